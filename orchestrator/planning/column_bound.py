"""The columns' bottleneck with whole layers and whole GPUs (docs/plans.md, "The bound on Sailor's metric",
*Whole layers*): a lower bound on the slowest stage's micro-batch ``C`` of every plan of ``N`` columns,
from the cheapest column (in GPUs) whose every stage runs within ``C``.

``column_lp`` relaxes a column into a fractional mix of kinds, which lets a column of 32 GPUs run 26
layers at TP 1 efficiency, 26/32 of a layer per GPU. Here a column is what a plan really has: contiguous
stages of whole layers, each on one replica of ``tp`` GPUs of one type. For a threshold ``C`` and weights
``lambda_g >= 0`` per GPU type, a dynamic program over the layers gives

    phi_lambda(C) = min over columns whose every stage s has  sum_{l in s} (fwd + bwd)_l(g_s, b, tp_s)
                    + [two or more stages] kappa(g_s, tp_s, b) <= C  and fits in memory  of  sum_s lambda_{g_s} tp_s

(``kappa`` as in the work bound: the cheapest activation transfer a stage of a pipeline of two or more
pays per micro-batch). ``N`` disjoint columns of bottleneck at most ``C`` use at least ``phi_lambda(C)`` of
``lambda``-weighted GPUs each, and the cluster has ``sum_g lambda_g N_g``, so

    N <= U(C) = min over lambda of  sum_g lambda_g N_g / phi_lambda(C)

(the LP's dual over the columns' GPU counts: with one GPU type it is exact, ``N_g / phi(C)``). A plan of
``N`` columns therefore has ``C_max > C`` for every ``C`` with ``U(C) < N``; ``C`` runs over a geometric
grid (1% steps), so the bound is the largest grid point below the true one."""

from __future__ import annotations

import itertools
import math

import numpy as np

from orchestrator.plan import GpuCluster, LayeredProfile

STEP = 1.01          # the grid of thresholds: the bound gives away at most this factor


class _Columns:
    """What both bounds share at one micro-batch size: the kinds (g, tp) with their prefix layer times,
    ``kappa`` and memory, the grid of thresholds, and where each stage starts to run within it."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, mbs: int):
        from orchestrator.planning.bound import min_transfer, stage_fits
        from orchestrator.planning.sailor_bound import _kinds

        self.L = L = profile.num_layers
        self.kinds = []
        for g, tp in _kinds(profile, cluster, mbs):
            t = np.concatenate([[0.0], np.cumsum([f + bw for f, bw, _ in profile.layer_times(g, mbs, tp)])])
            self.kinds.append((g, tp, t, min_transfer(profile, cluster, g, tp, mbs), stage_fits(profile, cluster, g, tp, mbs)))
        self.types = sorted({k[0] for k in self.kinds})
        self.counts = np.array([sum(n for (g, _), n in cluster.gpus.items() if g == gt and n > 0) for gt in self.types],
                               dtype=float)
        lo = min((float(np.diff(k[2]).min()) for k in self.kinds), default=0.0)
        hi = max((float(k[2][-1]) + k[3] for k in self.kinds), default=math.inf)
        self.ok = bool(self.kinds) and lo > 0 and math.isfinite(hi)
        if not self.ok:
            return
        self.grid = lo * STEP ** np.arange(int(math.ceil(math.log(hi / lo) / math.log(STEP))) + 2)
        # stage j..i-1 on kind k runs within C from grid index start[k][j, i] on (len(grid): never)
        self.starts = []
        for _, _, t, kappa, ok in self.kinds:
            idx = np.searchsorted(self.grid, t[None, :] - t[:, None] + kappa)
            self.starts.append((np.where(ok, idx, len(self.grid)),
                                int(np.searchsorted(self.grid, t[-1])) if ok[0, L] else len(self.grid)))

    def weights(self, lam: np.ndarray) -> np.ndarray:
        """Each kind's GPUs priced by ``lam`` (one row per price vector): ``lam_g tp``."""
        return np.stack([lam[..., self.types.index(g)] * tp for g, tp, *_ in self.kinds], axis=-1)


def column_bottleneck(profile: LayeredProfile, cluster: GpuCluster, mbs: int, most: int) -> np.ndarray:
    """``out[n]`` for ``n = 0 .. most``: a lower bound on the slowest stage's micro-batch (compute plus its
    activation transfers) of every plan with at least ``n`` columns, at micro-batch size ``mbs``; 0 where
    nothing is known."""
    out = np.zeros(most + 1)
    cols = _Columns(profile, cluster, mbs)
    if not cols.ok:
        return out
    upper = np.full(len(cols.grid), math.inf)
    for lam in _directions(len(cols.types)):
        phi = _cheapest_column(cols.L, len(cols.grid), cols.starts, list(cols.weights(lam)))
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(phi > 0, float(lam @ cols.counts) / phi, math.inf)
        upper = np.minimum(upper, u)
    # U(C) is non-decreasing in C; n columns need C_max > grid[i] for the last i with U(grid[i]) < n
    upper = np.maximum.accumulate(upper)
    n = np.arange(most + 1)
    last = np.searchsorted(upper, n, side="left") - 1
    out = np.where(last >= 0, cols.grid[np.clip(last, 0, None)], 0.0)
    out[0] = 0.0
    return out


