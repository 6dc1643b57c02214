"""``placer=optimal``: the exact optimiser of the pipeline objective among contiguous splits
(``orchestrator.placement.solve.contiguous``: the workload authors' DP over ideals, with incremental
loads and pruning), returned with its certificate: the trial logs the certified lower bound
(``placement.lower_bound_s``, valid for every placement, contiguous or not) and the gap.

Meta of the placement: ``contiguous_optimum_s`` (the DP's value), ``order`` (``ideals``: every
contiguous split was searched, so the answer is the contiguous optimum; ``linear``: the graph has
more than ``placer.ideals_limit`` ideals and only the prefixes of one topological order were;
``timeout``: ``placer.time_limit_s`` cut the full search short), ``exact`` (the DP's loads are the
evaluator's: the hub topology of the workload format), ``ideals``, ``pairs``.

Then any split (``orchestrator.placement.solve.milp``): a mixed-integer program solved by HiGHS for at
most ``placer.milp_time_limit_s`` (0: skipped). Its solution replaces the DP's when better, and its
proven bound (``certified_bound_s``, ``milp_status``) tightens the trial's ``placement.lower_bound_s``;
where it is ``optimal``, the placement is the optimum over every split. Last, for at most
``placer.bound_time_limit_s`` (0: skipped), the configuration-LP bound
(``orchestrator.placement.solve.config_bound``: every device's set must carry its own cuts) certifies
the remaining gap; the tighter of the two is ``certified_bound_s`` (``certified_bound_src``).
For ``placement.objective=step`` it is an error: use greedy or rl there."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.config.placer import OptimalPlacerConfig
from orchestrator.errors import ConfigError, InfeasiblePlacementError
from orchestrator.graph import Placement
from orchestrator.placement.solve.problem import PlacementProblem


class OptimalPlacer:
    def __init__(self, cfg: Any = None):
        c = OptimalPlacerConfig.from_node(cfg)   # time_limit_s > 0, ideals_limit >= 1, the others >= 0 (0: skip)
        self.time_limit_s, self.ideals_limit = float(c.time_limit_s), c.ideals_limit
        self.milp_time_limit_s, self.bound_time_limit_s = float(c.milp_time_limit_s), float(c.bound_time_limit_s)
        self.last = None

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        from orchestrator.placement.solve.contiguous import best_contiguous

        if getattr(evaluator, "objective", "step") != "pipeline":
            raise ConfigError("placer=optimal optimises placement.objective=pipeline (exact over contiguous "
                              "splits); for the one-step objective use +placer=greedy or +placer=rl")
        prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        r = self.last = best_contiguous(prob, evaluator.load_model, limit=self.ideals_limit, time_limit_s=self.time_limit_s)
        if r.assign is None or not math.isfinite(r.value):
            raise InfeasiblePlacementError(f"{graph.name}: no contiguous split fits the memory of worker {worker.name!r}")
        assign, value, extra = r.assign, prob.objective_value(r.assign), {}
        if self.milp_time_limit_s > 0:
            from orchestrator.placement.solve.milp import solve_milp

            m = solve_milp(prob, evaluator.load_model, self.milp_time_limit_s)
            extra = {"milp_status": m.status, "certified_bound_s": m.bound}
            if m.assign is not None:
                t = prob.objective_value(m.assign)
                if t < value * (1 - 1e-12):
                    assign, value = m.assign, t
                    extra["source"] = "milp"
        if self.bound_time_limit_s > 0 and math.isfinite(value):
            from orchestrator.placement.solve.config_bound import config_bound

            lower = max(evaluator.lower_bound(), float(extra.get("certified_bound_s", 0.0)))
            cb = config_bound(prob, evaluator.load_model, lower, value, self.bound_time_limit_s,
                              seeds=[prob.atoms_of(assign)])
            extra["config_bound_status"] = cb.status
            if cb.bound > float(extra.get("certified_bound_s", 0.0)):
                extra["certified_bound_s"], extra["certified_bound_src"] = cb.bound, "config_lp"
        return prob.placement(assign, placer="optimal", contiguous_optimum_s=r.value, order=r.order,
                              exact=r.exact, ideals=r.ideals, pairs=r.pairs, **extra)
