"""Pictures of a plan: the Gantt of one simulated iteration (stages x micro-batches, sends, all-reduces,
updates) and a map of which GPUs hold which layers. Both say which simulator drew them (simulated)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.plan import Plan
from orchestrator.plan.plan import replicas_text
from orchestrator.planning.estimate import PlanEstimate

MAX_GANTT_EVENTS = 60_000


# each kind of box of the Gantt: its name in the legend and its colour
KINDS = {"fwd": ("forward", "#4c72b0"), "bwd": ("backward", "#55a868"), "send": ("sends", "#dd8452"),
         "all-reduce": ("all-reduce", "#c44e52"), "update": ("update", "#8172b3")}


def gantt(estimate: PlanEstimate, path: str | Path, title: str) -> Path | None:
    """One row per stage (named with its GPU type), one colour per kind of work, a legend naming them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = estimate.events[:MAX_GANTT_EVENTS]
    if not events:
        return None
    gpu = {(s.pipeline, s.stage): s.gpu for s in estimate.stages}
    rows = sorted({(e.pipeline, e.stage) for e in events})
    y = {r: i for i, r in enumerate(rows)}
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for e in events:
        bars.setdefault((y[(e.pipeline, e.stage)], e.kind), []).append((e.start_s, max(e.end_s - e.start_s, 0.0)))
    span = max(e.end_s for e in events) or 1.0
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(rows) + 1.8))
    for (row, kind), spans in bars.items():
        colour = KINDS.get(kind, (kind, "#999999"))[1]
        ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=colour, edgecolor="black", linewidth=0.2)
    ax.set_xlim(0, span * 1.02)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.set_yticks(range(len(rows)), [f"pipeline {p} stage {s} ({gpu.get((p, s), '?')})" for p, s in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    present = [k for k in KINDS if any(kind == k for _, kind in bars)]
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=KINDS[k][1], edgecolor="black", linewidth=0.3) for k in present]
    ax.legend(handles, [KINDS[k][0] for k in present], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def layer_map(plan: Plan, num_layers: int, path: str | Path, title: str) -> Path:
    """One row per pipeline stage, a bar over its layers coloured by GPU type, labelled dp x tp."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = sorted({r.gpu for p in plan.pipelines for s in p.stages for r in s.replicas})
    cmap = plt.get_cmap("tab10")
    colour = {t: cmap(i % 10) for i, t in enumerate(types)}
    rows = [(pi, si, s) for pi, p in enumerate(plan.pipelines) for si, s in enumerate(p.stages)]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
    for y, (_, _, s) in enumerate(rows):
        kinds: dict[tuple[str, int], int] = {}
        for r in s.replicas:
            kinds[(r.gpu, r.tp)] = kinds.get((r.gpu, r.tp), 0) + 1
        x0 = s.layers[0]
        width = len(s.layers)
        share = 0.7 / max(len(kinds), 1)
        for k, ((gpu, tp), n) in enumerate(sorted(kinds.items())):
            ax.broken_barh([(x0, width)], (y - 0.35 + k * share, share), facecolors=colour[gpu], edgecolor="black", linewidth=0.3)
            ax.text(x0 + width / 2, y - 0.35 + (k + 0.5) * share, replicas_text(n, gpu, tp),
                    ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"p{pi} stage {si}" for pi, si, _ in rows])
    ax.set_xlim(0, num_layers)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("layer")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in types]
    ax.legend(handles, types, title="GPU type", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)  # beside, not over, the bars
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
