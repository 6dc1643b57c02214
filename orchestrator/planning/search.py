"""The search behind ``+planner=joint``: templates of one pipeline (a micro-batch size, a data-parallel
degree ``dp`` and a sequence of stage kinds, each a GPU type with its own TP degree), visited best-first by
lower bounds on their estimate (groups ``(mbs, dp)``, then choices of a block per type, then arrangements),
the best contiguous layer split of each template by dynamic programming, the most promising templates judged
by the trial's simulator, plans with mixed GPU types inside a stage made of the GPUs a template leaves idle
(``mixed.fill_plans``), then a local search on the best plan (docs/plans.md, "The joint planner").

For a template of ``S`` stage kinds the split minimises the bottleneck, then the sum (1F1B's
``T ~ (m - 1) max_s t_s + sum_s t_s``; ``t_s`` a micro-batch's forward, backward and boundary sends on
stage ``s``), over segments that fit in memory by the simulator's own rule (``stage_memory``): the chain
case of the partitioning engine (``orchestrator.partition.split.chain_split``), exact over contiguous splits.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.errors import InfeasiblePlanError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.partition.split import chain_minmax, chain_split
from orchestrator.plan import LayeredProfile, Pipeline, Plan, Stage
from orchestrator.planning.classes import class_plans
from orchestrator.planning.costs import Costs
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.mixed import fill_plans
from orchestrator.planning.moves import neighbours
from orchestrator.planning.prune import group_bound, may_admit, per_mbs_lp, price, priority, quick_bound
from orchestrator.planning.templates import Kind, arrangements, kinds_of, template_groups

__all__ = ["CEILINGS", "Candidate", "Costs", "search", "split"]

CEILINGS = 6                        # all-reduce ceilings tried per template (quantiles of its segments' all-reduces)


@dataclass
class Candidate:
    mbs: int
    dp: int
    kinds: tuple[Kind, ...]
    bounds: tuple[int, ...]          # stage s holds layers bounds[s] .. bounds[s+1]-1
    estimate_s: float                # the DP's estimate of the iteration (for ranking only)
    bottleneck_s: float = 0.0        # its slowest stage's micro-batch (compute and sends)

    def plan(self) -> Plan:
        stages = tuple(Stage(tuple(range(self.bounds[s], self.bounds[s + 1])), (k.replica(),) * self.dp)
                       for s, k in enumerate(self.kinds))
        return Plan([Pipeline(stages)], self.mbs)


def split(costs: Costs, kinds: tuple[Kind, ...], mbs: int, m: int, dp: int = 1,
          limit: float = math.inf) -> tuple[float, tuple[int, ...], float] | None:
    """(estimated iteration seconds, bounds, bottleneck) of the best contiguous split of the layers over ``kinds``
    (None: none fits). The estimate is ``(m - 1) B + sum_s t_s + A``: for each candidate ceiling ``A`` of
    the stages' all-reduces (stages above it excluded), the min-max split ``B`` then the least sum under it."""
    L = costs.profile.num_layers
    S = len(kinds)
    if S > L:
        return None
    tables = [costs.table(kinds[s - 1] if s else None, k, kinds[s + 1] if s < S - 1 else None, S, s, mbs, m)
              for s, k in enumerate(kinds)]
    if any(t is None for t in tables):
        return None
    ars = [costs.allreduce(k, dp) for k in kinds]
    upper = costs.upper
    if math.isfinite(limit):                                             # a cheap lower bound first
        B0 = chain_minmax(tables, L)
        floor = max(float(np.min(np.stack([np.diagonal(a, 1) for a in ars]), axis=0).max()), 0.0)
        if not math.isfinite(B0) or (m - 1) * B0 + B0 + floor >= limit:
            return None
    ceilings = np.unique(np.concatenate([a[upper & np.isfinite(tb)] for a, tb in zip(ars, tables)]))
    if len(ceilings) > CEILINGS:
        ceilings = np.unique(np.quantile(ceilings, np.linspace(0, 1, CEILINGS + 1)[1:], method="higher"))
    best_est, best_bounds, best_b = math.inf, None, 0.0
    for ceiling in ceilings if len(ceilings) else [0.0]:
        tabs = [np.where(a <= ceiling * (1 + 1e-12), t, math.inf) for t, a in zip(tables, ars)]
        got = chain_split(tabs, L)
        if got is None:
            continue
        B, total, bounds = got
        est = (m - 1) * B + total + max(float(a[bounds[s], bounds[s + 1]]) for s, a in enumerate(ars))
        if est < best_est:
            best_est, best_bounds, best_b = est, bounds, B
    return None if best_bounds is None else (best_est, best_bounds, best_b)


