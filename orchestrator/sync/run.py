"""A data-parallel training run of a sync strategy on ``sync.runtime``: the entry point the trial calls.
Above the runtimes (``virtual``, ``mpi``) and the strategy contract, so that neither imports the other."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.execution.training import TrainContext, TrainResult
from orchestrator.sync.report import write_artifacts
from orchestrator.sync.strategy import SyncStrategy


def train(strategy: SyncStrategy, ctx: TrainContext) -> TrainResult:
    """Train ``ctx.model`` on ``ctx.dataset`` with ``strategy`` on ``sync.runtime``; logs its ``sync.*``
    metrics and artifacts."""
    opts = strategy.options(ctx.cfg)
    if ctx.cluster is not None:
        # The hardware adapter is the authority on how many workers there are and how fast each is
        # (it may derive speeds from the workers' devices and placed step times).
        opts = dataclasses.replace(opts, workers=len(ctx.cluster.workers),
                                   speeds=[float(w.speed) for w in ctx.cluster.workers])
    result: Any
    if opts.runtime == "mpi":
        from orchestrator.sync.mpi import train_mpi

        result, stats = train_mpi(strategy, opts, ctx)
    else:
        from orchestrator.sync.virtual import train_virtual

        result, stats, _ = train_virtual(strategy, opts, ctx)
    result.extra_metrics.update(strategy.metrics(result, stats))
    m = result.extra_metrics
    label = strategy.label(opts)
    if "sync.speedup" in m:
        print(f"{label[:-1]}, {result.clock} clock): speedup {m['sync.speedup']:.2f} over one speed-1.0 worker, "
              f"capacity {stats.capacity:.2f}, scaling efficiency {m['sync.scaling_efficiency']:.2f}", flush=True)
    write_artifacts(result, stats, ctx.output_dir, label, ctx.sink)
    return result
