"""The one place that holds the data-parallel sync rules, shared by the virtual and the MPI runtime:

- ``SyncOptions``: the ``sync.*`` / ``hardware.*`` config a strategy reads;
- ``StalenessGate``: who may start its next iteration (``c_i - min_j c_j <= s``, asserted on each grant);
- ``ParameterServer``: the server's parameters and its atomic push update (``theta -= weight_i * grad``);
- ``batch_shares``: per-worker batch sizes (equal, or proportional to speed).

Nothing here imports TensorFlow or MPI.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.errors import ConfigError, number
from orchestrator.hardware.workers import worker_layout

UNBOUNDED = math.inf
DEFAULT_STALENESS = 2.0            # delay-sync default bound s


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.get(key)`` for dicts / DictConfigs, also for dotted keys (``a.b``)."""
    node = cfg
    for part in key.split("."):
        if node is None:
            return default
        node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
    return default if node is None else node


@dataclass
class SyncOptions:
    name: str = "delay"
    runtime: str = "virtual"              # "virtual" (emulated clock) or "mpi" (real processes)
    workers: int = 4
    speeds: list[float] = field(default_factory=lambda: [1.0] * 4)
    straggler_p: float = 0.0              # transient straggler probability per iteration
    straggler_slowdown: float = 1.0       # a transient straggler's iteration is this many times longer
    staleness: float = 0.0                # s; math.inf for async
    lr_scaling: str | float = "lr/W"      # push weight: "lr/W" (batch-weighted), "lr", or a multiplier of lr
    proportional_batches: bool = False
    dynamic_staleness: bool = False
    max_staleness: float = 8.0            # upper end for the dynamic bound
    base_time_s: float | None = None      # virtual: one speed-1.0 iteration at the base batch (None: measure)
    timeout_s: float = 600.0
    hostfile: str | None = None

    @classmethod
    def from_cfg(cls, cfg_sync: Any, cfg: Any = None, name: str | None = None) -> "SyncOptions":
        """Read ``sync.*`` from ``cfg_sync`` and ``hardware.*`` from the trial config ``cfg``."""
        name = name or str(_get(cfg_sync, "name", "delay"))
        if name not in ("allreduce", "async", "delay"):
            raise ConfigError(f"sync.name={name!r} (accepted: allreduce, async, delay)")
        runtime = str(_get(cfg_sync, "runtime", "virtual"))
        if runtime not in ("virtual", "mpi"):
            raise ConfigError(f"sync.runtime={runtime!r} (accepted: virtual, mpi)")
        speeds = worker_layout(_get(cfg, "hardware", None) or {}, has_sync=True)  # one parser for W and speeds
        workers = len(speeds)
        strag = _get(cfg, "hardware.stragglers", None)
        if strag is not None and not hasattr(strag, "get"):
            raise ConfigError(f"hardware.stragglers={strag!r} must be a mapping {{probability: P, slowdown: K}}")
        p = number(_get(strag, "probability", 0.0), "hardware.stragglers.probability") if strag is not None else 0.0
        k = number(_get(strag, "slowdown", 1.0), "hardware.stragglers.slowdown") if strag is not None else 1.0
        if not 0.0 <= p <= 1.0 or k < 1.0:
            raise ConfigError(f"hardware.stragglers needs probability in [0,1], slowdown >= 1 (got {p}, {k})")
        staleness = _get(cfg_sync, "staleness", DEFAULT_STALENESS)
        if name == "allreduce":
            s = 0.0
        elif name == "async" or str(staleness).lower() == "inf":
            s = UNBOUNDED
        else:
            s = number(staleness, "sync.staleness", minimum=0)
        scaling = _get(cfg_sync, "lr_scaling", "lr/W")
        if not (scaling in ("lr/W", "lr") or (isinstance(scaling, (int, float)) and not isinstance(scaling, bool)
                                               and math.isfinite(scaling) and scaling > 0)):
            raise ConfigError(f"sync.lr_scaling={scaling!r} (accepted: lr/W, lr, or a number)")
        prop = bool(_get(cfg_sync, "speed_proportional_batches", name == "delay"))
        base = _get(cfg_sync, "base_time_s", None)
        return cls(name=name, runtime=runtime, workers=workers, speeds=speeds, straggler_p=p, straggler_slowdown=k,
                   staleness=s, lr_scaling=scaling, proportional_batches=prop,
                   dynamic_staleness=bool(_get(cfg_sync, "dynamic_staleness", False)),
                   max_staleness=number(_get(cfg_sync, "max_staleness", 8.0), "sync.max_staleness", minimum=0),
                   base_time_s=number(base, "sync.base_time_s", minimum=0),
                   timeout_s=number(_get(cfg_sync, "timeout_s", 600.0), "sync.timeout_s", minimum=0),
                   hostfile=_get(cfg_sync, "hostfile", None))


def batch_shares(speeds: list[float], batch_size: int, proportional: bool) -> list[int]:
    """Per-worker batch sizes: all ``batch_size``, or ``W * batch_size`` split in proportion to speed."""
    w = len(speeds)
    if not proportional:
        return [batch_size] * w
    total = w * batch_size
    raw = [total * s / sum(speeds) for s in speeds]
    out = [max(1, int(math.floor(r))) for r in raw]
    for i in sorted(range(w), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)[: max(0, total - sum(out))]:
        out[i] += 1
    return out


def push_weights(lr: float, batches: list[int], scaling: str | float) -> list[float]:
    """Learning rate each worker's push is applied with. ``lr/W`` weights by batch share, so one round
    of W pushes equals one averaged (allreduce) update over the same samples."""
    if scaling == "lr/W":
        return [lr * b / sum(batches) for b in batches]
    if scaling == "lr":
        return [lr] * len(batches)
    return [lr * float(scaling)] * len(batches)


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
    def wait_and_grant(self, worker: int, stop: "threading.Event", timeout: float = 0.5) -> int | None:
        """Block until ``worker`` may proceed (or ``stop`` is set: returns None)."""
        with self.cond:
            while not self.may_proceed(worker):
                if stop.is_set():
                    return None
                self.cond.wait(timeout)
            return None if stop.is_set() else self.grant(worker)


class ParameterServer:
    """Server parameters and the push update, applied atomically; counts every applied push."""

    def __init__(self, params: np.ndarray, weights: list[float]):
        self.params = np.array(params, dtype=np.float32, copy=True)
        self.weights = [np.float32(w) for w in weights]
        self.version = 0                              # pushes applied so far (= global update count)
        self.pushes_by_worker = [0] * len(weights)
        self.samples = 0
        self.update_staleness: Counter[int] = Counter()  # versions applied between a worker's pull and push
        self.lock = threading.Lock()

    def pull(self) -> tuple[np.ndarray, int]:
        with self.lock:
            return self.params.copy(), self.version

    def pull_into(self, out: np.ndarray) -> int:
        with self.lock:
            np.copyto(out, self.params)
            return self.version

    def push(self, worker: int, grad: np.ndarray, pulled_version: int, batch: int) -> int:
        """Apply ``params -= weight_worker * grad``; returns the new version."""
        with self.lock:
            self.params -= self.weights[worker] * grad
            self.update_staleness[self.version - pulled_version] += 1
            self.version += 1
            self.pushes_by_worker[worker] += 1
            self.samples += batch
            return self.version


def histogram_dict(hist: Counter) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(hist.items())}
