"""What a plan simulator returns: the iteration time and where it goes, per stage; peak memory per GPU
type and whether the plan fits; USD per iteration; a timeline of one iteration for the Gantt (the simulators
that return it: ``planning.simulators``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import Plan


@dataclass
class StageFigures:
    """One stage of one pipeline (its slowest replica)."""

    pipeline: int
    stage: int
    gpu: str                         # the slowest replica's GPU type
    micro_batches: int               # micro-batches each replica runs per iteration
    compute_s: float                 # forward + backward of all its micro-batches
    send_s: float                    # point-to-point sends of activations and gradients, all micro-batches
    allreduce_s: float               # the stage's gradient all-reduce over its replicas
    update_s: float                  # the optimizer step
    peak_memory_bytes: float         # its most loaded GPU
    memory_limit_bytes: float


@dataclass
class Event:
    """One box of the Gantt: ``kind`` is fwd, bwd, send, all-reduce or update."""

    pipeline: int
    stage: int
    kind: str
    start_s: float
    end_s: float
    micro_batch: int = -1


@dataclass
class PlanEstimate:
    iteration_s: float
    simulator: str
    stages: list[StageFigures]
    global_batch: int
    usd_per_iteration: float = 0.0
    bubble_fraction: float = 0.0
    pipeline_s: list[float] = field(default_factory=list)      # each pipeline's time before the cross-pipeline sync
    sync_s: float = 0.0                                          # all-reduce and update after the pipelines
    events: list[Event] = field(default_factory=list)

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.iteration_s if self.iteration_s > 0 else 0.0

    @property
    def peak_memory(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.stages:
            out[s.gpu] = max(out.get(s.gpu, 0.0), s.peak_memory_bytes)
        return out

    @property
    def violations(self) -> list[str]:
        """One line per stage whose most loaded GPU exceeds its memory."""
        return [f"pipeline {s.pipeline} stage {s.stage} ({s.gpu}) needs {s.peak_memory_bytes / 2**30:.2f} GiB, "
                f"{(s.peak_memory_bytes - s.memory_limit_bytes) / 2**30:.2f} GiB over its {s.memory_limit_bytes / 2**30:.2f} GiB"
                for s in self.stages if s.peak_memory_bytes > s.memory_limit_bytes]

    @property
    def fits(self) -> bool:
        return not self.violations


def usd_per_iteration(plan: Plan, cluster: GpuCluster, iteration_s: float) -> float:
    """GPU-seconds at each type's price (types without a price count 0)."""
    usd = 0.0
    for (gpu, _), n in plan.gpus_used().items():
        price = cluster.types[gpu].usd_per_gpu_hour if gpu in cluster.types else None
        usd += n * (price or 0.0) * iteration_s / 3600.0
    return usd
