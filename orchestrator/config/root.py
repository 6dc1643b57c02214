"""The top-level keys of a trial's config (``conf/config.yaml`` keeps only its defaults list and
Hydra's settings): ``seed``, ``train``, ``placement``, ``objective``, ``tracking``, ``progress``.
The groups (``hardware``, ``model``, ``dataset``, ``placer``, ``sync``) are typed by their own
schemas; here they are slots that any option (typed or not) fills."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.choices import OPTIMIZERS
from orchestrator.config.fields import option
from orchestrator.schedules import SCHEDULES


@dataclass
class ReferenceGrid:
    """``train.reference_grid``: one list of learning rates per optimizer (a key per optimizer, so that an
    override such as ``train.reference_grid.adam=[]`` changes one list and a misspelt optimizer is refused)."""

    sgd: list[float] = option(factory=lambda: [0.05, 0.1, 0.2, 0.4], help="plain SGD")
    momentum: list[float] = option(factory=list, help="heavy-ball momentum (train.momentum)")
    nesterov: list[float] = option(factory=lambda: [0.02, 0.05, 0.1, 0.2], help="Nesterov momentum (train.momentum)")
    adam: list[float] = option(factory=lambda: [0.0005, 0.001, 0.002], help="Adam (train.beta1, beta2, eps)")


@dataclass
class TrainConfig(Schema):
    group = "train"

    batch_size: int = option(64, "per worker (delay-sync may re-split the global batch by worker speed)", min=1)
    lr: float = option(0.1, "the learning rate of one batch of batch_size (for train.optimizer)", min=0, finite=True)
    optimizer: str = option("sgd", "the update rule, the same in both runtimes (a parameter server keeps its state): "
                            "sgd | momentum | nesterov | adam", choices=OPTIMIZERS)
    momentum: float = option(0.9, "momentum, nesterov: mu", min=0, lt=1)
    weight_decay: float = option(0.0, "L2 added to the gradient (g + wd * theta)", min=0, finite=True)
    beta1: float = option(0.9, "adam: decay of the first moment", min=0, lt=1)
    beta2: float = option(0.999, "adam: decay of the second moment", min=0, lt=1)
    eps: float = option(1e-8, "adam: added to the root of the second moment", gt=0)
    lr_scaling: str = option("sqrt", "data parallel: train.lr is for one batch of batch_size; a batch k times larger "
                             "uses lr x rule(k): linear | sqrt | none | adascale (batch_policy=adaptive only: "
                             "AdaScale's gain k (B_noise + batch_size) / (B_noise + k batch_size) from the measured "
                             "noise scale; docs/sync.md)", choices=("linear", "sqrt", "none", "adascale"))
    warmup_updates: int = option(20, "linear warm-up to the scaled lr over this many batch_size-sample updates (0: none)", min=0)
    batch_policy: str = option("per_worker", "per_worker: global batch G = W x batch_size (weak scaling) | global: "
                               "G = batch_size split over the workers (strong) | hybrid: G = min(W x batch_size, "
                               "train.global_batch_max) | adaptive: G follows the measured gradient noise scale, "
                               "chosen by goodput (Pollux) every train.adaptive_every rounds between "
                               "train.adaptive_min_batch and train.adaptive_max_batch (collective strategies, "
                               "both runtimes; docs/sync.md)",
                               choices=("per_worker", "global", "hybrid", "adaptive"))
    global_batch_max: int = option(512, "batch_policy=hybrid: the largest global batch (near the critical batch); the "
                                   "workers split it by speed (sync.balance)", min=1)
    adaptive_min_batch: int | None = option(None, "batch_policy=adaptive: the smallest global batch and the first one "
                                            "(null: max(train.batch_size, W)); the candidates are it x 2^k up to "
                                            "train.adaptive_max_batch", min=1)
    adaptive_max_batch: int = option(1024, "batch_policy=adaptive: the largest global batch", min=1)
    adaptive_every: int = option(20, "batch_policy=adaptive: rounds between two choices of the global batch", min=1)
    adaptive_noise: str = option("simple", "batch_policy=adaptive: the noise scale of the raw gradients (simple) "
                                 "| of the gradients divided by Adam's preconditioner sqrt(v)+eps (preconditioned, as "
                                 "Pollux does for Adam; the raw ones for the other optimizers)",
                                 choices=("simple", "preconditioned"))
    adaptive_ema: float = option(0.9, "batch_policy=adaptive: decay of the moving averages of |G|^2 and tr(Sigma) "
                                 "per round (the noise scale is their ratio)", min=0, lt=1)
    target_accuracy: float | None = option(None, "a fraction; train.time_to_target_s is logged when reached (null: the "
                                           "dataset's, dataset.target_accuracy)", min=0, max=1)
    seeds: int = option(1, "run the training with seeds seed .. seed+k-1; train.time_to_target_s and train.speedup are "
                        "medians, _min/_max the spread (the reference uses the same seeds)", min=1)
    reference: str = option("tuned", "what train.speedup is over: tuned (one speed-1.0 worker, the best of "
                            "train.reference_grid) | same (one speed-1.0 worker with this trial's optimizer and lr)",
                            choices=("tuned", "same"))
    reference_grid: ReferenceGrid = option(
        factory=lambda: ReferenceGrid(),
        help="reference=tuned: the learning rates of each optimizer the single worker is tuned over (tune the "
             "parallel configuration over the same grid; [] leaves an optimizer out); cached in the tracking store")
    reference_extend: int = option(2, "reference=tuned: where an optimizer's best lr is the largest (smallest) of its "
                                   "reference_grid list, go on x2 (/2) while it improves, at most this many steps (0: the "
                                   "grid only)", min=0)
    compare_with: str | None = option(None, "a data-parallel trial that reached its target also runs this sync strategy "
                                      "with its tuned defaults (conf/sync/NAME.yaml) on the same workers, and the "
                                      "statistical limit there (virtual clock; cached in the tracking store; "
                                      "orchestrator/sync/compare.py); conf/config.yaml sets allreduce, null: none")
    statistical_limit: bool = option(True, "a data-parallel trial on the virtual clock that reached its target also "
                                     "measures S(G) and reports the statistical limit of synchronous data parallelism "
                                     "on its workers (cached in the tracking store)")
    stop: str = option("target", "target: stop when reached (or at the budget); budget: run the whole budget",
                       choices=("target", "budget"))
    eval_every: int | None = option(None, "evaluate on the test split every this many batch_size-sample updates (a round "
                                    "of W batches counts W: every W that divides it is evaluated at the same sample "
                                    "counts); null: the dataset's dataset.eval_every (MNIST 16, Fashion-MNIST 128)", min=1)
    budget_updates: Any = option("auto", "upper bound on batch_size-sample updates; auto: the dataset's "
                                 "dataset.budget_updates (MNIST 3000, Fashion-MNIST 30000); null: none (train.budget_s)",
                                 choices=("auto",), number=True, min=1)
    budget_s: float | None = option(None, "upper bound on (wall or virtual) training seconds", gt=0)
    eval_samples: int | None = option(None, "evaluate on the first N test samples (null: all)", min=1)
    seed: int | None = option(None, "the training's seed (null: the top-level seed)", min=0, max=2**32 - 1)


@dataclass
class PlacementConfig(Schema):
    group = "placement"

    objective: str = option("auto", "auto (pipeline for the throughput inputs of the public workloads, step elsewhere) "
                            "| step | pipeline", choices=("auto", "step", "pipeline"))
    bound_time_limit_s: float = option(20, "pipeline: the configuration LP, then a MILP (HiGHS), for this long prove a "
                                       "tighter placement.lower_bound_s (0: the LP bound only)", min=0)
    memory_headroom: Any = option("auto", "share of each device's memory search placers keep free: auto = 0.1 for "
                                  "pipeline (activations in flight), 0 for step", choices=("auto",), number=True,
                                  min=0, lt=1)
    hosts: str = option("first", "a cluster of several workers (hosts): first (place on the first; a sync strategy's "
                        "other workers are placed alike when training) | all (one model over every host's devices and "
                        "the network between them; simulated clusters, no sync)", choices=("first", "all"))
    micro_batches: int = option(1, "a micro-batched pipeline (models extracted from TensorFlow): each mini-batch is m "
                                "micro-batches of train.batch_size; > 1 schedules it and counts the activations in "
                                "flight", min=1)
    schedule: str = option("1f1b", "with micro_batches > 1: gpipe (all forwards, then all backwards) | 1f1b (one "
                           "forward, one backward; fewer micro-batches in flight)", choices=tuple(SCHEDULES))
    pipeline_steps: int = option(5, "with micro_batches > 1 on real devices: mini-batches trained pipelined for real "
                                 "and timed (after 2 untimed)", min=1)
    profile_scale: str = option("step", "with micro_batches > 1 on real devices: step (the simulated figures use the "
                                "layer profile scaled to the model's measured whole step on one CPU) | none",
                                choices=("step", "none"))


@dataclass
class ObjectiveConfig:
    metric: str = option("speedup", "the value a sweep optimises (any logged metric name)")
    direction: str = option("maximize", "maximize | minimize", choices=("maximize", "minimize"))


@dataclass
class TrackingConfig:
    uri: str | None = option(None, "null: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory")
    experiment: str = option("orchestrator", "the MLflow experiment")
    run_name: str | None = option(None, "null: placer/sync/hardware/model")


@dataclass
class OrchestratorConfig:
    """The root. ``placer`` and ``sync`` stay null (a baseline trial) unless added with ``+``."""

    seed: int = option(0, "reaches every placer, the training (train.seed, if set, wins for training) and the data split",
                       min=0, max=2**32 - 1)
    placement: PlacementConfig = option(factory=PlacementConfig, help="how the placement phase judges and bounds placements")
    train: TrainConfig = option(factory=TrainConfig, help="the training run")
    objective: ObjectiveConfig = option(factory=ObjectiveConfig, help="what a sweep optimises")
    tracking: TrackingConfig = option(factory=TrackingConfig, help="the MLflow store")
    progress: Any = option("auto", "auto (bars only on a terminal) | true | false", choices=("auto", True, False))
    hardware: Any = option(None, "the hardware group (hardware=OPTION)")
    model: Any = option(None, "the model group (model=OPTION)")
    dataset: Any = option(None, "the dataset group (dataset=OPTION)")
    placer: Any = option(None, "the placer group (+placer=OPTION; null: no placement)")
    sync: Any = option(None, "the sync group (+sync=OPTION; null: one worker)")
    planner: Any = option(None, "the planner group (+planner=OPTION; with hardware=gpu_cluster: a plan for a cluster of "
                          "GPUs instead of a placement or a training)")
