"""Worker speeds that change during a run, and the load balancer that follows them.

- ``SpeedSchedule``: nominal speeds plus ``hardware.speed_changes: [{worker, at_s, speed}]`` (seconds on
  the run's clock: virtual seconds, or wall seconds under MPI);
- ``Balancer``: the batch split. ``none``: every worker ``train.batch_size``; ``static``: the global batch
  split once from the nominal speeds so that every worker's compute lasts the same; ``online``: the same
  split re-derived every ``sync.balance_every`` iterations from *measured* speeds (an exponential moving
  average of ``model time / measured time`` per iteration), LB-BSP-like (Chen et al. 2019) for allreduce.
"""

from __future__ import annotations

from orchestrator.config.choices import BALANCE_MODES
from orchestrator.config.hardware import SpeedChange
from orchestrator.sync.costmodel import ComputeModel, balanced_batches

__all__ = ["BALANCE_MODES", "Balancer", "SpeedChange", "SpeedSchedule"]


class SpeedSchedule:
    def __init__(self, speeds: list[float], changes: tuple[SpeedChange, ...] = ()):
        self.nominal = list(speeds)
        self.changes = changes

    def speed(self, worker: int, t: float) -> float:
        v = self.nominal[worker]
        for c in self.changes:
            if c.worker == worker and c.at_s <= t:
                v = c.speed
        return v

    def capacity(self, until: float) -> float:
        """Sum of speeds (reference speed 1.0), averaged over ``[0, until]`` when speeds change."""
        if not self.changes or until <= 0:
            return float(sum(self.nominal))
        cuts = sorted({0.0, until, *(c.at_s for c in self.changes if c.at_s < until)})
        total = sum((b - a) * sum(self.speed(i, a) for i in range(len(self.nominal))) for a, b in zip(cuts, cuts[1:]))
        return total / until


class Balancer:
    """The batch split and, in ``online`` mode, its periodic re-derivation from measured speeds."""

    def __init__(self, mode: str, speeds: list[float], total: int, batch_size: int, cm: ComputeModel,
                 every: int = 10, alpha: float = 0.3):
        self.mode, self.total, self.cm, self.every, self.alpha = mode, total, cm, max(1, every), alpha
        w = len(speeds)
        self.estimate = list(speeds) if mode != "none" else [1.0] * w
        self.batches = self.split(total)
        self.rebalances = 0
        self._seen = 0

    def split(self, total: int) -> list[int]:
        """How ``total`` samples would be split now: equal shares (``none``), else balanced on the
        speeds known (nominal, or the measured estimate in ``online`` mode)."""
        w = len(self.estimate)
        if self.mode == "none":
            return [total // w + (1 if i < total % w else 0) for i in range(w)]
        return balanced_batches(self.estimate, total, self.cm)

    def set_total(self, total: int) -> None:
        """A new global batch (``train.batch_policy=adaptive``), split as the current one is."""
        self.total = total
        self.batches = self.split(total)

    def observe(self, worker: int, batch: int, duration: float) -> bool:
        """One measured iteration; returns True when the split was re-derived (online mode)."""
        if self.mode != "online" or duration <= 0:
            return False
        measured = self.cm.time(batch, 1.0) / duration
        self.estimate[worker] = (1 - self.alpha) * self.estimate[worker] + self.alpha * measured
        self._seen += 1
        if self._seen % (self.every * len(self.batches)) != 0:
            return False
        new = balanced_batches(self.estimate, self.total, self.cm)
        if new == self.batches:
            return False
        self.batches = new
        self.rebalances += 1
        return True
