"""The bound on Sailor's metric (docs/plans.md, "The bound on Sailor's metric"): for the plans Sailor's
formula scores honestly (``sailor_rules.sailor_scores_honestly``), a lower bound on its figure from the columns of
replicas (``column_lp``), the fill and drain of one pipeline, the all-reduce no plan of ``N`` columns avoids
(``_sailor_allreduce_floor``) and the update; at least the work bound of ``bound.py``."""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from orchestrator.cache import cached
from orchestrator.errors import UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.partition.bounds import release_scratch
from orchestrator.plan import LayeredProfile, Plan
from orchestrator.planning.bound import (
    capacity,
    cluster_micro_batches,
    lower_bound,
    min_transfer,
    min_update,
    replica_kinds,
)
from orchestrator.planning.column_bound import Columns, ColumnTimes, column_bottleneck, column_box
from orchestrator.planning.neighbour_bound import NeighbourColumns
from orchestrator.planning.sailor_rules import sailor_scores_honestly
from orchestrator.planning.simulators import PlanSimulator, simulators
from orchestrator.planning.simulators import simulator as resolve_simulator
from orchestrator.planning.sync_bound import Rings, SyncCoupled

__all__ = ["column_kinds", "column_lp", "plan_bound", "sailor_lower_bound", "sailor_scores_honestly"]

FINE_STEP = 1.01     # the grid of thresholds of the last refinement (level 3)


def plan_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
               simulator: PlanSimulator | str | None = None, plan: Plan | None = None) -> float:
    """The bound a plan's figure is compared with: the work bound (``bound.lower_bound``, valid on both
    built-in simulators) without a simulator, else the simulator's own (``PlanSimulator.lower_bound``: on
    Sailor's, the larger of the work bound and ``sailor_lower_bound`` unless ``plan`` is given and Sailor's
    formula does not score it honestly, ``sailor_scores_honestly``). A name is looked up in the registry."""
    if simulator is None:
        return lower_bound(profile, cluster, global_batch)
    sim = resolve_simulator(simulator) if isinstance(simulator, str) else simulator
    return sim.lower_bound(profile, cluster, global_batch, plan)


def sailor_lower_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                       detail: dict[str, float] | None = None, pipelines: str = "any",
                       time_limit_s: float | None = None) -> float:
    """A lower bound on Sailor's figure (``planner.simulator=sailor``) of every plan it scores honestly
    (docs/plans.md, "The bound on Sailor's metric", ``sailor_scores_honestly``): every stage has at least as
    many replicas as its pipeline's first, the last pipeline's first stage at most the average, TP groups
    inside one machine, the ring across pipelines at least what every pipeline's stages need.

    For a micro-batch size ``b`` and ``N = P dp_0`` columns (``m = ceil(B / (b N))``, Sailor's count):

        C(b, N)  the column LP: the slowest stage's micro-batch, with the columns' memory (``column_lp``)
        W(b)     = sum_l min over kinds of (fwd_l + bwd_l)(g, b, tp)   one micro-batch through every layer
        A(N)     = min(A1(N), min over N = P d, P >= 2 of ring_P(MM(floor(G / N))) + A1(d)),
                   A1(N) = ring_N(max(P / floor(G / N), MM(floor(G / N)) / 4))   (A1(1) = 0)
        C'(b, N) the same with whole layers and whole GPUs (``column_bound.column_bottleneck``)
        F(b, N)  the pipelines' part with bottleneck and fill together (``column_bound.ColumnTimes``)
        bound    = min over b, N of max((m - 1) C* + max(C*, W), F) + min update + A(N),  C* = max(C, C')

    ``pipelines="one"`` or ``"several"``: the bound over plans of one pipeline, or of two or more, only.
    With ``P`` the parameter bytes, ``MM(S)`` the least largest part of a contiguous split of the parameter bytes into at most ``S``
    parts, ``G`` the cluster's GPUs and each ring Sailor's bucketed ring on the fastest one-GPU link.
    The refinement is best first, so it is anytime: ``time_limit_s`` stops it after that long with the least
    candidate's bound so far, certified and looser (``detail["cut"]`` 1). Kept across trials (``orchestrator.cache``,
    keyed on the limit too): a sweep's planners on one cluster compute it once."""
    key = (profile, cluster, global_batch, pipelines) + ((time_limit_s,) if time_limit_s is not None else ())
    (best, found), _ = cached("sailor-bound", key,
                              lambda: _sailor_lower_bound(profile, cluster, global_batch, pipelines, time_limit_s))
    if detail is not None:
        detail.update(found)
    return best


