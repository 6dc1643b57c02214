"""The shared judge of placements: every placer's ``placement.step_time_s`` is this verdict on its
final placement, never the placer's own estimate. ``measured`` runs the placed training step on
real TensorFlow devices; ``simulated`` asks the cost-model simulator. The evaluators of the
measured and mixed search rewards (``placer.reward``) are in ``orchestrator.placement.evaluate.measured``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import IntArray
from orchestrator.graph.opgraph import OpGraph
from orchestrator.graph.placement import Placement
from orchestrator.hardware.cluster import Worker
from orchestrator.placement.simulate.inflight import MicrobatchSpec
from orchestrator.placement.simulate.load import LoadModel
from orchestrator.placement.simulate.simulator import SimResult, Simulator, lower_bound
from orchestrator.placement.solve.bounds import load_lower_bound

if TYPE_CHECKING:
    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.models import ModelSpec


@dataclass
class Verdict:
    step_time_s: float
    feasible: bool
    kind: str                                   # "simulated" or "measured"
    peak_memory_bytes: dict[str, float] = field(default_factory=dict)
    busy_s: dict[str, float] = field(default_factory=dict)
    oom: list[tuple[str, float]] = field(default_factory=list)
    time_per_sample_s: float | None = None      # the pipeline objective (``placement.objective=pipeline``)
    loads_s: dict[str, float] = field(default_factory=dict)   # pipeline load per device
    # the full simulation (schedule for the Gantt chart); simulated verdicts only, out of repr and ==
    result: SimResult | None = field(default=None, repr=False, compare=False)

    @property
    def value(self) -> float:
        """The trial's objective: time per sample for ``pipeline``, else the one-step latency."""
        return self.step_time_s if self.time_per_sample_s is None else self.time_per_sample_s


def placed_runtime(spec: ModelSpec, worker: Worker, placement: Placement | None, *, seed: int = 0,
                   lr: float = 0.1) -> ModelRuntime:
    """The model built with each layer on its placed device of ``worker`` (None: all on the first device)."""
    from orchestrator.execution.runtime import ModelRuntime

    # real devices only (MeasuredEvaluator checks ``is_real``), so every ``tf_device`` is a string
    tf_dev = {d.name: cast(str, d.tf_device) for d in worker.devices}
    mapping = {node: tf_dev[dev] for node, dev in placement.assignment.items()} if placement else None
    return ModelRuntime(spec, seed=seed, lr=lr, device_of=mapping,
                        default_device=cast(str, worker.devices[0].tf_device))


class MeasuredEvaluator:
    """Median wall time of the placed training step on the worker's real devices."""

    kind = "measured"

    def __init__(self, model_spec: ModelSpec, worker: Worker, x: Any, y: Any, seed: int = 0,
                 warmup: int = 3, repeats: int = 10) -> None:
        missing = [d.name for d in worker.devices if not d.is_real]
        if missing:
            raise ConfigError(f"placer.reward=measured needs real devices; {', '.join(missing)} exist only in the simulator")
        self.spec, self.worker, self.seed = model_spec, worker, seed
        self.x, self.y = x, y            # one batch (``PlacementPhase.batch``)
        self.warmup, self.repeats = warmup, repeats
        self.evaluations = 0

    def runtime(self, placement: Placement | None, lr: float = 0.1) -> ModelRuntime:
        return placed_runtime(self.spec, self.worker, placement, seed=self.seed, lr=lr)

    def evaluate(self, placement: Placement | None) -> Verdict:
        self.evaluations += 1
        rt = self.runtime(placement)
        t = rt.measure_step_time(self.x, self.y, warmup=self.warmup, repeats=self.repeats)
        return Verdict(t, True, self.kind)

    def single_device_baseline(self) -> tuple[str, Verdict]:
        """The fastest single device of the worker for the whole model, and its verdict."""
        verdicts = {d.name: self._on(d.name) for d in self.worker.devices}
        best = min(verdicts, key=lambda name: verdicts[name].step_time_s)
        return best, verdicts[best]

    def _on(self, device: str) -> Verdict:
        from orchestrator.execution.runtime import ModelRuntime

        rt = ModelRuntime(self.spec, seed=self.seed, default_device=cast(str, self.worker.device(device).tf_device))
        self.evaluations += 1
        return Verdict(rt.measure_step_time(self.x, self.y, warmup=self.warmup, repeats=self.repeats), True, self.kind)


OBJECTIVES = ("step", "pipeline")


class SimulatedEvaluator:
    """The cost-model simulator as judge. ``objective_value(assign)`` is the fast path placers use for
    many candidates (an int array: device index per node, in ``graph.nodes`` order, devices in
    ``worker.devices`` order): the value of the trial's ``objective`` (``step``: one step's latency;
    ``pipeline``: time per sample, ``orchestrator.placement.simulate.load``); infeasible placements
    return ``inf``. ``memory_headroom`` is the share of memory search placers keep free."""

    kind = "simulated"

    def __init__(self, graph: OpGraph, worker: Worker, objective: str = "step", memory_headroom: float = 0.0,
                 microbatch: MicrobatchSpec | None = None) -> None:
        if objective not in OBJECTIVES:
            raise ConfigError(f"placement.objective={objective!r} (accepted: auto, {', '.join(OBJECTIVES)})")
        if not 0.0 <= float(memory_headroom) < 1.0:
            raise ConfigError(f"placement.memory_headroom={memory_headroom!r} must be a fraction in [0, 1)")
        self.graph, self.worker = graph, worker
        self.objective, self.memory_headroom = objective, float(memory_headroom)
        self.microbatch = microbatch              # a micro-batched pipeline's schedule (memory in flight)
        self.simulator = Simulator(graph, worker, microbatch)
        self.load_model: LoadModel | None = None
        if objective == "pipeline":
            self.load_model = LoadModel(graph, worker, self.simulator)
        self.evaluations = 0
        self._bound: tuple[float, dict[str, float]] | None = None

    def objective_value(self, assign: npt.ArrayLike) -> float:
        """The objective's value of an assignment: one step's latency (``step``) or the time per
        sample (``pipeline``, the load model); the fast path placers use."""
        self.evaluations += 1
        if self.load_model is not None:
            return self.load_model.time_per_sample(assign)
        return self.simulator.step_time(assign)

    def assignment(self, placement: Placement) -> IntArray:
        return self.simulator.assignment(placement)

    def evaluate(self, placement: Placement | None, *, schedule: bool = False) -> Verdict:
        self.evaluations += 1
        if placement is None:  # ``Evaluator.evaluate(None)``: the whole model on the worker's first device
            first = self.worker.devices[0].name
            placement = Placement([d.name for d in self.worker.devices], {n.name: first for n in self.graph.nodes})
        a = self.simulator.assignment(placement)
        r = self.simulator.evaluate(a, schedule=schedule)
        v = Verdict(r.step_time_s, r.feasible, self.kind, dict(r.peak_memory_bytes), dict(r.busy_s), list(r.oom))
        if self.load_model is not None:
            v.time_per_sample_s = self.load_model.time_per_sample(a)
            v.loads_s = self.load_model.device_loads(a)
        v.result = r
        return v

    def lower_bound(self) -> float:
        """A certified lower bound on the objective over every placement that fits."""
        return self.bound_parts()[0]

    def bound_parts(self) -> tuple[float, dict[str, float]]:
        if self._bound is None:
            if self.load_model is not None:
                self._bound = load_lower_bound(self.graph, self.worker, self.simulator)
            else:
                lb = lower_bound(self.graph, self.worker, self.simulator)
                self._bound = lb, {"simulator": lb}
        return self._bound
