"""The one place that holds the data-parallel sync rules, shared by the virtual and the MPI runtime:

- ``SyncOptions``: the ``sync.*`` / ``hardware.*`` config a strategy runs with (the strategy itself,
  ``orchestrator.sync.strategy``, says which rules apply);
- ``batch_shares``: per-worker batch sizes (equal, or proportional to speed); learning-rate scaling.

The parameter server's rules (``StalenessGate``, ``ParameterServer``) are in ``orchestrator.sync.server``.

Nothing here imports TensorFlow or MPI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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
    def from_cfg(cls, cfg_sync: Any, cfg: Any, strategy: Any) -> SyncOptions:
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


def tracked_settings(strategy: Any, opts: SyncOptions, settings):
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


def scaled_lr(opts: SyncOptions, lr: float, batch: int, batch_size: int, samples_seen: float) -> float:
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
