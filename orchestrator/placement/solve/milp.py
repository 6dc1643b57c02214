"""The pipeline objective over *any* split as a mixed-integer program, solved by HiGHS
(``scipy.optimize.milp``) with a time limit: the best placement found and the solver's proven
lower bound (its dual bound), which certifies the gap of every placement, contiguous or not.

Variables: ``x[a,d]`` in {0,1} (group a on device d, 0 where a may not run on d), ``s[u,d]``,
``r[u,d]`` in [0,1] (device d sends / receives node u's output), ``T``::

    min T  s.t.  Σ_d x[a,d] = 1                                   every group placed once
                 s[u,d] >= x[a(u),d] - x[b,d]   for every group b fed by u   (u on d, a consumer off d)
                 r[u,d] >= x[b,d] - x[a(u),d]   for every group b fed by u   (a consumer on d, u off d)
                 Σ_a cost[a,d] x[a,d] + Σ_u (up_d(u) s[u,d] + down_d(u) r[u,d]) <= T    every device
                 Σ_a mem[a] x[a,d] <= memory of d (parameters only: a relaxation of the simulator's rule)
                 value precedence over identical devices (symmetry: device k+1 of a class is used
                 only after device k, in topological order of the groups)

``up_d(u)`` / ``down_d(u)``: the hop of u's output on d's own link to / from the hub (0 where d has
none, e.g. a CPU core in host memory). This is the pipeline load of ``orchestrator.placement.simulate.load``
exactly where the DP is exact (the hub topology, ``contiguous.device_classes``); elsewhere it is not
built (``None``). Link-channel limits and temporary memory are left out, so the optimum is a lower
bound of the evaluator's and the dual bound stays a certified bound.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from orchestrator.graph.arrays import IntArray
from orchestrator.placement.simulate.load import LoadModel
from orchestrator.placement.solve.contiguous import device_classes
from orchestrator.placement.solve.problem import PlacementProblem


@dataclass
class MILPResult:
    bound: float                 # certified lower bound (seconds), 0 when none was proven
    assign: IntArray | None      # the best placement found (device per node), if any
    status: str                  # "optimal", "time limit", or why it did not run


def solve_milp(prob: PlacementProblem, model: LoadModel, time_limit_s: float = 30.0) -> MILPResult:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    classes, links, exact = device_classes(prob, model)
    if not exact:
        return MILPResult(0.0, None, "not built: the worker is not a hub topology")
    feeds = group_feeds(prob, model)
    senders = sorted(feeds)
    col = _Columns(prob.n_atoms, prob.nd, len(senders))
    cons = _Rows()
    _placement_rows(cons, col, prob, feeds, senders)
    scale = _load_rows(cons, col, prob, model, classes, links, senders)
    _memory_rows(cons, col, prob)
    _symmetry_rows(cons, col, prob, classes)
    a_mat = coo_matrix((cons.vals, (cons.rows, cons.cols)), shape=(cons.r, col.nv)).tocsr()
    c = np.zeros(col.nv)
    c[col.T] = 1.0
    integrality = np.zeros(col.nv)
    integrality[:col.nx] = 1
    ub = np.ones(col.nv)
    ub[col.T] = np.inf
    ub[:col.nx][~prob.allowed.ravel()] = 0.0
    try:
        with quiet_stdout():                              # HiGHS prints from C++ even with disp off
            res = milp(c, constraints=[LinearConstraint(a_mat, cons.lo, cons.hi)], integrality=integrality,
                       bounds=Bounds(0.0, ub), options={"time_limit": float(time_limit_s), "disp": False})
    except (ValueError, MemoryError) as exc:
        return MILPResult(0.0, None, f"solver error: {exc}")
    dual = getattr(res, "mip_dual_bound", None)
    bound = float(dual) if dual is not None and np.isfinite(dual) else 0.0
    if res.status == 0 and res.fun is not None:
        bound = max(bound, float(res.fun) * (1 - 1e-4))   # HiGHS stops at its relative gap 1e-4
    bound = max(0.0, bound * (1 - 1e-5)) * scale           # solver tolerances (1e-7 on ~1): stay below
    assign = None
    if res.x is not None:
        atoms = res.x[:col.nx].reshape(prob.n_atoms, prob.nd).argmax(axis=1)
        assign = prob.expand(atoms)
    return MILPResult(bound, assign, "optimal" if res.status == 0 else "time limit" if res.status == 1 else res.message)


class _Columns:
    """The MILP's columns: x[a,d] (atom a on device d), s[i,d] and r[i,d] (sender i's output leaves or
    enters d), then T (the time per sample, the objective)."""

    def __init__(self, na: int, nd: int, ns: int):
        self.nd, self.ns, self.nx = nd, ns, na * nd
        self.T = self.nx + 2 * ns * nd
        self.nv = self.T + 1

    def X(self, a: int, d: int) -> int:
        return a * self.nd + d

    def S(self, i: int, d: int) -> int:
        return self.nx + i * self.nd + d

    def R(self, i: int, d: int) -> int:
        return self.nx + self.ns * self.nd + i * self.nd + d


class _Rows:
    """The constraint matrix as COO triplets, one row at a time, with each row's bounds."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.r = 0

    def add(self, entries: list[tuple[int, float]], low: float, high: float) -> None:
        for c, v in entries:
            self.rows.append(self.r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(low)
        self.hi.append(high)
        self.r += 1


def _placement_rows(cons: _Rows, col: _Columns, prob: PlacementProblem, feeds: dict[int, set[int]],
                    senders: list[int]) -> None:
    """Each atom on one device; s[i,d] >= x[au,d] - x[b,d] and r[i,d] >= x[b,d] - x[au,d] for each group b
    that sender i (in atom au) feeds."""
    X, S, R = col.X, col.S, col.R
    for a in range(prob.n_atoms):
        cons.add([(X(a, d), 1.0) for d in range(col.nd)], 1.0, 1.0)
    for i, u in enumerate(senders):
        au = int(prob.atom_of[u])
        for b in feeds[u]:
            for d in range(col.nd):
                cons.add([(S(i, d), 1.0), (X(au, d), -1.0), (X(b, d), 1.0)], 0.0, np.inf)
                cons.add([(R(i, d), 1.0), (X(b, d), -1.0), (X(au, d), 1.0)], 0.0, np.inf)


def _load_rows(cons: _Rows, col: _Columns, prob: PlacementProblem, model: LoadModel, classes: list[list[int]],
               links: list[tuple[int, int]], senders: list[int]) -> float:
    """Each device's load (compute + the hops it sends and receives) <= T, in units of the largest atom
    cost (returned: the scale)."""
    link_of: dict[int, tuple[int, int]] = {}
    for cls, (up, down) in zip(classes, links):
        for d in cls:
            link_of[d] = (up, down)
    cost = np.where(prob.allowed, prob.atom_cost, 0.0)
    scale = float(cost.max(initial=0.0)) or 1.0            # times ~1: the solver's absolute tolerances stay small
    cost = cost / scale
    X, S, R = col.X, col.S, col.R
    for d in range(col.nd):
        up, down = link_of[d]
        ent = [(X(a, d), float(cost[a, d])) for a in range(prob.n_atoms) if cost[a, d] > 0]
        ent += [(S(i, d), model.hop_s(u, up) / scale) for i, u in enumerate(senders) if model.hop_s(u, up) > 0]
        ent += [(R(i, d), model.hop_s(u, down) / scale) for i, u in enumerate(senders) if model.hop_s(u, down) > 0]
        cons.add(ent + [(col.T, -1.0)], -np.inf, 0.0)
    return scale


def _memory_rows(cons: _Rows, col: _Columns, prob: PlacementProblem) -> None:
    """The resident bytes on each device of a bounded pool within its capacity."""
    for d in range(col.nd):
        cap = float(prob.full_cap[prob.pool_of[d]])
        if math.isfinite(cap):
            cons.add([(col.X(a, d), float(prob.atom_resident[a])) for a in range(prob.n_atoms)
                      if prob.atom_resident[a] > 0], -np.inf, cap)


def _symmetry_rows(cons: _Rows, col: _Columns, prob: PlacementProblem, classes: list[list[int]]) -> None:
    """Value precedence over identical devices: an atom goes to the k-th device of a class only if an
    earlier atom (in position order) is on the (k-1)-th."""
    order = np.argsort(prob.atom_pos, kind="stable")
    for cls in classes:
        for k in range(1, len(cls)):
            for i, a in enumerate(order):
                cons.add([(col.X(int(a), cls[k]), 1.0)] + [(col.X(int(b), cls[k - 1]), -1.0) for b in order[:i]],
                         -np.inf, 0.0)


def group_feeds(prob: PlacementProblem, model: LoadModel) -> dict[int, set[int]]:
    """Node u -> the groups (atoms) other than u's own that consume its output."""
    feeds: dict[int, set[int]] = {}
    for u, v in zip(model.src, model.dst):
        a, b = int(prob.atom_of[u]), int(prob.atom_of[v])
        if a != b:
            feeds.setdefault(int(u), set()).add(b)
    return feeds


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):   # no real stdout (captured): nothing to hide
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
