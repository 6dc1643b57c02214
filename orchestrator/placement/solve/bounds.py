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
    try:
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix
    except ImportError:  # pragma: no cover - scipy is a dependency of the project's set
        return 0.0
    na, nd = prob.n_atoms, prob.nd
    ix = [(a, d) for a in range(na) for d in range(nd) if prob.allowed[a, d]]
    nv = len(ix) + 1                                  # x[a,d] ..., T
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    b_ub: list[float] = []
    r = 0
    for d in range(nd):                               # load_d - T <= 0
        for j, (a, dd) in enumerate(ix):
            if dd == d and prob.atom_cost[a, d] > 0:
                rows.append(r)
                cols.append(j)
                vals.append(float(prob.atom_cost[a, d]))
        rows.append(r)
        cols.append(nv - 1)
        vals.append(-1.0)
        b_ub.append(0.0)
        r += 1
    need = prob.atom_resident                         # (temp is a max per pool, not a sum: left out)
    for p, cap in enumerate(prob.full_cap):           # memory per pool (full capacity: a valid bound)
        if not math.isfinite(cap):
            continue
        for j, (a, d) in enumerate(ix):
            if prob.pool_of[d] == p and need[a] > 0:
                rows.append(r)
                cols.append(j)
                vals.append(float(need[a]))
        b_ub.append(float(cap))
        r += 1
    a_eq = coo_matrix(([1.0] * len(ix), ([a for a, _ in ix], list(range(len(ix))))), shape=(na, nv))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, nv))
    c = np.zeros(nv)
    c[-1] = 1.0
    try:
        res = linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, A_eq=a_eq.tocsr(), b_eq=np.ones(na), bounds=(0, None),
                      method="highs", options={"time_limit": float(time_limit_s)})
    except (ValueError, MemoryError):
        return 0.0
    if res.status != 0:
        return 0.0
    # HiGHS' dual bound on an optimal LP equals the objective; shave the solver's tolerance off so
    # the figure stays a bound.
    return max(0.0, float(res.fun) * (1 - 1e-7) - 1e-12)
