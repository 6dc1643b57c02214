"""A third-party hardware adapter and placer written only against ``orchestrator.api`` (used by
tests/test_api_plugins.py, which registers this module as a plugin)."""

from __future__ import annotations

from orchestrator.api import (
    Cluster,
    ConstantLink,
    Device,
    Evaluator,
    InfeasiblePlacementError,
    OpGraph,
    Placement,
    PlacementContext,
    Topology,
    TrialContext,
    Worker,
    hookimpl,
)

ORCHESTRATOR_HOOKSPEC = "1"


class TwoDevices:
    """Simulated workers of two devices: a slow CPU and a fast accelerator joined by one link each way."""

    last_context: TrialContext | None = None

    def __init__(self, cfg):
        self.cfg = cfg

    def cluster(self, context: TrialContext) -> Cluster:
        TwoDevices.last_context = context
        devices = [Device("slow", "cpu", peak_flops=2e11, mem_bandwidth=5e10),
                   Device("fast", "gpu", peak_flops=1e13, mem_bandwidth=9e11, memory_bytes=16e9)]
        links = Topology({("slow", "fast"): ConstantLink(1.6e10, 1e-5), ("fast", "slow"): ConstantLink(1.6e10, 1e-5)})
        count = int(self.cfg.get("workers", 2)) if context.has_sync else 1
        return Cluster("two_devices", [Worker(f"worker{i}", devices, links) for i in range(count)], simulated=True,
                       description="a slow CPU and a fast accelerator per worker")


class FastestDevice:
    """The whole graph on the single device the evaluator finds fastest."""

    def __init__(self, cfg):
        self.cfg = cfg

    def place(self, graph: OpGraph, worker: Worker, evaluator: Evaluator | None = None,
              context: PlacementContext | None = None) -> Placement:
        assert evaluator is not None
        names = [d.name for d in worker.devices]
        best: tuple[float, Placement] | None = None
        for d in names:
            candidate = Placement(names, {n.name: d for n in graph.nodes})
            verdict = evaluator.evaluate(candidate)
            if verdict.feasible and (best is None or verdict.value < best[0]):
                best = (verdict.value, candidate)
        if best is None:
            raise InfeasiblePlacementError(f"no single device of {worker.name} holds the model")
        return best[1]


class Raising:
    """A placer with a bug: what a user sees when a plugin's own code raises."""

    def __init__(self, cfg):
        self.cfg = cfg

    def place(self, graph: OpGraph, worker: Worker, evaluator: Evaluator | None = None,
              context: PlacementContext | None = None) -> Placement:
        return {}["no such device"]


@hookimpl
def orchestrator_hardware_adapters():
    return {"two_devices": "tests.api_plugin:TwoDevices"}


@hookimpl
def orchestrator_placers():
    return {"fastest_device_api": "tests.api_plugin:FastestDevice", "raising_api": "tests.api_plugin:Raising"}
