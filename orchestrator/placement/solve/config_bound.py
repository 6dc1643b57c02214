"""A certified lower bound on the pipeline objective from the *configuration LP* (set covering by
device loads), for any split, contiguous or not.

On the hub topology of the workload format (every device reaches the others through one link of
its own; ``contiguous.device_classes`` exact), a device's pipeline load depends only on the set S of
groups (colocation atoms) it holds::

    load_c(S) = Σ_{a∈S} cost_c(a) + Σ_{u: u∈S, a consumer of u ∉ S} up_c(u) + Σ_{u: u∉S, a consumer of u ∈ S} down_c(u)

(``orchestrator.placement.simulate.load``; ``up_c``/``down_c``: the hop of u's output on the class's own
link, 0 for a CPU core in host memory). A time per sample T is reachable only if the groups can be
partitioned into sets, at most n_c of them for class c, each with load_c(S) <= T and fitting the
memory. For any weights π >= 0 on the groups, such a partition gives

    Σ_a π_a = Σ_devices π(S_d) <= Σ_c n_c P_c(π, T),   P_c(π, T) = max { π(S) : load_c(S) <= T, S fits }

so ``Σ_a π_a > Σ_c n_c P_c(π, T)`` proves that no placement reaches T (Farkas' lemma for the LP
relaxation of the covering; the Gilmore-Gomory / column-generation bound of bin packing, Farley's
bound). π comes from the restricted master LP (HiGHS) over the sets generated so far; P_c is the
pricing problem, a knapsack with the cut terms, solved as a small MILP whose *dual* bound is used,
so a pricing cut short by its time limit still gives a valid certificate. A bisection on T between
the known bound and the best placement's value (climbing from below, the step doubling after each
success) returns the largest T certified this way.

Unlike the LP relaxation of the assignment (``pipeline.lower_bound``), this bound charges every set
its own boundary: a device holding a middle stage pays both of its cuts, and no fraction of the
whole graph escapes them, so on chain-like graphs with costly activations it is far tighter.
Link-channel limits and temporary memory are left out, which only lowers it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.graph.arrays import BoolArray, FloatArray, IntArray
from orchestrator.partition.bounds import ConfigLP
from orchestrator.partition.ideals import ideals
from orchestrator.placement.simulate.load import LoadModel
from orchestrator.placement.solve.contiguous import device_classes, supers
from orchestrator.placement.solve.milp import group_feeds, quiet_stdout, solve_milp
from orchestrator.placement.solve.problem import PlacementProblem

log = logging.getLogger(__name__)


@dataclass
class ConfigBound:
    bound: float        # certified: no placement has a time per sample below it (seconds); 0 if none
    tested: int         # values of T tried by the bisection
    columns: int        # sets generated
    status: str         # "ok", "time limit", or why it did not run
    seconds: float


class _Pricing:
    """max π(S) s.t. load_c(S) <= T, memory, allowed: one MILP per (class, π, T)."""

    def __init__(self, prob: PlacementProblem, model: LoadModel, dev: int, up: int, down: int,
                 feeds: dict[int, set[int]]) -> None:
        from scipy.sparse import coo_matrix

        na = prob.n_atoms
        self.na = na
        self.allowed = prob.allowed[:, dev].copy()
        cost = np.where(self.allowed, prob.atom_cost[:, dev], 0.0)
        senders = sorted(feeds)
        ns = len(senders)
        hu = np.array([model.hop_s(u, up) for u in senders])
        hd = np.array([model.hop_s(u, down) for u in senders])
        # variables: x[a] (na), s[i] (ns), r[i] (ns)
        self.nv = na + 2 * ns
        rows, cols, vals, lo, hi = [], [], [], [], []
        r = 0
        for i, u in enumerate(senders):
            au = int(prob.atom_of[u])
            for b in feeds[u]:
                if hu[i] > 0:       # s_i >= x_au - x_b
                    rows += [r, r, r]; cols += [na + i, au, b]; vals += [1.0, -1.0, 1.0]
                    lo.append(0.0); hi.append(np.inf); r += 1
                if hd[i] > 0:       # r_i >= x_b - x_au
                    rows += [r, r, r]; cols += [na + ns + i, b, au]; vals += [1.0, -1.0, 1.0]
                    lo.append(0.0); hi.append(np.inf); r += 1
        self.load_row = r            # Σ cost x + Σ hu s + Σ hd r <= T (upper bound set per call)
        for a in range(na):
            if cost[a] > 0:
                rows.append(r); cols.append(a); vals.append(float(cost[a]))
        for i in range(ns):
            if hu[i] > 0:
                rows.append(r); cols.append(na + i); vals.append(float(hu[i]))
            if hd[i] > 0:
                rows.append(r); cols.append(na + ns + i); vals.append(float(hd[i]))
        lo.append(-np.inf); hi.append(0.0); r += 1
        cap = float(prob.full_cap[prob.pool_of[dev]])
        if math.isfinite(cap):
            for a in range(na):
                if prob.atom_resident[a] > 0:
                    rows.append(r); cols.append(a); vals.append(float(prob.atom_resident[a]))
            lo.append(-np.inf); hi.append(cap); r += 1
        self.a = coo_matrix((vals, (rows, cols)), shape=(r, self.nv)).tocsr()
        self.lo, self.hi = np.array(lo), np.array(hi)
        self.ub = np.ones(self.nv)
        self.ub[:na][~self.allowed] = 0.0
        self.integrality = np.zeros(self.nv)
        self.integrality[:na] = 1
        self.cost, self.hu, self.hd = cost, hu, hd
        self.senders, self.feeds, self.atom_of = senders, feeds, prob.atom_of

    def loads(self, sets: BoolArray) -> FloatArray:
        """load_c of many sets at once (boolean matrix, one row per set)."""
        from scipy.sparse import csr_matrix

        if not hasattr(self, "_inc"):
            owner = np.array([int(self.atom_of[u]) for u in self.senders], dtype=np.int64)
            rows = [b for u in self.senders for b in self.feeds[u]]
            cols = [i for i, u in enumerate(self.senders) for _ in self.feeds[u]]
            self._inc = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(self.na, len(self.senders)))
            self._owner = owner
            self._ncons = np.asarray(self._inc.sum(axis=0)).ravel()
        out = np.empty(len(sets))
        for i in range(0, len(sets), 2048):
            m = sets[i:i + 2048]
            cnt = (csr_matrix(m.astype(np.float64)) @ self._inc).toarray()
            own = m[:, self._owner]
            out[i:i + 2048] = (m @ self.cost + (own & (cnt < self._ncons - 0.5)) @ self.hu
                               + (~own & (cnt > 0.5)) @ self.hd)
        return out

    def load(self, members: BoolArray) -> float:
        """load_c of the set (boolean per atom)."""
        return float(self.loads(np.asarray(members, dtype=bool)[None, :])[0])

    def solve(self, pi: FloatArray, T: float, time_limit_s: float) -> tuple[float, BoolArray | None]:
        """(an upper bound on max π(S), the best set found or None)."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        c = np.zeros(self.nv)
        c[:self.na] = -np.where(self.allowed, pi, 0.0)
        hi = self.hi.copy()
        hi[self.load_row] = T
        with quiet_stdout():
            res = milp(c, constraints=[LinearConstraint(self.a, self.lo, hi)], integrality=self.integrality,
                       bounds=Bounds(0.0, self.ub), options={"time_limit": float(time_limit_s), "disp": False,
                                                             "mip_rel_gap": 1e-3})
        dual = getattr(res, "mip_dual_bound", None)
        if res.status == 0 and res.fun is not None:
            ub = -float(res.fun)
            if dual is not None and np.isfinite(dual):
                ub = max(ub, -float(dual))
        elif dual is not None and np.isfinite(dual):
            ub = -float(dual)
        else:
            ub = float(np.where(self.allowed, pi, 0.0).sum())   # no bound proven: the trivial one
        members = None
        if res.x is not None:
            members = res.x[:self.na] > 0.5
        return ub * (1 + 1e-6) + 1e-9, members


