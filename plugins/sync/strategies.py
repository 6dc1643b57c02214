"""The built-in sync strategies, written against the same contract as a third-party one
(``orchestrator.sync.strategy``): each says which family it belongs to and which rules it changes;
the virtual and the MPI runtime run them all."""

from __future__ import annotations

import math

from orchestrator.errors import ConfigError
from orchestrator.sync.server import StalenessGate
from orchestrator.sync.strategy import CollectiveStrategy, ServerStrategy, parse_staleness
from orchestrator_plugins.sync.config import (
    AllReduceConfig,
    AsyncConfig,
    AsyncCutoffConfig,
    BackupWorkersConfig,
    DelaySyncConfig,
)


class AllReduce(CollectiveStrategy):
    """Bulk synchronous: every step averages all workers' gradients, weighted by batch (Horovod under
    MPI); one step of the global batch at ``train.lr_scaling``'s learning rate."""

    name = "allreduce"
    Config = AllReduceConfig


class AsyncParameterServer(ServerStrategy):
    """Parameter server applying each push at once; nobody waits (Dean et al. 2012, Downpour SGD)."""

    name = "async"
    Config = AsyncConfig

    def staleness_bound(self) -> float:
        return math.inf


class DelaySync(ServerStrategy):
    """Stale-synchronous parameter server: worker i starts an iteration only while
    ``c_i - min_j c_j <= s`` (``sync.staleness``; Ho et al. 2013, SSP); its batch split follows the
    measured speeds by default (its schema's ``balance``)."""

    name = "delay"
    Config = DelaySyncConfig

    def staleness_bound(self) -> float:
        return parse_staleness(self.config.staleness)

    def check_config(self, cfg):
        opts = super().check_config(cfg)
        c = self.config
        if c.dynamic_staleness and self.staleness_bound() > float(c.max_staleness):   # the range would be [s, s]
            raise ConfigError(f"sync.dynamic_staleness=true adapts the bound within [sync.staleness, sync.max_staleness], "
                              f"and sync.staleness={c.staleness} is above sync.max_staleness={c.max_staleness:g}")
        return opts

    def make_gate(self, opts):
        """The bound follows the observed speed spread with ``sync.dynamic_staleness`` (up to ``sync.max_staleness``)."""
        c = opts.sync
        return StalenessGate(opts.workers, opts.staleness, dynamic=bool(c.dynamic_staleness),
                             max_staleness=float(c.max_staleness))


class BackupWorkers(CollectiveStrategy):
    """Synchronous SGD with ``b`` backup workers (Chen, Pan, Monga, Bengio, Jozefowicz 2016, "Revisiting
    Distributed Synchronous SGD"): of W workers, a round reduces the gradients of the first ``N = W - b`` to
    finish and drops the rest, ``theta <- opt(theta, sum_{i in first N} (b_i / G_N) g_i, lr(G_N))`` with
    ``G_N`` the samples of those N. A straggler then costs a round the N-th finishing time instead of the
    slowest; the price is ``b`` gradients of work per round. ``b = 0`` is allreduce."""

    name = "backup"
    Config = BackupWorkersConfig

    def quorum(self, workers: int) -> int:
        b = int(self.config.backup_workers)
        if b >= workers:
            raise ConfigError(f"sync.backup_workers={b} must be < hardware.workers={workers}")
        return workers - b

    def options(self, cfg):
        opts = super().options(cfg)
        self.quorum(opts.workers)          # a bad b is one line before the run
        return opts


class AsyncCutoff(AsyncParameterServer):
    """Asynchronous SGD with a staleness cut-off: the server applies a push at once unless the parameters it
    was computed on are more than ``R = sync.max_delay`` updates old (``tau > R``), then drops it; the worker
    pulls fresh parameters and goes on (the rule of Ringmaster ASGD, Maranjyan, Tyurin, Richtarik 2025, which
    with a suitable R has the optimal time complexity of asynchronous SGD under arbitrary heterogeneous
    compute times). ``R = inf`` is async."""

    name = "async_cutoff"
    Config = AsyncCutoffConfig

    def make_server(self, theta0, weights, opts, optimizer=None):
        server = super().make_server(theta0, weights, opts, optimizer)
        server.max_delay = int(self.config.max_delay)
        return server
