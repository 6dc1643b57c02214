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
    queued = getattr(stats, "queue_s", None) or []
    if any(queued):
        for i, v in enumerate(queued):
            m[f"sync.worker{i}.queue_s"] = float(v)
        m["sync.queue_s"] = float(sum(queued) / len(queued))
    dropped = getattr(stats, "dropped", None) or []
    if dropped:
        m["sync.gradients_dropped"] = float(sum(dropped))
        if any(dropped):
            for i, v in enumerate(dropped):
                m[f"sync.worker{i}.dropped"] = float(v)
    if getattr(stats, "server_utilisation", None) is not None:
        m["sync.server_utilisation"] = float(stats.server_utilisation)
    m.update(getattr(stats, "server_metrics", None) or {})
    m["sync.rebalances"] = float(getattr(stats, "rebalances", 0))
    hist = getattr(stats, "batch_history", None) or []
    if hist:       # train.batch_policy=adaptive (the series: train.global_batch, sync.noise_scale by round)
        m["train.global_batch_first"] = float(hist[0][2])
        m["train.global_batch_final"] = float(hist[-1][2])
        m["train.global_batch_max_chosen"] = float(max(h[2] for h in hist))
        m["train.global_batch_changes"] = float(sum(1 for a, b in zip(hist, hist[1:]) if a[2] != b[2]))
        noise = [h[3] for h in hist if h[3] is not None and h[3] != float("inf")]
        if noise:
            m["sync.noise_scale_final"] = float(noise[-1])
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
    if getattr(stats, "compute_s", None):
        paths.append(plot_breakdown(stats, out_dir / "sync_time_breakdown.png", label,
                                    getattr(stats, "breakdown_kind", "simulated (virtual clock)")))
    if getattr(stats, "batch_history", None):
        paths.append(plot_batch(stats.batch_history, result, out_dir / "batch_over_time.png", label,
                                getattr(stats, "breakdown_kind", "simulated (virtual clock)")))
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


def time_breakdown(stats) -> list[dict[str, float]]:
    """Per worker, where its run's time went (seconds on the run's clock): ``compute`` (its gradients;
    a backup worker's abandoned work included), ``wait`` (at the barrier, or held by the staleness gate),
    ``comm`` (all-reduce, or push and pull on the links) less ``queue`` (its messages waiting in the
    server's shard queues). Under MPI (wall clock) ``wait`` is the time blocked in the all-reduce (the
    slowest rank and the transfer together) or at the staleness gate, ``comm`` the rest of the run."""
    w = len(stats.iterations)
    per = lambda key: list(getattr(stats, key, None) or [0.0] * w)  # noqa: E731
    compute, wait, comm, queue = per("compute_s"), per("wait_s"), per("comm_s"), per("queue_s")
    return [{"compute": compute[i], "wait": wait[i], "comm": max(0.0, comm[i] - queue[i]), "queue": queue[i]}
            for i in range(w)]


def plot_breakdown(stats, path: Path, label: str, kind: str = "simulated (virtual clock)") -> Path | None:
    """One stacked bar per worker: compute, waiting, communication, server queueing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = time_breakdown(stats)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(rows) + 3.5), 3.6))
    bottom = [0.0] * len(rows)
    colours = {"compute": "#4c72b0", "wait": "#dd8452", "comm": "#55a868", "queue": "#c44e52"}
    names = {"compute": "compute", "wait": "waiting (barrier / staleness gate)", "comm": "communication",
             "queue": "server queueing"}
    for part in ("compute", "wait", "comm", "queue"):
        vals = [r[part] for r in rows]
        if not any(vals):
            continue
        ax.bar(range(len(rows)), vals, bottom=bottom, color=colours[part], label=names[part])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)))
    ax.set_xlabel("worker")
    ax.set_ylabel("seconds")
    ax.set_title(f"{label}\nwhere each worker's time went, {kind}", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_batch(history, result: TrainResult, path: Path, label: str, kind: str = "simulated (virtual clock)") -> Path | None:
    """``train.batch_policy=adaptive``: the global batch chosen over the run's time (a step line) and the
    gradient noise scale it was chosen from (right axis), with the time to target marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    end = max(result.elapsed_s, history[-1][1])
    ts = [h[1] for h in history] + [end]
    ms = [h[2] for h in history] + [history[-1][2]]
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    ax.step(ts, ms, where="post", color="#4c72b0", label="global batch")
    ax.set_xlabel(f"time [s, {result.clock} clock]")
    ax.set_ylabel("global batch (samples)", color="#4c72b0")
    ax.set_yscale("log", base=2)
    if result.time_to_target_s is not None:
        ax.axvline(result.time_to_target_s, color="grey", ls="--", lw=0.8, label="target reached")
    handles, labels = ax.get_legend_handles_labels()
    noise = [(h[1], h[3]) for h in history if h[3] is not None and h[3] != float("inf")]
    if noise:
        ax2 = ax.twinx()
        ax2.plot([n[0] for n in noise], [max(n[1], 1e-3) for n in noise], "o-", color="#dd8452", ms=3, lw=0.6,
                 label="gradient noise scale B_noise")
        ax2.set_yscale("log")
        ax2.set_ylabel("B_noise (samples)", color="#dd8452")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.set_title(f"{label}\nadaptive global batch (goodput, Pollux), {kind}", fontsize=8)
    ax.legend(handles, labels, fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
