"""The sync-strategy contract: what the virtual and the MPI runtime ask of a data-parallel strategy.

A strategy is split into the parts a runtime needs, so that one runtime serves every strategy and a
new rule is a subclass, not a branch (Alpa's ``PipelineSchedule`` subclasses, Ray Tune's ``Searcher``):

- **how a worker's work is combined** (the family): ``CollectiveStrategy`` (workers meet at a barrier
  each round; one weighted all-reduce of a vector per worker) or ``ServerStrategy`` (rank 0 is a
  parameter server; each worker pushes to it and pulls from it);
- **when a worker may proceed**: a barrier (collectives), or the server's ``StalenessGate`` with the
  bound ``staleness_bound()`` (0: lockstep, ``inf``: nobody waits);
- **how an update is applied**: ``local`` / ``weights`` / ``apply`` for a round of a collective,
  ``push_weights`` / ``make_server`` (the server's update rule and its state) for a server.

A collective round, on either runtime (``r`` is the round, ``H = local_steps()``)::

    worker i:   m_i = local(i, theta, grad, round)     # H gradient evaluations on batches of b_i
    all-reduce: M   = sum_i float32(w_i) * m_i           # w = weights(round)
    everyone:   theta <- apply(theta, M, round)

Gradient averaging (allreduce) is ``m_i = grad(theta)``, ``w_i = b_i / G``, ``theta <- opt(theta, M,
lr(G))`` (``round.optimizer``: the trial's update rule, ``orchestrator.execution.optim``; every rank
keeps the same state); local SGD is ``m_i`` = the parameters after H local steps, ``w_i = b_i / G``,
``theta <- M``.

Nothing here imports TensorFlow or MPI; the runtimes live in ``orchestrator.sync.virtual`` and
``orchestrator.sync.mpi``, and ``orchestrator.sync.run.train(strategy, ctx)`` runs a strategy on one. Strategies are built as ``Class(cfg_sync)`` from the trial's ``sync`` node
and, under MPI, again in every rank from ``ref()`` and the plain ``cfg_sync``.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from orchestrator.config import plain
from orchestrator.config.sync import ServerSyncConfig, SyncConfig
from orchestrator.errors import ConfigError
from orchestrator.execution.optim import Optimizer
from orchestrator.sync.core import SyncOptions, push_weights, scaled_lr
from orchestrator.sync.server import DelayCompensatedServer, ParameterServer, StalenessGate

Gradient = Callable[[np.ndarray], np.ndarray]   # parameters -> gradient of the next batch of this worker


@dataclass(frozen=True)
class Round:
    """What a collective round knows: the batch of each worker's local steps and the lr schedule."""

    opts: SyncOptions
    batches: tuple[int, ...]        # per worker, each of its local steps
    base_lr: float                  # train.lr, for one batch of train.batch_size
    batch_size: int                 # train.batch_size
    samples_seen: float             # samples of every round before this one (drives the warm-up)
    optimizer: Optimizer            # the run's update rule and its state (train.optimizer)
    index: int = 0                  # this round's number (0, 1, ...)
    contributors: tuple[int, ...] | None = None   # whose vectors the round reduces (None: every worker's)
    noise_scale: float | None = None  # the measured B_noise before this round (train.batch_policy=adaptive; adascale)

    @property
    def included(self) -> tuple[int, ...]:
        """The workers whose vectors this round reduces: all, or the first ``quorum()`` to finish."""
        return tuple(range(len(self.batches))) if self.contributors is None else self.contributors

    @property
    def total(self) -> int:
        """The round's global batch: the samples of the workers it reduces."""
        if self.contributors is None:
            return int(sum(self.batches))
        return int(sum(self.batches[i] for i in self.contributors))

    def lr(self, batch: float) -> float:
        """The learning rate of one step over ``batch`` samples (``core.scaled_lr``: scaling rule + warm-up)."""
        return scaled_lr(self.opts, self.base_lr, int(batch), self.batch_size, self.samples_seen, self.noise_scale)


