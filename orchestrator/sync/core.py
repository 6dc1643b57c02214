"""The one place that holds the data-parallel sync rules, shared by the virtual and the MPI runtime:

- ``SyncOptions``: what one run of a strategy is set to: the groups it reads, each validated once into its
  dataclass (the strategy's ``SyncConfig``, ``TrainConfig``, ``DataParallelHardware``), the workers'
  speeds, and the few values only the groups together decide (the staleness bound, the server's shards,
  the links with an emulated cluster's, the MPI hostfile); the MPI ranks receive it as JSON (``plain`` /
  ``from_plain``); the strategy itself (``orchestrator.sync.strategy``) says which rules apply;
- ``push_weights`` and the learning-rate scaling and warm-up (per-worker batch sizes: ``orchestrator.sync.balance``).

The parameter server's rules (``StalenessGate``, ``ParameterServer``) are in ``orchestrator.sync.server``.

Nothing here imports TensorFlow or MPI.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.hardware import DataParallelHardware, SpeedChange, Stragglers
from orchestrator.config.root import TrainConfig
from orchestrator.config.sync import SyncConfig
from orchestrator.errors import ConfigError
from orchestrator.hardware.workers import worker_layout


@dataclass
class SyncOptions:
    """The settings of one run of a strategy. Read the groups as they were validated: ``sync`` (the strategy's
    own config object, ``strategy.config``: ``sync.balance``, ``sync.overlap``, a server's ``push_lr``...),
    ``train`` (``lr_scaling``, ``batch_policy``, the adaptive batch's keys...) and ``hardware`` (stragglers,
    jitter, speed changes, the emulated step); ``workers``, ``runtime`` and ``warmup_samples`` are derived."""

    sync: SyncConfig = field(default_factory=SyncConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    hardware: DataParallelHardware = field(default_factory=DataParallelHardware)
    speeds: list[float] = field(default_factory=lambda: [1.0] * 4)   # one per worker (W = len)
    name: str = ""                        # the strategy's name: a label for runs and logs, never a switch
    staleness: float = 0.0                # the strategy's staleness_bound(): s; math.inf for async
    shards: int = 1                       # parameter-server shards (each with its own link), sync.shards resolved
    colocated: bool = False               # sync.shards=colocated: one shard on each worker's link
    network: dict | None = None           # hardware.network (plain) with an emulated cluster's links; hardware.topology.Topology
    hostfile: str | None = None           # sync.hostfile, or the emulated cluster's

    @property
    def workers(self) -> int:
        return len(self.speeds)

    @property
    def runtime(self) -> str:
        """``sync.runtime``: virtual (emulated clock) or mpi (real processes)."""
        return self.sync.runtime

    @property
    def warmup_samples(self) -> int:
        """``train.warmup_updates`` x ``train.batch_size``: the linear warm-up's length (Goyal et al.)."""
        return self.train.warmup_updates * self.train.batch_size

    def net(self):
        from orchestrator.hardware.topology import Topology

        return Topology.from_cfg(self.network, self.workers)

    def schedule(self):
        from orchestrator.sync.balance import SpeedSchedule

        return SpeedSchedule(self.speeds, self.hardware.speed_changes)

    def total_batch(self, batch_size: int) -> int:
        """The global batch G of one round: ``per_worker`` W x B (weak scaling), ``global`` B (strong
        scaling), ``hybrid`` min(W x B, ``train.global_batch_max``) (weak scaling up to a cap near the
        critical batch, strong beyond it). The workers split G by speed (``sync.balance``)."""
        policy = self.train.batch_policy
        if policy == "per_worker":
            return self.workers * batch_size
        if policy == "adaptive":       # the first batch; the runtime re-decides it (sync.adaptive)
            return self.adaptive_range(batch_size)[0]
        total = batch_size if policy == "global" else min(self.workers * batch_size, self.train.global_batch_max)
        if total < self.workers:
            raise ConfigError(f"train.batch_policy={policy}: a global batch of {total} < {self.workers} "
                              "workers (raise train.batch_size / train.global_batch_max)")
        return total

    def adaptive_range(self, batch_size: int) -> tuple[int, int]:
        """``train.batch_policy=adaptive``: the smallest and the largest global batch it may choose."""
        t = self.train
        low = t.adaptive_min_batch if t.adaptive_min_batch is not None else max(batch_size, self.workers)
        if low < self.workers:
            raise ConfigError(f"train.adaptive_min_batch={low} < {self.workers} workers (each needs a sample)")
        if t.adaptive_max_batch < low:
            raise ConfigError(f"train.adaptive_max_batch={t.adaptive_max_batch} < the smallest global batch {low} "
                              "(train.adaptive_min_batch, else max(train.batch_size, W))")
        return low, t.adaptive_max_batch

    def plain(self) -> dict[str, Any]:
        """What an MPI rank receives (JSON): everything but ``sync``, which the rank's strategy rebuilds from the
        plain ``sync`` node (``from_plain``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sync"}
        return {**out, "train": dataclasses.asdict(self.train), "hardware": dataclasses.asdict(self.hardware)}

    @classmethod
    def from_plain(cls, d: dict[str, Any], sync: SyncConfig) -> SyncOptions:
        """``plain()``'s dict back, with the rank's strategy's ``sync`` config."""
        hw = d["hardware"]
        hardware = DataParallelHardware(Stragglers(**hw["stragglers"]), hw["jitter_sigma"],
                                        tuple(SpeedChange(**ch) for ch in hw["speed_changes"]),
                                        hw["emulated_step_s"], hw["network"], hw["netlab"])
        rest = {k: v for k, v in d.items() if k not in ("train", "hardware")}
        return cls(sync=sync, train=TrainConfig.from_node(d["train"], "train"), hardware=hardware, **rest)

    @classmethod
    def from_cfg(cls, cfg_sync: Any, cfg: Any, strategy: Any) -> SyncOptions:
        """The settings ``strategy`` (a ``orchestrator.sync.strategy.SyncStrategy``) runs with, from the trial
        config ``cfg``: its ``train`` and ``hardware`` groups validated once into ``TrainConfig`` and
        ``DataParallelHardware`` (the workers by ``worker_layout``), then ``from_configs``."""
        train = TrainConfig.from_node(_group(cfg, "train"), "train")
        node = _group(cfg, "hardware")
        speeds = worker_layout(node or {}, has_sync=True)  # one parser for W and speeds
        return cls.from_configs(strategy, train, DataParallelHardware.from_node(node, len(speeds)), speeds)

    @classmethod
    def from_configs(cls, strategy: Any, train: TrainConfig, hardware: DataParallelHardware,
                     speeds: list[float]) -> SyncOptions:
        """The settings of a run of ``strategy`` (its typed ``sync`` config is ``strategy.config``) on workers of
        ``speeds``; checks across the groups are one-line errors."""
        c: SyncConfig = strategy.config
        name = str(getattr(strategy, "name", "") or type(strategy).__name__)
        workers = len(speeds)
        network, hostfile = _links(hardware, c.hostfile, workers, strategy.uses_server)
        _check_across(c, train, strategy, name, workers)
        shards, colocated = _shards(c, getattr(c, "shards", 1), strategy.uses_server, workers)
        out = cls(sync=c, train=train, hardware=hardware, speeds=list(speeds), name=name,
                  staleness=float(strategy.staleness_bound()), shards=shards, colocated=colocated, network=network,
                  hostfile=hostfile)
        if train.batch_policy == "adaptive":
            out.adaptive_range(train.batch_size)   # a bad range is one line before the run
        return out


def _group(cfg: Any, name: str) -> Any:
    """The trial config's group ``name`` (a DictConfig, a dict, an object with the attribute, or None)."""
    if cfg is None:
        return None
    return cfg.get(name, None) if hasattr(cfg, "get") else getattr(cfg, name, None)


def _links(hardware: DataParallelHardware, hostfile: str | None, workers: int, server: bool) -> tuple[dict | None, str | None]:
    """``hardware.network`` (plain) and the MPI hostfile; an emulated cluster (``hardware.netlab``) adds its
    links and its hostfile. The links are checked now: one-line errors before any run starts."""
    from orchestrator.hardware.topology import Topology

    network = hardware.network
    if hardware.netlab:
        from orchestrator.hardware import netlab

        lab = netlab.require(hardware.netlab)
        hostfile = hostfile or str(lab.hostfile)
        network = {**(network or {}), **netlab.network_config(lab, workers, server=server)}
    Topology.from_cfg(network, workers)   # the topology parses hardware.network (it needs W)
    return network, hostfile


def _check_across(c: SyncConfig, train: TrainConfig, strategy: Any, name: str, workers: int) -> None:
    """What no single schema can check: keys that must agree across ``sync`` and ``train``."""
    if (c.step_overhead_s is None) != (c.per_sample_s is None):
        raise ConfigError(f"sync.step_overhead_s={c.step_overhead_s} / sync.per_sample_s={c.per_sample_s}: "
                          "give both (or neither)")
    if getattr(c, "push_lr", "scaled") is None:
        raise ConfigError("sync.push_lr=null is not accepted (scaled, lr, lr/staleness, or a number > 0)")
    if train.lr_scaling == "adascale" and train.batch_policy != "adaptive":
        raise ConfigError(f"train.lr_scaling=adascale needs train.batch_policy=adaptive (its gain comes from the "
                          f"noise scale the adaptive batch measures), not {train.batch_policy}")
    if train.batch_policy == "adaptive":
        if strategy.uses_server:
            raise ConfigError(f"train.batch_policy=adaptive needs a collective strategy (allreduce, backup, ...): "
                              f"sync={name} is a parameter server, whose pushes have no round to measure it on")
        if workers < 2:
            raise ConfigError("train.batch_policy=adaptive needs hardware.workers >= 2 (the noise scale is measured "
                              "from the workers' gradients)")


def _shards(c: SyncConfig, shards: Any, server: bool, workers: int) -> tuple[int, bool]:
    """``sync.shards`` (its schema has checked it: auto, colocated or an integer >= 1) resolved: the number of
    parameter-server shards and whether they sit on the workers' links."""
    given = shards
    if shards == "auto":   # the measured better placement where it is modelled (docs/benchmarks/sync_shards.md)
        shards = "colocated" if c.runtime == "virtual" and server and workers > 1 else 1
    colocated = shards == "colocated"
    count = workers if colocated else int(float(shards))
    if c.runtime != "virtual" and server and (colocated or count > 1):
        raise ConfigError(f"sync.shards={given} is modelled on sync.runtime=virtual only (under MPI the "
                          "server is one rank)")
    return count, colocated


def jitter_factor(rng: Any, sigma: float) -> float:
    """One draw of the jitter factor ``exp(sigma Z - sigma^2/2)`` (1.0 without jitter, drawing nothing)."""
    if sigma <= 0:
        return 1.0
    return math.exp(sigma * float(rng.standard_normal()) - 0.5 * sigma * sigma)


def tracked_settings(strategy: Any, opts: SyncOptions, settings):
    """``train.eval_every`` / ``train.budget_updates`` count sample-equivalent updates (``batch_size``
    samples each): an update of ``k x batch_size`` samples (an allreduce step over W batches, k = W)
    evaluates every ``eval_every / k`` updates, so every W (and every strategy) is evaluated at the
    same sample counts."""
    if opts.train.batch_policy == "adaptive":   # rounds of changing size: the runtime counts samples itself
        return settings
    k = strategy.samples_per_update(opts, settings.batch_size) / settings.batch_size
    return dataclasses.replace(settings, eval_every=max(1, round(settings.eval_every / k)),
                               budget_updates=None if settings.budget_updates is None
                               else max(1, math.ceil(settings.budget_updates / k)))


def lr_multiplier(rule: str, ratio: float, noise: float | None = None) -> float:
    """How the learning rate grows with the batch (ratio = batch / train.batch_size): ``linear``
    (Goyal et al. 2017: k x batch, k x lr), ``sqrt`` (Krizhevsky 2014: sqrt(k)), ``none``, or ``adascale``
    (Johnson, Agrawal, Gu, Guestrin, NeurIPS'20, "AdaScale SGD", the gain Pollux uses for SGD):

        r = (sigma^2 + mu^2) / (sigma^2 / k + mu^2) = k (B_noise + M0) / (B_noise + k M0)

    with ``sigma^2 = tr(Sigma) / M0`` the gradient variance at the base batch ``M0 = train.batch_size``,
    ``mu^2 = |G|^2`` and ``B_noise = tr(Sigma) / |G|^2`` the measured noise scale (``noise = B_noise / M0``): ``k`` times
    Pollux's efficiency, between 1 (no noise: a larger batch adds nothing) and ``k`` (all noise: linear).
    Without a measurement yet (``noise`` None) it is ``sqrt``."""
    if rule == "linear":
        return ratio
    if rule == "sqrt" or (rule == "adascale" and noise is None):
        return math.sqrt(ratio)
    if rule == "adascale":       # noise in units of M0 (B_noise / M0)
        return ratio if math.isinf(noise) else ratio * (noise + 1.0) / (noise + ratio)
    return 1.0


def scaled_lr(opts: SyncOptions, lr: float, batch: int, batch_size: int, samples_seen: float,
              noise: float | None = None) -> float:
    """The learning rate of an update over ``batch`` samples: ``lr x rule(batch / batch_size)`` (``noise``: the
    measured noise scale, for ``adascale``), reached linearly over the first ``warmup_samples`` samples from
    ``lr`` (gradual warm-up, Goyal et al. 2017)."""
    target = lr * lr_multiplier(opts.train.lr_scaling, batch / batch_size,
                                None if noise is None else noise / batch_size)
    if opts.warmup_samples > 0 and samples_seen < opts.warmup_samples and target > lr:
        return lr + (target - lr) * samples_seen / opts.warmup_samples
    return target


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
