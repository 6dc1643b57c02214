"""The judge a planner asks: a plan simulator (``planning.simulators``) bound to one model, cluster and
global batch, counting what it judged and what it had to skip; and the objective a planner optimises."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.errors import ConfigError, PluginError, UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Plan
from orchestrator.plan.profile import ProfileMissing
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.simulators import PlanSimulator, simulator

__all__ = ["OBJECTIVES", "PlanEvaluator", "PlanObjective", "simulator"]

OBJECTIVES = ("throughput", "cost", "budget")


@dataclass(frozen=True)
class PlanObjective:
    """``throughput``: least seconds per iteration; ``cost``: least USD per iteration with at least
    ``min_samples_per_s``; ``budget``: most samples/s with USD per hour at most ``max_usd_per_hour``.
    Plans that do not fit in memory never win."""

    kind: str = "throughput"
    min_samples_per_s: float | None = None
    max_usd_per_hour: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise ConfigError(f"planner.objective={self.kind!r} (accepted: {', '.join(OBJECTIVES)})")

    def ignored(self) -> list[str]:
        """The constraints given that this objective does not read (a sweep over objectives may set both: a note,
        not an error)."""
        return [f"planner.{key}={value:g} is read by planner.objective={kind} only; planner.objective={self.kind} "
                "ignores it" for key, value, kind in (("min_samples_per_s", self.min_samples_per_s, "cost"),
                                                     ("max_usd_per_hour", self.max_usd_per_hour, "budget"))
                if value is not None and self.kind != kind]

    def unpriced(self, cluster: GpuCluster) -> str:
        """The cluster's GPU types without a price per hour ('' when every one has one): a throughput plan's USD
        leave them out (the summary says so); a cost or budget objective cannot rank plans without them (one line)."""
        names = sorted({t for (t, _), n in cluster.gpus.items() if n > 0 and cluster.gpu_type(t).usd_per_gpu_hour is None})
        if names and self.kind in ("cost", "budget"):
            raise ConfigError(f"{self.describe()} needs a price per GPU hour for every GPU type; {', '.join(names)} "
                              "has none (neither the cluster nor the GPU catalog prices it): give node_types.TYPE.usd_per_gpu_hour in "
                              "a hardware.file cluster, or leave it out of hardware.gpus")
        return ", ".join(names)

    def describe(self) -> str:
        """The objective with its constraint, as the user wrote them."""
        if self.kind == "cost" and self.min_samples_per_s is not None:
            return f"planner.objective=cost with planner.min_samples_per_s={self.min_samples_per_s:g}"
        if self.kind == "budget" and self.max_usd_per_hour is not None:
            return f"planner.objective=budget with planner.max_usd_per_hour={self.max_usd_per_hour:g}"
        return f"planner.objective={self.kind}"

    def admissible(self, e: PlanEstimate) -> bool:
        if not e.fits:
            return False
        if self.kind == "cost" and self.min_samples_per_s is not None and e.samples_per_s < self.min_samples_per_s:
            return False
        if self.kind == "budget" and self.max_usd_per_hour is not None:
            return e.usd_per_iteration * 3600.0 / e.iteration_s <= self.max_usd_per_hour
        return True

    def score(self, e: PlanEstimate) -> float:
        """Lower is better; inadmissible plans score +inf."""
        if not self.admissible(e):
            return math.inf
        if self.kind == "cost":
            return e.usd_per_iteration
        return e.iteration_s


class PlanEvaluator:
    """Judges plans of one (model, cluster, global batch) with one simulator."""

    def __init__(self, sim: PlanSimulator, profile: LayeredProfile, cluster: GpuCluster, global_batch: int):
        self.sim, self.profile, self.cluster, self.global_batch = sim, profile, cluster, global_batch
        self.kind = "simulated"
        self.evaluations = 0
        self.skipped = 0                       # candidates whose profile entries or links are missing
        self.skipped_reasons: dict[str, int] = {}

    def check(self, plan: Plan) -> None:
        """The plan is well formed for this model and within this cluster's GPUs (one-line errors)."""
        plan.check(self.profile.num_layers)
        shares = [p.batch for p in plan.pipelines if p.batch is not None]
        if len(shares) == len(plan.pipelines) and sum(shares) != self.global_batch:    # every share given
            raise ConfigError(f"plan: the pipelines' batches {shares} sum to {sum(shares)} samples "
                              f"(the global batch is {self.global_batch})")
        for i, (p, batch) in enumerate(zip(plan.pipelines, plan.batches(self.global_batch))):
            for j, s in enumerate(p.stages):
                if batch < s.dp * plan.mbs:
                    raise ConfigError(f"plan: pipeline {i} gets {batch} samples per iteration, less than a micro-batch of "
                                      f"{plan.mbs} for each of stage {j}'s {s.dp} replicas ({s.dp * plan.mbs}): lower mbs "
                                      "or the replicas, or raise the batch")
                for r in s.replicas:
                    if r.node_gpus != (per := self.cluster.gpu_type(r.gpu).gpus_per_node):
                        raise ConfigError(f"plan: pipeline {i} stage {j} puts {r.gpu} on machines of {r.node_gpus} GPUs; "
                                          f"the cluster's {r.gpu} machines have {per}")
        have = self.cluster.gpus
        if have:
            for (gpu, zone), n in sorted(plan.gpus_used().items()):
                if n > have.get((gpu, zone), 0):
                    raise ConfigError(f"the plan uses {n} {gpu} GPUs in {zone}, the cluster has {have.get((gpu, zone), 0)} "
                                      "(hardware.gpus)")

    def evaluate(self, plan: Plan, timeline: bool = False) -> PlanEstimate:
        self.evaluations += 1
        est = self.sim.estimate(plan, self.profile, self.cluster, self.global_batch, timeline=timeline)
        if not (isinstance(est.iteration_s, (int, float)) and 0 < est.iteration_s < math.inf):   # a plugin's figure
            raise PluginError(f"planner.simulator={getattr(self.sim, 'name', '?')!r} ({type(self.sim).__name__}) gave "
                              f"{est.iteration_s!r} s per iteration for {plan.describe()[:100]}: a time is a number > 0")
        return est

    def try_evaluate(self, plan: Plan) -> PlanEstimate | None:
        """``evaluate``, or None (counted in ``skipped``) when the plan needs a profile entry or link
        fit the data lacks: a search skips such a candidate instead of reading it as 0 s."""
        try:
            return self.evaluate(plan)
        except PluginError:                   # a simulator's bug, not a gap in the data: the trial stops
            raise
        except (ProfileMissing, UserError) as exc:
            self.skipped += 1
            key = str(exc).split(":")[0][:80]
            self.skipped_reasons[key] = self.skipped_reasons.get(key, 0) + 1
            return None
