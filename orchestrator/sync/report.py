"""Turns a sync run's observations into ``sync.*`` metrics and artifacts (staleness histogram JSON,
convergence plot PNG)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.execution.training import TrainResult


def sync_metrics(stats) -> dict[str, float]:
    m: dict[str, float] = {
        "sync.staleness_max": float(max(stats.gap_histogram, default=0)),
        "sync.update_staleness_max": float(max(stats.update_staleness, default=0)),
        "sync.pushes_made": float(stats.pushes_made),
        "sync.pushes_applied": float(stats.pushes_applied),
        "sync.pushes_dropped": float(stats.pushes_dropped),
        "sync.staleness_bound_max": float(stats.bound_max),
    }
    for i, (c, wt, b) in enumerate(zip(stats.iterations, stats.wait_s, stats.batches)):
        m[f"sync.worker{i}.iterations"] = float(c)
        m[f"sync.worker{i}.wait_s"] = float(wt)
        m[f"sync.worker{i}.batch"] = float(b)
    for key in ("compute_s", "comm_s"):
        per = getattr(stats, key, None) or []
        for i, v in enumerate(per):
            m[f"sync.worker{i}.{key}"] = float(v)
        if per:
            m[f"sync.{key}"] = float(sum(per) / len(per))      # mean per worker
    if getattr(stats, "server_utilisation", None) is not None:
        m["sync.server_utilisation"] = float(stats.server_utilisation)
    m.update(getattr(stats, "server_metrics", None) or {})
    m["sync.rebalances"] = float(getattr(stats, "rebalances", 0))
    m["sync.capacity"] = float(getattr(stats, "capacity", len(stats.iterations)))
    return m


def scaling_metrics(result: TrainResult, capacity: float) -> dict[str, float]:
    """``sync.speedup`` (reference time to target / this run's) and ``sync.scaling_efficiency``
    (speedup / hardware capacity, the sum of speeds over the reference speed 1.0)."""
    ref, tt = result.reference_time_to_target_s, result.time_to_target_s
    if not ref or not tt:
        return {}
    return {"sync.speedup": ref / tt, "sync.scaling_efficiency": ref / tt / capacity}


def write_artifacts(result: TrainResult, stats, out_dir: Path, label: str, sink) -> list[Path]:
    """Write ``sync_staleness.json`` and ``sync_convergence.png`` into ``out_dir`` and log them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hist = out_dir / "sync_staleness.json"
    hist.write_text(json.dumps({
        "strategy": label,
        "gap_at_grant": {str(k): int(v) for k, v in sorted(stats.gap_histogram.items())},
        "update_staleness": {str(k): int(v) for k, v in sorted(stats.update_staleness.items())},
        "worker_iterations": list(stats.iterations),
        "worker_wait_s": list(stats.wait_s),
    }, indent=1))
    paths = [hist, _plot(result, out_dir / "sync_convergence.png", label)]
    for p in paths:
        if p is not None:
            sink.log_artifact(p)
    return [p for p in paths if p is not None]


def _plot(result: TrainResult, path: Path, label: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([p.elapsed_s for p in result.history], [p.accuracy for p in result.history], marker=".", label=label)
    ax.set_xlabel(f"time [s, {result.clock} clock]")
    ax.set_title("emulated: real gradients on a virtual clock" if result.clock == "virtual"
                 else "measured: wall clock", fontsize=9)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
