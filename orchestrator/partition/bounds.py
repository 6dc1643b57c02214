"""The bounds beside the partitioning engine, on arrays: the work LP (the work of each item spread over
resources, fractionally: ``work_lp``; the placement's LP relaxation of the assignment and the plans' work bound)
and the column DP (the least weighted column of stages, every stage within a threshold, for every threshold of a
grid at once, per vector of a box of resource counts and an extra state: ``ColumnDP``, ``column_dp``; the plans'
bounds on Sailor's metric) and the configuration LP (set covering by the
loads of sets of items, by column generation: ``ConfigLP``; the placement's ``config_bound``, whose pricing is a
MILP on the op graph)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchestrator.graph.arrays import BoolArray, FloatArray, IntArray

log = logging.getLogger(__name__)


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


_SCRATCH: list[np.ndarray] = []


def scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 table of ``shape`` filled with +inf, in memory reused from the last call (the column DPs build
    many tables of tens of MB; fresh pages cost more than the fill). Valid until the next call."""
    size = math.prod(shape)
    if not _SCRATCH or _SCRATCH[0].size < size:
        _SCRATCH[:] = [np.empty(size, dtype=np.float32)]
    out = _SCRATCH[0][:size].reshape(shape)
    out.fill(math.inf)
    return out


def release_scratch() -> None:
    """Free the memory ``scratch`` keeps."""
    _SCRATCH.clear()


class ColumnDP:
    """The column DP over layer ranges: a chain of ``n`` units cut into stages ``j .. i-1``, each on a kind ``k``
    that uses ``v_k`` of a box of resource counts, every stage within a threshold of a grid of ``size``::

        lat[0, 0, x, s] = 0 at x = 0                                       (``start``; else the caller seeds it)
        lat[i, q, x, s] = min over the stages j .. i-1 on kind k pushed from (j, q') to (i, q) from threshold s0 on
                          of  lat[j, q', x - v_k, s] + add                  (s >= s0)

    ``lat[i, q, p, x, s]``: the least cost of a column's first stages ending at unit ``i`` in the state ``q`` (what
    the caller keeps of them, e.g. the last stage's kind; one state by default), for the problem ``p`` (``shape``:
    independent problems, e.g. one per price vector) on the resource vector ``x`` (within ``box``), every stage
    within ``grid[s]``. ``uses[k] = (axis, count)``: a stage on kind k takes ``count`` resources of box axis
    ``axis`` (0: none). ``sweep(moves)`` visits each j in order (its row final: every stage ends after it starts)
    and ``moves(j, live)`` (``live``: the states with a finite entry at j) pushes the stages that start there
    (``push``, from a row or from ``merge``, a boundary cost that depends on the state before it); ``one_stage``
    the whole chain as one stage. ``compact``: float32 in reused memory (``scratch``)."""

    def __init__(self, n: int, size: int, uses: Sequence[tuple[int, int]], box: Sequence[int] = (),
                 shape: tuple[int, ...] = (), states: int = 1, compact: bool = False, start: bool = True):
        dims = (*shape, *(b + 1 for b in box))
        self.n, self.size = n, size
        self.lat = scratch((n + 1, states, *dims, size)) if compact else np.full((n + 1, states, *dims, size), math.inf)
        self.origin = np.full((*dims, size), math.inf, dtype=self.lat.dtype)     # zero resources, no stage
        self.origin[(slice(None),) * len(shape) + (0,) * len(box)] = 0.0
        if start:
            self.lat[0, 0] = self.origin
        self.buf = np.empty(self.origin.size, dtype=self.lat.dtype)
        self.via: np.ndarray | None = None
        every = (slice(None),) * len(dims)
        self.shift = []                                   # (source, destination, fits the box) per kind
        for axis, count in uses:
            a = len(shape) + axis
            self.shift.append((every[:a] + (slice(None, -count),) + every[a + 1:] if count else every,
                               every[:a] + (slice(count, None),) + every[a + 1:] if count else every,
                               count == 0 or count <= box[axis]))

    def push(self, src: np.ndarray, k: int, add: Any, s: int, i: int, q: int = 0) -> None:
        """``lat[i, q, x + v_k, s:] = min(itself, src[x, s:] + add)``: a stage on kind k, within ``grid[s]`` on."""
        a, b, fits = self.shift[k]
        if not fits:
            return
        src, dst = src[(*a, slice(s, None))], self.lat[(i, q, *b, slice(s, None))]
        tmp = self.buf[:src.size].reshape(src.shape)
        np.add(src, add, out=tmp)
        np.minimum(dst, tmp, out=dst)

    def merge(self, j: int, live: list[int], hop: np.ndarray) -> np.ndarray:
        """``via[k] = min over the live states q of lat[j, q] + hop[q, k]`` (a boundary priced by the state before
        it, for stages whose threshold does not depend on it)."""
        if self.via is None:
            self.via = np.empty((hop.shape[1], *self.origin.shape), dtype=self.lat.dtype)
        via, tmp = self.via, self.buf.reshape(self.origin.shape)
        for k in range(hop.shape[1]):
            np.add(self.lat[j, live[0]], hop[live[0], k], out=via[k])
            for q in live[1:]:
                np.add(self.lat[j, q], hop[q, k], out=tmp)
                np.minimum(via[k], tmp, out=via[k])
        return via

    def sweep(self, moves: Callable[[int, list[int]], None], first: int = 0) -> None:
        """``moves(j, live)`` for j = ``first`` .. n-1 in order, where some state has a finite entry."""
        for j in range(first, self.n):
            live = [q for q in range(self.lat.shape[1]) if np.isfinite(self.lat[j, q]).any()]
            if live:
                moves(j, live)

    def one_stage(self, k: int, cost: Any, s: int, q: int = 0) -> None:
        """The whole chain as one stage on kind k, within ``grid[s]`` on (``size``: never)."""
        if s < self.size:
            self.push(self.origin, k, cost, s, self.n, q)


