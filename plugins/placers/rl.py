"""``placer=rl``: REINFORCE over a TensorFlow policy (``orchestrator.placement.policy``) choosing a device
per group (colocation groups merged along topological order into <= ``placer.max_groups``, cut
where the greedy placement changes device). Per update a batch of placements is sampled and scored
by the shared evaluator (its fast path when simulated); reward -sqrt(step / greedy step), an
infeasible sample -(2 + 10 x overflow / capacity); moving-average baseline, batch-normalised
advantages, entropy bonus decaying to 0.

The policy starts biased toward the greedy placement (``placer.init_bias`` on its logits), greedy
is the incumbent, and the best placement seen is kept, so the result is never worse than greedy.
With ``placement.objective=pipeline`` the incumbent is the better of greedy and the exact
contiguous optimum (``placer.seed_contiguous``; the DP of ``placer=optimal``, at most
``placer.contiguous_time_limit_s``), and the search then goes on over any split.
After the policy phase, the rest of the budget (at least ``placer.local_fraction``) goes to an
iterated local search on the best placement: first-improvement moves of each colocation group /
node, then of runs of 2-16 consecutive groups (topological order), to each other device; when no
move helps, a seeded kick (one or two runs moved to a random device) and a new descent.
The budget counts placements scored (``placer.budget_evaluations``), so runs are reproducible.

Ctrl-C during the search ends it: ``place`` returns the best placement so far (meta
``interrupted: true``) and ``placer.best_placement`` holds it at all times during the search.
``placer.checkpoint``: a .npz path; restored when it exists (resume, or reuse the MLP on a graph
with the same device count), saved at the end (also after Ctrl-C).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from orchestrator.placement import Placement
from orchestrator.placement.search import PlacementProblem, cfg_get, group_atoms


class RLPlacer:
    def __init__(self, cfg: Any = None):
        c = lambda k, d: cfg_get(cfg, k, d)
        self.budget = int(c("budget_evaluations", 12000))
        self.batch = int(c("batch", 16))
        self.max_groups = int(c("max_groups", 64))
        self.lr = float(c("lr", 0.05))
        self.entropy = float(c("entropy", 0.01))
        self.init_bias = float(c("init_bias", 3.0))
        self.hidden = int(c("hidden", 64))
        self.local_fraction = float(c("local_fraction", 0.3))
        self.checkpoint = c("checkpoint", None)
        self.seed_contiguous = bool(c("seed_contiguous", True))
        self.contiguous_time_limit_s = float(c("contiguous_time_limit_s", 30.0))
        self.best_placement: Placement | None = None
        self.history: list[tuple[float, float]] = []
        self._prob: PlacementProblem | None = None

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        from orchestrator_plugins.placers.greedy import best_greedy

        prob = self._prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        seed = int(getattr(context, "seed", 0) or 0)
        t0 = time.perf_counter()
        g_assign, g_variant, g_times = best_greedy(prob)
        self.used = len(g_times)
        self.best, self.best_t = g_assign.copy(), g_times[g_variant]
        self.best_placement = prob.placement(self.best, placer="rl", source="greedy")
        self.contiguous_s = None
        if getattr(evaluator, "pipeline", None) is not None and self.seed_contiguous:
            # Pipeline objective: the exact contiguous optimum (placer=optimal's answer) is the
            # incumbent the search starts from, so rl is never worse than it or than greedy.
            from orchestrator.placement.contiguous import best_contiguous

            dp = best_contiguous(prob, evaluator.pipeline, time_limit_s=self.contiguous_time_limit_s)
            if dp.assign is not None:
                t = prob.step_time(dp.assign)
                self.used += 1
                self.contiguous_s = t
                if t < self.best_t:
                    g_assign, g_variant = dp.assign.copy(), "contiguous-dp"
                    self._new_best(prob, dp.assign, t)
        self.interrupted, restored = False, "none"
        policy = None
        try:
            policy, restored = self._search(prob, g_assign, seed, context)
            self._local(prob, context, seed)
        except KeyboardInterrupt:
            self.interrupted = True
        if policy is not None and self.checkpoint:
            policy.save(self.checkpoint)
        return prob.placement(self.best, placer="rl", greedy_step_time_s=min(g_times.values()), start=g_variant,
                              contiguous_s=self.contiguous_s,
                              evaluations=self.used, search_s=time.perf_counter() - t0,
                              updates=len(self.history), interrupted=self.interrupted, restored=restored)

    # -- the policy phase ------------------------------------------------------------------------
    def _search(self, prob: PlacementProblem, g_assign: np.ndarray, seed: int, context: Any):
        from orchestrator.placement.policy import PlacementPolicy, group_features

        rng = np.random.default_rng(seed)
        g_atoms = prob.atoms_of(g_assign)
        group = group_atoms(prob, self.max_groups, hint=g_atoms)
        n_groups = int(group.max()) + 1
        feat, mask = group_features(prob, group)
        policy = PlacementPolicy(feat.shape[1], prob.nd, n_groups, self.hidden, seed, self.lr)
        restored = policy.restore(self.checkpoint) if self.checkpoint and _exists(self.checkpoint) else "none"
        if restored != "all":                                   # bias toward the greedy placement
            prior = np.zeros((n_groups, prob.nd), np.float32)
            for gi in range(n_groups):
                prior[gi, np.bincount(g_atoms[group == gi], minlength=prob.nd).argmax()] = self.init_bias
            policy.table.assign(prior)
        cap = float(prob.pool_cap[np.isfinite(prob.pool_cap)].sum() or 1.0)
        t_ref = self.best_t if math.isfinite(self.best_t) else 1.0
        rl_budget = int(self.budget * (1 - self.local_fraction))
        updates = max(0, (rl_budget - self.used) // self.batch)
        baseline = None
        bar = _bar(context, updates * self.batch, "rl")
        for upd in range(updates):
            probs = policy.probs(feat, mask)
            cum = probs.cumsum(axis=1)
            draws = rng.random((self.batch, n_groups, 1))
            acts = np.minimum((draws > cum[None]).sum(axis=2), prob.nd - 1)
            rewards, times = np.empty(self.batch), np.empty(self.batch)
            for b in range(self.batch):
                a = prob.expand(acts[b][group])
                over = prob.overflow(a)
                t = math.inf if over else prob.step_time(a)
                self.used += 1
                times[b] = t
                rewards[b] = -math.sqrt(t / t_ref) if math.isfinite(t) else -(2.0 + 10.0 * over / cap)
                if t < self.best_t:
                    self._new_best(prob, a, t)
            mean_r = rewards.mean()
            baseline = mean_r if baseline is None else 0.9 * baseline + 0.1 * mean_r
            adv = (rewards - baseline) / (rewards.std() + 1e-8)
            policy.update(feat, mask, acts, adv, self.entropy * (1 - upd / max(1, updates)))
            fin = times[np.isfinite(times)]
            mean_t = float(fin.mean()) if len(fin) else math.inf
            self.history.append((self.best_t, mean_t))
            if context is not None and getattr(context, "sink", None) is not None:
                context.sink.log_metrics({"rl.best_step_time_s": self.best_t, "rl.mean_step_time_s": mean_t}, step=upd)
            if bar is not None:
                bar.update(self.batch)
                bar.set_postfix(best=f"{self.best_t:.4g}s", current=f"{mean_t:.4g}s")
        if bar is not None:
            bar.close()
        return policy, restored

    # -- local improvement of the best ----------------------------------------------------------
    def _local(self, prob: PlacementProblem, context: Any, seed: int = 0) -> None:
        """Iterated local search on the best placement until the budget is spent. Descent: first
        improvement over moves of single atoms (costliest first), then of contiguous runs of 2, 4,
        8 and 16 atoms in topological order (a stage of layers moved together, so its inner
        transfers do not count against the move), each to every device the run may use; repeated
        until no move helps. Then, while budget remains, a seeded kick (a random run moved to a
        random device, or two runs swapped) and a descent from there; the best is kept."""
        rng = np.random.default_rng(seed + 1)
        cost = np.where(np.isfinite(prob.atom_cost), prob.atom_cost, 0)
        single = [np.array([a]) for a in np.argsort(-cost.max(axis=1), kind="stable")]
        topo = np.argsort(prob.atom_pos, kind="stable")
        runs = [topo[i:i + L] for L in (2, 4, 8, 16) if L < len(topo) for i in range(0, len(topo) - L + 1, L // 2)]
        moves = single + runs
        cur, cur_t = self.best.copy(), self.best_t
        while self.used < self.budget:
            cur, cur_t = self._descent(prob, moves, cur, cur_t)
            if self.used >= self.budget or not runs:
                return
            cur = self.best.copy()                      # kick from the best
            for _ in range(1 + int(rng.integers(0, 2))):
                r = runs[int(rng.integers(len(runs)))]
                ok = np.flatnonzero(prob.allowed[r].all(axis=0))
                if len(ok):
                    cur[np.concatenate([prob.members[a] for a in r])] = ok[int(rng.integers(len(ok)))]
            self.used += 1
            cur_t = math.inf if prob.overflow(cur) > 0 else prob.step_time(cur)
            if cur_t < self.best_t * (1 - 1e-9):
                self._new_best(prob, cur, cur_t)

    def _descent(self, prob: PlacementProblem, moves: list, cur: np.ndarray, cur_t: float):
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
                    t = prob.step_time(cand)
                    if t < cur_t * (1 - 1e-9):
                        cur, cur_t, improved = cand, t, True
                        if t < self.best_t * (1 - 1e-9):
                            self._new_best(prob, cand, t)
        return cur, cur_t

    def _new_best(self, prob: PlacementProblem, assign: np.ndarray, t: float) -> None:
        self.best, self.best_t = assign.copy(), t
        self.best_placement = prob.placement(assign, placer="rl", step_time_s=t)


def _exists(path: Any) -> bool:
    from pathlib import Path

    return Path(str(path)).exists()


def _bar(context: Any, total: int, desc: str):
    if not getattr(context, "show_progress", False):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="eval", leave=False)
