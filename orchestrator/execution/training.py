"""What every training run shares, whatever executes it (one local worker, virtual workers, MPI
ranks): settings, the batch sampler, convergence tracking (metric names below) and the result.

Metrics (with step = global update count): ``train.loss``, ``train.test_accuracy`` (0-1),
``train.elapsed_s`` at each evaluation. Evaluation time is not counted in ``train.elapsed_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from orchestrator.errors import ConfigError, number
from orchestrator.execution.optim import Optimizer, OptimizerSettings


@dataclass
class TrainSettings:
    batch_size: int = 64
    lr: float = 0.1
    target_accuracy: float = 0.97
    stop: str = "target"            # "target": stop when reached (or at the budget); "budget": run the budget
    eval_every: int = 16            # global updates between evaluations (MNIST's dataset.eval_every, as from_cfg)
    budget_updates: int | None = 3000
    budget_s: float | None = None
    seed: int = 0
    eval_samples: int | None = None  # evaluate on the first N test samples (None: all)
    optimizer: str = "sgd"           # train.optimizer and its settings (orchestrator.execution.optim)
    momentum: float = 0.9
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    seeds: int = 1                   # train.seeds: a trial runs seeds seed .. seed+k-1, reports the median

    def optimizer_settings(self) -> OptimizerSettings:
        return OptimizerSettings(self.optimizer, self.momentum, self.weight_decay, self.beta1, self.beta2, self.eps)

    def new_optimizer(self) -> Optimizer:
        """A fresh update rule (its state empty) for one parameter vector."""
        return Optimizer(self.optimizer_settings())

    @classmethod
    def from_cfg(cls, cfg: Any, seed: Any = None) -> TrainSettings:
        """``seed``: the trial's top-level ``seed`` (``train.seed``, when set, wins). The defaults are
        the schema's (``orchestrator.config.root.TrainConfig``), for a config built by hand too."""
        from orchestrator.config.model import MNISTDatasetConfig
        from orchestrator.config.root import TrainConfig

        d = TrainConfig()

        def num(key, typ, default, minimum=None):
            val = cfg.get(key, default) if cfg is not None else default
            if key == "seed" and val is None:  # train.seed: null (the schema's default): the trial's seed
                val = default
            out = number(val, f"train.{key}", typ, minimum)
            if isinstance(out, float) and math.isinf(out) and key not in ("budget_s",):
                raise ConfigError(f"train.{key}={val!r} must be finite")
            return out

        stop = (cfg.get("stop", d.stop) if cfg is not None else d.stop)
        if stop not in ("target", "budget"):
            raise ConfigError(f"train.stop={stop!r} (accepted: target, budget)")
        target = num("target_accuracy", float, d.target_accuracy, 0.0)
        if target is None:   # null: the dataset's target (the trial fills it in); 0.97 for a config built by hand
            target = cls.target_accuracy
        if target > 1.0:
            raise ConfigError(f"train.target_accuracy={target!r} must be a fraction in [0, 1]")
        # null / auto: the dataset's cadence and budget (the trial fills them in); MNIST's for a config built by hand
        mnist = MNISTDatasetConfig()
        eval_every = num("eval_every", int, d.eval_every, 1)
        budget = cfg.get("budget_updates", d.budget_updates) if cfg is not None else d.budget_updates
        s = cls(
            batch_size=num("batch_size", int, d.batch_size, 1), lr=num("lr", float, d.lr, 0.0), target_accuracy=target,
            stop=stop, eval_every=mnist.eval_every if eval_every is None else eval_every,
            budget_updates=mnist.budget_updates if budget == "auto" else num("budget_updates", int, None, 1),
            budget_s=num("budget_s", float, d.budget_s, 0.0), seed=num("seed", int, _seed(seed)), eval_samples=num("eval_samples", int, d.eval_samples, 1),
            optimizer=str(cfg.get("optimizer", d.optimizer) if cfg is not None else d.optimizer),
            momentum=num("momentum", float, d.momentum), weight_decay=num("weight_decay", float, d.weight_decay),
            beta1=num("beta1", float, d.beta1), beta2=num("beta2", float, d.beta2), eps=num("eps", float, d.eps),
            seeds=num("seeds", int, d.seeds, 1),
        )
        s.optimizer_settings()    # one-line errors for a bad rule or setting (the schema checks a composed config)
        if s.budget_updates is None and s.budget_s is None:
            raise ConfigError("train.budget_updates and train.budget_s are both null: a run needs a budget")
        return s


