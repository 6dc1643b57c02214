"""The plan simulator protocol and its registry (``planner.simulator=NAME``).

A plan simulator judges a whole plan (``estimate``) and states, as its own rules, what the joint planner's
dynamic program (``planning.costs``) and the certified bounds (``planning.bound`` and the bounds on Sailor's
metric) need to stay exact and sound for it: the sends a stage pays per micro-batch, one transfer across a
boundary, the gradient's layer, a stage's memory and gradient all-reduce, which plans its figure charges in
full, and a lower bound on its figure. Every method is abstract: a simulator states each rule itself.

Simulators are plugins: ``orchestrator_simulators() -> {name: "module:Class"}`` (``orchestrator.hookspecs``);
the built-ins, ``project`` and ``sailor``, are registered that way too (``orchestrator_plugins.planners``).
A name is resolved once, where planning starts (``simulator(name)``), and the object is passed down."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from orchestrator.errors import ConfigError, PluginError, UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Plan, Replica
from orchestrator.planning.estimate import PlanEstimate

SendFactors = tuple[tuple[float, float], tuple[float, float]]
MemoryRule = tuple[Callable[[Any, Any], Any], float]         # (need(params floats, activation floats), limit bytes)
AllreduceRule = Callable[[Any, Any], Any]                   # f(params floats at TP 1, at the replica's TP) -> s


class PlanSimulator(ABC):
    """Judges plans on a cluster; ``name`` is the one it is registered under (``PlanEstimate.simulator``)."""

    name: str = ""
    bound_time_limit_s: float | None = None   # ``lower_bound`` may stop refining after this long (None: no limit)
    bound_cut: bool = False                   # set by ``lower_bound`` when it stopped there: certified, and looser

    @abstractmethod
    def estimate(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                 timeline: bool = False) -> PlanEstimate:
        """The plan's iteration (and, with ``timeline``, the Gantt's events)."""

    @abstractmethod
    def send_factors(self, stages: int, stage: int) -> SendFactors:
        """Per micro-batch, the (activation, gradient) transfers stage ``stage`` of ``stages`` pays at its input
        boundary and at its output boundary."""

    @abstractmethod
    def gradient_layer(self, first: int) -> int:
        """The layer whose output size is charged for the gradient a stage starting at layer ``first`` sends back."""

    @abstractmethod
    def boundary_time(self, a: Replica, b: Replica, nbytes: Any, cluster: GpuCluster) -> Any:
        """Seconds of one activation of ``nbytes`` (a number or an array) from a replica of ``a`` to one of ``b``."""

    @abstractmethod
    def stage_allreduce(self, profile: LayeredProfile, replica: Replica, dp: int, cluster: GpuCluster) -> AllreduceRule:
        """f(params floats at TP 1, at the replica's TP) -> a stage's gradient all-reduce over ``dp`` replicas."""

    @abstractmethod
    def stage_memory(self, profile: LayeredProfile, tp: int, gpu: str, mbs: int, stages: int, stage: int,
                     micro_batches: int, cluster: GpuCluster) -> MemoryRule:
        """(need(params floats, activation floats per sample), limit) of one stage's GPU."""

    @abstractmethod
    def scores_honestly(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster) -> bool:
        """Whether ``estimate`` charges ``plan`` all the work it does (a search keeps only such plans)."""

    @abstractmethod
    def lower_bound(self, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                    plan: Plan | None = None) -> float:
        """A certified lower bound on this simulator's figure of every plan (or of those like ``plan``: the
        plans its formula scores as honestly as that one)."""


def simulator_names() -> list[str]:
    from orchestrator import plugins

    return plugins.names("simulator")


def simulator(name: str) -> PlanSimulator:
    """The simulator registered as ``name``, built; an unknown name is one line listing the registered ones."""
    from orchestrator import plugins

    try:
        cls = plugins.load("simulator", name)
    except PluginError as exc:
        if name in simulator_names():
            raise
        raise ConfigError(f"planner.simulator={name!r} (registered: {', '.join(simulator_names())})") from exc
    if isinstance(cls, type) and issubclass(cls, PlanSimulator) and cls.__abstractmethods__:
        raise ConfigError(f"planner.simulator={name!r}: {cls.__name__} does not implement "
                          f"{', '.join(sorted(cls.__abstractmethods__))} (orchestrator.api.PlanSimulator)")
    sim = cls()
    if not isinstance(sim, PlanSimulator):
        raise ConfigError(f"planner.simulator={name!r}: {type(sim).__name__} does not subclass "
                          "orchestrator.api.PlanSimulator")
    return sim


def simulators() -> list[PlanSimulator]:
    """One of every usable registered simulator, by name (the bounds hold for each of them). One that cannot be
    built (a plugin's, half written) is left out with a note, once: it is an error only where it is chosen."""
    import sys

    out = []
    for name in simulator_names():
        try:
            out.append(simulator(name))
        except UserError as exc:
            if name not in _LEFT_OUT:
                _LEFT_OUT.add(name)
                print(f"note: the bounds leave out simulator {name!r}: {exc}", file=sys.stderr, flush=True)
    return out


_LEFT_OUT: set[str] = set()