def _contiguous_sets(prob: PlacementProblem, work: FloatArray, upper: float, limit_ideals: int = 1500,
                     max_sets: int = 40_000) -> BoolArray:
    """Candidate stages: every I \\ J for ideals J ⊂ I of the DAG (the contiguous sets of the DP,
    ``contiguous.supers``/``ideals``) where there are at most ``limit_ideals`` ideals, else the runs
    of consecutive atoms in topological order; only sets whose compute ``work`` (per atom, the
    cheapest device's) is at most ``upper``, and at most ``max_sets`` of them (the largest by
    compute: they cover most). Boolean matrix, one row per set."""
    na = prob.n_atoms
    comp, n_sup, preds = supers(prob)
    found = ideals(n_sup, preds, limit_ideals)
    cand: list[tuple[float, Any]] = []   # (work, (first, last) run in topological order | ideal bitmask)
    order = np.argsort(prob.atom_pos, kind="stable")
    if found is None:
        for s in range(na):
            w = 0.0
            for t in range(s, na):
                w += float(work[order[t]])
                if w > upper:
                    break
                cand.append((w, (s, t)))
    else:
        wu = np.zeros(n_sup)
        np.add.at(wu, comp, work)
        masks = found[0]
        wi = [float(sum(wu[x] for x in range(n_sup) if (m >> x) & 1)) for m in masks]
        seen: set[int] = set()
        for i, mi in enumerate(masks):
            for j, mj in enumerate(masks):
                if mj != mi and mj & ~mi == 0 and wi[i] - wi[j] <= upper * (1 + 1e-9):
                    d = mi & ~mj
                    if d not in seen:
                        seen.add(d)
                        cand.append((wi[i] - wi[j], d))
    cand.sort(key=lambda c: -c[0])
    cand = cand[:max_sets]
    out = np.zeros((len(cand), na), dtype=bool)
    if found is None:
        for r, (_, (s, t)) in enumerate(cand):
            out[r, order[s:t + 1]] = True
    else:
        units = np.array([[(d >> x) & 1 for x in range(n_sup)] for _, d in cand], dtype=bool).reshape(-1, n_sup)
        out = units[:, comp]                                   # units -> atoms
    return out