class SyncStrategy(ABC):
    """How data-parallel workers combine their gradients. Subclass ``CollectiveStrategy`` or
    ``ServerStrategy``, not this class; set ``name`` and override the rules you change.

    Built as ``Class(cfg_sync)`` with the trial's ``sync`` config node (``+sync=NAME``'s YAML keys).
    """

    name: ClassVar[str] = ""
    uses_server: ClassVar[bool] = False     # True: one extra MPI rank (rank 0) serves the parameters
    Config: ClassVar[type[SyncConfig]] = SyncConfig   # the schema of this strategy's sync.* keys

    def __init__(self, cfg_sync: Any = None):
        self.cfg_sync = cfg_sync if cfg_sync is not None else {}
        self.config = type(self).Config.from_node(self.cfg_sync, "sync")   # typed; a bad value is one line

    # -- what the runtimes ask ----------------------------------------------------------------
    @abstractmethod
    def staleness_bound(self) -> float:
        """How many iterations a worker may run ahead of the slowest (0: lockstep; ``math.inf``: no bound)."""

    def ranks(self, workers: int) -> int:
        """MPI ranks of a run with ``workers`` workers."""
        return workers + (1 if self.uses_server else 0)

    @abstractmethod
    def samples_per_update(self, opts: SyncOptions, batch_size: int) -> float:
        """Samples behind one step of the training curve (a round, or one applied push): evaluations and
        budgets count sample-equivalent updates of ``batch_size`` samples, equal for every strategy."""

    def label(self, opts: SyncOptions) -> str:
        return f"{self.name or type(self).__name__} W={opts.workers} ({opts.runtime})"

    def options(self, cfg: Any) -> SyncOptions:
        """The ``sync.*`` / ``hardware.*`` / ``train.*`` settings this strategy runs with; a bad value is a
        one-line ConfigError. Override to read keys of your own (and call ``super().options``)."""
        return SyncOptions.from_cfg(self.cfg_sync, cfg, self)

    def metrics(self, result: Any, stats: Any) -> dict[str, float]:
        """``sync.*`` metrics of a finished run (override to add your own).

        On the virtual runtime this instance ran every worker. Under MPI each rank's instance calls it at
        the end of its run with that rank's view (``stats`` of its own worker or of the server; ``result``
        without a reference); the keys it adds beyond this base method's are sent back and combined by
        ``gather_metrics``, and the trial's instance adds the base keys from the gathered statistics."""
        from orchestrator.sync.report import scaling_metrics, sync_metrics

        return {**sync_metrics(stats), **scaling_metrics(result, stats.capacity)}

    def own_metrics(self, result: Any, stats: Any) -> dict[str, float]:
        """The keys ``metrics()`` adds beyond the engine's own (what an MPI rank sends back)."""
        base = SyncStrategy.metrics(self, result, stats)
        return {k: float(v) for k, v in self.metrics(result, stats).items() if k not in base}

    def gather_metrics(self, per_rank: list[dict[str, float]]) -> dict[str, float]:
        """Combine the ``own_metrics`` of the MPI ranks that computed them: by default the mean over the
        ranks that reported a key (a per-worker rate or a constant stays what it is); override for sums
        or maxima."""
        keys = sorted({k for m in per_rank for k in m})
        return {k: float(np.mean([m[k] for m in per_rank if k in m])) for k in keys}

    def dense_bytes(self, parameters: int) -> float:
        """Bytes of the whole model as one message: 4 per parameter (float32), 2 with ``sync.fp16``."""
        return float(parameters * (2 if getattr(self.config, "fp16", False) else 4))

    @classmethod
    def ref(cls) -> str:
        """``module:qualname``: how an MPI rank finds this class again."""
        return f"{cls.__module__}:{cls.__qualname__}"

    # -- before the run ------------------------------------------------------------------------
    def check_config(self, cfg: Any) -> SyncOptions:
        """Called before the trial's run starts: a bad value (or too many MPI ranks) costs no MLflow run."""
        opts = self.options(cfg)
        if opts.runtime == "mpi":
            from orchestrator.sync.limits import check_mpi_ranks

            check_mpi_ranks(self, opts)
        self._checked = (cfg, opts)
        return opts

    def run_options(self, cfg: Any) -> SyncOptions:
        """The options ``check_config`` validated where the trial started, when ``cfg`` is that very config
        (validated once, passed down); else ``options(cfg)``."""
        checked = getattr(self, "_checked", None)
        return checked[1] if checked is not None and checked[0] is cfg else self.options(cfg)


