"""``placer=random``: the best of ``placer.samples`` random placements (each colocation group a
unit, uniform over the devices it may run on; memory-infeasible draws are redrawn up to
``placer.redraws`` times). A baseline. Seeded by the trial seed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.config.placer import RandomPlacerConfig
from orchestrator.graph import Placement
from orchestrator.placement.solve.problem import PlacementProblem


class RandomPlacer:
    def __init__(self, cfg: Any = None):
        c = RandomPlacerConfig.from_node(cfg)
        self.samples, self.redraws = c.samples, c.redraws

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        rng = np.random.default_rng(getattr(context, "seed", 0))
        best, best_t, feasible = None, math.inf, 0
        for _ in range(self.samples):
            for _ in range(self.redraws + 1):
                a = prob.expand(random_atoms(prob, rng))
                if prob.overflow(a) == 0:
                    break
            t = prob.objective_value(a)
            feasible += math.isfinite(t)
            if best is None or t < best_t:
                best, best_t = a, t
        return prob.placement(best, placer="random", samples=self.samples, feasible_samples=feasible)


def random_atoms(prob: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(prob.allowed.shape) * prob.allowed
    return np.argmax(u, axis=1)
