"""Gantt chart of a simulated step: one row per device and per link channel used (PNG, matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path


def gantt(result, path: str | Path, title: str = "") -> Path:
    """Draw ``result.schedule`` (``simulate(..., schedule=True)``) into ``path``."""
    if result.schedule is None:
        raise ValueError("the result has no schedule: simulate with schedule=True")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[str] = []
    for ev in sorted(result.schedule, key=lambda e: (e["kind"] != "node", e["row"])):
        if ev["row"] not in rows:
            rows.append(ev["row"])
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(rows) + 1.5))
    for ev in result.schedule:
        y = rows.index(ev["row"])
        ax.barh(y, max(ev["end"] - ev["start"], 0.0), left=ev["start"], height=0.7,
                color="tab:blue" if ev["kind"] == "node" else "tab:orange", edgecolor="black", linewidth=0.2)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title or f"step {result.makespan_s:.6g} s" + ("" if result.feasible else " (infeasible: memory)"))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