def column_dp(n: int, size: int, starts: Sequence[tuple[IntArray, int]], add: Callable[[int, int, int], Any],
              whole: Callable[[int], Any], shape: tuple[int, ...] = (), box: Sequence[int] = (),
              uses: Sequence[tuple[int, int]] | None = None, compact: bool = False) -> FloatArray:
    """``out[..., x, s]`` (``ColumnDP.lat[n, 0]``): the least sum of ``add(k, j, i)`` over the columns (a chain of
    ``n`` units cut into stages ``j .. i-1``, each on a kind ``k``) on the resources ``x`` whose every stage runs
    within the threshold ``s`` of a grid of ``size`` (``starts[k] = (start, whole_from)``: stage ``j .. i-1`` on
    kind k runs within thresholds ``start[j, i]`` on, ``size`` never; a one-stage column of the whole chain within
    ``whole_from`` on, costing ``whole(k)``). ``add`` and ``whole`` may be arrays of ``shape`` (one column problem
    per entry, e.g. per price vector); ``box`` and ``uses`` as ``ColumnDP``'s (default: no resources)."""
    dp = ColumnDP(n, size, [(0, 0)] * len(starts) if uses is None else uses, box, shape, compact=compact)

    def moves(j: int, _: list[int]) -> None:
        for k, (start, _w) in enumerate(starts):
            for i in np.nonzero(start[j, j + 1:] < size)[0] + j + 1:
                dp.push(dp.lat[j, 0], k, add(k, j, i), int(start[j, i]), i)

    dp.sweep(moves)
    for k, (_, w) in enumerate(starts):
        dp.one_stage(k, whole(k), w)
    return dp.lat[n, 0]


