"""The columns' bottleneck with whole layers and whole GPUs (docs/plans.md, "The bound on Sailor's metric",
*Whole layers*): a lower bound on the slowest stage's micro-batch ``C`` of every plan of ``N`` columns,
from the cheapest column (in GPUs) whose every stage runs within ``C``.

``column_lp`` relaxes a column into a fractional mix of kinds, which lets a column of 32 GPUs run 26
layers at TP 1 efficiency, 26/32 of a layer per GPU. Here a column is what a plan really has: contiguous
stages of whole layers, each on one replica of ``tp`` GPUs of one type. For a threshold ``C`` and weights
``lambda_g >= 0`` per GPU type, a dynamic program over the layers gives

    phi_lambda(C) = min over columns whose every stage s has  sum_{l in s} (fwd + bwd)_l(g_s, b, tp_s)
                    + [two or more stages] kappa(g_s, tp_s, b) <= C  and fits in memory  of  sum_s lambda_{g_s} tp_s

(``kappa`` the cheapest transfer of one activation from or to a replica of the kind, times Sailor's sends
per micro-batch: one for a first stage, two for any other of a pipeline of two or more). ``N`` disjoint
columns of bottleneck at most ``C`` use at least ``phi_lambda(C)`` of ``lambda``-weighted GPUs each, and the
cluster has ``sum_g lambda_g N_g``, so

    N <= U(C) = min over lambda of  sum_g lambda_g N_g / phi_lambda(C)

(the LP's dual over the columns' GPU counts: with one GPU type it is exact, ``N_g / phi(C)``). A plan of
``N`` columns therefore has ``C_max > C`` for every ``C`` with ``U(C) < N``; ``C`` runs over a geometric
grid (1% steps), so the bound is the largest grid point below the true one."""

from __future__ import annotations

import itertools
import math

import numpy as np

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.partition.bounds import column_dp
from orchestrator.plan import LayeredProfile
from orchestrator.planning.bound import min_transfer, replica_kinds, stage_fits

STEP = 1.01          # the grid of thresholds: the bound gives away at most this factor
COARSE_STEP = 1.02   # the grid of ColumnTimes and ExactColumns
CELLS = 1500         # ExactColumns' box for three or more GPU types: at most this many GPU vectors
BOX_CELLS = 1200     # and for one or two, sized per column count (column_box)