def search(profile: LayeredProfile, cluster: GpuCluster, objective: PlanObjective, evaluator: PlanEvaluator,
           budget_s: float = 30.0, max_stages: int = 32, judged: int = 48,
           slack: float = 0.05, fill: int = 16, classes: bool = True,
           work_limit: int | None = None) -> tuple[Plan, PlanEstimate, dict[str, float]]:
    """The best plan found, its estimate, and counters (templates, split, judged, local moves). ``work_limit``: the
    walk ends after this many steps (heap entries expanded) and no step has a time share of the budget, so that the
    plan is the same on any machine and load; ``budget_s`` is then only a hard cap (``plan.search_cut`` where it hit)."""
    t0 = time.perf_counter()
    costs = Costs(profile, cluster, evaluator.sim)
    B = evaluator.global_batch
    walk = _BestFirst(profile, cluster, objective, costs, B, max_stages, judged, slack, t0)
    walk.run(t0 + (budget_s if work_limit else 0.6 * budget_s), work_limit)
    walk.ranked.sort(key=lambda x: x[0])
    judge = _Judging(evaluator, objective, t0, budget_s, shares=work_limit is None)
    judge.ranked(walk.ranked, judged)
    judge.filled(walk.ranked, costs, cluster, B, fill)
    before = judge.best
    if classes and judge.best is not None:
        judge.classes(walk.ranked, profile, cluster, B)
    if judge.best is None or not math.isfinite(judge.best[0]):
        raise InfeasiblePlanError(f"planner=joint: no plan fits in memory and meets {objective.describe()} "
                                  f"({walk.n_templates} templates of stages tried)")
    judge.local(profile, cluster)
    if objective.kind == "cost" and before is not None and judge.classes_in:   # the local moves from both starts:
        after, judge.best = judge.best, before          # a class plan's local optimum may be dearer than the other's
        judge.local(profile, cluster)
        judge.best = min(judge.best, after, key=lambda b: b[0])
    stats = {"plan.templates": float(walk.n_templates), "plan.templates_split": float(walk.n_split),
             "plan.templates_pruned": float(walk.n_pruned),
             "plan.best_template_found_s": walk.found_s, "plan.narrow_pass_s": walk.narrow_s,
             "plan.templates_judged": float(judge.judged), "plan.local_moves": float(judge.moves),
             "plan.filled": float(judge.filled_in), "plan.pipeline_classes": float(judge.classes_in),
             "plan.class_plans_judged": float(judge.class_tried), "plan.class_plans_refused": float(judge.class_refused),
             # 1 where planner.budget_s ended a step of the search before it was complete (a rerun may differ)
             "plan.search_cut": float(walk.cut or judge.cut), "plan.search_budget_s": float(budget_s),
             "plan.walk_steps": float(walk.steps)}
    if work_limit:
        stats["plan.work_limit"] = float(work_limit)
    return judge.best[1], judge.best[2], stats


