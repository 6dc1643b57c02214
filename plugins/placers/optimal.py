"""``placer=optimal``: the exact optimiser of the pipeline objective among contiguous splits
(``orchestrator.placement.contiguous``: the workload authors' DP over ideals, with incremental
loads and pruning), returned with its certificate: the trial logs the certified lower bound
(``placement.lower_bound_s``, valid for every placement, contiguous or not) and the gap.

Meta of the placement: ``contiguous_optimum_s`` (the DP's value), ``order`` (``ideals``: every
contiguous split was searched, so the answer is the contiguous optimum; ``linear``: the graph has
more than ``placer.ideals_limit`` ideals and only the prefixes of one topological order were;
``timeout``: ``placer.time_limit_s`` cut the full search short), ``exact`` (the DP's loads are the
evaluator's: the hub topology of the workload format), ``ideals``, ``pairs``.
For ``placement.objective=step`` it is an error: use greedy or rl there."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.errors import ConfigError, InfeasiblePlacementError
from orchestrator.placement import Placement
from orchestrator.placement.search import PlacementProblem, cfg_get


class OptimalPlacer:
    def __init__(self, cfg: Any = None):
        self.time_limit_s = float(cfg_get(cfg, "time_limit_s", 60.0))
        self.ideals_limit = int(cfg_get(cfg, "ideals_limit", 200_000))
        if self.time_limit_s <= 0 or self.ideals_limit < 1:
            raise ConfigError("placer.time_limit_s must be > 0 and placer.ideals_limit >= 1")
        self.last = None

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        from orchestrator.placement.contiguous import best_contiguous

        if getattr(evaluator, "objective", "step") != "pipeline":
            raise ConfigError("placer=optimal optimises placement.objective=pipeline (exact over contiguous "
                              "splits); for the one-step objective use +placer=greedy or +placer=rl")
        prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        r = self.last = best_contiguous(prob, evaluator.pipeline, limit=self.ideals_limit, time_limit_s=self.time_limit_s)
        if r.assign is None or not math.isfinite(r.value):
            raise InfeasiblePlacementError(f"{graph.name}: no contiguous split fits the memory of worker {worker.name!r}")
        return prob.placement(r.assign, placer="optimal", contiguous_optimum_s=r.value, order=r.order,
                              exact=r.exact, ideals=r.ideals, pairs=r.pairs)