class Columns:
    """What both bounds share at one micro-batch size: the kinds (g, tp) with their prefix layer times,
    ``kappa`` and memory, the grid of thresholds, and where each stage starts to run within it."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, mbs: int, step: float = STEP):
        self.L = L = profile.num_layers
        self.mbs = mbs
        self.kinds = []
        for g, tp in replica_kinds(profile, cluster, mbs):
            t = np.concatenate([[0.0], np.cumsum([f + bw for f, bw, _ in profile.layer_times(g, mbs, tp)])])
            # Sailor's sends per micro-batch (SailorSimulator.send_factors): a first stage one, every other stage
            # of a pipeline of two or more two (middle: an activation and a gradient; last: two gradients)
            sends = np.where(np.arange(L + 1)[:, None] == 0, 1.0, 2.0) * np.ones((1, L + 1))
            kap = min_transfer(profile, cluster, g, tp, mbs) * sends
            self.kinds.append((g, tp, t, kap, stage_fits(profile, cluster, g, tp, mbs)))
        self.types = sorted({k[0] for k in self.kinds})
        self.counts = np.array([sum(n for (g, _), n in cluster.gpus.items() if g == gt and n > 0) for gt in self.types],
                               dtype=float)
        lo = min((float(np.diff(k[2]).min()) for k in self.kinds), default=0.0)
        hi = max((float(k[2][-1]) + float(k[3].max()) for k in self.kinds), default=math.inf)
        self.ok = bool(self.kinds) and lo > 0 and math.isfinite(hi)
        if not self.ok:
            return
        self.grid = lo * step ** np.arange(int(math.ceil(math.log(hi / lo) / math.log(step))) + 2)
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
    cols = Columns(profile, cluster, mbs)
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


class ColumnTimes:
    """The pipelines' part of Sailor's formula, ``max_p (m - 1) C_p + sum_s (c_s + k_s)``, bounded below for
    every plan Sailor scores honestly with ``n`` columns (``m = ceil(B / (b n))``), from the columns'
    bottleneck and latency together (docs/plans.md, *Bottleneck and fill together*). Every column ``j`` has
    ``tau_j = (m - 1) C_j + l_j <= T_pp`` (its pipeline's bottleneck and fill are at least its own). With
    ``D_lambda(C) = min over columns whose every stage is within C of  l + lambda . x`` (a DP whose stage cost is
    additive once the bottleneck is capped; ``x`` the column's GPUs per type):

    ``average(n)``: the columns' mean ``tau`` is at most ``T_pp``, so for every price vector ``lambda >= 0``
        T_pp >= min_i [D_lambda(C_i) + (m - 1) C_(i-1)] - lambda . N_g / n
    ``worst(n, m, lo)``: every column has ``tau <= T_pp``; for a direction ``sigma`` a column with
        ``tau <= Theta`` uses at least ``phi_sigma(Theta) = min_i max_{mu >= 0} [D_{sigma/mu}(C_i) mu - mu R_i]``
        weighted GPUs, ``R_i = Theta - (m - 1) C_(i-1)`` (Lagrange on the latency budget), so ``n`` columns need
        ``n <= sigma . N_g / phi_sigma(Theta)``; the largest ``Theta`` that fails is a bound (bisection)."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, mbs: int):
        self.cols = cols = Columns(profile, cluster, mbs, COARSE_STEP)
        if not cols.ok:
            return
        self.lams, self.shapes, self.scales = _prices(cols)
        size, L = len(cols.grid), cols.L
        wk = cols.weights(self.lams)                              # (prices, kinds)
        t, kap = [k[2] for k in cols.kinds], [k[3] for k in cols.kinds]
        d = column_dp(L, size, cols.starts, lambda k, j, i: t[k][i] - t[k][j] + kap[k][j, i] + wk[:, k, None],
                      lambda k: t[k][-1] + wk[:, k, None], (len(self.lams),))   # one stage, the whole model: no transfer
        self.d = d
        self.below = np.concatenate([[0.0], cols.grid[:-1]])      # a column within grid[i] has C > grid[i - 1]
        self.rent = self.lams @ cols.counts
        self._avg: dict[int, np.ndarray] = {}
        # worst(): D per (direction, scale), and mu = 0 (GPUs alone)
        self.w_d = d[1:].reshape(len(self.shapes), len(self.scales), size)
        self.w_phi0 = np.stack([_cheapest_column(L, size, cols.starts, list(cols.weights(sh))) for sh in self.shapes])
        self.w_rent = np.array([float(sh @ cols.counts) for sh in self.shapes])

    def average(self, n: int, m: int) -> float:
        if not self.cols.ok:
            return 0.0
        if m not in self._avg:
            self._avg[m] = (self.d + (m - 1) * self.below[None, :]).min(axis=1)
        return max(0.0, float((self._avg[m] - self.rent / n).max()))

    def _fails(self, theta: float, n: int, m: int) -> bool:
        """Whether ``n`` columns cannot all have ``tau <= theta``."""
        r = theta - (m - 1) * self.below                        # the latency budget per capped bottleneck
        with np.errstate(invalid="ignore", over="ignore"):
            lag = ((self.w_d - r[None, None, :]) / self.scales[None, :, None]).max(axis=1)
        phi = np.maximum(lag, self.w_phi0)
        phi = np.where(r[None, :] < 0, math.inf, phi).min(axis=1)  # (directions,)
        with np.errstate(divide="ignore", invalid="ignore"):
            upper = np.where(phi > 0, self.w_rent / phi, math.inf)
        return bool(n > upper.min())

    def worst(self, n: int, m: int, lo: float) -> float:
        """The largest ``theta`` found (by bisection from ``lo``) with ``_fails``: ``T_pp > theta``; ``lo`` if
        ``lo`` itself does not fail."""
        if not self.cols.ok or not self._fails(lo, n, m):
            return lo
        return _largest_failing(lambda theta: self._fails(theta, n, m), lo, 2.0 * lo if lo > 0 else float(self.cols.grid[-1]) * m)


def _prices(cols: Columns) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Price vectors for the duals (seconds per GPU, one row each; any is valid): 0, then for each direction
    (prices proportional to each type's speed, each type's also halved and doubled) a geometric scale."""
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
    return np.vstack([np.zeros(len(base))] + [sc * sh for sh in shapes for sc in scale]), shapes, scale


def _cheapest_column(L: int, size: int, starts: list, weight: list[float]) -> np.ndarray:
    """phi(C) on the grid: the least weighted GPUs of a column of whole-layer stages, every stage within C (one
    stage, the whole model: no transfer)."""
    return column_dp(L, size, starts, lambda k, j, i: weight[k], lambda k: weight[k])


def _directions(types: int) -> list[np.ndarray]:
    """Weights per GPU type for the dual: every point of a simplex grid (exact for one type)."""
    if types == 1:
        return [np.ones(1)]
    res = {2: 24, 3: 8, 4: 4}.get(types, 2)
    out = [np.array(c, dtype=float) / res for c in itertools.product(range(res + 1), repeat=types) if sum(c) == res]
    return out


class ExactColumns:
    """``worst`` without the Lagrangian's duality gap: a DP over each column's GPU count per type (a box: up to
    16 and 32 for one or two types, smaller boxes for more, ``CELLS``) gives the least latency ``l*(C, x)`` of a
    column on exactly the GPUs ``x`` whose every stage is within ``C``, and so its least ``tau*(x) = min_i
    l*(C_i, x) + (m - 1) C_(i-1)``. ``N`` columns with ``tau <= Theta`` must fit the cluster: the LP ``max sum_t
    y_t s.t. sum_t y_t x_t <= N_g`` over the vectors that meet ``Theta`` must reach ``N``; a column outside the
    box uses at least ``box_g + 1`` GPUs of some type ``g`` and counts as that corner, meeting every ``Theta``.
    The thresholds ``C`` run on a coarser grid (``COARSE_STEP``)."""

    def __init__(self, cols: Columns, a_max: int = 16, v_max: int = 32, starts: list | None = None):
        self.ok = cols.ok
        if not self.ok:
            return
        T = max(2, len(cols.types))
        self.counts = np.concatenate([cols.counts, np.zeros(T - len(cols.types))])
        if len(cols.types) <= 2:                   # the most GPUs per type of the columns the DP enumerates
            box = [min(int(self.counts[0]), a_max), min(int(self.counts[1]), v_max)]
        else:
            box = [min(int(c), a_max) for c in self.counts]
            while math.prod(b + 1 for b in box) > CELLS:
                box[int(np.argmax(box))] //= 2
        self._finish(cols, box, self._table(cols, cols.starts if starts is None else starts, box))

    def _table(self, cols: Columns, starts: list, box: list[int]) -> np.ndarray:
        """``l*(C, x)`` per (GPU vector, threshold): the engine's column DP over the box (``starts``: a subset of
        the stages, for a restricted bound)."""
        t, kap = [k[2] for k in cols.kinds], [k[3] for k in cols.kinds]
        return column_dp(cols.L, len(cols.grid), starts, lambda k, j, i: float(t[k][i] - t[k][j] + kap[k][j, i]),
                         lambda k: t[k][-1], box=box, uses=[(cols.types.index(g), tp) for g, tp, *_ in cols.kinds],
                         compact=True)                            # one stage, the whole model: no transfer

    def _finish(self, cols: Columns, box: list[int], out: np.ndarray) -> None:
        """Keep the least latency per (GPU vector, threshold) of the finished columns ``out``."""
        T = len(box)
        self.box = box
        # (columns' GPU vectors, thresholds); float32 sums of at most L terms: 1e-5 covers their rounding
        self.lat = out.reshape(-1, len(cols.grid)).astype(float) * (1 - 1e-5)
        self.below = np.concatenate([[0.0], cols.grid[:-1]])
        # a column outside the box uses at least one of these (if the cluster has that many)
        self.outside = [tuple(box[k] + 1 if ax == k else 0 for ax in range(T)) for k in range(T) if self.counts[k] > box[k]]
        self._by_m: dict[int, np.ndarray] = {}

    def _tau(self, m: int) -> np.ndarray:
        if m not in self._by_m:
            tau = (self.lat + (m - 1) * self.below[None, :]).min(axis=1)
            self._by_m[m] = tau.reshape(*(b + 1 for b in self.box))
        return self._by_m[m]

    def _fails(self, theta: float, n: int, m: int) -> bool:
        """Whether ``n`` columns with ``tau <= theta`` exceed the cluster: the LP ``max sum y_t s.t. sum y_t x_t
        <= N_g`` over the columns that meet ``theta`` (for each vector of the other types the fewest of the
        last) is below ``n``. Two types: a vertex uses one column or two, enumerated; more: the LP's dual
        ``min lambda . N_g s.t. lambda . x_t >= 1, lambda >= 0``."""
        ok = self._tau(m) <= theta
        has = ok.any(axis=-1)
        pts = [(*idx, int(np.argmax(ok[idx]))) for idx in zip(*np.nonzero(has))] + list(self.outside)
        if not pts:
            return n > 0
        x = np.array(pts, dtype=float)
        if x.shape[1] > 2:
            return bool(n > _packing(x, self.counts) * (1 + 1e-9))
        na, nv = self.counts
        with np.errstate(divide="ignore", invalid="ignore"):
            single = np.minimum(np.where(x[:, 0] > 0, na / x[:, 0], math.inf), np.where(x[:, 1] > 0, nv / x[:, 1], math.inf))
            a1, v1, a2, v2 = x[:, None, 0], x[:, None, 1], x[None, :, 0], x[None, :, 1]
            det = a1 * v2 - a2 * v1
            y1 = (na * v2 - a2 * nv) / det
            y2 = (a1 * nv - v1 * na) / det
            pair = np.where((det != 0) & (y1 >= 0) & (y2 >= 0), y1 + y2, 0.0)
        return bool(n > max(float(single.max()), float(pair.max())) * (1 + 1e-9))

    def worst(self, n: int, m: int, lo: float, never: float | None = None) -> float:
        """The largest ``theta`` with ``_fails`` from ``lo`` (which must be a bound); where no ``theta`` lets
        ``n`` columns fit, ``never`` (``math.inf`` is right: no such plan; by default the last ``theta`` tried)."""
        if not self.ok or not self._fails(lo, n, m):
            return lo
        tau = self._tau(m)
        hi = float(tau[np.isfinite(tau)].max()) if np.isfinite(tau).any() else 2.0 * lo
        return _largest_failing(lambda theta: self._fails(theta, n, m), lo, max(hi, 2.0 * lo), never)


def column_box(counts: np.ndarray, n: int) -> tuple[int, int]:
    """``ExactColumns``' ``(a_max, v_max)`` for plans of ``n`` columns: per type four times the columns' mean
    GPUs, rounded up to a power of two, at least the fixed box (16, 32), the larger halved while the box has
    more than ``BOX_CELLS`` vectors (a column outside the box still counts, as its corner: sound for any box;
    a larger one keeps the corners from making up columns the cluster cannot). Three or more types: ``CELLS``."""
    if len(counts) > 2:
        return (16, 32)
    cap = [max(low, 1 << math.ceil(math.log2(max(1.0, 4.0 * float(x) / max(n, 1))))) for x, low in zip(counts, (16, 32))]
    cap += [32] * (2 - len(cap))
    while (cap[0] + 1) * (cap[1] + 1) > BOX_CELLS and max(cap[0] / 16, cap[1] / 32) > 1:
        k = int(cap[1] / 32 > cap[0] / 16)
        cap[k] //= 2
    return cap[0], cap[1]


def _packing(x: np.ndarray, counts: np.ndarray) -> float:
    """``max sum_t y_t s.t. sum_t y_t x_t <= counts, y >= 0`` by its dual (small: one variable per GPU type)."""
    from scipy.optimize import linprog

    res = linprog(counts, A_ub=-x, b_ub=-np.ones(len(x)), bounds=[(0, None)] * len(counts), method="highs")
    return float(res.fun) if res.status == 0 else math.inf


def _largest_failing(fails, lo: float, hi: float, never: float | None = None) -> float:
    """Bisection for the largest ``theta`` with ``fails(theta)`` (monotone: true below some point), given
    that ``fails(lo)``: ``hi`` doubles until it does not fail (64 times at most: then no plan has that many
    columns: ``never`` if given, else the last ``theta`` that failed), then the interval halves to 1e-5."""
    for _ in range(64):
        if not fails(hi):
            break
        lo, hi = hi, 2.0 * hi
    else:
        return lo if never is None else never
    for _ in range(40):
        if hi - lo <= 1e-5 * hi:
            break
        mid = 0.5 * (lo + hi)
        if fails(mid):
            lo = mid
        else:
            hi = mid
    return lo
