"""The three built-in sync strategies, written against the same contract as a third-party one
(``orchestrator.sync.strategy``): each says which family it belongs to and which rules it changes;
the virtual and the MPI runtime run them all."""

from __future__ import annotations

import math

from orchestrator.sync.strategy import CollectiveStrategy, ServerStrategy, parse_staleness

DEFAULT_STALENESS = 2.0            # delay-sync's bound s when sync.staleness is not set


class AllReduce(CollectiveStrategy):
    """Bulk synchronous: every step averages all workers' gradients, weighted by batch (Horovod under
    MPI); one step of the global batch at ``train.lr_scaling``'s learning rate."""

    name = "allreduce"


class AsyncParameterServer(ServerStrategy):
    """Parameter server applying each push at once; nobody waits (Dean et al. 2012, Downpour SGD)."""

    name = "async"

    def staleness_bound(self) -> float:
        return math.inf


class DelaySync(ServerStrategy):
    """Stale-synchronous parameter server: worker i starts an iteration only while
    ``c_i - min_j c_j <= s`` (``sync.staleness``; Ho et al. 2013, SSP); its batch split follows the
    measured speeds by default."""

    name = "delay"
    default_balance = "online"

    def staleness_bound(self) -> float:
        return parse_staleness(self.cfg_sync, DEFAULT_STALENESS)