def _sailor_lower_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                        pipelines: str, time_limit_s: float | None = None) -> tuple[float, dict[str, float]]:
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    u_min = min_update(profile, cluster)
    u_min = u_min if math.isfinite(u_min) else 0.0
    G = sum(n for n in cluster.gpus.values() if n > 0)
    if G < 1:
        return math.inf, {}
    rules = ("one", "several") if pipelines == "any" else (pipelines,)
    rings = Rings(profile, cluster, G)
    floors = _sailor_allreduce_floor(profile, cluster, G, rings)
    ar = [min(floors[r][n] for r in rules) for n in range(G + 1)]
    cands, times = _column_candidates(profile, cluster, global_batch, G, u_min, ar)
    best, where, cut = _Refinement(profile, cluster, global_batch, times, rings, rules, floors).run(cands, u_min, deadline)
    release_scratch()
    detail: dict[str, float] = {"cut": 1.0} if cut else {}
    if math.isfinite(best):
        b, n, c, w, pipe, sync = where
        m = math.ceil(global_batch / (b * n))
        detail.update({"mbs": b, "columns": n, "micro_batches": m, "work_s": m * c, "bubble_s": max(c, w) - c,
                       "pipelines_s": pipe, "update_s": u_min, "allreduce_s": sync})
    return best, detail


def _column_candidates(profile: LayeredProfile, cluster: GpuCluster, global_batch: int, G: int, u_min: float,
                       ar: list[float]) -> tuple[list[tuple], dict[int, ColumnTimes]]:
    """Level 0 of the bound per micro-batch size ``b`` and column count ``n``: the column LP, whole layers and
    GPUs, one pass and the fill, (bound, b, n, c, w, pipelines' part, all-reduce, level 0); with the columns'
    ``ColumnTimes`` per ``b`` (bottleneck and fill together)."""
    cands = []
    grid = sorted({1, G} | {int(round(x)) for x in np.geomspace(1, G, 40)})
    times: dict[int, ColumnTimes] = {}
    for b in cluster_micro_batches(profile, cluster):
        w = _one_pass(profile, cluster, b)
        data = column_kinds(profile, cluster, b)
        whole = column_bottleneck(profile, cluster, b, G)     # C(b, N) with whole layers and GPUs
        times[b] = both = ColumnTimes(profile, cluster, b)    # bottleneck and fill together
        for i, n0 in enumerate(grid):
            top = grid[i + 1] if i + 1 < len(grid) else G + 1
            v = column_lp(profile, cluster, b, n0, top - 1, data)        # C(n) / n for n0 <= n < top
            if not math.isfinite(v):
                break                                      # the columns' memory: no more columns fit
            for n in range(n0, top):
                m = math.ceil(global_batch / (b * n))
                c = max(v * n, float(whole[n]))
                pipe = max((m - 1) * c + max(c, w), both.average(n, m))
                cands.append((pipe + u_min + ar[n], b, n, c, w, pipe, ar[n], 0))
    return cands, times


