"""The three built-in sync strategies. Each is ``Class(cfg_sync)`` with ``train(ctx) -> TrainResult``;
``sync.runtime`` picks the virtual emulation (``orchestrator.sync.virtual``) or real MPI ranks
(``orchestrator.sync.mpi``). The rules themselves live in ``orchestrator.sync.core``."""

from __future__ import annotations

import dataclasses

from orchestrator.sync.core import SyncOptions
from orchestrator.sync.report import scaling_metrics, sync_metrics, write_artifacts
from orchestrator.execution.training import TrainContext, TrainResult


class SyncStrategy:
    name = ""

    def __init__(self, cfg_sync):
        self.cfg_sync = cfg_sync

    def check(self, cfg) -> SyncOptions:
        """Validate ``sync.*`` / ``hardware.*`` / ``train.*`` before the trial starts (one-line ConfigErrors)."""
        return SyncOptions.from_cfg(self.cfg_sync, cfg, name=self.name)

    def options(self, ctx: TrainContext) -> SyncOptions:
        opts = SyncOptions.from_cfg(self.cfg_sync, ctx.cfg, name=self.name)
        if ctx.cluster is not None:
            # The hardware adapter is the authority on how many workers there are and how fast
            # each is (it may derive speeds from the workers' devices and placed step times).
            opts = dataclasses.replace(opts, workers=len(ctx.cluster.workers),
                                       speeds=[float(w.speed) for w in ctx.cluster.workers])
        return opts

    def train(self, ctx: TrainContext) -> TrainResult:
        opts = self.options(ctx)
        if opts.runtime == "mpi":
            from orchestrator.sync.mpi import train_mpi

            result, stats = train_mpi(opts, ctx)
        else:
            from orchestrator.sync.virtual import train_virtual

            result, stats, _ = train_virtual(opts, ctx)
        result.extra_metrics.update(sync_metrics(stats))
        result.extra_metrics.update(scaling_metrics(result, stats.capacity))
        m = result.extra_metrics
        if "sync.speedup" in m:
            print(f"{self.name} W={opts.workers} ({opts.runtime}, {result.clock} clock): speedup {m['sync.speedup']:.2f} "
                  f"over one speed-1.0 worker, capacity {stats.capacity:.2f}, scaling efficiency "
                  f"{m['sync.scaling_efficiency']:.2f}", flush=True)
        write_artifacts(result, stats, ctx.output_dir, f"{self.name} W={opts.workers} ({opts.runtime})", ctx.sink)
        return result


class AllReduce(SyncStrategy):
    """Bulk synchronous: every step averages all workers' gradients (Horovod under MPI)."""

    name = "allreduce"


class AsyncParameterServer(SyncStrategy):
    """Parameter server applying each push at once; nobody waits."""

    name = "async"


class DelaySync(SyncStrategy):
    """Stale-synchronous parameter server: worker i runs ahead of the slowest by at most ``s``."""

    name = "delay"