class _BestFirst:
    """The templates, best-first: groups (mbs, dp), choices (a block per type) and templates in one heap by a
    lower bound on their estimate, each expanded when popped; ends when the next bound cannot enter the best
    ``judged`` estimates (nor come within ``slack`` of the best), or at the soft limit (60% of the budget). Two
    passes: the narrow templates (one TP degree per type) give a good incumbent fast, then the wide ones (two
    per type). ``ranked`` collects (rank, candidate) of every template split."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, objective: PlanObjective, costs: Costs,
                 batch: int, max_stages: int, judged: int, slack: float, t0: float):
        self.profile, self.cluster, self.objective, self.costs, self.B = profile, cluster, objective, costs, batch
        self.max_stages, self.judged, self.slack, self.t0 = max_stages, judged, slack, t0
        self.ranked: list[tuple[float, Candidate]] = []
        self.kth: list[float] = []                                    # the best ``judged`` ranks (a max-heap)
        self.n_templates = self.n_split = self.n_pruned = 0
        self.lp = per_mbs_lp(profile, cluster, batch)
        self.best_rank, self.found_s, self.narrow_s = math.inf, 0.0, 0.0
        self.seen: set[tuple[int, int, tuple[Kind, ...]]] = set()
        self.heap: list[tuple[float, int, Any]] = []
        self.tick = 0
        self.cut = False                            # the soft limit ended the walk with templates left
        self.steps = 0                              # heap entries expanded (the work a work limit counts)

    def limit(self) -> float:
        """No template whose priority (a lower bound on its rank) reaches this can enter the best ``judged``."""
        return min(-self.kth[0] if len(self.kth) >= self.judged else math.inf, self.best_rank * (1 + self.slack))

    def run(self, soft: float, work_limit: int | None = None) -> None:
        for wide in (False, True):
            self.heap = []
            self._push_groups(wide)
            while self.heap:
                if work_limit is not None and self.steps >= work_limit and math.isfinite(self.best_rank):
                    break                                               # the same point on any machine
                if time.perf_counter() >= soft and math.isfinite(self.best_rank):    # past it: until a plan ranks
                    self.cut = True
                    break
                self.steps += 1
                pr, _, (what, mbs, dp, item) = heapq.heappop(self.heap)
                if pr >= self.limit():
                    self.n_pruned += 1 + len(self.heap)
                    break
                m = math.ceil(self.B / (mbs * dp))
                if what == "group":
                    self._expand_group(mbs, dp, m, item)
                elif what == "choice":
                    self._expand_choice(pr, mbs, dp, item)
                else:
                    self._split(mbs, dp, m, item)
            if not wide:
                self.narrow_s = time.perf_counter() - self.t0

    def _push(self, priority_s: float, entry: tuple[Any, ...]) -> None:
        self.tick += 1
        heapq.heappush(self.heap, (priority_s, self.tick, entry))

    def _push_groups(self, wide: bool) -> None:
        for mbs, dp, choices in template_groups(self.profile, self.cluster, self.B, self.max_stages, wide):
            lb = group_bound(self.costs, self.cluster, mbs, dp, self.B, self.lp.get(mbs, 0.0), self.max_stages)
            cheapest = dp * min((k.tp * price(self.cluster, k) for ks in kinds_of(self.profile, self.cluster, mbs).values()
                                 for k in ks), default=0.0)
            if math.isfinite(lb):
                self._push(priority(self.objective, lb, cheapest), ("group", mbs, dp, choices))

    def _expand_group(self, mbs: int, dp: int, m: int, choices: Any) -> None:
        """A group's choices, by their quick bound."""
        floor_c = self.lp.get(mbs, 0.0) * mbs * dp / self.B
        for choice in choices:
            kinds = tuple(k for blk in choice for k in blk)
            usd_h = dp * sum(k.tp * price(self.cluster, k) for k in kinds)
            qb = quick_bound(self.costs, kinds, mbs, m, dp, floor_c, pairs=True)
            if not may_admit(self.objective, qb, usd_h, self.B):
                continue
            p = priority(self.objective, qb, usd_h)
            if p < self.limit():
                self._push(p, ("choice", mbs, dp, choice))

    def _expand_choice(self, pr: float, mbs: int, dp: int, choice: Any) -> None:
        """A choice's arrangements, at the choice's bound."""
        for kinds in arrangements(list(choice)):
            if (mbs, dp, kinds) not in self.seen:
                self.seen.add((mbs, dp, kinds))
                self.n_templates += 1
                self._push(pr, ("template", mbs, dp, kinds))

    def _split(self, mbs: int, dp: int, m: int, kinds: tuple[Kind, ...]) -> None:
        """A template's best split, ranked."""
        got = split(self.costs, kinds, mbs, m, dp, limit=self.limit() if self.objective.kind != "cost" else math.inf)
        if got is None:
            return
        self.n_split += 1
        est, bounds, neck = got
        est += max(self.costs.update(k, mbs) for k in kinds)
        cand = Candidate(mbs, dp, kinds, bounds, est, neck)
        rank = _rank(self.objective, cand, self.cluster, est, self.B)
        self.ranked.append((rank, cand))
        if not math.isfinite(rank):
            return
        if rank < self.best_rank:
            self.best_rank, self.found_s = rank, time.perf_counter() - self.t0
        heapq.heappush(self.kth, -rank)
        if len(self.kth) > self.judged:
            heapq.heappop(self.kth)


