"""The search behind ``+planner=joint``: templates of one pipeline (a micro-batch size, a data-parallel
degree ``dp`` and a sequence of stage kinds, each a GPU type with its own TP degree), visited best-first by
lower bounds on their estimate (groups ``(mbs, dp)``, then choices of a block per type, then arrangements),
the best contiguous layer split of each template by dynamic programming, the most promising templates judged
by the trial's simulator, plans with mixed GPU types inside a stage made of the GPUs a template leaves idle
(``mixed.fill_plans``), then a local search on the best plan (docs/plans.md, "The joint planner").

For a template of ``S`` stage kinds the split minimises the bottleneck, then the sum (1F1B's
``T ~ (m - 1) max_s t_s + sum_s t_s``; ``t_s`` a micro-batch's forward, backward and boundary sends on
stage ``s``), over segments that fit in memory by the simulator's own rule (``stage_memory``):

    best[0][0] = 0,   best[s][i] = min over j < i of max(best[s-1][j], t_s(j, i))     (min-max)
    then, with B = best[S][L]:  sum[s][i] = min over j < i, t_s(j, i) <= B of sum[s-1][j] + t_s(j, i)

Both are exact over contiguous splits (Bokhari 1988; the chain case of the project's contiguous DP over
ideals, ``orchestrator.placement.solve.contiguous``), vectorised over ``j`` with numpy.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.plan import GpuCluster, LayeredProfile, Pipeline, Plan, Stage
from orchestrator.planning.costs import Costs
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.mixed import fill_plans
from orchestrator.planning.prune import _group_bound, _may_admit, _per_mbs_lp, _price, _priority, _quick_bound
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
        B0 = _minmax(tables, L)
        floor = max(float(np.min(np.stack([np.diagonal(a, 1) for a in ars]), axis=0).max()), 0.0)
        if not math.isfinite(B0) or (m - 1) * B0 + B0 + floor >= limit:
            return None
    ceilings = np.unique(np.concatenate([a[upper & np.isfinite(tb)] for a, tb in zip(ars, tables)]))
    if len(ceilings) > CEILINGS:
        ceilings = np.unique(np.quantile(ceilings, np.linspace(0, 1, CEILINGS + 1)[1:], method="higher"))
    best_est, best_bounds, best_b = math.inf, None, 0.0
    for ceiling in ceilings if len(ceilings) else [0.0]:
        tabs = [np.where(a <= ceiling * (1 + 1e-12), t, math.inf) for t, a in zip(tables, ars)]
        got = _minmax_then_sum(tabs, L)
        if got is None:
            continue
        B, total, bounds = got
        est = (m - 1) * B + total + max(float(a[bounds[s], bounds[s + 1]]) for s, a in enumerate(ars))
        if est < best_est:
            best_est, best_bounds, best_b = est, bounds, B
    return None if best_bounds is None else (best_est, best_bounds, best_b)


def _minmax(tables: list[np.ndarray], L: int) -> float:
    best = np.full(L + 1, math.inf)
    best[0] = 0.0
    for t in tables:
        best = np.min(np.maximum(best[:, None], t), axis=0)
    return float(best[L])


def _minmax_then_sum(tables: list[np.ndarray], L: int) -> tuple[float, float, tuple[int, ...]] | None:
    best = np.full(L + 1, math.inf)
    best[0] = 0.0
    for t in tables:
        best = np.min(np.maximum(best[:, None], t), axis=0)
    B = best[L]
    if not math.isfinite(B):
        return None
    total = np.full(L + 1, math.inf)
    total[0] = 0.0
    back = []
    for t in tables:
        cand = np.where(t <= B * (1 + 1e-12), total[:, None] + t, math.inf)
        back.append(np.argmin(cand, axis=0))
        total = np.min(cand, axis=0)
    bounds = [L]
    i = L
    for s in range(len(tables) - 1, -1, -1):
        i = int(back[s][i])
        bounds.append(i)
    bounds.reverse()
    if bounds[0] != 0:
        return None
    return float(B), float(total[L]), tuple(bounds)


def search(profile: LayeredProfile, cluster: GpuCluster, objective: PlanObjective, evaluator: PlanEvaluator,
           budget_s: float = 30.0, max_stages: int = 32, judged: int = 48,
           slack: float = 0.05, fill: int = 16, classes: bool = True) -> tuple[Plan, PlanEstimate, dict[str, float]]:
    """The best plan found, its estimate, and counters (templates, split, judged, local moves)."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    costs = Costs(profile, cluster, evaluator.sim)
    B = evaluator.global_batch
    ranked: list[tuple[float, Candidate]] = []
    kth: list[float] = []                                             # the best ``judged`` estimates (a max-heap)
    n_templates = n_split = n_pruned = 0
    # best-first: groups (mbs, dp), choices (a block per type) and templates in one heap by a lower bound on
    # their estimate, each expanded when popped; ends when the next bound cannot enter the best ``judged``
    # estimates (nor come within ``slack`` of the best), or at 60% of the budget. Two passes: the narrow
    # templates (one TP degree per type) give a good incumbent fast, then the wide ones (two per type).
    lp = _per_mbs_lp(profile, cluster, B)
    soft = t0 + 0.6 * budget_s
    best_rank, found_s, narrow_s = math.inf, 0.0, 0.0
    seen: set[tuple[int, int, tuple[Kind, ...]]] = set()
    tick = 0

    def limit() -> float:
        """No template whose priority (a lower bound on its rank) reaches this can enter the best ``judged``."""
        return min(-kth[0] if len(kth) >= judged else math.inf, best_rank * (1 + slack))

    for wide in (False, True):
        heap: list[tuple[float, int, Any]] = []
        for mbs, dp, choices in template_groups(profile, cluster, B, max_stages, wide):
            lb = _group_bound(costs, cluster, mbs, dp, B, lp.get(mbs, 0.0), max_stages)
            cheapest = dp * min((k.tp * _price(cluster, k) for ks in kinds_of(profile, cluster, mbs).values()
                                 for k in ks), default=0.0)
            if math.isfinite(lb):
                heapq.heappush(heap, (_priority(objective, lb, cheapest), tick := tick + 1, ("group", mbs, dp, choices)))
        while heap and (time.perf_counter() < soft or not math.isfinite(best_rank)):   # past it: until a plan ranks
            pr, _, (what, mbs, dp, item) = heapq.heappop(heap)
            if pr >= limit():
                n_pruned += 1 + len(heap)
                break
            m = math.ceil(B / (mbs * dp))
            if what == "group":                                       # its choices by their quick bound
                floor_c = lp.get(mbs, 0.0) * mbs * dp / B
                for choice in item:
                    kinds = tuple(k for blk in choice for k in blk)
                    usd_h = dp * sum(k.tp * _price(cluster, k) for k in kinds)
                    qb = _quick_bound(costs, kinds, mbs, m, dp, floor_c, pairs=True)
                    if not _may_admit(objective, qb, usd_h, B):
                        continue
                    p = _priority(objective, qb, usd_h)
                    if p < limit():
                        heapq.heappush(heap, (p, tick := tick + 1, ("choice", mbs, dp, choice)))
                continue
            if what == "choice":                                      # its arrangements, at the choice's bound
                for kinds in arrangements(list(item)):
                    if (mbs, dp, kinds) not in seen:
                        seen.add((mbs, dp, kinds))
                        n_templates += 1
                        heapq.heappush(heap, (pr, tick := tick + 1, ("template", mbs, dp, kinds)))
                continue
            got = split(costs, item, mbs, m, dp, limit=limit() if objective.kind != "cost" else math.inf)
            if got is None:
                continue
            n_split += 1
            est, bounds, neck = got
            est += max(costs.update(k, mbs) for k in item)
            cand = Candidate(mbs, dp, item, bounds, est, neck)
            rank = _rank(objective, cand, cluster, est, B)
            ranked.append((rank, cand))
            if not math.isfinite(rank):
                continue
            if rank < best_rank:
                best_rank, found_s = rank, time.perf_counter() - t0
            heapq.heappush(kth, -rank)
            if len(kth) > judged:
                heapq.heappop(kth)
        if not wide:
            narrow_s = time.perf_counter() - t0
    ranked.sort(key=lambda x: x[0])
    best: tuple[float, Plan, PlanEstimate] | None = None
    n_judged = 0
    for _, cand in ranked[:judged]:
        if time.perf_counter() > deadline and best is not None:
            break           # past the budget only until one plan fits: a slow machine gets a plan, not a false "none fits"
        plan = cand.plan()
        est = evaluator.try_evaluate(plan)
        n_judged += 1
        if est is None:
            continue
        score = objective.score(est)
        if best is None or score < best[0]:
            best = (score, plan, est)
    # mixed replicas from the GPUs the templates leave idle (``fill_plans``): scanned over the ranked templates
    # (to 75% of the budget), estimated by the template's bottleneck, the ``fill`` most promising judged
    n_filled = 0
    filled: list[tuple[float, int, Plan]] = []
    for _, cand in ranked:
        if time.perf_counter() > t0 + 0.75 * budget_s or fill <= 0 or objective.kind == "cost":
            break
        for plan, m_new in fill_plans(cand, costs, cluster, B):
            m_old = math.ceil(B / (cand.mbs * cand.dp))
            filled.append((cand.estimate_s - (m_old - m_new) * cand.bottleneck_s, len(filled), plan))
    for _, _, plan in sorted(filled)[:fill]:
        if time.perf_counter() > deadline:
            break
        est = evaluator.try_evaluate(plan)
        n_judged += 1
        if est is None:
            continue
        score = objective.score(est)
        if best is None or score < best[0] - 1e-12:
            best = (score, plan, est)
            n_filled += 1
    # several pipeline classes: two of the best templates side by side, the batch split by their speed
    n_classes = n_class_tried = n_class_refused = 0
    if classes and objective.kind != "cost" and best is not None:
        from orchestrator.planning.classes import class_plans
        from orchestrator.planning.sailor_bound import sailor_scores_honestly

        honest_only = getattr(evaluator.sim, "name", "") == "sailor"
        for plan in class_plans(ranked, cluster, B):
            if time.perf_counter() > t0 + 0.85 * budget_s:
                break
            if honest_only and not sailor_scores_honestly(plan, profile, cluster):
                n_class_refused += 1
                continue
            est = evaluator.try_evaluate(plan)
            n_judged += 1
            n_class_tried += 1
            if est is None:
                continue
            score = objective.score(est)
            if score < best[0] - 1e-12:
                best = (score, plan, est)
                n_classes += 1
    if best is None or not math.isfinite(best[0]):
        from orchestrator.errors import InfeasiblePlacementError

        raise InfeasiblePlacementError(f"planner=joint: none of {n_templates} templates gave a plan that fits in memory "
                                       f"and meets planner.objective={objective.kind}")
    moves = 0
    improved = True
    honest = getattr(evaluator.sim, "name", "") != "sailor"
    if not honest:
        from orchestrator.planning.sailor_bound import sailor_scores_honestly
    while improved and time.perf_counter() < deadline:
        improved = False
        for plan in _neighbours(best[1], profile.num_layers, cluster):
            if time.perf_counter() > deadline:
                break
            if not honest and not sailor_scores_honestly(plan, profile, cluster):
                continue                                # Sailor's formula would under-charge it
            est = evaluator.try_evaluate(plan)
            moves += 1
            if est is not None and objective.score(est) < best[0] - 1e-12:
                best = (objective.score(est), plan, est)
                improved = True
                break
    stats = {"plan.templates": float(n_templates), "plan.templates_split": float(n_split),
             "plan.templates_pruned": float(n_pruned),
             "plan.best_template_found_s": found_s, "plan.narrow_pass_s": narrow_s,
             "plan.templates_judged": float(n_judged), "plan.local_moves": float(moves),
             "plan.filled": float(n_filled), "plan.pipeline_classes": float(n_classes),
             "plan.class_plans_judged": float(n_class_tried), "plan.class_plans_refused": float(n_class_refused)}
    return best[1], best[2], stats


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


