"""Re-calibrating the simulator from measured step times, as a search measures placements
(``placer.reward=mixed``; logged for ``measured`` too). Pure numpy/scipy: no TensorFlow.

The model: a placement's measured step time ``m`` is predicted from features of its simulation,

    m_hat = theta_S * S + sum_d theta_d * W_d + theta_n * N_cut + theta_b * B_cut + theta_0

with ``S`` the simulated step time (makespan), ``W_d`` the simulated busy time of device ``d`` (sum
of its nodes' costs), ``N_cut`` the number of edges between devices, ``B_cut`` their bytes, and a
constant. The prior ``p = (s, 0, ..., 0)`` is the simulator scaled by ``s = median_i(m_i / S_i)``
(with no measurement, ``s = 1``: the plain simulator; one measurement already fixes the overall
scale). ``theta >= 0`` is fitted by non-negative least squares on the relative error, with a ridge
pull towards the prior, so that the structure (which devices are slower, what transfers cost, how
much the devices overlap) moves away from the simulator's only as the measurements demand it:

    min_theta  sum_i ((f_i . theta - m_i) / m_i)^2  +  lam * sum_j c_j^2 (theta_j - p_j)^2

where ``c_j = sqrt(mean_i (f_ij / m_i)^2)`` makes the penalty unit-free (a coefficient that alone
would explain the measurements costs ``lam``, like one measurement off by 100%) and ``lam`` =
``prior_weight`` (0.1). Columns that are 0 on every measured placement keep their prior value.
``theta_S`` and the ``W_d`` span the range between devices that run in parallel (the simulator's
assumption: m ~ S) and devices that share one processor (logical CPU devices of one host share its
cores: m ~ sum_d W_d); ``theta_d`` is a per-device speed factor; ``theta_n``, ``theta_b`` price
transfers the simulator thinks free. Solved with ``scipy.optimize.nnls`` on the stacked system
``[A; sqrt(lam) diag(c)] theta = [1; sqrt(lam) c * p]``, ``A_ij = f_ij / m_i`` (Lawson & Hanson,
Solving Least Squares Problems, 1974, ch. 23).

Errors: ``raw_error`` is the median relative error ``|S_i - m_i| / m_i`` of the simulator as the
simulated reward sees it; ``calibrated_error`` the same for the estimate the re-calibrated model gave
each placement *before* it was measured (fitted on the earlier measurements only: prequential, out
of sample).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from orchestrator.graph.arrays import FloatArray
from orchestrator.placement.simulate.simulator import Simulator


def median_rel_error(estimated: npt.ArrayLike, measured: npt.ArrayLike) -> float:
    e, m = np.asarray(estimated, float), np.asarray(measured, float)
    ok = np.isfinite(e) & np.isfinite(m) & (m > 0)
    return float(np.median(np.abs(e[ok] - m[ok]) / m[ok])) if ok.any() else math.nan


def fit_with_prior(F: npt.ArrayLike, m: npt.ArrayLike, prior: npt.ArrayLike, prior_weight: float) -> FloatArray:
    """The non-negative ``theta`` of the module docstring for features ``F`` (rows: placements) and
    measured times ``m``."""
    from scipy.optimize import nnls

    F, m, prior = np.asarray(F, float), np.asarray(m, float), np.asarray(prior, float)
    if len(m) == 0:
        return prior.copy()
    A = F / m[:, None]
    c = np.sqrt((A ** 2).mean(axis=0))
    used = c > 0
    theta = prior.copy()
    if not used.any():
        return theta
    # columns never seen keep the prior: move their contribution to the right-hand side
    rhs = np.ones(len(m)) - A[:, ~used] @ prior[~used]
    s = math.sqrt(float(prior_weight))
    Au = A[:, used]
    big = np.vstack([Au, s * np.diag(c[used])])
    b = np.concatenate([rhs, s * c[used] * prior[used]])
    theta[used], _ = nnls(big, b, maxiter=50 * big.shape[1])
    return theta


class SimulatorFit:
    """Features of a placement's simulation, the fitted model and its error record."""

    def __init__(self, simulator: Simulator, prior_weight: float = 0.1) -> None:
        self.sim = simulator
        self.prior_weight = float(prior_weight)
        names = [d.name for d in simulator.worker.devices]
        self.names = ["simulated"] + [f"busy.{n}" for n in names] + ["transfers", "transfer_bytes", "constant"]
        self.prior = np.zeros(len(self.names))
        self.prior[0] = 1.0
        self.theta = self.prior.copy()
        self._src = np.repeat(np.arange(len(simulator.graph.nodes)), np.diff(simulator.succ_ptr))
        self.F: list[FloatArray] = []
        self.m: list[float] = []
        self.raw: list[float] = []          # S_i
        self.before: list[float] = []       # the model's estimate just before measuring i

    def features(self, assign: npt.ArrayLike, simulated: float) -> FloatArray:
        a = np.asarray(assign, dtype=np.int64)
        nd = len(self.sim.worker.devices)
        cost = self.sim.cost[np.arange(len(a)), a]
        busy = np.bincount(a, weights=np.where(np.isfinite(cost), cost, 0.0), minlength=nd)
        cut = a[self._src] != a[self.sim.succ_idx]
        return np.concatenate([[simulated], busy, [float(cut.sum()), float(self.sim.succ_bytes[cut].sum()), 1.0]])

    def predict(self, f: FloatArray) -> float:
        if not math.isfinite(float(f[0])):
            return math.inf
        return float(f @ self.theta)

    def add(self, f: FloatArray, measured: float) -> None:
        """Record a measurement (finite ones only) and re-fit."""
        if not (math.isfinite(measured) and measured > 0 and math.isfinite(float(f[0]))):
            return
        self.before.append(self.predict(f))
        self.raw.append(float(f[0]))
        self.F.append(np.asarray(f, float))
        self.m.append(float(measured))
        prior = self.prior * float(np.median(np.array(self.m) / np.array(self.raw)))
        self.theta = fit_with_prior(np.array(self.F), np.array(self.m), prior, self.prior_weight)

    @property
    def raw_error(self) -> float:
        return median_rel_error(self.raw, self.m)

    @property
    def calibrated_error(self) -> float:
        return median_rel_error(self.before[1:], self.m[1:])   # the first estimate is the prior's

    @property
    def fitted_error(self) -> float:
        """In-sample error of the final model on every measured placement."""
        return median_rel_error(np.array(self.F) @ self.theta, self.m) if self.m else math.nan

    def coefficients(self) -> dict[str, float]:
        return dict(zip(self.names, map(float, self.theta)))
