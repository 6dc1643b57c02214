"""Iterated local search on a ``PlacementProblem``, counted in evaluations so that runs repeat.

Descent: first improvement over moves of single atoms (costliest first), then of contiguous runs of
2, 4, 8 and 16 atoms in topological order (a stage of layers moved together, so its inner transfers
do not count against the move), each to every device the run may use; repeated until no move helps.
Then, while budget remains, a seeded kick (a random run moved to a random device, or two runs) and a
descent from there; the best is kept. ``placer=rl`` refines its best placement with it
(``placer.refine=local``) and pre-training makes its imitation targets with it."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from orchestrator.graph.arrays import IntArray
from orchestrator.placement.solve.problem import PlacementProblem


class LocalSearch:
    """The search state: ``best`` / ``best_t`` (the incumbent) and ``used`` (evaluations spent of
    ``budget``). ``on_best(assign, value)`` is called at each new best, so a caller interrupted
    (Ctrl-C) still holds the best placement found so far."""

    def __init__(self, prob: PlacementProblem, budget: int, best: npt.ArrayLike, best_t: float, used: int = 0,
                 on_best: Callable[[IntArray, float], None] | None = None):
        self.prob, self.budget, self.used, self.on_best = prob, int(budget), int(used), on_best
        self.best, self.best_t = np.asarray(best, np.int64).copy(), best_t

    def _new_best(self, assign: IntArray, t: float) -> None:
        self.best, self.best_t = assign.copy(), t
        if self.on_best is not None:
            self.on_best(self.best, t)

    def run(self, seed: int = 0) -> tuple[IntArray, float]:
        """Search until the budget is spent; returns (best assignment, its value)."""
        prob = self.prob
        rng = np.random.default_rng(seed + 1)
        cost = np.where(np.isfinite(prob.atom_cost), prob.atom_cost, 0)
        single = [np.array([a]) for a in np.argsort(-cost.max(axis=1), kind="stable")]
        topo = np.argsort(prob.atom_pos, kind="stable")
        runs = [topo[i:i + L] for L in (2, 4, 8, 16) if L < len(topo) for i in range(0, len(topo) - L + 1, L // 2)]
        moves = single + runs
        cur, cur_t = self.best.copy(), self.best_t
        while self.used < self.budget:
            cur, cur_t = self._descent(moves, cur, cur_t)
            if self.used >= self.budget or not runs:
                break
            cur = self.best.copy()                      # kick from the best
            for _ in range(1 + int(rng.integers(0, 2))):
                r = runs[int(rng.integers(len(runs)))]
                ok = np.flatnonzero(prob.allowed[r].all(axis=0))
                if len(ok):
                    cur[np.concatenate([prob.members[a] for a in r])] = ok[int(rng.integers(len(ok)))]
            self.used += 1
            cur_t = math.inf if prob.overflow(cur) > 0 else prob.objective_value(cur)
            if cur_t < self.best_t * (1 - 1e-9):
                self._new_best(cur, cur_t)
        return self.best, self.best_t

    def _descent(self, moves: list[IntArray], cur: IntArray, cur_t: float) -> tuple[IntArray, float]:
        prob = self.prob
        improved = True
        while improved and self.used < self.budget:
            improved = False
            for r in moves:
                nodes = prob.members[r[0]] if len(r) == 1 else np.concatenate([prob.members[a] for a in r])
                for d in np.flatnonzero(prob.allowed[r].all(axis=0)):
                    if self.used >= self.budget:
                        return cur, cur_t
                    if (cur[nodes] == d).all():
                        continue
                    cand = cur.copy()
                    cand[nodes] = d
                    self.used += 1
                    if prob.overflow(cand) > 0:
                        continue
                    t = prob.objective_value(cand)
                    if t < cur_t * (1 - 1e-9):
                        cur, cur_t, improved = cand, t, True
                        if t < self.best_t * (1 - 1e-9):
                            self._new_best(cand, t)
        return cur, cur_t


def local_search(prob: PlacementProblem, assign: npt.ArrayLike, budget: int, seed: int = 0) -> tuple[IntArray, float]:
    """The local search from ``assign`` for ``budget`` evaluations (the start's own value is not
    counted). Returns (assignment, value)."""
    start = np.asarray(assign, np.int64)
    start_t = math.inf if prob.overflow(start) > 0 else prob.objective_value(start)
    return LocalSearch(prob, budget, start, start_t).run(seed)