def _seed(lp: ConfigLP, pricers: list[_Pricing], prob: PlacementProblem, classes: list[list[int]], upper: float,
          seeds: list[IntArray] | None) -> None:
    """The starting pool: every contiguous candidate set each class can hold within ``upper``, and the
    device sets of the ``seeds`` placements."""
    cand = _contiguous_sets(prob, np.where(prob.allowed, prob.atom_cost, np.inf).min(axis=1), upper)
    for k, pr in enumerate(pricers):
        ok = pr.allowed[None, :] | ~cand
        ok = ok.all(axis=1) & (cand.astype(float) @ lp.mem <= lp.caps[k])
        sub = cand[ok]
        if len(sub):
            sub = sub[sub.astype(float) @ pr.cost <= upper]       # compute alone rules most out
            for m, l in zip(sub, pr.loads(sub)):
                if l <= upper:
                    lp.cols.append((k, m.copy(), float(l)))
    for s in seeds or []:
        for k, cls in enumerate(classes):
            for d in cls:
                lp.add(k, np.asarray(s) == d)


def config_bound(prob: PlacementProblem, model: LoadModel, lower: float, upper: float, time_limit_s: float = 30.0,
                 pricing_limit_s: float = 5.0, rel_tol: float = 0.005, seeds: list[IntArray] | None = None,
                 ) -> ConfigBound:
    """The largest T in [lower, upper] certified unreachable (see the module doc), to ``rel_tol``.
    ``seeds``: placements (atom -> device arrays) whose device sets start the column pool, with
    every contiguous run of atoms whose load is at most ``upper``."""
    t_start = time.perf_counter()
    classes, links, exact = device_classes(prob, model)
    if not exact:
        return ConfigBound(0.0, 0, 0, "not built: the worker is not a hub topology", 0.0)
    if not (math.isfinite(upper) and upper > lower >= 0):
        return ConfigBound(0.0, 0, 0, "nothing to certify", 0.0)
    feeds = group_feeds(prob, model)
    pricers = [_Pricing(prob, model, cls[0], up, down, feeds) for cls, (up, down) in zip(classes, links)]
    columns = ConfigLP(pricers, np.array([len(c) for c in classes], dtype=float), prob.atom_resident,
                       [float(prob.full_cap[prob.pool_of[c[0]]]) for c in classes], pricing_limit_s, t_start)
    _seed(columns, pricers, prob, classes, upper, seeds)
    bound, tested, status = columns.largest(lower, upper, time_limit_s, rel_tol)
    return ConfigBound(bound, tested, len(columns.cols), status, time.perf_counter() - t_start)


def certify(prob: PlacementProblem, model: LoadModel, lower: float, upper: float, time_limit_s: float,
            seeds: list[IntArray] | None = None) -> tuple[float, str]:
    """The tightest certified bound within ``time_limit_s``: the configuration LP first (seeded with
    the placements in ``seeds``, atom -> device), then, with the time left and where the gap to
    ``upper`` is still over 1%, the MILP's dual bound (``orchestrator.placement.solve.milp``).
    Returns (bound in seconds, its source: "config_lp", "milp" or "" when neither beat ``lower``)."""
    t0 = time.perf_counter()
    best, src = lower, ""
    cb = config_bound(prob, model, lower, upper, time_limit_s=time_limit_s, seeds=seeds)
    if cb.bound > best:
        best, src = cb.bound, "config_lp"
    left = time_limit_s - (time.perf_counter() - t0)
    if left > 1.0 and upper > best * 1.01:
        m = solve_milp(prob, model, left)
        if m.bound > best:
            best, src = m.bound, "milp"
    return best, src
