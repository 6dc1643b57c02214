"""``+planner=joint``: this project's planner (docs/plans.md, "The joint planner"): pipeline templates with a
GPU type and TP degree per stage, the exact contiguous layer split of each by dynamic programming, the best
judged by the trial's simulator and refined by local search; with a certified lower bound."""

from __future__ import annotations

from typing import Any

from orchestrator.api import GpuCluster, LayeredProfile, Plan, PlanEvaluator, PlanObjective
from orchestrator.config.planning import JointPlannerConfig


class JointPlanner:
    def __init__(self, cfg: Any):
        self.cfg = JointPlannerConfig.from_node(cfg, "planner")
        self.stats: dict[str, float] = {}

    def plan(self, model: LayeredProfile, cluster: GpuCluster, objective: PlanObjective,
             evaluator: PlanEvaluator) -> Plan:
        from orchestrator.planning.search import search

        if not cluster.gpus:
            from orchestrator.errors import ConfigError

            raise ConfigError("planner=joint needs the GPUs to plan for: hardware.gpus={TYPE: N, ...}")
        plan, _, self.stats = search(model, cluster, objective, evaluator, budget_s=self.cfg.budget_s or 30.0,
                                     max_stages=self.cfg.max_stages, judged=self.cfg.judged,
                                     work_limit=self.cfg.work_limit)
        return plan
