"""``+planner=uniform``: the best Megatron-style plan, searched exhaustively: one GPU type, one pipeline of
``pp`` stages with the layers split evenly (DeepSpeed's ``partition_uniform``), ``dp`` replicas of each
stage, TP degree ``tp``, every micro-batch size the profile holds; ``dp = floor(N / (pp * tp))`` for the
type's ``N`` GPUs. Candidates whose profile entries are missing are skipped and counted."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.api import GpuCluster, LayeredProfile, Pipeline, Plan, PlanEvaluator, PlanObjective, Replica, Stage
from orchestrator.config.planning import UniformPlannerConfig
from orchestrator.errors import ConfigError, InfeasiblePlanError


def even_split(layers: int, parts: int) -> list[range]:
    """``layers`` split into ``parts`` contiguous ranges whose sizes differ by at most one (the larger first)."""
    base, rest = divmod(layers, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < rest else 0)
        out.append(range(start, start + n))
        start += n
    return out


class UniformPlanner:
    def __init__(self, cfg: Any):
        self.cfg = UniformPlannerConfig.from_node(cfg, "planner")
        self.considered = 0

    def candidates(self, model: LayeredProfile, cluster: GpuCluster):
        if not cluster.gpus:
            raise ConfigError("planner=uniform needs the GPUs to plan for: hardware.gpus={TYPE: N, ...}")
        for (gpu, zone), n in sorted(cluster.gpus.items()):
            if n <= 0 or gpu not in model.times:
                continue
            per_node = cluster.gpu_type(gpu).gpus_per_node
            for mbs in model.micro_batches(gpu):
                for tp in model.tp_degrees(gpu, mbs):
                    if tp > per_node:
                        continue
                    for pp in range(1, min(self.cfg.max_stages, model.num_layers) + 1):
                        dp = n // (pp * tp)
                        if dp < 1:
                            break
                        stages = tuple(Stage(tuple(r), (Replica(gpu, tp, per_node, zone),) * dp)
                                       for r in even_split(model.num_layers, pp))
                        yield Plan([Pipeline(stages)], mbs)

    def plan(self, model: LayeredProfile, cluster: GpuCluster, objective: PlanObjective,
             evaluator: PlanEvaluator) -> Plan:
        deadline = time.monotonic() + (self.cfg.budget_s or float("inf"))
        best, best_score = None, float("inf")
        for cand in self.candidates(model, cluster):
            if time.monotonic() > deadline:
                break
            self.considered += 1
            est = evaluator.try_evaluate(cand)
            if est is None:
                continue
            score = objective.score(est)
            if score < best_score:
                best, best_score = cand, score
        if best is None:
            raise InfeasiblePlanError(f"planner=uniform: no plan of {self.considered} candidates fits in memory "
                                           f"and meets {objective.describe()} ({evaluator.skipped} skipped "
                                           "for missing profile entries)")
        return best
