"""The parameter server's rules, shared by the virtual and the MPI runtime:

- ``StalenessGate``: who may start its next iteration (``c_i - min_j c_j <= s``, asserted on each grant);
- ``ParameterServer``: the server's parameters and its atomic push update (through an optimizer);
- ``DelayCompensatedServer``: DC-ASGD's correction of stale gradients.

Nothing here imports TensorFlow or MPI.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

import numpy as np

REJECTED = -1   # what ``ParameterServer.push`` returns for a push its rule did not admit (too stale)


class StalenessGate:
    """The staleness rule: worker i may start an iteration only while ``c_i - min_j c_j <= s``.

    ``completed`` counts pushes applied per worker. ``grant`` asserts the rule on every grant and keeps a
    histogram of the gap seen. Thread-safe (the MPI server calls it from one thread per worker).
    """

    def __init__(self, workers: int, staleness: float, *, dynamic: bool = False, max_staleness: float = 8.0):
        self.completed = [0] * workers
        self.base_staleness = staleness
        self.staleness = staleness
        self.dynamic = dynamic
        self.max_staleness = max(max_staleness, staleness) if math.isfinite(staleness) else staleness
        self.gap_histogram: Counter[int] = Counter()
        self.grants = 0
        self.max_bound_used = staleness
        self._iter_time = [0.0] * workers
        self.cond = threading.Condition()

    def gap(self, worker: int) -> int:
        return self.completed[worker] - min(self.completed)

    def may_proceed(self, worker: int) -> bool:
        return self.gap(worker) <= self.staleness

    def grant(self, worker: int) -> int:
        """Record a grant (the caller checked ``may_proceed``); returns the gap. Fails loudly on a breach."""
        g = self.gap(worker)
        assert g <= self.staleness, f"staleness bound broken: worker {worker} gap {g} > s={self.staleness}"
        self.gap_histogram[g] += 1
        self.grants += 1
        return g

    def completed_push(self, worker: int, iteration_time: float | None = None) -> None:
        self.completed[worker] += 1
        if iteration_time is not None and self.dynamic:
            prev = self._iter_time[worker]
            self._iter_time[worker] = iteration_time if prev == 0 else 0.7 * prev + 0.3 * iteration_time
            self._adapt()

    def _adapt(self) -> None:
        """DSSP-like: let the bound follow the observed speed spread (slowest/fastest iteration time),
        within [sync.staleness, sync.max_staleness]."""
        times = [t for t in self._iter_time if t > 0]
        if len(times) < len(self._iter_time) or not math.isfinite(self.base_staleness):
            return
        spread = max(times) / min(times)
        self.staleness = float(min(self.max_staleness, max(self.base_staleness, math.ceil(spread) - 1)))
        self.max_bound_used = max(self.max_bound_used, self.staleness)

    # blocking form for threaded servers
    def wait_and_grant(self, worker: int, stop: threading.Event, timeout: float = 0.5) -> int | None:
        """Block until ``worker`` may proceed (or ``stop`` is set: returns None)."""
        with self.cond:
            while not self.may_proceed(worker):
                if stop.is_set():
                    return None
                self.cond.wait(timeout)
            return None if stop.is_set() else self.grant(worker)


class ParameterServer:
    """Server parameters and the push update, applied atomically; counts every applied push.

    A push of gradient ``g`` from worker i is applied through the server's update rule (``optimizer``,
    an ``orchestrator.execution.optim.Optimizer``: plain SGD unless told otherwise; its state lives here) at
    the learning rate ``weight_i``. With ``damped`` a push computed on parameters ``tau`` versions old is
    applied at ``weight_i / max(1, tau)`` (staleness-aware async SGD, Zhang et al. 2016). A push older than
    ``max_delay`` versions (``tau > max_delay``; default inf) is not applied (``admit``; a staleness cut-off,
    Ringmaster ASGD): ``push`` returns ``REJECTED`` and counts it in ``rejected_by_worker``. Subclasses change
    the gradient before it is applied (``correct``), which pushes they admit (``admit``), and may keep
    per-worker state on ``pull``."""

    def __init__(self, params: np.ndarray, weights: list[float], damped: bool = False, optimizer: Any = None):
        from orchestrator.execution.optim import Optimizer

        self.params = np.array(params, dtype=np.float32, copy=True)
        self.weights = [np.float32(w) for w in weights]
        self.damped = damped
        self.optimizer = optimizer if optimizer is not None else Optimizer()
        self.version = 0                              # pushes applied so far (= global update count)
        self.pushes_by_worker = [0] * len(weights)
        self.samples = 0
        self.update_staleness: Counter[int] = Counter()  # versions applied between a worker's pull and push
        self.max_delay = math.inf
        self.rejected_by_worker = [0] * len(weights)
        self.lock = threading.Lock()

    def metrics(self) -> dict[str, float]:
        """``sync.*`` metrics of this server's rule (a subclass adds its own): with a finite ``max_delay``,
        ``sync.pushes_rejected`` (pushes older than it, not applied) and their share of the pushes."""
        if not math.isfinite(self.max_delay):
            return {}
        rejected = sum(self.rejected_by_worker)
        return {"sync.pushes_rejected": float(rejected),
                "sync.pushes_rejected_fraction": rejected / max(1, rejected + self.version)}

    def admit(self, worker: int, tau: int) -> bool:
        """Whether a push ``tau`` versions old is applied (under the lock): ``tau <= max_delay``."""
        return tau <= self.max_delay

    def set_weights(self, weights: list[float]) -> None:
        with self.lock:
            self.weights = [np.float32(w) for w in weights]

    def pull(self, worker: int | None = None) -> tuple[np.ndarray, int]:
        with self.lock:
            self.on_pull(worker)
            return self.params.copy(), self.version

    def pull_into(self, out: np.ndarray, worker: int | None = None) -> int:
        with self.lock:
            self.on_pull(worker)
            np.copyto(out, self.params)
            return self.version

    def on_pull(self, worker: int | None) -> None:
        """Called (under the lock) when ``worker`` pulls the parameters; nothing to remember by default."""

    def correct(self, worker: int, grad: np.ndarray) -> np.ndarray:
        """The gradient to apply for a push of ``grad`` (under the lock); as pushed by default."""
        return grad

    def push(self, worker: int, grad: np.ndarray, pulled_version: int, batch: int,
             closed: threading.Event | None = None) -> int | None:
        """Apply ``worker``'s gradient (damped by staleness if asked); returns the new version, or ``REJECTED``
        when ``admit`` refuses it (nothing applied).
        Once ``closed`` is set (training stopped: target reached or budget spent) a push still in flight is
        dropped and None returned, so the final parameters are the ones the stop was decided on."""
        with self.lock:
            if closed is not None and closed.is_set():
                return None
            tau = self.version - pulled_version
            if not self.admit(worker, tau):
                self.rejected_by_worker[worker] += 1
                return REJECTED
            weight = self.weights[worker] / np.float32(max(1, tau)) if self.damped else self.weights[worker]
            self.optimizer.step(self.params, self.correct(worker, grad), weight)
            self.update_staleness[tau] += 1
            self.version += 1
            self.pushes_by_worker[worker] += 1
            self.samples += batch
            return self.version


class DelayCompensatedServer(ParameterServer):
    """DC-ASGD (Zheng et al. 2017, "Asynchronous SGD with Delay Compensation"): a gradient computed on the
    parameters ``w_pulled`` a worker pulled is corrected to the current ``w`` by the first-order Taylor
    term with the outer-product approximation of the Hessian, ``g + lambda * g (.) g (.) (w - w_pulled)``.
    ``adaptive``: ``lambda_t = lambda0 / sqrt(MeanSquare_t + eps)`` elementwise, with
    ``MeanSquare_t = m MeanSquare_{t-1} + (1 - m) g (.) g`` (DC-ASGD-a; the constant form is DC-ASGD-c).
    Keeps one copy of the parameters per worker (what it pulled)."""

    def __init__(self, params: np.ndarray, weights: list[float], damped: bool = False, optimizer: Any = None, *,
                 lam: float = 0.04, adaptive: bool = False, decay: float = 0.95):
        super().__init__(params, weights, damped, optimizer)
        self.lam, self.adaptive, self.decay = np.float32(lam), adaptive, np.float32(decay)
        self.backup: dict[int, np.ndarray] = {}
        self.mean_square: np.ndarray | None = None
        self.ratios: list[float] = []      # ||correction|| / ||g|| of each corrected push

    def metrics(self) -> dict[str, float]:
        """``sync.dc_correction_ratio``: the median over pushes of ||lambda g (.) g (.) (w - w_pulled)|| / ||g||,
        how much the compensation changed the gradients it corrected (0: it did nothing)."""
        own = {"sync.dc_correction_ratio": float(np.median(self.ratios))} if self.ratios else {}
        return {**super().metrics(), **own}

    def on_pull(self, worker: int | None) -> None:
        if worker is not None:
            if worker in self.backup:
                np.copyto(self.backup[worker], self.params)
            else:
                self.backup[worker] = self.params.copy()

    def correct(self, worker: int, grad: np.ndarray) -> np.ndarray:
        pulled = self.backup.get(worker)
        if pulled is None:
            return grad
        lam: Any = self.lam
        if self.adaptive:
            sq = grad * grad
            if self.mean_square is None:
                self.mean_square = sq.copy()
            else:
                self.mean_square *= self.decay
                self.mean_square += (1 - self.decay) * sq
            lam = self.lam / np.sqrt(self.mean_square + np.float32(1e-7))
        corr = lam * grad * grad * (self.params - pulled)
        norm = float(np.linalg.norm(grad))
        if norm > 0:
            self.ratios.append(float(np.linalg.norm(corr)) / norm)
        return grad + corr


def histogram_dict(hist: Counter) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(hist.items())}