class _Judging:
    """The plans the simulator judges, in turn: the ranked templates, mixed replicas, pipeline classes, then a
    local search; ``best`` is (score, plan, estimate) of the best so far. Only plans the simulator scores
    honestly (``PlanSimulator.scores_honestly``) are built beyond the templates."""

    def __init__(self, evaluator: PlanEvaluator, objective: PlanObjective, t0: float, budget_s: float,
                 shares: bool = True):
        self.evaluator, self.sim, self.objective = evaluator, evaluator.sim, objective
        self.t0, self.budget_s, self.deadline = t0, budget_s, t0 + budget_s
        # the steps' time shares of the budget (75% mixed replicas, 85% classes); without (a work limit) only the cap
        self.fill_end, self.classes_end = (t0 + 0.75 * budget_s, t0 + 0.85 * budget_s) if shares else (self.deadline,) * 2
        self.best: tuple[float, Plan, PlanEstimate] | None = None
        self.judged = self.filled_in = self.classes_in = self.class_tried = self.class_refused = self.moves = 0
        self.cut = False                            # the budget ended a step with plans left to judge

    def past(self, limit: float) -> bool:
        """Whether ``limit`` has passed (a step ends there, and the search is marked cut)."""
        over = time.perf_counter() > limit
        self.cut |= over
        return over

    def _better(self, plan: Plan) -> bool:
        """Judge ``plan``; keep it (True) when it scores better than the best by more than rounding."""
        est = self.evaluator.try_evaluate(plan)
        self.judged += 1
        if est is None:
            return False
        score = self.objective.score(est)
        if self.best is None or score < self.best[0] - 1e-12:
            self.best = (score, plan, est)
            return True
        return False

    def ranked(self, ranked: list[tuple[float, Candidate]], judged: int) -> None:
        """The ``judged`` best templates (past the budget only until one plan fits: a slow machine gets a
        plan, not a false "none fits")."""
        for _, cand in ranked[:judged]:
            if self.best is not None and self.past(self.deadline):
                break
            plan = cand.plan()
            est = self.evaluator.try_evaluate(plan)
            self.judged += 1
            if est is None:
                continue
            score = self.objective.score(est)
            if self.best is None or score < self.best[0]:
                self.best = (score, plan, est)

    def filled(self, ranked: list[tuple[float, Candidate]], costs: Costs, cluster: GpuCluster, batch: int,
               fill: int) -> None:
        """Mixed replicas from the GPUs the templates leave idle (``fill_plans``): scanned over the ranked
        templates (to 75% of the budget), estimated by the template's bottleneck, the ``fill`` most
        promising judged."""
        filled: list[tuple[float, int, Plan]] = []
        for _, cand in ranked:
            if fill <= 0 or self.objective.kind == "cost" or self.past(self.fill_end):
                break
            for plan, m_new in fill_plans(cand, costs, cluster, batch):
                m_old = math.ceil(batch / (cand.mbs * cand.dp))
                filled.append((cand.estimate_s - (m_old - m_new) * cand.bottleneck_s, len(filled), plan))
        for _, _, plan in sorted(filled)[:fill]:
            if self.past(self.deadline):
                break
            if self._better(plan):
                self.filled_in += 1

    def classes(self, ranked: list[tuple[float, Candidate]], profile: LayeredProfile, cluster: GpuCluster,
                batch: int) -> None:
        """Several pipeline classes: two of the best templates side by side, the batch split by their speed."""
        for plan in class_plans(ranked, cluster, batch):
            if self.past(self.classes_end):
                break
            if not self.sim.scores_honestly(plan, profile, cluster):
                self.class_refused += 1
                continue
            self.class_tried += 1
            if self._better(plan):
                self.classes_in += 1

    def local(self, profile: LayeredProfile, cluster: GpuCluster) -> None:
        """First-improvement moves (``moves.neighbours``) on the best plan, until none improves or the budget ends."""
        improved = True
        while improved and not self.past(self.deadline):
            improved = False
            for plan in neighbours(self.best[1], profile.num_layers, cluster):  # type: ignore[index]
                if self.past(self.deadline):
                    break
                if not self.sim.scores_honestly(plan, profile, cluster):
                    continue                                # the simulator would under-charge it
                est = self.evaluator.try_evaluate(plan)
                self.moves += 1
                if est is not None and self.objective.score(est) < self.best[0] - 1e-12:  # type: ignore[index]
                    self.best = (self.objective.score(est), plan, est)
                    improved = True
                    break


def _rank(objective: PlanObjective, cand: Candidate, cluster: GpuCluster, est: float, batch: int) -> float:
    gpus = cand.dp * sum(k.tp for k in cand.kinds)
    usd_h = cand.dp * sum(k.tp * (cluster.gpu_type(k.gpu).usd_per_gpu_hour or 0.0) for k in cand.kinds)
    if objective.kind == "cost":
        if objective.min_samples_per_s is not None and batch / est < objective.min_samples_per_s:
            return math.inf
        return usd_h * est
    if objective.kind == "budget" and objective.max_usd_per_hour is not None and usd_h > objective.max_usd_per_hour:
        return math.inf
    return est + 1e-9 * gpus
