"""``placer=greedy``: memory-aware list scheduling (HEFT-style). Nodes are taken from a ready list
by priority, each goes to the device with the earliest finish time (device free time, inputs'
arrival over the route, node cost) among the devices whose memory still holds its colocation group;
a group is placed as a unit with its first node. Two priorities: upward rank (HEFT: mean cost plus
mean transfer to the exit) and topological order. Both (and the fastest single device that fits)
are judged by the shared evaluator on the trial's objective; the best wins. For
``placement.objective=pipeline`` a fourth candidate, ``chain``: one topological order cut into
consecutive stages, the best such cut (a DP over the order's prefixes). Deterministic.

A thin adapter: the heuristics are ``orchestrator.placement.solve.greedy``."""

from __future__ import annotations

from typing import Any

from orchestrator.config.placer import GreedyPlacerConfig
from orchestrator.graph import Placement
from orchestrator.placement.solve.greedy import best_greedy
from orchestrator.placement.solve.problem import PlacementProblem


class GreedyPlacer:
    def __init__(self, cfg: Any = None):
        self.cfg = GreedyPlacerConfig.from_node(cfg)
        self.variants = list(self.cfg.variants)
        self.last: dict[str, float] = {}

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        assign, name, times = best_greedy(prob, self.variants)
        self.last = times
        return prob.placement(assign, placer="greedy", variant=name,
                              **{f"step_time_s.{k}": v for k, v in times.items()})
