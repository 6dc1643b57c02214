"""Gantt charts (PNG, matplotlib Agg): one row per device and per link channel used. ``gantt`` draws a
simulated step; ``gantt_events`` any list of events, e.g. a micro-batched pipeline schedule
(``orchestrator.placement.simulate.microbatch``), whose tasks are labelled F3 / B3 (forward / backward of
micro-batch 3) and U (the update), each micro-batch in its own colour."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.placement.simulate.simulator import SimResult


def gantt(result: SimResult, path: str | Path, title: str = "") -> Path:
    """Draw ``result.schedule`` (``simulate(..., schedule=True)``) into ``path``."""
    if result.schedule is None:
        raise ValueError("the result has no schedule: simulate with schedule=True")
    return gantt_events(result.schedule, path,
                        title or f"simulated step {result.makespan_s:.6g} s (cost model)"
                        + ("" if result.feasible else " (infeasible: memory)"))


def _colour(ev: dict[str, Any], cmap: Callable[[int], tuple[float, ...]]) -> str | tuple[float, ...]:
    label = ev.get("label")
    if label and label[1:].isdigit():            # F3 / B3: the micro-batch's colour, backward lighter
        c = cmap((int(label[1:]) - 1) % 10)
        return c if label[0] == "F" else (*c[:3], 0.55)
    if label == "U":
        return "tab:gray"
    return "tab:blue" if ev["kind"] == "node" else "tab:orange"


MERGE_ABOVE = 2000   # bars in one row and colour beyond which bars closer than half a pixel are merged


def _merged(spans: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) spans sorted, neighbours closer than ``gap`` joined: a row of thousands of
    back-to-back ops is drawn as the few hundred runs a 1,200-pixel chart can show."""
    out: list[tuple[float, float]] = []
    for start, width in sorted(spans):
        if out and start - (out[-1][0] + out[-1][1]) <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], start + width - out[-1][0]))
        else:
            out.append((start, width))
    return out


def gantt_events(events: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """``events``: {"kind": "node"|"transfer", "row", "start", "end"[, "label"]} (seconds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: dict[str, int] = {}
    for ev in sorted(events, key=lambda e: (e["kind"] != "node", e["row"])):
        rows.setdefault(ev["row"], len(rows))
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(rows) + 1.5))
    cmap = plt.get_cmap("tab10")
    span = max((e["end"] for e in events), default=0.0) or 1.0
    # one collection per (row, colour), not one patch per event: a 20,000-op step has ~50,000
    # events, and a patch each took matplotlib minutes to place and draw (the rows look the same)
    bars: dict[tuple[int, Any], list[tuple[float, float]]] = {}
    for ev in events:
        y = rows[ev["row"]]
        width = max(ev["end"] - ev["start"], 0.0)
        bars.setdefault((y, _colour(ev, cmap)), []).append((ev["start"], width))
        if ev.get("label") and width > 0.02 * span:
            ax.text(ev["start"] + width / 2, y, ev["label"], ha="center", va="center", fontsize=7)
    for (y, colour), spans in bars.items():
        if len(spans) > MERGE_ABOVE:
            spans = _merged(spans, span / 2400)
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colour, edgecolor="black", linewidth=0.2)
    ax.set_xlim(0, span * 1.02)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
