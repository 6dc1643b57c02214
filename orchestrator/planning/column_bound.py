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


def column_bottleneck(profile: LayeredProfile, cluster: GpuCluster, mbs: int, most: int) -> np.ndarray:
    """``out[n]`` for ``n = 0 .. most``: a lower bound on the slowest stage's micro-batch (compute plus its
    activation transfers) of every plan with at least ``n`` columns, at micro-batch size ``mbs``; 0 where
    nothing is known."""
    from orchestrator.planning.bound import min_transfer, stage_fits
    from orchestrator.planning.sailor_bound import _kinds

    out = np.zeros(most + 1)
    kinds = []
    for g, tp in _kinds(profile, cluster, mbs):
        t = np.concatenate([[0.0], np.cumsum([f + bw for f, bw, _ in profile.layer_times(g, mbs, tp)])])
        kinds.append((g, tp, t, min_transfer(profile, cluster, g, tp, mbs), stage_fits(profile, cluster, g, tp, mbs)))
    if not kinds:
        return out
    L = profile.num_layers
    types = sorted({k[0] for k in kinds})
    counts = np.array([sum(n for (g, _), n in cluster.gpus.items() if g == gt and n > 0) for gt in types], dtype=float)
    lo = min(float(np.diff(k[2]).min()) for k in kinds)
    hi = max(float(k[2][-1]) + k[3] for k in kinds)
    if not (lo > 0 and math.isfinite(hi)):
        return out
    grid = lo * STEP ** np.arange(int(math.ceil(math.log(hi / lo) / math.log(STEP))) + 2)
    # stage j..i-1 on kind k runs within C from grid index start[k][j, i] on (len(grid): never)
    starts = []
    for _, _, t, kappa, ok in kinds:
        span = t[None, :] - t[:, None]
        idx = np.searchsorted(grid, span + kappa)
        starts.append((np.where(ok, idx, len(grid)), int(np.searchsorted(grid, t[-1])) if ok[0, L] else len(grid)))
    upper = np.full(len(grid), math.inf)
    for lam in _directions(len(types)):
        weight = [lam[types.index(g)] * tp for g, tp, *_ in kinds]
        phi = _cheapest_column(L, len(grid), starts, weight)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(phi > 0, float(lam @ counts) / phi, math.inf)
        upper = np.minimum(upper, u)
    # U(C) is non-decreasing in C; n columns need C_max > grid[i] for the last i with U(grid[i]) < n
    upper = np.maximum.accumulate(upper)
    n = np.arange(most + 1)
    last = np.searchsorted(upper, n, side="left") - 1
    out = np.where(last >= 0, grid[np.clip(last, 0, None)], 0.0)
    out[0] = 0.0
    return out


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