class CollectiveStrategy(SyncStrategy):
    """Workers in lockstep rounds behind a barrier, combined by one weighted all-reduce per round
    (the round's formulas are in the module docstring). The defaults are gradient averaging: bulk
    synchronous SGD over the global batch, what Horovod's allreduce computes."""

    uses_server = False
    Config = SyncConfig
    collective: ClassVar[str] = "ring_allreduce"   # how the virtual clock charges a round: ring_allreduce | ring_allgather

    def staleness_bound(self) -> float:
        return 0.0

    def local_steps(self) -> int:
        """Gradient evaluations of each worker per round (H)."""
        return 1

    def quorum(self, workers: int) -> int:
        """How many workers' vectors close a round: the first ``quorum`` to finish are reduced, the late
        ones are dropped (backup workers, Chen et al. 2016). Default: every worker."""
        return workers

    def message_bytes(self, rnd: Round, parameters: int) -> float:
        """Bytes of one worker's vector in this round's collective (what the virtual clock charges): the
        dense model by default (``dense_bytes``: float32, or float16 with ``sync.fp16``). A compressing
        strategy returns its message's size (e.g. top-k: k values and k indices), and with
        ``collective = "ring_allgather"`` the clock charges an all-gather of it instead of a ring all-reduce."""
        return self.dense_bytes(parameters)

    def samples_per_update(self, opts: SyncOptions, batch_size: int) -> float:
        return self.local_steps() * opts.total_batch(batch_size)

    def local(self, worker: int, theta: np.ndarray, grad: Gradient, rnd: Round) -> np.ndarray:
        """The vector worker ``worker`` contributes to the all-reduce (``theta`` must not be modified)."""
        return grad(theta)

    def weights(self, rnd: Round) -> list[float]:
        """The all-reduce's weight of each worker's vector (0 for a worker the round does not reduce)."""
        inc = set(rnd.included)
        return [b / rnd.total if i in inc else 0.0 for i, b in enumerate(rnd.batches)]

    def apply(self, theta: np.ndarray, reduced: np.ndarray, rnd: Round) -> np.ndarray:
        """The new parameters from the reduced vector (may update ``theta`` in place and return it)."""
        return rnd.optimizer.step(theta, reduced, rnd.lr(rnd.total))


class ServerStrategy(SyncStrategy):
    """A parameter server: each worker pulls the parameters, computes a gradient on its batch and pushes
    it; the server applies it at once (``ParameterServer.push``) and the ``StalenessGate`` decides when
    the worker may pull again (``c_i - min_j c_j <= staleness_bound()``)."""

    uses_server = True
    Config: ClassVar[type[SyncConfig]] = ServerSyncConfig

    def samples_per_update(self, opts: SyncOptions, batch_size: int) -> float:
        return opts.total_batch(batch_size) / opts.workers

    def push_bytes(self, worker: int, iteration: int, parameters: int) -> float:
        """Bytes of ``worker``'s push at its ``iteration`` (0, 1, ...): the dense gradient by default."""
        return self.dense_bytes(parameters)

    def pull_bytes(self, worker: int, iteration: int, parameters: int) -> float:
        """Bytes of ``worker``'s pull at its ``iteration``: the dense parameters by default."""
        return self.dense_bytes(parameters)

    def push_weights(self, lr: float, batches: list[int], opts: SyncOptions, batch_size: int) -> list[float]:
        """The learning rate each worker's push is applied with (``sync.push_lr``, ``core.push_weights``)."""
        return push_weights(lr, batches, opts.sync.push_lr, batch_size=batch_size, rule=opts.train.lr_scaling)

    def make_server(self, theta0: np.ndarray, weights: list[float], opts: SyncOptions,
                    optimizer: Optimizer | None = None) -> ParameterServer:
        """The server's state and update rule (subclass ``ParameterServer`` for another rule): each push
        goes through ``optimizer`` (the trial's ``train.optimizer``; its state on the server), plain or
        delay-compensated with ``sync.delay_compensation`` > 0 (DC-ASGD)."""
        c = opts.sync
        damped = c.push_lr == "lr/staleness"
        if c.delay_compensation > 0:
            return DelayCompensatedServer(theta0, weights, damped, optimizer, lam=float(c.delay_compensation),
                                          adaptive=c.delay_compensation_mode == "adaptive")
        return ParameterServer(theta0, weights, damped, optimizer)

    def make_gate(self, opts: SyncOptions) -> StalenessGate:
        """The gate with the bound ``staleness_bound()`` (``opts.staleness``)."""
        return StalenessGate(opts.workers, opts.staleness)


def parse_staleness(value: Any) -> float:
    """``sync.staleness``: a number >= 0 or ``inf`` (the schema checked both; null it lets through)."""
    if value is None:
        raise ConfigError("sync.staleness=null is not accepted (a number >= 0, or inf)")
    return math.inf if str(value).lower() == "inf" else float(value)


def load_ref(ref: str) -> type[SyncStrategy]:
    """The strategy class named by ``SyncStrategy.ref()`` (in an MPI rank)."""
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, SyncStrategy)):
        raise ConfigError(f"{ref!r} is not a SyncStrategy subclass")
    return obj


def plain_cfg(cfg_sync: Any) -> dict:
    """The ``sync`` node as a plain dict (what MPI ranks rebuild the strategy from)."""
    node = plain(cfg_sync)
    return dict(node) if isinstance(node, Mapping) else {}


class SingleWorker(CollectiveStrategy):
    """The reference every speedup is measured against: one worker with the trial's update rule
    (gradient averaging over one worker). Core-owned, so that the reference does not depend on which
    plugins are installed."""

    name = "single worker"
