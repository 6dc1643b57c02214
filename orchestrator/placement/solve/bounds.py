"""Certified lower bounds on the load objective (``placement.objective=pipeline``) that every
placement which fits in memory respects, contiguous or not: the LP relaxation of the assignment and
the costliest atom. They sit with the solvers because they are stated on the problem's atoms
(``PlacementProblem``); the simulated judge reports them beside its verdicts. The tighter bounds
(MILP, configuration LP) are ``milp`` and ``config_bound``."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.graph.opgraph import OpGraph
from orchestrator.hardware.cluster import Worker
from orchestrator.partition.bounds import work_lp
from orchestrator.placement.simulate.simulator import Simulator
from orchestrator.placement.solve.problem import PlacementProblem


def load_lower_bound(graph: OpGraph, worker: Worker, sim: Simulator | None = None, time_limit_s: float = 10.0) -> tuple[float, dict[str, float]]:
    """A certified lower bound on the time per sample of every placement that fits in memory
    (contiguous or not), and its parts. Communication only adds load, so it is left out:

    - ``lp``: the LP relaxation of assigning nodes (colocation groups as units) to devices,
      min T s.t. sum_d x[a,d] = 1, sum_a cost[a,d] x[a,d] <= T, sum_a mem[a] x[a,d] <= cap(pool),
      x >= 0 (x[a,d] = 0 where a may not run on d), solved by HiGHS (``scipy.optimize.linprog``);
    - ``atom``: the largest over groups of the group's cheapest allowed device cost.
    The bound is the larger; ``lp`` is skipped (0) where the solver fails or runs out of time."""
    prob = PlacementProblem(graph, worker) if sim is None else PlacementProblem(graph, worker, _SimOnly(sim))
    cost = prob.atom_cost
    atom = float(np.where(prob.allowed, cost, np.inf).min(axis=1).max(initial=0.0))
    parts = {"atom": atom if math.isfinite(atom) else 0.0, "lp": _lp_bound(prob, time_limit_s)}
    return max(parts.values()), parts


class _SimOnly:
    """An evaluator stand-in that only lends its simulator to ``PlacementProblem``."""

    def __init__(self, sim: Simulator) -> None:
        self.simulator = sim


def _lp_bound(prob: PlacementProblem, time_limit_s: float) -> float:
    """The LP relaxation of the assignment (``partition.bounds.work_lp``: one resource per device, memory per
    pool at full capacity; temporary memory, a max per pool and not a sum, left out)."""
    res = work_lp(np.where(prob.allowed, prob.atom_cost, np.inf), np.ones(prob.nd), prob.atom_resident, prob.pool_of,
                  prob.full_cap, time_limit_s)
    if res is None or res.status != 0:
        return 0.0
    # HiGHS' dual bound on an optimal LP equals the objective; shave the solver's tolerance off so
    # the figure stays a bound.
    return max(0.0, float(res.fun) * (1 - 1e-7) - 1e-12)
