"""The shared judge of placements: every placer's ``placement.step_time_s`` is this verdict on its
final placement, never the placer's own estimate. ``measured`` runs the placed training step on
real TensorFlow devices; ``simulated`` asks the cost-model simulator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.placement import Placement


@dataclass
class Verdict:
    step_time_s: float
    feasible: bool
    kind: str                                   # "simulated" or "measured"
    peak_memory_bytes: dict[str, float] = field(default_factory=dict)
    busy_s: dict[str, float] = field(default_factory=dict)
    oom: list[tuple[str, float]] = field(default_factory=list)


class MeasuredEvaluator:
    """Median wall time of the placed training step on the worker's real devices."""

    kind = "measured"

    def __init__(self, model_spec: Any, worker: Any, dataset: Any, batch_size: int, seed: int = 0,
                 warmup: int = 3, repeats: int = 10):
        missing = [d.name for d in worker.devices if not d.is_real]
        if missing:
            raise ConfigError(f"evaluator=measured needs real devices; {', '.join(missing)} exist only in the simulator")
        self.spec, self.worker, self.seed = model_spec, worker, seed
        self.x, self.y = dataset.x_train[:batch_size], dataset.y_train[:batch_size]
        self.warmup, self.repeats = warmup, repeats
        self.evaluations = 0

    def runtime(self, placement: Placement | None, lr: float = 0.1):
        from orchestrator.execution.runtime import ModelRuntime

        tf_dev = {d.name: d.tf_device for d in self.worker.devices}
        mapping = {node: tf_dev[dev] for node, dev in placement.assignment.items()} if placement else None
        return ModelRuntime(self.spec, seed=self.seed, lr=lr, device_of=mapping,
                            default_device=self.worker.devices[0].tf_device)

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

        rt = ModelRuntime(self.spec, seed=self.seed, default_device=self.worker.device(device).tf_device)
        self.evaluations += 1
        return Verdict(rt.measure_step_time(self.x, self.y, warmup=self.warmup, repeats=self.repeats), True, self.kind)


class SimulatedEvaluator:
    """The cost-model simulator as judge. ``step_time(assign)`` is the fast path placers use for
    many candidates (an int array: device index per node, in ``graph.nodes`` order, devices in
    ``worker.devices`` order); infeasible placements return ``inf``."""

    kind = "simulated"

    def __init__(self, graph: Any, worker: Any):
        from orchestrator.placement.simulator import Simulator

        self.graph, self.worker = graph, worker
        self.simulator = Simulator(graph, worker)
        self.evaluations = 0

    def step_time(self, assign) -> float:
        self.evaluations += 1
        return self.simulator.step_time(assign)

    def assignment(self, placement: Placement):
        return self.simulator.assignment(placement)

    def evaluate(self, placement: Placement | None, *, schedule: bool = False) -> Verdict:
        self.evaluations += 1
        r = self.simulator.evaluate(self.simulator.assignment(placement), schedule=schedule)
        v = Verdict(r.step_time_s, r.feasible, self.kind, dict(r.peak_memory_bytes), dict(r.busy_s), list(r.oom))
        v.result = r  # the full simulation (schedule for the Gantt chart)
        return v

    def lower_bound(self) -> float:
        from orchestrator.placement.simulator import lower_bound

        return lower_bound(self.graph, self.worker)
