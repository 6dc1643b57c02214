"""The adaptive global batch (``train.batch_policy=adaptive``, issue 29 item 6): during training the global
batch of a collective strategy follows the measured gradient noise scale, chosen by goodput (formulas and
sources in docs/sync.md, "Adaptive global batch").

- ``NoiseScale``: McCandlish, Kaplan, Amodei et al. 2018 ("An Empirical Model of Large-Batch Training",
  appendix A.1), the unbiased estimates of ``|G|^2`` and ``S = tr(Sigma)`` from the gradients of two batch
  sizes a collective round already has: each worker's own gradient (batch ``b_i``; with unequal batches the
  harmonic mean ``b = 1 / mean_i(1 / b_i)`` is the small batch, exactly: ``E mean_i |g_i|^2 = |G|^2 + S / b``)
  and their batch-weighted average (batch ``B = sum_i b_i``)::

      |G|^2 ~ (B |g_B|^2 - b |g_b|^2) / (B - b),    S ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

  each smoothed by an exponential moving average; the noise scale is their ratio ``B_noise = EMA(S) / EMA(|G|^2)``.
- ``AdaptiveBatch``: Pollux (Qiao et al., OSDI'21) picks the batch ``M`` of the largest goodput,
  ``goodput(M) = throughput(M) x efficiency(M)``, ``efficiency(M) = (B_noise + M0) / (B_noise + M)`` with
  ``M0 = train.batch_size`` (the batch the learning rate is for), the throughput ``H M / T(M)`` from the
  virtual clock's cost model: the balanced split of M over the workers' (estimated) speeds, the slowest
  worker's compute, plus the strategy's collective (or the larger of the two with ``sync.overlap``).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


def two_batch_estimates(sq_small: float, b_small: float, sq_big: float, b_big: float) -> tuple[float, float]:
    """McCandlish et al.'s unbiased ``(|G|^2, S)`` from ``|g_b|^2`` at batch ``b`` and ``|g_B|^2`` at ``B > b``."""
    if not b_big > b_small > 0:
        raise ValueError(f"two batch sizes b < B are needed (got b={b_small:g}, B={b_big:g})")
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    s = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return float(g2), float(s)


@dataclass
class NoiseScale:
    """The gradient noise scale ``B_noise = EMA(S) / EMA(|G|^2)`` from the workers' gradients of each round."""

    decay: float = 0.9                 # train.adaptive_ema: weight of the previous average
    g2: float = 0.0                    # EMA of |G|^2 (bias-corrected on read)
    s: float = 0.0                     # EMA of S = tr(Sigma)
    n: int = 0                         # rounds observed

    def observe(self, grads: list[np.ndarray], batches: list[int]) -> tuple[float, float]:
        """One round: each worker's gradient ``grads[i]`` over ``batches[i]`` samples. Returns this
        round's raw ``(|G|^2, S)`` estimates."""
        if len(grads) < 2:
            raise ValueError("the noise scale needs the gradients of at least 2 workers")
        b = np.asarray(batches, dtype=np.float64)
        big = float(b.sum())
        mean = np.zeros_like(grads[0], dtype=np.float64)
        sq = []
        for g, bi in zip(grads, b):
            g64 = g.astype(np.float64, copy=False)
            sq.append(float(np.dot(g64, g64)))
            mean += (bi / big) * g64
        return self.add_round(sq, batches, float(np.dot(mean, mean)))

    def add_round(self, sq: list[float], batches, sq_big: float) -> tuple[float, float]:
        """One round from each worker's ``|g_i|^2`` at batch ``batches[i]`` and ``|g_B|^2`` of their batch-weighted
        average: the small batch is the harmonic mean (``E mean_i |g_i|^2 = |G|^2 + S / b``), the big one the sum."""
        b = np.asarray(batches, dtype=np.float64)
        return self.add(float(np.mean(sq)), float(len(b) / np.sum(1.0 / b)), sq_big, float(b.sum()))

    def add(self, sq_small: float, b_small: float, sq_big: float, b_big: float) -> tuple[float, float]:
        g2, s = two_batch_estimates(sq_small, b_small, sq_big, b_big)
        self.g2 = self.decay * self.g2 + (1 - self.decay) * g2
        self.s = self.decay * self.s + (1 - self.decay) * s
        self.n += 1
        return g2, s

    @property
    def value(self) -> float | None:
        """``B_noise`` (samples); ``inf`` while the averaged ``|G|^2`` is not positive (the noise dominates:
        any batch is statistically efficient), None before the first round."""
        if self.n == 0:
            return None
        if self.g2 <= 0:
            return math.inf
        return max(0.0, self.s / self.g2)      # the ratio of the two EMAs (the bias corrections cancel)