class _Refinement:
    """The costlier terms only where they can change the least (each only raises a candidate): level 1 every
    column's bottleneck and fill (sends priced by the neighbours' kinds, neighbour_bound), level 2 the
    all-reduce with the columns (sync_bound.SyncCoupled), level 3 the same with the neighbours' sends on a
    finer grid of thresholds (FINE_STEP). Each bound is built when the refinement first reaches it."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, global_batch: int, times: dict[int, ColumnTimes],
                 rings: Rings, rules: tuple[str, ...], floors: dict[str, list[float]]):
        self.profile, self.cluster, self.global_batch, self.times = profile, cluster, global_batch, times
        self.rings, self.rules, self.floors = rings, rules, floors
        self.exact: dict[tuple, NeighbourColumns] = {}             # per (b, box)
        self.coupled: dict[int, SyncCoupled] = {}
        self.fine: dict[int, SyncCoupled] = {}                     # level 3: sends between neighbours, a finer grid

    def run(self, cands: list[tuple], u_min: float, deadline: float | None = None) -> tuple[float, tuple, bool]:
        """(the least candidate once refined to level 3, (b, n, c, w, pipelines' part, all-reduce) of it, False);
        past ``deadline``, the least candidate at whatever level it has reached, and True: every candidate bounds
        its (b, n) at its level, so the least of them bounds every plan."""
        heapq.heapify(cands)
        best, where = math.inf, (0, 0, 0.0, 0.0, 0.0, 0.0)
        while cands:
            if deadline is not None and cands[0][-1] < 3 and time.perf_counter() > deadline:
                t, b, n, c, w, pipe, sync, _ = cands[0]
                return t, (b, n, c, w, pipe, sync), True
            t, b, n, c, w, pipe, sync, level = heapq.heappop(cands)
            if level == 3:
                best, where = t, (b, n, c, w, pipe, sync)
                break
            sync, pipe = self.raised(level, b, n, pipe, sync)
            heapq.heappush(cands, (pipe + u_min + sync, b, n, c, w, pipe, sync, level + 1))
        return best, where, False

    def raised(self, level: int, b: int, n: int, pipe: float, sync: float) -> tuple[float, float]:
        """(all-reduce, pipelines' part) of a candidate at ``level`` refined to the next level."""
        profile, cluster, times = self.profile, self.cluster, self.times
        m = math.ceil(self.global_batch / (b * n))
        if level == 0:
            box = column_box(times[b].cols.counts, n)
            if (b, box) not in self.exact:
                self.exact[(b, box)] = NeighbourColumns(profile, cluster, times[b].cols, None, *box)
            pipe = self.exact[(b, box)].worst(n, m, times[b].worst(n, m, pipe))
        elif level == 1:
            if b not in self.coupled:
                self.coupled[b] = SyncCoupled(profile, times[b].cols, self.rings, self.rules)
            sync, pipe = self.coupled[b].bound(n, m, pipe, self.floors)
        else:
            if b not in self.fine:
                self.fine[b] = SyncCoupled(profile, Columns(profile, cluster, b, FINE_STEP), self.rings, self.rules,
                                           lambda cols, starts, box: NeighbourColumns(profile, cluster, cols, starts, *box))
            sync, pipe = self.fine[b].bound(n, m, pipe, self.floors)
        return sync, pipe


def column_kinds(profile: LayeredProfile, cluster: GpuCluster, mbs: int) -> tuple[list[tuple[str, int]], list[np.ndarray], list[np.ndarray]]:
    """(kinds (g, tp), e per kind, tp x w per kind) of ``column_lp`` at micro-batch size ``mbs``."""
    kinds: list[tuple[str, int]] = []
    e_cols, w_cols = [], []
    for g, tp in replica_kinds(profile, cluster, mbs):
        cap, whole = capacity(profile, cluster, g, tp, mbs)
        if cap < 1:
            continue
        penalty = 0.0 if whole else min_transfer(profile, cluster, g, tp, mbs) / cap
        share = _memory_share(profile, cluster, g, tp, mbs)
        if share is None:
            continue
        kinds.append((g, tp))
        e_cols.append(np.array([(f + bw + penalty) * tp for f, bw, _ in profile.layer_times(g, mbs, tp)]))
        w_cols.append(tp * share)
    return kinds, e_cols, w_cols


def column_lp(profile: LayeredProfile, cluster: GpuCluster, mbs: int, columns: int, most: int | None = None,
              data: tuple | None = None) -> float:
    """C(b, N) / N, for every N from ``columns`` to ``most`` (default: ``columns``): the least bottleneck per
    column over N columns (each a chain of replicas, one per stage, holding every layer once), relaxed:
    x_lk the share of the columns that run layer ``l`` on kind ``k = (g, tp)``, ``V_g`` the GPU-seconds of
    type g per column and per unit of C (``n_g C / N`` with ``n_g`` the GPUs of g in the columns),

        min v  s.t.  sum_k x_lk = 1,  sum_{l, k of g} x_lk e_lk <= V_g,  V_g <= N_g v,
                     sum_g V_g <= most L tp_max v,  columns sum_{l, k of g} x_lk w_lk <= N_g

    with ``e_lk = tp ((fwd + bwd)_l + [not whole] kappa / cap)`` the GPU-seconds of a micro-batch (as in the
    work LP), ``w_lk`` the layer's share of one replica's memory times ``tp`` (the looser simulator's rule,
    one micro-batch in flight: a replica holds layers whose shares sum to at most 1 on its ``tp`` GPUs) and
    ``L tp_max`` the most GPUs a column can hold (at most L stages, one replica of at most ``tp_max`` GPUs
    each). Every N in the range has C(b, N) / N at least this (the memory row is loosest at the fewest
    columns, the GPU row at the most). +inf where the columns cannot hold the model."""
    from scipy.optimize import linprog

    most = columns if most is None else most
    kinds, e_cols, w_cols = data if data is not None else column_kinds(profile, cluster, mbs)
    if not kinds:
        return math.inf
    types = sorted({g for g, _ in kinds})
    counts = {g: sum(n for (gg, _), n in cluster.gpus.items() if gg == g) for g in types}
    tp_max = max(tp for _, tp in kinds)
    L, K, G = profile.num_layers, len(kinds), len(types)
    n = L * K + G + 1                                 # x (L x K, row-major), V (G), v
    c = np.zeros(n)
    c[-1] = 1.0
    a_eq = np.zeros((L, n))
    for layer in range(L):
        a_eq[layer, layer * K:(layer + 1) * K] = 1.0
    a_ub = np.zeros((3 * G + 1, n))
    b_ub = np.zeros(3 * G + 1)
    for ti, g in enumerate(types):
        for ki, (gk, _) in enumerate(kinds):
            if gk == g:
                a_ub[3 * ti, np.arange(L) * K + ki] = e_cols[ki]
                a_ub[3 * ti + 1, np.arange(L) * K + ki] = columns * w_cols[ki]
        a_ub[3 * ti, L * K + ti] = -1.0
        b_ub[3 * ti + 1] = counts[g]
        a_ub[3 * ti + 2, L * K + ti] = 1.0
        a_ub[3 * ti + 2, -1] = -counts[g]
    a_ub[3 * G, L * K:L * K + G] = 1.0
    a_ub[3 * G, -1] = -most * L * tp_max
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(L), bounds=[(0, None)] * n, method="highs")
    if res.status != 0:
        return math.inf
    return float(res.x[-1]) * (1 - 1e-9)


def _memory_share(profile: LayeredProfile, cluster: GpuCluster, g: str, tp: int, mbs: int) -> np.ndarray | None:
    """Each layer's share of one replica's memory (the looser simulator's rule, one micro-batch in flight):
    a replica holds layers whose shares sum to at most 1."""
    sizes = profile.layer_sizes(tp)
    p = np.asarray(sizes.params, dtype=float)
    a = np.asarray(sizes.act_mem, dtype=float)
    share = np.full(profile.num_layers, math.inf)
    for sim in simulators():
        try:
            need, limit = sim.stage_memory(profile, tp, g, mbs, 1, 0, 1, cluster)
        except UserError:
            continue
        fixed = float(need(0.0, 0.0))
        if limit > fixed:
            share = np.minimum(share, (np.asarray(need(p, a), dtype=float) - fixed) / (limit - fixed))
    return np.maximum(share, 0.0) if np.isfinite(share).all() else None


def _one_pass(profile: LayeredProfile, cluster: GpuCluster, mbs: int) -> float:
    """W(b): a micro-batch's forward + backward through every layer, each on its fastest kind (a pipeline's
    ``sum_s c_s`` is at least this)."""
    best = np.full(profile.num_layers, math.inf)
    for g, tp in replica_kinds(profile, cluster, mbs):
        t = np.array([f + bw for f, bw, _ in profile.layer_times(g, mbs, tp)])
        best = np.minimum(best, t)
    return float(best.sum()) if np.isfinite(best).all() else 0.0


def _sailor_allreduce_floor(profile: LayeredProfile, cluster: GpuCluster, G: int, ring: Rings) -> dict[str, list[float]]:
    """A(N) for N = 0 .. G (A(0) = A(1) = 0) per form of plan (``"one"`` pipeline, ``"several"``): the least
    ``T_sync`` of Sailor's formula over plans of ``N`` columns. One pipeline (N = dp_0): some stage ``s``
    all-reduces at least ``P_s / min(4, tp_s)`` bytes over at least ``N`` replicas. Take the column with the
    fewest GPUs, ``n <= floor(G / N)``: its replica of stage ``s`` has ``tp_s`` at least the stage's smallest
    TP degree, and ``max_s P_s / tp_s >= sum_s P_s / sum_s tp_s = P / n`` (the mediant), so the bytes are at
    least ``P / floor(G / N)``; and at least ``MM(floor(G / N)) / 4`` (each stage has at least ``N`` GPUs).
    ``P >= 2`` pipelines (``N = P dp_0,last``, ``2 <= P <= N``): the ring across them carries the longest
    pipeline's stages undivided, and for a plan Sailor scores honestly that is at least what any pipeline's
    stages need; the plan has at least ``N`` columns on at most ``G`` GPUs, so some column has at most
    ``floor(G / N)`` GPUs, its pipeline at most that many stages, and a stage of at least ``MM(floor(G / N))``
    bytes, over exactly ``P`` members; and ``T_sync`` adds the all-reduce inside the pipelines, over at least ``d =
    N / P`` members (``Rings.within``; ``Rings.across``: the least over the factorizations ``N = P d``). Each
    ring is ``Rings``' floor."""
    out = {"one": [0.0, 0.0], "several": [0.0, math.inf]}
    for n in range(2, G + 1):
        out["one"].append(ring(max(ring.stage(n) / 4.0, ring.total / (G // n)), n))
    for n in range(2, G + 1):                      # P >= 2 pipelines, N = P d: across them, and inside them
        out["several"].append(ring.across(ring.stage(n), n))
    return out
