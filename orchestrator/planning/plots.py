"""Pictures of a plan: the Gantt of one simulated iteration (stages x micro-batches, sends, all-reduces,
updates) and a map of which GPUs hold which layers. Both say which simulator drew them (simulated)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.plan import Plan
from orchestrator.planning.estimate import PlanEstimate

MAX_GANTT_EVENTS = 60_000


def gantt(estimate: PlanEstimate, path: str | Path, title: str) -> Path | None:
    from orchestrator.placement.simulate.gantt import gantt_events

    events = []
    for ev in estimate.events[:MAX_GANTT_EVENTS]:
        row = f"pipeline {ev.pipeline} stage {ev.stage}"
        if ev.kind in ("fwd", "bwd"):
            events.append({"kind": "node", "row": row, "start": ev.start_s, "end": ev.end_s,
                           "label": f"{'F' if ev.kind == 'fwd' else 'B'}{ev.micro_batch + 1}"})
        elif ev.kind == "update":
            events.append({"kind": "node", "row": row, "start": ev.start_s, "end": ev.end_s, "label": "U"})
        else:
            events.append({"kind": "transfer", "row": row, "start": ev.start_s, "end": ev.end_s,
                           "label": "AR" if ev.kind == "all-reduce" else None})
    if not events:
        return None
    return gantt_events(events, path, title)


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
            ax.text(x0 + width / 2, y - 0.35 + (k + 0.5) * share, f"{n} x {gpu}" + (f" tp{tp}" if tp > 1 else ""),
                    ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"p{pi} stage {si}" for pi, si, _ in rows])
    ax.set_xlim(0, num_layers)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("layer")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in types]
    ax.legend(handles, types, loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
