"""The bounds beside the partitioning engine, on arrays: the work LP (the work of each item spread over
resources, fractionally: ``work_lp``; the placement's LP relaxation of the assignment and the plans' work bound)
and the column DP (the least weighted column of stages, every stage within a threshold, for every threshold of a
grid at once: ``column_dp``; the plans' bounds on Sailor's metric). The configuration LP's column generation is
``placement.solve.config_bound`` (its pricing is a MILP on the op graph)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchestrator.graph.arrays import FloatArray, IntArray


def work_lp(cost: FloatArray, count: FloatArray, need: FloatArray | None = None, pool_of: IntArray | None = None,
            caps: Sequence[float] | FloatArray = (), time_limit_s: float | None = None) -> Any:
    """HiGHS' result (``scipy.optimize.linprog``; None where it raised) of

        min T  s.t.  sum_r x[a, r] = 1,   sum_a cost[a, r] x[a, r] <= count[r] T   (every item a, resource r)
                     sum_{a, r in pool p} need[a] x[a, r] <= caps[p]   (each pool of finite capacity; ``pool_of[r]``)
                     x >= 0,   x[a, r] only where cost[a, r] is finite

    the variables x (row-major over the finite entries) then T: ``res.x[-1]`` is T."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    na, nr = cost.shape
    ix = [(a, r) for a in range(na) for r in range(nr) if math.isfinite(cost[a, r])]
    nv = len(ix) + 1
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    b_ub: list[float] = []
    for r in range(nr):                               # work_r - count_r T <= 0
        for j, (a, rr) in enumerate(ix):
            if rr == r and cost[a, r] > 0:
                rows.append(len(b_ub))
                cols.append(j)
                vals.append(float(cost[a, r]))
        rows.append(len(b_ub))
        cols.append(nv - 1)
        vals.append(-float(count[r]))
        b_ub.append(0.0)
    for p, cap in enumerate(caps):                    # memory per pool
        if not math.isfinite(cap) or need is None or pool_of is None:
            continue
        for j, (a, r) in enumerate(ix):
            if pool_of[r] == p and need[a] > 0:
                rows.append(len(b_ub))
                cols.append(j)
                vals.append(float(need[a]))
        b_ub.append(float(cap))
    a_eq = coo_matrix(([1.0] * len(ix), ([a for a, _ in ix], list(range(len(ix))))), shape=(na, nv))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(len(b_ub), nv))
    c = np.zeros(nv)
    c[-1] = 1.0
    options = {} if time_limit_s is None else {"time_limit": float(time_limit_s)}
    try:
        return linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, A_eq=a_eq.tocsr(), b_eq=np.ones(na), bounds=(0, None),
                       method="highs", options=options)
    except (ValueError, MemoryError):
        return None


def column_dp(n: int, size: int, starts: Sequence[tuple[IntArray, int]], add: Callable[[int, int, int], Any],
              whole: Callable[[int], Any], shape: tuple[int, ...] = ()) -> FloatArray:
    """``out[..., s]``: the least sum of ``add(k, j, i)`` over the columns (a chain of ``n`` units cut into stages
    ``j .. i-1``, each on a kind ``k``) whose every stage runs within the threshold ``s`` of a grid of ``size``
    (``starts[k] = (start, whole_from)``: stage ``j .. i-1`` on kind k runs within thresholds ``start[j, i]`` on,
    ``size`` never; a one-stage column of the whole chain within ``whole_from`` on, costing ``whole(k)``). ``add``
    and ``whole`` may be arrays of ``shape`` (one column problem per entry, e.g. per price vector)."""
    cost = np.full((n + 1, *shape, size), math.inf)
    cost[0] = 0.0
    for i in range(1, n + 1):
        best = cost[i]
        for k, (start, _) in enumerate(starts):
            for j in np.nonzero(start[:i, i] < size)[0]:
                s = int(start[j, i])
                np.minimum(best[..., s:], cost[j, ..., s:] + add(k, j, i), out=best[..., s:])
    out: FloatArray = cost[n]
    for k, (_, w) in enumerate(starts):
        if w < size:                                  # one stage, the whole chain
            np.minimum(out[..., w:], whole(k), out=out[..., w:])
    return out