def column_time(profile: LayeredProfile, cluster: GpuCluster, mbs: int, most: int, global_batch: int) -> np.ndarray:
    """``out[n]`` for ``n = 0 .. most``: a lower bound on the pipelines' part of Sailor's formula,
    ``max_p (m - 1) C_p + sum_s (c_s + k_s)``, of every plan Sailor scores honestly with ``n`` columns
    (``m = ceil(B / (b n))``), from the columns' bottleneck and latency together (docs/plans.md, *Fill and
    bottleneck together*):

        T_pp >= max over lambda >= 0 of  psi_lambda(m) - sum_g lambda_g N_g / n,
        psi_lambda(m) = min over columns of  (m - 1) max_s (c_s + k_s) + sum_s (c_s + k_s) + sum_s lambda_{g_s} tp_s

    ``psi`` by a dynamic program whose stage cost is additive once the bottleneck is capped at a grid point
    (rounded down to the point below)."""
    out = np.zeros(most + 1)
    cols = _Columns(profile, cluster, mbs)
    if not cols.ok:
        return out
    lams = _prices(cols)
    size, L = len(cols.grid), cols.L
    wk = cols.weights(lams)                                   # (prices, kinds)
    at = np.arange(size)
    cost = np.full((L + 1, len(lams), size), math.inf)
    cost[0] = 0.0
    for i in range(1, L + 1):
        best = np.full((len(lams), size), math.inf)
        for k, ((_, _, t, kappa, _), (start, _)) in enumerate(zip(cols.kinds, cols.starts)):
            s = start[:i, i]
            if s.min() >= size:
                continue
            span = t[i] - t[:i] + kappa                       # a stage of a pipeline of two or more
            cand = cost[:i] + span[:, None, None] + wk[None, :, k, None]
            cand = np.where((at[None, :] >= s[:, None])[:, None, :], cand, math.inf).min(axis=0)
            np.minimum(best, cand, out=best)
        cost[i] = best
    d = cost[L]
    for k, ((_, _, t, _, _), (_, whole)) in enumerate(zip(cols.kinds, cols.starts)):
        if whole < size:                                      # one stage, the whole model: no transfer
            np.minimum(d[:, whole:], t[-1] + wk[:, k, None], out=d[:, whole:])
    below = np.concatenate([[0.0], cols.grid[:-1]])           # a column within grid[i] has C > grid[i - 1]
    rent = lams @ cols.counts
    cache: dict[int, np.ndarray] = {}
    for n in range(1, most + 1):
        m = math.ceil(global_batch / (mbs * n))
        if m not in cache:
            cache[m] = (d + (m - 1) * below[None, :]).min(axis=1)
        out[n] = max(0.0, float((cache[m] - rent / n).max()))
    return out


def _prices(cols: _Columns) -> np.ndarray:
    """Price vectors for the dual (seconds per GPU, one row each; any is valid): 0, and a geometric scale
    times prices proportional to each type's speed, each type's also halved and doubled."""
    speed = np.array([max(1.0 / (float(k[2][-1]) * k[1]) for k in cols.kinds if k[0] == g) for g in cols.types])
    base = speed / speed.max()
    shapes = [base]
    if len(base) > 1:
        for i in range(len(base)):
            for f in (0.5, 2.0):
                shaped = base.copy()
                shaped[i] *= f
                shapes.append(shaped)
    scale = np.geomspace(1e-4, 30.0, 24)
    return np.vstack([np.zeros(len(base))] + [sc * sh for sh in shapes for sc in scale])


def _cheapest_column(L: int, size: int, starts: list, weight: list[float]) -> np.ndarray:
    """phi(C) on the grid: the least weighted GPUs of a column of whole-layer stages, every stage within C."""
    cost = np.full((L + 1, size), math.inf)
    cost[0] = 0.0
    for i in range(1, L + 1):
        best = np.full(size, math.inf)
        for (start, _), w in zip(starts, weight):
            for j in range(i):
                s = start[j, i]
                if s < size:
                    np.minimum(best[s:], cost[j, s:] + w, out=best[s:])
        cost[i] = best
    phi = cost[L]
    for (_, whole), w in zip(starts, weight):       # one stage, the whole model: no transfer
        if whole < size:
            np.minimum(phi[whole:], w, out=phi[whole:])
    return phi


def _directions(types: int) -> list[np.ndarray]:
    """Weights per GPU type for the dual: every point of a simplex grid (exact for one type)."""
    if types == 1:
        return [np.ones(1)]
    res = {2: 24, 3: 8, 4: 4}.get(types, 2)
    out = [np.array(c, dtype=float) / res for c in itertools.product(range(res + 1), repeat=types) if sum(c) == res]
    return out
