"""The three built-in sync strategies, written against the same contract as a third-party one
(``orchestrator.sync.strategy``): each says which family it belongs to and which rules it changes;
the virtual and the MPI runtime run them all."""

from __future__ import annotations

import math

from orchestrator.sync.strategy import CollectiveStrategy, ServerStrategy, parse_staleness
from orchestrator_plugins.sync.config import AllReduceConfig, AsyncConfig, DelaySyncConfig


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