def _neighbours(plan: Plan, num_layers: int, cluster: GpuCluster):
    """Per pipeline (the others kept): one replica more or less in every stage (where the GPUs allow; a
    mixed stage keeps its mix), one replica more or less in one stage (a stage's own DP degree), one layer
    moved across one stage boundary; with two pipelines or more, a micro-batch's worth of each replica
    column moved between two pipelines' batch shares."""
    P = len(plan.pipelines)

    def with_pipeline(i: int, new: Pipeline) -> Plan:
        return Plan([new if j == i else q for j, q in enumerate(plan.pipelines)], plan.mbs)

    def within(cand: Plan) -> bool:
        return all(n <= cluster.gpus.get(k, 0) for k, n in cand.gpus_used().items())

    for pi, p in enumerate(plan.pipelines):
        for d in (1, -1):                               # a copy of each stage's last replica, or the last dropped
            stages = tuple(Stage(s.layers, s.replicas + s.replicas[-1:] if d > 0 else s.replicas[:-1]) for s in p.stages)
            cand = with_pipeline(pi, Pipeline(stages, p.batch))
            if all(s.dp >= 1 for s in stages) and within(cand):
                yield cand
        for si, st in enumerate(p.stages):              # one stage's own degree
            for d in (1, -1):
                reps = st.replicas + st.replicas[-1:] if d > 0 else st.replicas[:-1]
                if not reps or len(p.stages) == 1:
                    continue
                stages = tuple(Stage(s.layers, reps) if j == si else s for j, s in enumerate(p.stages))
                cand = with_pipeline(pi, Pipeline(stages, p.batch))
                if within(cand):
                    yield cand
        for s in range(len(p.stages) - 1):
            a, b = p.stages[s], p.stages[s + 1]
            for d in (-1, 1):
                cut = b.layers[0] + d
                if a.layers[0] < cut <= a.layers[-1] + 1 and cut <= b.layers[-1]:
                    stages = list(p.stages)
                    stages[s] = Stage(tuple(range(a.layers[0], cut)), a.replicas)
                    stages[s + 1] = Stage(tuple(range(cut, b.layers[-1] + 1)), b.replicas)
                    yield with_pipeline(pi, Pipeline(tuple(stages), p.batch))
    if P > 1 and all(q.batch is not None for q in plan.pipelines):
        for i in range(P):
            for j in range(P):
                step = plan.mbs * plan.pipelines[i].stages[0].dp
                bi, bj = plan.pipelines[i].batch, plan.pipelines[j].batch
                if i != j and bi is not None and bj is not None and bi - step >= 1:
                    moved = [Pipeline(q.stages, bi - step if k == i else bj + step if k == j else q.batch)
                             for k, q in enumerate(plan.pipelines)]
                    yield Plan(moved, plan.mbs)
