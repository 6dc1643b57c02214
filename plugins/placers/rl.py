"""``placer=rl``: a graph policy (``orchestrator.placement.learn.graph_policy``: message passing over the
graph's edges, a device head conditioned on the worker's devices) proposes a device per atom
(colocation group or lone node); what it does depends on ``placer.mode``:

- ``zero_shot``: the pre-trained policy (``placer.policy``, default the checkpoint shipped in the
  package) decodes one placement (atom by atom, the most likely device given the atoms placed so
  far) and draws ``placer.zero_shot_samples`` more; the best is kept. No updates, a few evaluations.
- ``finetune`` (default): the zero-shot step, then REINFORCE on this graph starting from the
  pre-trained weights; a per-atom logit table (0 at the start unless ``placer.init_bias`` is a
  number, then biased toward the incumbent: the better of greedy and the zero-shot placements) is
  trained with it (``placer.lr``; the network at ``placer.policy_lr``).
- ``scratch``: the same from untrained weights (the sequential head's list-scheduling prior), with
  the table biased toward the greedy placement (``placer.init_bias``).

``placer.init_bias: auto`` sets the table's starting bonus b: 0 for ``finetune`` (the pre-trained
policy is the prior, as GDP fine-tunes; biasing toward the incumbent did worse, docs/placer_policy.md),
and for ``scratch`` the b for which a sample moves ``placer.flips`` atoms off the start in
expectation: p = min(flips / atoms, 0.5), b = log((1 - p) / p x (D - 1)).

Per update a batch of placements is sampled and scored by the shared evaluator (its fast path when
simulated); reward -sqrt(step / greedy step), an infeasible sample -(2 + 10 x overflow / capacity);
moving-average baseline, batch-normalised advantages, entropy bonus decaying to 0. Greedy is the
incumbent and the best placement seen is kept, so the result is never worse than greedy. With
``placement.objective=pipeline`` the incumbent is the better of greedy and the exact contiguous
optimum (``placer.seed_contiguous``; the DP of ``placer=optimal``, at most
``placer.contiguous_time_limit_s``).

The search stops as soon as the best placement reaches the evaluator's certified lower bound (it is
optimal; meta ``stopped_at_bound``).

``placer.refine``: ``local`` (the default, ``auto``, except for ``zero_shot``, which is no search) gives the rest of the budget (at least
``placer.local_fraction``) to an iterated local search on the best placement: first-improvement
moves of each atom, then of runs of 2-16 consecutive atoms (topological order), to each other
device; when no move helps, a seeded kick and a new descent. ``none``: the policy alone (the
whole budget). The budget counts placements scored (``placer.budget_evaluations``), so runs are
reproducible. Tags ``placer.mode``, ``placer.refine``, ``placer.policy`` say what produced a result.

Ctrl-C during the search ends it: ``place`` returns the best placement so far (meta
``interrupted: true``) and ``placer.best_placement`` holds it at all times during the search.
``placer.checkpoint``: a .npz path; the trial's policy (weights + table) is restored from it when it
exists (resume) and saved there at the end (also after Ctrl-C).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.config.placer import RLPlacerConfig
from orchestrator.graph import Placement
from orchestrator.placement.solve.greedy import best_greedy
from orchestrator.placement.solve.local_search import LocalSearch
from orchestrator.placement.solve.problem import PlacementProblem


class RLPlacer:
    def __init__(self, cfg: Any = None):
        c = self.cfg = RLPlacerConfig.from_node(cfg)   # defaults, ranges and choices: the schema
        self.mode = c.mode
        self.refine = c.refine if c.refine != "auto" else ("none" if c.mode == "zero_shot" else "local")
        self.policy_path = c.policy
        self.budget, self.batch = c.budget_evaluations, c.batch
        self.lr, self.policy_lr, self.entropy = float(c.lr), float(c.policy_lr), float(c.entropy)
        self.init_bias = None if str(c.init_bias) == "auto" else float(c.init_bias)
        self.flips, self.hidden = float(c.flips), c.hidden
        self.samples = c.zero_shot_samples
        self.local_fraction = float(c.local_fraction)
        self.checkpoint = c.checkpoint
        self.seed_contiguous = c.seed_contiguous
        self.contiguous_time_limit_s = float(c.contiguous_time_limit_s)
        self.best_placement: Placement | None = None
        self.history: list[tuple[float, float]] = []
        self.curve: list[tuple[int, float]] = []          # (evaluations used, best so far) after each update
        self._prob: PlacementProblem | None = None

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        prob = self._prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        seed = int(getattr(context, "seed", 0) or 0)
        t0 = time.perf_counter()
        g_assign, g_variant, g_times = best_greedy(prob)
        self.used = len(g_times)
        self.best, self.best_t = g_assign.copy(), g_times[g_variant]
        self.best_placement = prob.placement(self.best, placer="rl", source="greedy")
        self.contiguous_s = None
        if getattr(evaluator, "load_model", None) is not None and self.seed_contiguous:
            # Pipeline objective: the exact contiguous optimum (placer=optimal's answer) is the
            # incumbent the search starts from, so rl is never worse than it or than greedy.
            from orchestrator.placement.solve.contiguous import best_contiguous

            dp = best_contiguous(prob, evaluator.load_model, time_limit_s=self.contiguous_time_limit_s)
            if dp.assign is not None:
                t = prob.objective_value(dp.assign)
                self.used += 1
                self.contiguous_s = t
                if t < self.best_t:
                    g_assign, g_variant = dp.assign.copy(), "contiguous-dp"
                    self._new_best(prob, dp.assign, t)
        self.interrupted, restored, self.policy_t = False, "none", math.inf
        # a placement at the evaluator's certified lower bound is optimal: the search stops there
        bound_parts = getattr(evaluator, "bound_parts", None)
        self.bound = float(bound_parts()[0]) if callable(bound_parts) else 0.0
        policy, self.table = self._policy(seed, context), None
        try:
            restored = self._search(prob, policy, g_assign, seed, context)
            if self.refine == "local" and not self._at_bound():
                self._local(prob, context, seed)
        except KeyboardInterrupt:
            self.interrupted = True
        if getattr(context, "sink", None) is not None:
            context.sink.log_metrics({"rl.best_step_time_s": self.best_t}, step=len(self.history))
        if self.checkpoint and self.mode != "zero_shot":
            policy.save(self.checkpoint, table=None if self.table is None else self.table.numpy())
        return prob.placement(self.best, placer="rl", greedy_step_time_s=min(g_times.values()), start=g_variant,
                              contiguous_s=self.contiguous_s, mode=self.mode, refine=self.refine,
                              policy=self.policy_source, policy_step_time_s=self.policy_t,
                              evaluations=self.used, search_s=time.perf_counter() - t0,
                              updates=len(self.history), interrupted=self.interrupted, restored=restored,
                              stopped_at_bound=self._at_bound())

    def _at_bound(self) -> bool:
        return bool(self.bound > 0 and self.best_t <= self.bound * (1 + 1e-9))

    # -- the policy ------------------------------------------------------------------------------
    def _policy(self, seed: int, context: Any):
        from orchestrator.placement.learn.graph_policy import SHIPPED, GraphPolicy, InferencePolicy

        pol: Any
        if self.mode == "scratch":
            self.policy_source = "random init"
            pol = GraphPolicy(self.hidden, seed=seed, lr=self.policy_lr * 3, table_lr=self.lr)
        else:
            path = Path(str(self.policy_path)) if self.policy_path else SHIPPED
            self.policy_source = str(path) if self.policy_path else f"shipped checkpoint ({path.name})"
            if self.mode == "zero_shot":    # inference only: the forward pass in numpy, no TensorFlow imported
                pol = InferencePolicy.load(path)
            else:
                pol = GraphPolicy.load(path, seed=seed, lr=self.policy_lr, table_lr=self.lr)
        if getattr(context, "sink", None) is not None:
            context.sink.set_tags({"placer.mode": self.mode, "placer.refine": self.refine, "placer.policy": self.policy_source})
            print(f"rl: placer.mode={self.mode} placer.refine={self.refine}, policy: {self.policy_source}", flush=True)
        return pol

    def _search(self, prob: PlacementProblem, policy, g_assign: np.ndarray, seed: int, context: Any) -> str:
        from orchestrator.placement.learn.graph_policy import graph_inputs

        rng = np.random.default_rng(seed)
        gi = graph_inputs(prob)
        cap = float(prob.pool_cap[np.isfinite(prob.pool_cap)].sum() or 1.0)
        t_ref = self.best_t if math.isfinite(self.best_t) else 1.0

        def score(acts: np.ndarray) -> np.ndarray:
            times = np.empty(len(acts))
            for b, act in enumerate(acts):
                a = prob.expand(act)
                over = prob.overflow(a)
                times[b] = math.inf if over else prob.objective_value(a)
                self.used += 1
                self.policy_t = min(self.policy_t, times[b])
                if times[b] < self.best_t:
                    self._new_best(prob, a, times[b])
            return times

        if self.mode != "scratch":                           # the pre-trained policy's own guesses first
            acts = np.concatenate([policy.decode(gi)[None], policy.sample(gi, self.samples, rng).actions])
            times = score(acts)
            fin = times[np.isfinite(times)]
            self.history.append((self.best_t, float(fin.mean()) if len(fin) else math.inf))
            self.curve.append((self.used, self.best_t))
            if self.mode == "zero_shot" or self._at_bound():   # no updates (at the bound: nothing to gain)
                return "policy"
        import tensorflow as tf  # only to train the policy

        self.table = tf.Variable(np.zeros(gi.mask.shape, np.float32))
        restored = "none"
        if self.checkpoint and Path(str(self.checkpoint)).exists():
            restored = policy.restore(self.checkpoint, self.table)
        if restored != "all":                                # bias toward the incumbent (scratch: greedy)
            start = g_assign if self.mode == "scratch" else self.best
            prior = np.zeros(gi.mask.shape, np.float32)
            prior[np.arange(prob.n_atoms), prob.atoms_of(start)] = self._bias(prob.n_atoms, prob.nd)
            self.table.assign(prior)
        budget = int(self.budget * (1 - self.local_fraction)) if self.refine == "local" else self.budget
        updates = max(0, (budget - self.used) // self.batch)
        baseline = None
        bar = _bar(context, updates * self.batch, "rl")
        for upd in range(updates):
            if self._at_bound():
                break
            ro = policy.sample(gi, self.batch, rng, self.table.numpy(), traced=True)
            acts = ro.actions
            times = score(acts)
            over = np.array([prob.overflow(prob.expand(a)) for a in acts]) if not np.isfinite(times).all() else 0
            rewards = np.where(np.isfinite(times), -np.sqrt(np.minimum(times, 1e300) / t_ref), -(2.0 + 10.0 * over / cap))
            mean_r = rewards.mean()
            baseline = mean_r if baseline is None else 0.9 * baseline + 0.1 * mean_r
            adv = (rewards - baseline) / (rewards.std() + 1e-8)
            policy.update(gi, ro, adv, self.entropy * (1 - upd / max(1, updates)), self.table)
            fin = times[np.isfinite(times)]
            mean_t = float(fin.mean()) if len(fin) else math.inf
            self.history.append((self.best_t, mean_t))
            self.curve.append((self.used, self.best_t))
            if context is not None and getattr(context, "sink", None) is not None:
                context.sink.log_metrics({"rl.best_step_time_s": self.best_t, "rl.mean_step_time_s": mean_t}, step=upd)
            if bar is not None:
                bar.update(self.batch)
                bar.set_postfix(best=f"{self.best_t:.4g}s", current=f"{mean_t:.4g}s")
        if bar is not None:
            bar.close()
        return restored

    def _bias(self, n_atoms: int, nd: int) -> float:
        """``init_bias: auto``: the logit bonus b for which a sample moves ``placer.flips`` atoms in
        expectation off the start (other logits equal): p = min(flips / atoms, 0.5),
        b = log((1 - p) / p x (D - 1))."""
        if self.init_bias is not None:
            return self.init_bias
        if self.mode == "finetune":           # the pre-trained policy is the prior: the table starts at 0
            return 0.0
        p = min(self.flips / max(1, n_atoms), 0.5)
        return float(math.log((1 - p) / p * max(1, nd - 1)))

    # -- local improvement of the best ----------------------------------------------------------
    def _local(self, prob: PlacementProblem, context: Any, seed: int = 0) -> None:
        """``refine=local``: the iterated local search (``orchestrator.placement.solve.local_search``)
        on the best placement until the budget is spent; each new best is kept at once (Ctrl-C)."""
        search = LocalSearch(prob, self.budget, self.best, self.best_t, self.used,
                             on_best=lambda a, t: self._new_best(prob, a, t))
        try:
            search.run(seed)
        finally:
            self.used = search.used

    def _new_best(self, prob: PlacementProblem, assign: np.ndarray, t: float) -> None:
        self.best, self.best_t = assign.copy(), t
        self.best_placement = prob.placement(assign, placer="rl", step_time_s=t)


def _bar(context: Any, total: int, desc: str):
    if not getattr(context, "show_progress", False):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="eval", leave=False)

