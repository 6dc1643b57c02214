"""The public contract of every extension point: what a placer, a sync strategy, a hardware adapter
and an evaluator are, what they receive and what they return. A plugin imports from this module only;
everything named here keeps its meaning within a major ``HOOKSPEC_VERSION``.

=================  =====================================================  =================================
extension point    registered with (``orchestrator.hookspecs``)           built as / must offer
=================  =====================================================  =================================
placer             ``orchestrator_placers() -> {name: "mod:Class"}``      ``Class(cfg.placer)``, ``Placer``
planner            ``orchestrator_planners()``                            ``Class(cfg.planner)``, ``Planner``
plan simulator     ``orchestrator_simulators()``                          ``Class()``, a subclass of
                                                                          ``PlanSimulator``
sync strategy      ``orchestrator_sync_strategies()``                     ``Class(cfg.sync)``, a subclass of
                                                                          ``CollectiveStrategy`` or
                                                                          ``ServerStrategy``
hardware adapter   ``orchestrator_hardware_adapters()``                   ``Class(cfg.hardware)``,
                                                                          ``HardwareAdapter``
model              ``orchestrator_models() -> {name: "mod:function"}``    ``function(cfg.model) -> ModelSpec``
=================  =====================================================  =================================

Importing this module imports neither TensorFlow nor MPI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from orchestrator.config import Schema
from orchestrator.config.fields import option
from orchestrator.config.planning import PlannerConfig
from orchestrator.config.sync import ServerSyncConfig, SyncConfig
from orchestrator.errors import ConfigError, InfeasiblePlacementError, InfeasiblePlanError, UserError, WorkloadError
from orchestrator.execution.optim import Optimizer, OptimizerSettings
from orchestrator.execution.training import MetricsSink, NullSink, TrainContext, TrainResult, TrainSettings
from orchestrator.graph import Edge, Node, OpGraph, Placement, PlacementContext
from orchestrator.hardware.cluster import Cluster, Device, Worker
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.profiles import DeviceKind
from orchestrator.hardware.topology import Topology
from orchestrator.hookspecs import HOOKSPEC_VERSION, hookimpl
from orchestrator.models import ModelSpec
from orchestrator.placement.simulate.inflight import MicrobatchSpec
from orchestrator.plan import LayeredProfile, Pipeline, Plan, Replica, Stage
from orchestrator.planning.estimate import PlanEstimate, StageFigures
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.simulators import PlanSimulator
from orchestrator.sync.core import SyncOptions
from orchestrator.sync.server import ParameterServer, StalenessGate
from orchestrator.sync.strategy import CollectiveStrategy, Round, ServerStrategy, SyncStrategy

__all__ = [
    "HOOKSPEC_VERSION", "hookimpl",
    "Placer", "Evaluator", "Verdict", "HardwareAdapter", "TrialContext", "MetricsSink", "NullSink",
    "SyncStrategy", "CollectiveStrategy", "ServerStrategy", "Round", "SyncOptions", "StalenessGate", "ParameterServer",
    "Schema", "option", "SyncConfig", "ServerSyncConfig", "Optimizer", "OptimizerSettings",
    "TrainContext", "TrainResult", "TrainSettings", "ModelSpec",
    "OpGraph", "Node", "Edge", "Placement", "PlacementContext", "PlacementOutcome", "MicrobatchSpec",
    "Cluster", "Worker", "Device", "Topology", "ConstantLink",
    "Planner", "Plan", "Pipeline", "Stage", "Replica", "GpuCluster", "DeviceKind", "LayeredProfile", "PlanEstimate",
    "StageFigures", "PlanEvaluator", "PlanObjective", "PlanSimulator", "PlannerConfig",
    "UserError", "ConfigError", "InfeasiblePlacementError", "InfeasiblePlanError", "WorkloadError",
]


@runtime_checkable
class Verdict(Protocol):
    """An evaluator's judgement of one placement."""

    step_time_s: float              # one training step (the step objective)
    feasible: bool                  # every device within its memory
    kind: str                       # "simulated" or "measured"
    time_per_sample_s: float | None  # the pipeline (load) objective, when that is the trial's objective

    @property
    def value(self) -> float:
        """The trial's objective figure: time per sample under the pipeline objective, else the step time."""
        ...