def efficiency(noise: float, m: float, m0: float) -> float:
    """Pollux's statistical efficiency of batch ``m`` relative to ``m0``: ``(B_noise + m0) / (B_noise + m)``
    (1 at ``m0``; the progress per sample of a batch ``m`` over that of ``m0``; 1 for every m when the noise is inf)."""
    if math.isinf(noise):
        return 1.0
    return (noise + m0) / (noise + m)


def candidates(low: int, high: int) -> list[int]:
    """The global batches considered: ``low x 2^k`` up to ``high``, and ``high`` itself."""
    out, m = [], low
    while m < high:
        out.append(m)
        m *= 2
    out.append(high)
    return out


@dataclass
class AdaptiveBatch:
    """Re-decides the global batch every ``every`` rounds from the noise scale (``choose``).
    ``step_time(M)`` is the seconds of one round of global batch ``M`` and ``samples(M)`` its samples."""

    low: int                                        # the smallest global batch (train.adaptive_min_batch)
    high: int                                       # the largest (train.adaptive_max_batch)
    m0: int                                         # train.batch_size: the batch the lr is tuned for
    every: int                                      # train.adaptive_every: rounds between decisions
    step_time: Callable[[int], float]
    samples: Callable[[int], float] = lambda m: float(m)
    noise: NoiseScale = field(default_factory=NoiseScale)
    current: int = 0
    history: list[tuple[int, float, int, float | None]] = field(default_factory=list)   # (round, t, M, B_noise)

    def __post_init__(self):
        if self.current <= 0:
            self.current = self.low
        self.grid = candidates(self.low, self.high)

    def goodput(self, m: int, noise: float | None = None) -> float:
        """Samples per second, in samples of the efficiency of ``m0``: ``samples(M) / T(M) x efficiency(M)``."""
        phi = self.noise.value if noise is None else noise
        eff = 1.0 if phi is None else efficiency(phi, m, self.m0)
        return self.samples(m) / self.step_time(m) * eff

    def choose(self, noise: float | None = None) -> int:
        """The candidate of the largest goodput at noise scale ``noise`` (default: the measured one)."""
        phi = self.noise.value if noise is None else noise
        if phi is None:
            return self.current
        return max(self.grid, key=lambda m: (self.goodput(m, phi), -m))

    def after_round(self, index: int, t: float) -> int | None:
        """Called after round ``index`` (0, 1, ...) ended at ``t``; the new global batch when it is a
        decision round and the choice changed, else None."""
        if (index + 1) % self.every != 0:
            return None
        new = self.choose()
        self.history.append((index + 1, t, new, self.noise.value))
        if new == self.current:
            return None
        self.current = new
        return new


