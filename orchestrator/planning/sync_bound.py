"""The all-reduce and the columns together (docs/plans.md, "The bound on Sailor's metric", *All-reduce and
columns together*): a lower bound on ``T_pp + T_sync`` of Sailor's formula for every plan it scores honestly
with ``N`` columns, where the stages that keep the all-reduce small (short ones, or wide TP) are the ones
that make a column's fill long.

``T_sync`` is at least a ring over the bytes of some stage, and the stages every column runs are the plan's:

- one pipeline (``N = dp_0``, every stage ``dp_s >= N``): Sailor rings ``P_s / min(4, tp_min,s)`` bytes over
  ``dp_s`` replicas, and ``tp_min,s`` is at most the TP degree of any column's replica in the stage, so every
  column ``j`` has ``beta_j = max_s P_s / min(4, tp_j,s) <= beta*`` and ``T_sync >= ring_{>=N}(beta*)``;
- two or more pipelines: the ring across them carries the longest pipeline's stages undivided, at least what
  any pipeline's stages need (for a plan scored honestly), over exactly ``P`` members, and the pipelines add
  their own all-reduce (``Rings.within``), so ``beta_j = max_s P_s <= beta*`` and ``T_sync >= min over N = P d
  of ring_{>=P}(beta*) + within(P, d)`` (``Rings.across``); two pipelines also by the one-pipeline rule over
  ``d`` members (``SyncCoupled.bound``).

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
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import bucketed_allreduce_time
from orchestrator.partition.split import chain_minmax
from orchestrator.plan import LayeredProfile
from orchestrator.planning.column_bound import Columns, ExactColumns, column_box
from orchestrator.planning.sailor_rules import BUCKET_BYTES, uncapped

GROUP = 1.03       # stage-byte values this close share one restricted bound (it gives away their spread)
TOLERANCE = 2e-3   # the branch and bound over runs stops this close to the best run found


class Rings:
    """``ring(nbytes, least)``: a lower bound on Sailor's bucketed ring all-reduce of at least ``nbytes`` over
    at least ``least`` members (``least`` to ``G``; 0 for one), on the cheapest of the cluster's one-GPU inter-node links;
    taken over a grid of sizes from ``nbytes`` up to the model's bytes too, so it stays a floor if a fit's time
    fell with the size."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, G: int):
        self.G = G
        self.params = np.asarray(profile.layer_sizes(1).params, dtype=float) * profile.float_bytes
        self.total = float(self.params.sum())
        pb = np.concatenate([[0.0], np.cumsum(self.params)])
        self.span = pb[None, :] - pb[:, None]                      # bytes of the stage j .. i - 1
        present = [(g, z) for (g, z), n in cluster.gpus.items() if n > 0]
        self.links = []
        for ga, za in present:
            for gb, zb in present:
                try:
                    self.links.append(uncapped(cluster.topology.inter_link(za, ga, 1, zb, gb, 1)))
                except UserError:
                    continue
        self._cache: dict[float, np.ndarray] = {}
        self._within: dict[tuple[int, int], float] = {}
        self._stage: dict[int, float] = {}
        self._ks = np.arange(2, G + 1, dtype=float)[None, :]

    def __call__(self, nbytes: float, least: int) -> float:
        if not self.links or self.G < 2 or least < 2:
            return 0.0                                             # one member: no ring
        if nbytes not in self._cache:
            ks, G = self._ks, self.G
            sizes = np.geomspace(nbytes, max(nbytes, self.total), 48)[:, None]
            per_k = np.full(G + 2, math.inf)
            for link in self.links:                              # Sailor's buckets, in turn (bucketed ring)
                t = bucketed_allreduce_time(link, sizes, ks, BUCKET_BYTES)
                per_k[2:G + 1] = np.minimum(per_k[2:G + 1], t.min(axis=0))
            self._cache[nbytes] = np.minimum.accumulate(per_k[::-1])[::-1]          # the least over sizes >= k
        t = float(self._cache[nbytes][min(max(least, 2), self.G)])
        return max(t, 0.0) if math.isfinite(t) else 0.0

    def within(self, p: int, d: int) -> float:
        """A floor on the all-reduce inside the pipelines of a plan of ``p >= 2`` pipelines that Sailor scores
        honestly, the last with ``d`` first-stage replicas (0 for ``d < 2``). Honesty gives ``p d <= sum_q d_q``
        over the pipelines' first stages, so the pipelines with ``d_q >= d`` (the last and at least one more)
        hold at least ``p + 2 d - 2`` columns: one of them, with ``d_q >= d`` columns, has a column of at most
        ``k = floor(G / (p + 2 d - 2))`` GPUs, hence a stage of at least ``max(P / k, MM(k) / 4)`` ring bytes
        (the one-pipeline argument of ``sailor_bound._sailor_allreduce_floor``), rung over at least ``d``
        members; ``T_sync`` takes the largest pipeline's all-reduce."""
        if d < 2:
            return 0.0
        if (p, d) not in self._within:
            k = max(1, self.G // (p + 2 * d - 2))
            self._within[(p, d)] = self(max(self.total / k, self.stage_of(k) / 4.0), d)
        return self._within[(p, d)]

    def across(self, nbytes: float, n: int, least: int = 2) -> float:
        """A floor on ``T_sync`` of a plan of ``P >= least`` pipelines with ``n = P d`` (``d`` the last pipeline's
        first-stage replicas, Sailor's count): the ring across the ``P`` pipelines over at least ``nbytes``, plus
        ``within(P, d)``, the all-reduce inside the pipelines."""
        return min((self(nbytes, p) + self.within(p, n // p) for p in range(max(2, least), n + 1) if n % p == 0),
                   default=math.inf)

    def stage(self, n: int) -> float:
        """``MM(floor(G / n))``: the bytes of some stage of a plan of ``n`` columns (a column of at most
        ``floor(G / n)`` GPUs, so at most that many stages)."""
        return self.stage_of(max(1, self.G // n))

    def stage_of(self, k: int) -> float:
        """``MM(k)``: the least largest stage of the model's bytes split into at most ``k`` contiguous stages (the
        engine's chain min-max, ``partition.split.chain_minmax``)."""
        if k not in self._stage:          # empty stages allowed (at most k); 1e-9 below the optimum, as sums round
            n = len(self.params)
            span = np.where(np.triu(np.ones_like(self.span, dtype=bool)), self.span, math.inf)
            self._stage[k] = chain_minmax([span] * max(1, min(k, n)), n) * (1 - 1e-9)
        return self._stage[k]


class SyncCoupled:
    """The bound of the module docstring for one micro-batch size; ``rules`` among ``"one"`` and ``"several"``."""

    def __init__(self, profile: LayeredProfile, cols: Columns, rings: Rings, rules: tuple[str, ...],
                 build=None):
        self.cols, self.rings, self.rules = cols, rings, rules
        self.build = build if build is not None else (lambda c, starts, box: ExactColumns(c, *box, starts=starts))
        self.sized = build is not None            # the box sized per column count (column_box), else 16 x 32
        self.ok = cols.ok
        if not self.ok:
            return
        self.span = rings.span
        self.runs: dict[str, list[tuple[float, float]]] = {}
        for rule in set(rules) | ({"one"} if "several" in rules else set()):     # two pipelines use both
            values = set()
            for (_, tp, *_), (start, whole) in zip(cols.kinds, cols.starts):
                d = self._divisor(rule, tp)
                runs = (start < len(cols.grid)) & np.triu(np.ones_like(start, dtype=bool), 1)
                values.update((self.span[runs] / d).tolist())
                if whole < len(cols.grid):
                    values.add(float(self.span[0, -1]) / d)
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
        micro-batches, given ``lo`` (a bound on ``T_pp``) and ``floors[rule][n]`` (on ``T_sync``); ``(min of the
        floors, lo)`` where the method does not apply or gives no more.

        Several pipelines split by their number ``P``. ``P >= 3``: the ring across them coupled with the columns
        (``beta`` undivided), ``Rings.across``. ``P = 2``: both pipelines have at least ``d = n / 2`` columns
        (honesty: ``2 d_last <= d_1 + d_last``), so every column's stages are rung over at least ``d`` members
        inside its pipeline and the one-pipeline coupling holds with ``d`` members, plus the ring across the two
        over at least ``MM(floor(G / n))`` bytes; the larger of that and the ``beta``-undivided coupling."""
        out = (min(floors[r][n] for r in self.rules), lo)
        if not self.ok:
            return out
        box = column_box(self.cols.counts, n) if self.sized else (16, 32)

        def least(rule: str, sync: list[float]) -> tuple[float, tuple[float, float]]:
            if not sync or not math.isfinite(sync[0]):
                return math.inf, out
            return self._least(sync, lambda i: self._columns(rule, i, box).worst(n, m, lo, never=math.inf), lo)

        rings, one, several = self.rings, self.runs.get("one", []), self.runs.get("several", [])
        picks = []
        if "one" in self.rules:
            picks.append(least("one", [max(rings(b, n), floors["one"][n]) for b, _ in one]))
        if "several" in self.rules:
            floor = rings.across(rings.stage(n), n, 3)
            picks.append(least("several", [max(rings.across(b, n, 3), floor) for b, _ in several]))
            if n % 2 == 0:
                d, cross = n // 2, rings(rings.stage(n), 2)
                inside = rings.within(2, d)
                undivided = least("several", [max(rings(b, 2), cross) + inside for b, _ in several])
                divided = least("one", [cross + max(rings(b, d), inside) for b, _ in one])
                picks.append(max(undivided, divided, key=lambda v: v[0]))
        value, pick = min(picks, key=lambda v: v[0])
        return pick if value > sum(out) else out

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