def _seed(seed: Any) -> int:
    if seed is None:
        return 0
    try:
        return int(seed)
    except (TypeError, ValueError):
        raise ConfigError(f"seed={seed!r} is not an int") from None


class MetricsSink(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_artifact(self, path: str | Path) -> None: ...


class NullSink:
    """A sink that keeps metrics in memory (for tests and nested reference runs)."""

    def __init__(self) -> None:
        self.metrics: list[tuple[str, float, int | None]] = []
        self.tags: dict[str, str] = {}
        self.artifacts: list[str] = []

    def log_metrics(self, metrics, step=None):
        self.metrics.extend((k, float(v), step) for k, v in metrics.items())

    def set_tags(self, tags):
        self.tags.update(tags)

    def log_artifact(self, path):
        self.artifacts.append(str(path))


class BatchSampler:
    """Seeded mini-batches, epoch by epoch without replacement; one stream per worker."""

    def __init__(self, n: int, seed: int, worker: int = 0):
        self.n = n
        self.rng = np.random.default_rng([seed, worker])
        self._perm = self.rng.permutation(n)
        self._pos = 0

    def next(self, batch: int) -> np.ndarray:
        out = []
        while batch > 0:
            if self._pos >= self.n:
                self._perm, self._pos = self.rng.permutation(self.n), 0
            take = min(batch, self.n - self._pos)
            out.append(self._perm[self._pos : self._pos + take])
            self._pos += take
            batch -= take
        return np.concatenate(out)


@dataclass
class EvalPoint:
    step: int
    elapsed_s: float
    loss: float
    accuracy: float


@dataclass
class TrainResult:
    updates: int
    elapsed_s: float
    samples: int
    final_test_accuracy: float
    time_to_target_s: float | None
    updates_to_target: float | None             # interpolated between evaluations (``crossing``)
    clock: str                                  # "wall" or "virtual"
    history: list[EvalPoint] = field(default_factory=list)
    extra_metrics: dict[str, float] = field(default_factory=dict)
    # time to target of the reference (one worker of speed 1.0, same model/settings) on the same
    # clock, when the executor knows it; the trial turns it into train.speedup
    reference_time_to_target_s: float | None = None
    reference: Any = None                       # orchestrator.sync.reference.Reference, when a sync run has one
    compute_model: Any = None                   # a sync run's speed-1.0 compute model (the reference runs on it)

    @property
    def reached_target(self) -> bool:
        return self.time_to_target_s is not None

    @property
    def throughput(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class TrainContext:
    """Everything a training executor (single worker or a sync strategy) gets from the trial."""

    settings: TrainSettings
    dataset: Any                    # orchestrator.data.Dataset
    model: Any                      # orchestrator.models.ModelSpec
    cluster: Any                    # orchestrator.hardware.cluster.Cluster
    sink: MetricsSink
    output_dir: Path
    cfg: Any = None                 # the trial's whole (resolved) config
    # per-worker step time of the placed model (seconds, from the placer's evaluator), when a placer ran
    worker_step_time_s: dict[str, float] = field(default_factory=dict)
    show_progress: bool = False


def crossing(history: list[EvalPoint], target: float) -> tuple[float | None, float | None]:
    """(time, updates) at which the accuracy first reaches ``target``, interpolated linearly between
    the last evaluation below it and the first at or above it (an evaluation every k updates would
    otherwise round every run's time up to its next evaluation: up to k updates of bias, more for the
    runs that take fewer updates); (None, None) if never reached. The first evaluation at or above
    the target is where training stopped; the interpolated point is the estimate of the crossing."""
    for i, p in enumerate(history):
        if p.accuracy >= target:
            if i == 0 or not history[i - 1].accuracy < target:
                return p.elapsed_s, float(p.step)
            q = history[i - 1]
            f = (target - q.accuracy) / (p.accuracy - q.accuracy)
            return q.elapsed_s + f * (p.elapsed_s - q.elapsed_s), q.step + f * (p.step - q.step)
    return None, None


class ConvergenceTracker:
    """Logs each evaluation and decides when a run stops (target reached, or budget spent)."""

    def __init__(self, settings: TrainSettings, sink: MetricsSink, progress: Callable[[EvalPoint], None] | None = None,
                 num_classes: int = 10):
        self.s = settings
        self.sink = sink
        self.history: list[EvalPoint] = []
        self.time_to_target: float | None = None
        self.updates_to_target: float | None = None
        self.progress = progress
        self.num_classes = num_classes

    def record(self, step: int, elapsed_s: float, loss: float, accuracy: float) -> None:
        point = EvalPoint(step, elapsed_s, loss, accuracy)
        self.history.append(point)
        self.sink.log_metrics({"train.loss": loss, "train.test_accuracy": accuracy, "train.elapsed_s": elapsed_s}, step=step)
        if self.time_to_target is None and accuracy >= self.s.target_accuracy:
            self.time_to_target, self.updates_to_target = crossing(self.history, self.s.target_accuracy)
        if self.progress:
            self.progress(point)

    def budget_spent(self, step: int, elapsed_s: float) -> bool:
        if self.s.budget_updates is not None and step >= self.s.budget_updates:
            return True
        return self.s.budget_s is not None and elapsed_s >= self.s.budget_s

    @property
    def diverged(self) -> bool:
        """The loss became NaN/inf, or exploded past ``exploded_loss(classes)`` (10 x the cross-entropy
        of a uniform guess): whatever the stop rule, training cannot recover from there."""
        if not self.history:
            return False
        loss = self.history[-1].loss
        return not math.isfinite(loss) or loss > exploded_loss(self.num_classes)

    def should_stop(self, step: int, elapsed_s: float) -> bool:
        if self.diverged:
            return True
        if self.s.stop == "target" and self.time_to_target is not None:
            return True
        return self.budget_spent(step, elapsed_s)

    def result(self, updates: int, elapsed_s: float, samples: int, clock: str, **extra: float) -> TrainResult:
        final = self.history[-1].accuracy if self.history else math.nan
        return TrainResult(updates, elapsed_s, samples, final, self.time_to_target, self.updates_to_target,
                           clock, list(self.history), dict(extra))


def log_final(result: TrainResult, sink: MetricsSink, *, speedup: float | None,
              reference_time_to_target_s: float | None, num_classes: int | None = None) -> dict[str, float]:
    """The end-of-training metrics of the foundation contract; returns what was logged."""
    m: dict[str, float] = {
        "train.final_test_accuracy": result.final_test_accuracy,
        "train.throughput_samples_per_s": result.throughput,
        "train.updates": float(result.updates),
        "train.total_elapsed_s": result.elapsed_s,
    }
    if result.time_to_target_s is not None:
        m["train.time_to_target_s"] = result.time_to_target_s
        m["train.updates_to_target"] = float(result.updates_to_target or 0)
    if reference_time_to_target_s is not None:
        m["train.reference_time_to_target_s"] = reference_time_to_target_s
    if speedup is not None:
        m["train.speedup"] = speedup
    m.update(result.extra_metrics)
    sink.log_metrics(m)
    tags = {"train.reached_target": str(result.reached_target).lower(), "train.clock": result.clock}
    if not result.reached_target:
        tags["train.missed_target"] = missed_target_reason(result, num_classes)
    sink.set_tags(tags)
    return m


def exploded_loss(num_classes: int | None) -> float:
    """The training loss past which a run has diverged: 10 x ln(classes), ten times the cross-entropy
    of a uniform guess (23.0 for 10 classes); a model that far off does not come back."""
    return 10 * math.log(num_classes) if num_classes and num_classes > 1 else 10 * math.log(10)


def missed_target_reason(result: TrainResult, num_classes: int | None = None) -> str:
    """Why a run did not reach the target: it diverged (a NaN/inf loss, one above 10x the first
    evaluation's, or above ``exploded_loss``), or spent its budget."""
    h = result.history
    if h and (not math.isfinite(h[-1].loss) or h[-1].loss > exploded_loss(num_classes)
              or (len(h) > 1 and math.isfinite(h[0].loss) and h[-1].loss > 10 * h[0].loss)):
        return (f"diverged at update {h[-1].step} (training loss {h[0].loss:.3g} -> {h[-1].loss:.3g}; "
                "training stopped there; try a smaller train.lr)")
    seen = f" ({result.samples} samples)" if result.samples else ""        # an update of W workers holds W batches
    return (f"budget spent after {result.updates} updates{seen} at accuracy {result.final_test_accuracy:.3f} "
            "(raise train.budget_updates / train.budget_s, or lower train.target_accuracy)")