@runtime_checkable
class Evaluator(Protocol):
    """The shared judge a placer may ask; the trial's final figures are always its verdicts."""

    kind: str                       # "simulated" or "measured"
    evaluations: int                # how many placements it judged so far

    def evaluate(self, placement: Placement | None) -> Verdict:
        """Judge ``placement`` (None: the whole model on the worker's first device)."""
        ...


@runtime_checkable
class Placer(Protocol):
    """Assigns every node of ``graph`` to one device of ``worker`` (model parallelism).

    ``evaluator`` judges candidate placements (simulated or measured, as the trial decided);
    ``context`` carries the seed, the output directory and the trial config. Return a ``Placement``
    naming every node; raise ``InfeasiblePlacementError`` when nothing fits.
    """

    def place(self, graph: OpGraph, worker: Worker, evaluator: Evaluator | None = None,
              context: PlacementContext | None = None) -> Placement:
        ...


@runtime_checkable
class Planner(Protocol):
    """Plans the training of ``model`` (a layered profile) on ``cluster`` (GPU types, counts, links):
    pipelines, stages, replicas, TP degrees, micro-batch size, batch split (``Plan``).

    ``evaluator`` judges candidate plans (``evaluate`` or, inside a search, ``try_evaluate``, which skips
    and counts a plan whose profile entries are missing); ``objective.score(estimate)`` ranks them (lower
    is better; plans that do not fit score +inf). Return the chosen ``Plan``; raise
    ``InfeasiblePlacementError`` when no plan fits."""

    def plan(self, model: LayeredProfile, cluster: GpuCluster, objective: PlanObjective,
             evaluator: PlanEvaluator) -> Plan:
        ...


@dataclass
class TrialContext:
    """What a hardware adapter (and any other plugin called during a trial) may use: the config slices,
    the model, whether the trial trains and with how many data-parallel workers, where to write files,
    and where metrics go. Plugins get this, never the orchestrating ``Trial``."""

    cfg: Any                                   # the whole trial config (read-only)
    names: dict[str, str | None]               # plugin name per group: placer, sync, hardware, model
    model: ModelSpec
    has_sync: bool                             # a sync strategy takes part: the adapter builds its workers
    trains: bool                               # the model is trained (not only placed)
    output_dir: Path
    sink: MetricsSink = field(default_factory=NullSink)

    def group(self, name: str) -> Any:
        """The config node of one group (``placer``, ``sync``, ``hardware``, ``model``, ``train``, ...)."""
        return self.cfg.get(name) if hasattr(self.cfg, "get") else None


@dataclass
class PlacementOutcome:
    """What the placement phase of a trial hands on (to training, to the workers' speeds): the placer's
    answer and the shared evaluator's verdicts on it and on the baseline, and what it logged."""

    placement: Placement
    graph: OpGraph
    worker: Worker                              # the worker it was placed on (the cluster's first)
    evaluator: Evaluator                        # the judge of the search and of the final verdict
    verdict: Verdict                            # the final placement's
    baseline: Verdict | None                    # the baseline placement's (None: no feasible baseline)
    metrics: dict[str, float]                   # the placement.* metrics logged
    microbatch: MicrobatchSpec | None = None    # the micro-batched pipeline it was judged under
    measured: Any = None                        # real devices: the evaluator that measured (its runtime trains)
    measured_baseline: Verdict | None = None    # real devices: the baseline's measured verdict
    measured_step_s: float | None = None        # real devices: the placement's measured step time


@runtime_checkable
class HardwareAdapter(Protocol):
    """Which workers and devices exist and how fast they are. ``cluster`` is called once per trial,
    before its MLflow run starts; ``Cluster(simulated=True)`` makes every figure of the trial simulated.
    An adapter that starts processes may define ``close()``; the trial calls it when it ends."""

    def cluster(self, context: TrialContext) -> Cluster:
        ...
