"""The all-reduce and the columns together (docs/plans.md, "The bound on Sailor's metric", *All-reduce and
columns together*): a lower bound on ``T_pp + T_sync`` of Sailor's formula for every plan it scores honestly
with ``N`` columns, where the stages that keep the all-reduce small (short ones, or wide TP) are the ones
that make a column's fill long.

``T_sync`` is at least a ring over the bytes of some stage, and the stages every column runs are the plan's:

- one pipeline (``N = dp_0``, every stage ``dp_s >= N``): Sailor rings ``P_s / min(4, tp_min,s)`` bytes over
  ``dp_s`` replicas, and ``tp_min,s`` is at most the TP degree of any column's replica in the stage, so every
  column ``j`` has ``beta_j = max_s P_s / min(4, tp_j,s) <= beta*`` and ``T_sync >= ring_{>=N}(beta*)``;
- two or more pipelines: the ring across them carries the longest pipeline's stages undivided, at least what
  any pipeline's stages need (for a plan scored honestly), over exactly ``P`` members, and the last pipeline
  adds its own all-reduce over its ``d = N / P`` columns, so ``beta_j = max_s P_s <= beta*`` and ``T_sync >=
  min over N = P d of ring_{>=P}(beta*) + A1(d)`` (``Rings.across``).

With ``Theta_beta(N, m)`` the exact worst-column bound (``column_bound.ExactColumns``) over the columns whose
every stage has at most ``beta`` bytes by that rule, and the stage-byte values grouped into runs
``[beta_lo, beta_hi]`` (within ``GROUP`` of each other):

    T_pp + T_sync >= min over runs of  max(ring term of beta_lo, A(N)) + Theta_beta_hi(N, m)

per rule, and the bound is the smaller of the two rules (a plan has one pipeline or several). ``A(N)`` is
the floor that does not look at the columns (``sailor_bound._sailor_allreduce_floor``). Each ring is the
cheapest of Sailor's bucketed rings over the cluster's one-GPU inter-node links (``Rings``)."""

from __future__ import annotations

import heapq
import math

import numpy as np

from orchestrator.errors import UserError
from orchestrator.plan import GpuCluster, LayeredProfile
from orchestrator.planning.column_bound import ExactColumns, _Columns, column_box

GROUP = 1.03       # stage-byte values this close share one restricted bound (it gives away their spread)
TOLERANCE = 2e-3   # the branch and bound over runs stops this close to the best run found