class RankRounds:
    """``train.batch_policy=adaptive`` under MPI (``mpi_worker.run_collective``): what one rank adds to a
    collective round so that rank 0 can measure the noise scale and the goodput with no extra message in the
    usual case.

    Each rank appends ``3 W`` float32 to its all-reduce vector (``tail``), writing its own slots: ``|g_i|^2``
    of its first gradient of the round (at ``theta``), the emulated compute seconds of its round, and 1 when
    the vector it contributes *is* that gradient. The all-reduce's ``Sum`` gives every rank every rank's
    slots. When every reduced worker contributed its gradient with a weight proportional to its batch (the
    default ``local`` / ``weights``: allreduce, backup workers), the reduced vector is the big batch's
    gradient up to its weight sum, ``g_B = M / sum_i w_i`` (``big_gradient``); otherwise (local SGD, a
    compressing plugin) the ranks all-reduce ``b_i g_i`` once more (``needs_second_reduce``), which costs
    what it costs and is measured. Rank 0 then feeds ``NoiseScale`` (``observe``) and keeps the speeds and
    the collective's seconds the goodput's ``T(M)`` needs (``speeds``, ``comm_s``; ``step_time``)."""

    def __init__(self, workers: int, rank: int, alpha: float = 0.3):
        self.w, self.rank, self.alpha = workers, rank, alpha
        self.first: np.ndarray | None = None        # this round's first gradient (the object the grad call returned)
        self.scaled: np.ndarray | None = None       # it in float64 (times Adam's preconditioner when asked)
        self.sq = 0.0
        self.precond: np.ndarray | None = None
        self.skip = False                           # no estimate this round (preconditioned, before Adam's step)
        self.speeds: list[float] | None = None      # EMA of cm.time(b, 1) / (seconds of a local step), per rank
        self.comm_s = 0.0                           # EMA of the round's seconds beyond its slowest compute

    def begin(self, precond: np.ndarray | None = None, skip: bool = False) -> None:
        self.first = self.scaled = None
        self.precond, self.skip = precond, skip

    def capture(self, g: np.ndarray) -> None:
        """Called with every gradient this rank computes; keeps the round's first."""
        if self.first is None:
            self.first = g
            self.scaled = g.astype(np.float64) if self.precond is None else g * self.precond
            self.sq = float(np.dot(self.scaled, self.scaled))

    def tail(self, vec: np.ndarray, compute_s: float) -> np.ndarray:
        out = np.zeros(3 * self.w, dtype=np.float32)
        out[self.rank] = self.sq if self.first is not None else np.nan
        out[self.w + self.rank] = compute_s
        out[2 * self.w + self.rank] = 1.0 if vec is self.first and self.first is not None else 0.0
        return out

    def split(self, summed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(|g_i|^2, compute seconds, contributed its gradient) per rank, from the reduced tail."""
        w = self.w
        return summed[:w].astype(np.float64), summed[w:2 * w].astype(np.float64), summed[2 * w:] > 0.5

    def needs_second_reduce(self, summed: np.ndarray, weights: list[float], batches: tuple[int, ...],
                            included: tuple[int, ...]) -> bool:
        """Whether the reduced vector is not the big batch's gradient (every rank decides the same)."""
        if self.skip:
            return False
        _, _, grad = self.split(summed)
        inc = list(included)
        ratio = [weights[i] / batches[i] for i in inc]
        return not (all(grad[i] for i in inc) and max(ratio) - min(ratio) <= 1e-6 * max(ratio)
                    and all(weights[i] == 0 for i in range(self.w) if i not in set(inc)))

    def mine_for_second_reduce(self, batch: int) -> np.ndarray:
        """This rank's ``b_i g_i`` (float32) for the second all-reduce."""
        assert self.scaled is not None
        return (batch * self.scaled).astype(np.float32)

    def observe(self, noise: NoiseScale, summed: np.ndarray, batches: tuple[int, ...], included: tuple[int, ...],
                mean: np.ndarray) -> bool:
        """Feed ``noise`` with the round (``mean``: the big batch's gradient over ``included``, already
        preconditioned where asked). Returns False when there was nothing to measure."""
        sq, _, _ = self.split(summed)
        inc = list(included)
        if self.skip or len(inc) < 2 or not np.isfinite(sq[inc]).all():
            return False
        noise.add_round(list(sq[inc]), [batches[i] for i in inc], float(np.dot(mean, mean)))
        return True

    def big_gradient(self, reduced: np.ndarray, weights: list[float], included: tuple[int, ...]) -> np.ndarray:
        """``g_B`` from the reduced vector (weights proportional to the batches), preconditioned where asked."""
        mean = reduced.astype(np.float64) / sum(weights[i] for i in included)
        return mean if self.precond is None else mean * self.precond

    def measured(self, summed: np.ndarray, batches: tuple[int, ...], local_steps: int, round_s: float,
                 cm) -> None:
        """Rank 0, after a round of ``round_s`` wall seconds: updates the speed of each rank (``cm.time(b, 1)``
        over its seconds per local step, as ``Balancer`` measures it) and the collective's seconds."""
        _, compute, _ = self.split(summed)
        speeds = [cm.time(b, 1.0) / (c / local_steps) if c > 0 else math.nan for b, c in zip(batches, compute)]
        if self.speeds is None:
            self.speeds = [v if math.isfinite(v) else 1.0 for v in speeds]
        else:
            self.speeds = [(1 - self.alpha) * old + self.alpha * v if math.isfinite(v) else old
                           for old, v in zip(self.speeds, speeds)]
        comm = max(0.0, round_s - float(np.max(compute)))
        self.comm_s = comm if self.comm_s == 0.0 else (1 - self.alpha) * self.comm_s + self.alpha * comm

    def step_time(self, split: Callable[[int], list[int]], local_steps: int, cm, overlap: bool) -> Callable[[int], float]:
        """``T(M)``: the balanced split of ``M``, the slowest rank's compute at its measured speed, plus the
        measured collective (or the larger of the two with ``sync.overlap``)."""
        def t(m: int) -> float:
            speeds = self.speeds or [1.0] * self.w
            compute = local_steps * max(cm.time(bi, v) for bi, v in zip(split(m), speeds))
            return max(compute, self.comm_s) if overlap else compute + self.comm_s

        return t