class ConfigLP:
    """The configuration LP's column generation: ``counts[c]`` resources of each class cover the items with sets
    of load at most T (each fitting its class's memory ``caps[c]``, items of ``mem``); weights ``pi >= 0`` on the
    items with ``sum pi > sum_c counts[c] P_c(pi, T)`` (``P_c`` the pricing bound) prove T unreachable (Farkas).
    The pool of generated sets (class, members, load), the restricted master LP over it and the certificate test
    at one T (``certify``), and the largest T certified in a range (``largest``). A pricer per class gives
    ``allowed`` (per item), ``load(members)`` and ``solve(pi, T, time_limit_s)``: (an upper bound on ``max pi(S)
    s.t. load(S) <= T``, S fits and is allowed; the best set found or None)."""

    def __init__(self, pricers: Sequence[Any], counts: FloatArray, mem: FloatArray, caps: list[float],
                 pricing_limit_s: float, t_start: float) -> None:
        self.na, self.n_classes = len(mem), len(pricers)
        self.pricers, self.counts, self.mem, self.caps = pricers, counts, mem, caps
        self.cols: list[tuple[int, BoolArray, float]] = []     # (class, members, load)
        self.pricing_limit_s, self.t_start = pricing_limit_s, t_start

    def add(self, k: int, members: BoolArray) -> None:
        if members.any() and self.pricers[k].allowed[members].all() and self.mem[members].sum() <= self.caps[k]:
            self.cols.append((k, members.copy(), self.pricers[k].load(members)))

    def master(self, T: float) -> tuple[float, FloatArray, FloatArray] | None:
        """The restricted master LP over the sets of load <= T: (lambda, π_LP, σ), or None when the LP
        fails; where some atom fits no generated set (infeasible), lambda is inf and π_LP prices the
        uncovered atoms."""
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix

        na, cols = self.na, self.cols
        use = [j for j, (_, _, l) in enumerate(cols) if l <= T]
        nz = len(use)
        nv = nz + 1                                          # z_j ..., lambda
        r_, c_, v_ = [], [], []
        for jj, j in enumerate(use):
            k, m, _ = cols[j]
            idx = np.flatnonzero(m)
            r_ += idx.tolist(); c_ += [jj] * len(idx); v_ += [-1.0] * len(idx)
            r_.append(na + k); c_.append(jj); v_.append(1.0)
        for k in range(self.n_classes):
            r_.append(na + k); c_.append(nz); v_.append(-self.counts[k])
        a_ub = coo_matrix((v_, (r_, c_)), shape=(na + self.n_classes, nv)).tocsr()
        b_ub = np.concatenate([-np.ones(na), np.zeros(self.n_classes)])
        c = np.zeros(nv)
        c[nz] = 1.0
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
        if res.status == 2:                                  # some atom fits no generated set
            pi_lp = np.zeros(na)
            covered = np.zeros(na, dtype=bool)
            for j in use:
                covered |= cols[j][1]
            pi_lp[~covered] = 1.0
            return math.inf, pi_lp, np.zeros(self.n_classes)
        if res.status != 0:
            return None
        return float(res.fun), np.maximum(0.0, -res.ineqlin.marginals[:na]), np.maximum(0.0, -res.ineqlin.marginals[na:])

    def price(self, pi: FloatArray, pi_lp: FloatArray, sigma: FloatArray, T: float,
              until: float) -> tuple[list[float], int] | None:
        """Each class's pricing bound P_c(π, T), the sets that price out added to the pool: (bounds, how
        many were added), or None when out of time (``until``)."""
        ubs, new = [], 0
        for k, pr in enumerate(self.pricers):
            left = until - time.perf_counter()
            if left <= 0:
                return None
            ub, members = pr.solve(pi, T, min(self.pricing_limit_s, left))
            ubs.append(ub)
            if members is not None and float(pi_lp[members].sum()) > sigma[k] + 1e-7 and pr.load(members) <= T * (1 + 1e-9):
                self.add(k, members)
                new += 1
        return ubs, new

    def certify(self, T: float, until: float) -> bool | None:
        """True: T is proven unreachable; False: the LP covers at T; None: out of time (``until``).
        Duals are smoothed (Wentges): pricing uses α π_best + (1 - α) π_LP, π_best the weights with
        the best certificate ratio so far; any π >= 0 gives a valid certificate."""
        best_pi, best_ratio, alpha = None, 0.0, 0.5
        while True:
            if time.perf_counter() > until:
                return None
            solved = self.master(T)
            if solved is None:
                return None
            lam, pi_lp, sigma = solved
            if lam <= 1.0 + 1e-9:                                # these sets already cover: no certificate
                return False
            smooth = best_pi is not None and alpha > 0 and math.isfinite(lam)
            pi = alpha * best_pi + (1 - alpha) * pi_lp if smooth and best_pi is not None else pi_lp  # smooth implies best_pi
            priced = self.price(pi, pi_lp, sigma, T, until)
            if priced is None:
                return None
            ubs, new = priced
            ratio = float(pi.sum()) / max(1e-300, float(self.counts @ np.array(ubs)))
            log.debug("T=%.6g lambda=%.4f ratio=%.4f new=%d columns=%d t=%.1fs", T, lam, ratio, new, len(self.cols),
                      time.perf_counter() - self.t_start)
            if ratio > 1 + 1e-7:
                return True
            if ratio > best_ratio and math.isfinite(lam):
                best_pi, best_ratio = pi.copy(), ratio
            if new == 0:
                if not smooth:
                    return False                                 # the LP is solved and covers at T
                alpha = 0.0                                      # mispriced: price the LP's own duals once
            else:
                alpha = 0.5

    def largest(self, lower: float, upper: float, time_limit_s: float, rel_tol: float) -> tuple[float, int, str]:
        """(the largest T in [lower, upper] certified unreachable, to ``rel_tol``, 0 if none; the T tried; "ok" or
        "time limit"). From below: a T far under the threshold is certified in few iterations, so the bound grows
        early even where the time limit stops the search; the step doubles after each success."""
        lo, hi, tested = lower, upper, 0
        step, status = (hi - lo) / 4, "ok"
        while hi - lo > rel_tol * hi:
            T = lo + min(step, 0.5 * (hi - lo))
            tested += 1
            now = time.perf_counter()
            left = time_limit_s - (now - self.t_start)
            if left <= 0:
                status = "time limit"
                break
            verdict = self.certify(T, now + max(min(left, 2.0), left / 3))   # one T may not take all the time
            if verdict is None:                                                # undecided: look lower
                status, verdict = "time limit", False
            if verdict:
                lo, step = T, 2 * step
            else:
                hi, step = T, (T - lo) / 4
        return (lo if lo > lower else 0.0), tested, status
