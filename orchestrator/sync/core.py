"""The one place that holds the data-parallel sync rules, shared by the virtual and the MPI runtime:

- ``SyncOptions``: the ``sync.*`` / ``hardware.*`` config a strategy runs with (the strategy itself,
  ``orchestrator.sync.strategy``, says which rules apply);
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



def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.get(key)`` for dicts / DictConfigs, also for dotted keys (``a.b``)."""
    node = cfg
    for part in key.split("."):
        if node is None:
            return default
        node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
    return default if node is None else node


LR_RULES = ("linear", "sqrt", "none")
PUSH_LR = ("scaled", "lr", "lr/staleness")
BATCH_POLICIES = ("per_worker", "global")
DC_MODES = ("constant", "adaptive")


def _plain(node: Any) -> Any:
    """A DictConfig / ListConfig as plain dicts and lists (JSON-able for the MPI job file)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return node


@dataclass
class SyncOptions:
    name: str = ""                        # the strategy's name: a label for runs and logs, never a switch
    runtime: str = "virtual"              # "virtual" (emulated clock) or "mpi" (real processes)
    workers: int = 4
    speeds: list[float] = field(default_factory=lambda: [1.0] * 4)
    straggler_p: float = 0.0              # transient straggler probability per iteration
    straggler_slowdown: float = 1.0       # a transient straggler's iteration is this many times longer
    staleness: float = 0.0                # s; math.inf for async
    push_lr: str | float = "scaled"       # push weight: "scaled", "lr", "lr/staleness", or a multiplier
    balance: str = "static"               # batch split: none (equal), static (nominal speeds), online (measured)
    balance_every: int = 10               # online: re-derive the split every k iterations per worker
    dynamic_staleness: bool = False
    max_staleness: float = 8.0            # upper end for the dynamic bound
    lr_rule: str = "sqrt"                 # train.lr_scaling: lr x rule(batch / train.batch_size)
    warmup_samples: int = 0               # train.warmup_updates x train.batch_size: linear warm-up (Goyal et al.)
    batch_policy: str = "per_worker"      # per_worker: global batch W x batch_size; global: batch_size split
    base_time_s: float | None = None      # virtual: one speed-1.0 iteration at the base batch (None: measure)
    step_overhead_s: float | None = None  # t0 of the compute model (with per_sample_s; None: fit / linear)
    per_sample_s: float | None = None     # t1 of the compute model
    shards: int = 1                       # parameter-server shards (each with its own link)
    overlap: bool = False                 # allreduce overlapped with the backward pass
    fp16: bool = False                    # gradients / parameters sent as 16-bit floats
    network: dict | None = None           # hardware.network (plain); see costmodel.Network
    speed_changes: list = field(default_factory=list)   # [(worker, at_s, speed)]
    emulated_step_s: float | None = None  # mpi: a speed-1.0 iteration lasts at least this long
    timeout_s: float = 600.0
    hostfile: str | None = None
    delay_compensation: float = 0.0       # DC-ASGD's lambda (server strategies; 0: off)
    delay_compensation_mode: str = "constant"   # constant (DC-ASGD-c) | adaptive (DC-ASGD-a)

    @property
    def proportional_batches(self) -> bool:
        return self.balance != "none"

    def net(self):
        from orchestrator.sync.costmodel import Network

        return Network.from_cfg(self.network, self.workers)

    def schedule(self):
        from orchestrator.sync.balance import SpeedChange, SpeedSchedule

        return SpeedSchedule(self.speeds, tuple(SpeedChange(int(w), float(a), float(v)) for w, a, v in self.speed_changes))

    def total_batch(self, batch_size: int) -> int:
        if self.batch_policy == "global":
            if batch_size < self.workers:
                raise ConfigError(f"train.batch_policy=global: train.batch_size={batch_size} < {self.workers} workers")
            return batch_size
        return self.workers * batch_size

    @classmethod
    def from_cfg(cls, cfg_sync: Any, cfg: Any, strategy: Any) -> "SyncOptions":
        """Read ``sync.*`` from ``cfg_sync`` and ``hardware.*`` / ``train.*`` from the trial config ``cfg``
        for ``strategy`` (a ``orchestrator.sync.strategy.SyncStrategy``: it gives the staleness bound, the
        default batch split and whether a server takes part)."""
        from orchestrator.sync.balance import BALANCE_MODES, parse_speed_changes
        from orchestrator.sync.costmodel import Network

        name = str(getattr(strategy, "name", "") or type(strategy).__name__)
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
        s = float(strategy.staleness_bound())
        push = _get(cfg_sync, "push_lr", "scaled")
        if not (push in PUSH_LR or (isinstance(push, (int, float)) and not isinstance(push, bool) and push > 0)):
            raise ConfigError(f"sync.push_lr={push!r} (accepted: {', '.join(PUSH_LR)}, or a number > 0)")
        balance = _get(cfg_sync, "balance", None) or strategy.default_balance
        if balance not in BALANCE_MODES:
            raise ConfigError(f"sync.balance={balance!r} (accepted: {', '.join(BALANCE_MODES)})")
        rule = str(_get(cfg, "train.lr_scaling", "sqrt"))
        if rule not in LR_RULES:
            raise ConfigError(f"train.lr_scaling={rule!r} (accepted: {', '.join(LR_RULES)})")
        policy = str(_get(cfg, "train.batch_policy", "per_worker"))
        if policy not in BATCH_POLICIES:
            raise ConfigError(f"train.batch_policy={policy!r} (accepted: {', '.join(BATCH_POLICIES)})")
        warm = _num(cfg, "train.warmup_updates", 0, int, 0) * int(_get(cfg, "train.batch_size", 64))
        emulated = _num(cfg, "hardware.emulated_step_s", None, float)
        if emulated is not None and not emulated > 0:
            raise ConfigError(f"hardware.emulated_step_s={emulated:g} must be > 0")
        network = _plain(_get(cfg, "hardware.network", None))
        hostfile = _get(cfg_sync, "hostfile", None)
        if _get(cfg, "hardware.netlab", None):  # an emulated cluster: its hostfile and its links
            from orchestrator.hardware import netlab

            lab = netlab.require(_get(cfg, "hardware.netlab", None))
            hostfile = hostfile or str(lab.hostfile)
            network = {**(network or {}), **netlab.network_config(lab, workers, server=strategy.uses_server)}
        Network.from_cfg(network, workers)  # validate now: one-line errors before any run starts
        changes = parse_speed_changes(_plain(_get(cfg, "hardware.speed_changes", None)), workers)
        base = _num(cfg_sync, "base_time_s", None, float, 0.0)
        t0, t1 = _num(cfg_sync, "step_overhead_s", None, float, 0.0), _num(cfg_sync, "per_sample_s", None, float, 0.0)
        if (t0 is None) != (t1 is None) or (t1 is not None and t1 <= 0):
            raise ConfigError(f"sync.step_overhead_s={t0} / sync.per_sample_s={t1}: give both, per_sample_s > 0")
        dc = number(_get(cfg_sync, "delay_compensation", 0.0), "sync.delay_compensation", minimum=0)
        dc_mode = str(_get(cfg_sync, "delay_compensation_mode", "constant"))
        if dc_mode not in DC_MODES:
            raise ConfigError(f"sync.delay_compensation_mode={dc_mode!r} (accepted: {', '.join(DC_MODES)})")
        if dc and not strategy.uses_server:
            raise ConfigError(f"sync.delay_compensation={dc:g} needs a parameter-server strategy ({name} has none)")
        return cls(name=name, runtime=runtime, workers=workers, speeds=speeds, straggler_p=p, straggler_slowdown=k,
                   staleness=s, push_lr=push, balance=balance,
                   balance_every=_num(cfg_sync, "balance_every", 10, int, 1),
                   dynamic_staleness=bool(_get(cfg_sync, "dynamic_staleness", False)),
                   max_staleness=number(_get(cfg_sync, "max_staleness", 8.0), "sync.max_staleness", minimum=0),
                   lr_rule=rule, warmup_samples=warm,
                   batch_policy=policy, base_time_s=base, step_overhead_s=t0, per_sample_s=t1,
                   shards=_num(cfg_sync, "shards", 1, int, 1), overlap=bool(_get(cfg_sync, "overlap", False)),
                   fp16=bool(_get(cfg_sync, "fp16", False)), network=network,
                   speed_changes=[(c.worker, c.at_s, c.speed) for c in changes], emulated_step_s=emulated,
                   timeout_s=number(_get(cfg_sync, "timeout_s", 600.0), "sync.timeout_s", minimum=0),
                   hostfile=hostfile, delay_compensation=dc, delay_compensation_mode=dc_mode)


def tracked_settings(strategy: Any, opts: "SyncOptions", settings):
    """``train.eval_every`` / ``train.budget_updates`` count sample-equivalent updates (``batch_size``
    samples each): an update of ``k x batch_size`` samples (an allreduce step over W batches, k = W)
    evaluates every ``eval_every / k`` updates, so every W (and every strategy) is evaluated at the
    same sample counts."""
    import dataclasses

    k = strategy.samples_per_update(opts, settings.batch_size) / settings.batch_size
    return dataclasses.replace(settings, eval_every=max(1, round(settings.eval_every / k)),
                               budget_updates=None if settings.budget_updates is None
                               else max(1, math.ceil(settings.budget_updates / k)))


def _num(cfg: Any, key: str, default: Any, typ: type, minimum: float | None = None) -> Any:
    val = _get(cfg, key, None)
    name = key if key.startswith(("train.", "hardware.")) else "sync." + key  # bare keys are read from sync.*
    if val is None:
        return default
    if isinstance(val, bool):
        raise ConfigError(f"{name}={val!r} is not a number")
    try:
        out = typ(val)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={val!r} is not a {'number' if typ is float else 'integer'}") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"{name}={val!r} must be >= {minimum:g}")
    return out


def lr_multiplier(rule: str, ratio: float) -> float:
    """How the learning rate grows with the batch (ratio = batch / train.batch_size): ``linear``
    (Goyal et al. 2017: k x batch, k x lr), ``sqrt`` (Krizhevsky 2014: sqrt(k)), ``none``."""
    if rule == "linear":
        return ratio
    if rule == "sqrt":
        return math.sqrt(ratio)
    return 1.0


def scaled_lr(opts: "SyncOptions", lr: float, batch: int, batch_size: int, samples_seen: float) -> float:
    """The learning rate of an update over ``batch`` samples: ``lr x rule(batch / batch_size)``, reached
    linearly over the first ``warmup_samples`` samples from ``lr`` (gradual warm-up, Goyal et al. 2017)."""
    target = lr * lr_multiplier(opts.lr_rule, batch / batch_size)
    if opts.warmup_samples > 0 and samples_seen < opts.warmup_samples and target > lr:
        return lr + (target - lr) * samples_seen / opts.warmup_samples
    return target


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


def push_weights(lr: float, batches: list[int], scaling: str | float, *, batch_size: int | None = None,
                 rule: str = "none") -> list[float]:
    """Learning rate each worker's push is applied with (before staleness damping).
    ``scaled``: ``lr x rule(G / batch_size) x b_i / G`` (G = sum of the batches): one round of W pushes is
    one step of the global batch at the scaled learning rate, as allreduce takes it;
    ``lr`` and ``lr/staleness`` apply each push as a step of its own: ``lr x rule(b_i / batch_size)``."""
    if scaling == "scaled":
        g = sum(batches)
        return [lr * lr_multiplier(rule, g / (batch_size or g / len(batches))) * b / g for b in batches]
    if scaling in ("lr", "lr/staleness"):
        bs = batch_size or (sum(batches) / len(batches))
        return [lr * lr_multiplier(rule, b / bs) for b in batches]
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
    """Server parameters and the push update, applied atomically; counts every applied push.

    A push of gradient ``g`` from worker i is applied through the server's update rule (``optimizer``,
    an ``orchestrator.sync.optim.Optimizer``: plain SGD unless told otherwise; its state lives here) at
    the learning rate ``weight_i``. With ``damped`` a push computed on parameters ``tau`` versions old is
    applied at ``weight_i / max(1, tau)`` (staleness-aware async SGD, Zhang et al. 2016). Subclasses change
    the gradient before it is applied (``correct``) and may keep per-worker state on ``pull``."""

    def __init__(self, params: np.ndarray, weights: list[float], damped: bool = False, optimizer: Any = None):
        from orchestrator.sync.optim import Optimizer

        self.params = np.array(params, dtype=np.float32, copy=True)
        self.weights = [np.float32(w) for w in weights]
        self.damped = damped
        self.optimizer = optimizer if optimizer is not None else Optimizer()
        self.version = 0                              # pushes applied so far (= global update count)
        self.pushes_by_worker = [0] * len(weights)
        self.samples = 0
        self.update_staleness: Counter[int] = Counter()  # versions applied between a worker's pull and push
        self.lock = threading.Lock()

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
        """Apply ``worker``'s gradient (damped by staleness if asked); returns the new version.
        Once ``closed`` is set (training stopped: target reached or budget spent) a push still in flight is
        dropped and None returned, so the final parameters are the ones the stop was decided on."""
        with self.lock:
            if closed is not None and closed.is_set():
                return None
            tau = self.version - pulled_version
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
        return grad + lam * grad * grad * (self.params - pulled)


def histogram_dict(hist: Counter) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(hist.items())}
