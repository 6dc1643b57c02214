"""``+planner=file planner.path=FILE``: a plan read from a file, ``plan.json`` (this project's format) or
Sailor's ``plan_config`` (told apart by their keys)."""

from __future__ import annotations

from typing import Any

from orchestrator.api import GpuCluster, LayeredProfile, Plan, PlanEvaluator, PlanObjective
from orchestrator.config.planning import FilePlannerConfig
from orchestrator.errors import ConfigError


class FilePlanner:
    def __init__(self, cfg: Any):
        self.cfg = FilePlannerConfig.from_node(cfg, "planner")
        if not self.cfg.path:
            raise ConfigError("planner=file needs planner.path=FILE (a plan.json or Sailor's plan_config_*.json)")
        self._plan: Plan | None = None

    def read(self) -> Plan:
        if self._plan is None:
            self._plan = Plan.read(str(self.cfg.path))
        return self._plan

    def global_batch(self) -> int | None:
        """The batch the file was written for (its ``gbs`` / ``global_batch``), if it says."""
        return self.read().global_batch

    def plan(self, model: LayeredProfile, cluster: GpuCluster, objective: PlanObjective,  # noqa: ARG002
             evaluator: PlanEvaluator) -> Plan:
        plan = self.read()
        evaluator.check(plan)
        return plan