class Rings:
    """``ring(nbytes, least)``: a lower bound on Sailor's bucketed ring all-reduce of at least ``nbytes`` over
    at least ``least`` members (``least`` to ``G``; 0 for one), on the cheapest of the cluster's one-GPU inter-node links;
    taken over a grid of sizes from ``nbytes`` up to the model's bytes too, so it stays a floor if a fit's time
    fell with the size."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, G: int):
        from orchestrator.planning.sailor import _raw

        self.G, self.total = G, float(np.sum(profile.layer_sizes(1).params)) * profile.float_bytes
        present = [(g, z) for (g, z), n in cluster.gpus.items() if n > 0]
        self.links = []
        for ga, za in present:
            for gb, zb in present:
                try:
                    self.links.append(_raw(cluster.network.inter_link(za, ga, 1, zb, gb, 1)))
                except UserError:
                    continue
        self._cache: dict[float, np.ndarray] = {}
        self._ks = np.arange(2, G + 1, dtype=float)[None, :]

    def __call__(self, nbytes: float, least: int) -> float:
        from orchestrator.planning.sailor import BUCKET_BYTES

        if not self.links or self.G < 2 or least < 2:
            return 0.0                                             # one member: no ring
        if nbytes not in self._cache:
            ks, G = self._ks, self.G
            sizes = np.geomspace(nbytes, max(nbytes, self.total), 48)[:, None]
            full = np.floor(sizes / BUCKET_BYTES)                     # Sailor's buckets, in turn (bucketed ring)
            rest = sizes - full * BUCKET_BYTES
            per_k = np.full(G + 2, math.inf)
            for link in self.links:
                t = 2.0 * (ks - 1) * (full * np.asarray(link.time(np.full_like(ks, BUCKET_BYTES) / ks))
                                      + np.asarray(link.time(rest / ks)))
                per_k[2:G + 1] = np.minimum(per_k[2:G + 1], t.min(axis=0))
            self._cache[nbytes] = np.minimum.accumulate(per_k[::-1])[::-1]          # the least over sizes >= k
        t = float(self._cache[nbytes][min(max(least, 2), self.G)])
        return max(t, 0.0) if math.isfinite(t) else 0.0

    def across(self, nbytes: float, n: int, within: list[float]) -> float:
        """A floor on ``T_sync`` of a plan of ``P >= 2`` pipelines with ``n = P d`` (``d`` the last pipeline's
        first-stage replicas, Sailor's count): the ring across the ``P`` pipelines over at least ``nbytes``, plus
        ``within[d]``, a floor on the last pipeline's own all-reduce over its ``d`` columns (0 for ``d = 1``)."""
        return min((self(nbytes, p) + within[n // p] for p in range(2, n + 1) if n % p == 0), default=math.inf)


class SyncCoupled:
    """The bound of the module docstring for one micro-batch size; ``rules`` among ``"one"`` and ``"several"``."""

    def __init__(self, profile: LayeredProfile, cols: _Columns, rings: Rings, rules: tuple[str, ...],
                 build=None):
        self.cols, self.rings, self.rules = cols, rings, rules
        self.build = build if build is not None else (lambda c, starts, box: ExactColumns(c, *box, starts=starts))
        self.sized = build is not None            # the box sized per column count (column_box), else 16 x 32
        self.ok = cols.ok
        if not self.ok:
            return
        pb = np.concatenate([[0.0], np.cumsum(np.asarray(profile.layer_sizes(1).params, dtype=float))]) * profile.float_bytes
        self.span = pb[None, :] - pb[:, None]                      # bytes of the stage j .. i - 1
        self.runs: dict[str, list[tuple[float, float]]] = {}
        for rule in rules:
            values = set()
            for (_, tp, *_), (start, whole) in zip(cols.kinds, cols.starts):
                d = self._divisor(rule, tp)
                runs = (start < len(cols.grid)) & np.triu(np.ones_like(start, dtype=bool), 1)
                values.update((self.span[runs] / d).tolist())
                if whole < len(cols.grid):
                    values.add(float(pb[-1]) / d)
            self.runs[rule] = _group(sorted(v for v in values if v > 0))
        self._exact: dict[tuple, ExactColumns] = {}

    @staticmethod
    def _divisor(rule: str, tp: int) -> float:
        return float(min(4, tp)) if rule == "one" else 1.0

    def _columns(self, rule: str, i: int, box: tuple[int, int] = (16, 32)) -> ExactColumns:
        for (r, j, b), got in self._exact.items():                  # a larger box serves a smaller one
            if r == rule and j == i and b[0] >= box[0] and b[1] >= box[1]:
                return got
        if (rule, i, box) not in self._exact:
            beta, size = self.runs[rule][i][1] * (1 + 1e-12), len(self.cols.grid)
            starts = []
            for (_, tp, *_), (start, whole) in zip(self.cols.kinds, self.cols.starts):
                d = self._divisor(rule, tp)
                starts.append((np.where(self.span / d <= beta, start, size), whole if self.span[0, -1] / d <= beta else size))
            self._exact[(rule, i, box)] = self.build(self.cols, starts, box)
        return self._exact[(rule, i, box)]

    def bound(self, n: int, m: int, lo: float, floors: dict[str, list[float]]) -> tuple[float, float]:
        """(all-reduce, pipelines' part) whose sum bounds ``T_pp + T_sync`` below for ``n`` columns and ``m``
        micro-batches, given ``lo`` (a bound on ``T_pp``) and ``floors[rule][n]`` (on ``T_sync``; ``"one"`` also
        the last pipeline's own all-reduce of ``Rings.across``); ``(min of the floors, lo)`` where the method
        does not apply or gives no more."""
        out = (min(floors[r][n] for r in self.rules), lo)
        if not self.ok:
            return out
        best, pick = math.inf, out
        for rule, runs in self.runs.items():
            if rule == "one":
                sync = [max(self.rings(b_lo, n), floors[rule][n]) for b_lo, _ in runs]
            else:
                sync = [max(self.rings.across(b_lo, n, floors["one"]), floors[rule][n]) for b_lo, _ in runs]
            if not math.isfinite(sync[0]):
                continue
            value, at = self._least(sync, lambda i, rule=rule: self._columns(rule, i, column_box(self.cols.counts, n) if self.sized else (16, 32)).worst(n, m, lo, never=math.inf), lo)
            if value < best:
                best, pick = value, at
        return pick if best > sum(out) else out

    @staticmethod
    def _least(sync: list[float], pipe, lo: float) -> tuple[float, tuple[float, float]]:
        """A lower bound on ``min_i sync[i] + pipe(i)`` (``sync`` non-decreasing, ``pipe`` non-increasing, the
        last run's ``pipe`` is ``lo``: every stage allowed), with the (sync, pipe) it was reached at: branch and
        bound over intervals of runs, ``sync[i1] + pipe(i2)`` below every run of ``[i1, i2]``, until the least
        interval is within ``TOLERANCE`` of the best run found (then that interval's figure is returned)."""
        k = len(sync)
        known = {k - 1: lo}
        if k > 1:
            known[0] = pipe(0)
        best = min((sync[i] + p, (sync[i], p)) for i, p in known.items())
        heap = [(sync[0] + lo, 0, k - 1)] if k > 2 else []
        while heap:
            low, i1, i2 = heapq.heappop(heap)
            if low >= best[0] * (1 - TOLERANCE):
                if low < best[0]:                            # close enough: its figure is the bound
                    best = (low, (sync[i1], low - sync[i1]))
                break
            mid = (i1 + i2) // 2
            known[mid] = p = pipe(mid)
            if sync[mid] + p < best[0]:
                best = (sync[mid] + p, (sync[mid], p))
            for a, b in ((i1, mid), (mid, i2)):
                if b - a > 1:
                    heapq.heappush(heap, (sync[a] + known[b], a, b))
        return best


def _group(values: list[float]) -> list[tuple[float, float]]:
    """Sorted values as runs (first, last) whose last is within ``GROUP`` of its first."""
    runs: list[tuple[float, float]] = []
    for v in values:
        if runs and v <= runs[-1][0] * GROUP:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs
