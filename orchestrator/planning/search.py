"""The search behind ``+planner=joint``: templates of one pipeline (a micro-batch size, a data-parallel
degree ``dp`` and a sequence of stage kinds, each a GPU type with its own TP degree), the best contiguous
layer split of each template by dynamic programming, the most promising templates judged by the trial's
simulator, then a local search on the best plans (docs/plans.md, "The joint planner").

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

from orchestrator.errors import UserError
from orchestrator.plan import GpuCluster, LayeredProfile, Pipeline, Plan, Stage
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.templates import Kind, templates


@dataclass
class Candidate:
    mbs: int
    dp: int
    kinds: tuple[Kind, ...]
    bounds: tuple[int, ...]          # stage s holds layers bounds[s] .. bounds[s+1]-1
    estimate_s: float                # the DP's estimate of the iteration (for ranking only)

    def plan(self) -> Plan:
        stages = tuple(Stage(tuple(range(self.bounds[s], self.bounds[s + 1])), (k.replica(),) * self.dp)
                       for s, k in enumerate(self.kinds))
        return Plan([Pipeline(stages)], self.mbs)


class Costs:
    """Per (kind, mbs): prefix sums of a micro-batch's forward + backward per layer; per boundary the
    seconds of one activation across it; memory per segment by the simulator's rule."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, sim: Any):
        self.profile, self.cluster, self.sim = profile, cluster, sim
        self._prefix: dict[tuple[Kind, int], np.ndarray | None] = {}
        self._update: dict[tuple[Kind, int], float] = {}
        self._send: dict[tuple[Kind, Kind, int], np.ndarray] = {}
        self._fits: dict[tuple[Kind, int, int, int, int], np.ndarray] = {}
        self._ar: dict[tuple[Kind, int], np.ndarray] = {}

    def prefix(self, kind: Kind, mbs: int) -> np.ndarray | None:
        key = (kind, mbs)
        if key not in self._prefix:
            if not self.profile.has(kind.gpu, mbs, kind.tp):
                self._prefix[key] = None
            else:
                t = self.profile.layer_times(kind.gpu, mbs, kind.tp)
                self._prefix[key] = np.concatenate([[0.0], np.cumsum([f + b for f, b, _ in t])])
                self._update[key] = float(max(u for _, _, u in t))
        return self._prefix[key]

    def update(self, kind: Kind, mbs: int) -> float:
        self.prefix(kind, mbs)
        return self._update.get((kind, mbs), 0.0)

    def send(self, a: Kind, b: Kind, mbs: int) -> np.ndarray:
        """Seconds across each boundary (column = the first layer after it): [activation, gradient]."""
        key = (a, b, mbs)
        if key not in self._send:
            self._send[key] = self._sends(a, b, mbs)
        return self._send[key]

    def allreduce(self, kind: Kind, dp: int) -> np.ndarray:
        """ar[j, i]: the gradient all-reduce of layers j .. i-1 over ``dp`` replicas of ``kind``, by the
        simulator's own rule (``stage_allreduce``; 0 without one)."""
        key = (kind, dp)
        if key not in self._ar:
            L = self.profile.num_layers
            rule = getattr(self.sim, "stage_allreduce", None)
            if rule is None or dp <= 1:
                self._ar[key] = np.zeros((L + 1, L + 1))
                return self._ar[key]
            try:
                f = rule(self.profile, kind.replica(), dp, self.cluster)
            except UserError:                              # no link fit for this group: no stage of it
                self._ar[key] = np.full((L + 1, L + 1), math.inf)
            else:
                p1 = np.concatenate([[0.0], np.cumsum(self.profile.layer_sizes(1).params)])
                pt = np.concatenate([[0.0], np.cumsum(self.profile.layer_sizes(kind.tp).params)])
                a1, at = p1[None, :] - p1[:, None], pt[None, :] - pt[:, None]
                self._ar[key] = np.where(a1 > 0, f(np.maximum(a1, 0.0), np.maximum(at, 0.0)), 0.0)
        return self._ar[key]

    def _sends(self, a: Kind, b: Kind, mbs: int) -> np.ndarray:
        """Row 0: the activation across boundary ``i`` (layer i-1's output); row 1: the gradient sent back
        across it, by the simulator's rule (``boundary_time`` and ``gradient_layer``)."""
        sizes = np.array(self.profile.layer_sizes(1).act_output) * self.profile.float_bytes * mbs
        L = len(sizes)
        act = np.concatenate([[sizes[0]], sizes])                         # act[i] = output of layer i-1
        grad_layer = getattr(self.sim, "gradient_layer", lambda i: i - 1)  # Sailor: the stage's first layer
        grad = np.array([sizes[min(max(grad_layer(i), 0), L - 1)] for i in range(L + 1)])
        rule = getattr(self.sim, "boundary_time", None)
        out = np.zeros((2, L + 1))
        try:
            for row, nbytes in enumerate((act, grad)):
                if rule is not None:
                    out[row] = rule(a.replica(), b.replica(), nbytes, self.cluster)
                else:
                    link = self.cluster.network.inter_link(a.zone, a.gpu, min(a.tp, a.node_gpus), b.zone, b.gpu,
                                                           min(b.tp, b.node_gpus))
                    out[row] = link.time(nbytes)
        except UserError:
            return np.full((2, L + 1), math.inf)
        out[:, 0] = 0.0
        return np.where(np.isfinite(out) & (out >= 0), out, math.inf)

    def fits(self, kind: Kind, mbs: int, stages: int, stage: int, micro_batches: int) -> np.ndarray:
        """fits[j, i]: layers j .. i-1 on ``kind`` as stage ``stage`` of ``stages`` (True where it fits)."""
        key = (kind, mbs, stages, stage, micro_batches)
        if key not in self._fits:
            self._fits[key] = self._fit_table(kind, mbs, stages, stage, micro_batches)
        return self._fits[key]

    def _fit_table(self, kind: Kind, mbs: int, stages: int, stage: int, micro_batches: int) -> np.ndarray:
        L = self.profile.num_layers
        rule = getattr(self.sim, "stage_memory", None)
        ok = np.ones((L + 1, L + 1), dtype=bool)
        if rule is None:
            return ok
        sizes = self.profile.layer_sizes(kind.tp)
        p = np.concatenate([[0.0], np.cumsum(sizes.params)])
        a = np.concatenate([[0.0], np.cumsum(sizes.act_mem)])
        need, limit = rule(self.profile, kind.tp, kind.gpu, mbs, stages, stage, micro_batches, self.cluster)
        params = p[None, :] - p[:, None]
        acts = a[None, :] - a[:, None]
        return need(params, acts) <= limit


def split(costs: Costs, kinds: tuple[Kind, ...], mbs: int, m: int, dp: int = 1) -> tuple[float, tuple[int, ...]] | None:
    """(estimated iteration seconds, bounds) of the best contiguous split of the layers over ``kinds``
    (None: none fits). The estimate is ``(m - 1) B + sum_s t_s + A``: for each candidate ceiling ``A`` of
    the stages' all-reduces (stages above it excluded), the min-max split ``B`` then the least sum under it."""
    L = costs.profile.num_layers
    S = len(kinds)
    if S > L:
        return None
    factors = getattr(costs.sim, "send_factors", _blocking)
    tables, ars = [], []
    upper = np.arange(L + 1)[None, :] > np.arange(L + 1)[:, None]
    for s, k in enumerate(kinds):
        pre = costs.prefix(k, mbs)
        if pre is None:
            return None
        t = pre[None, :] - pre[:, None]                                  # t[j, i] = compute of j..i-1
        f_in, f_out = factors(S, s)
        if s > 0:                                                        # at j: the activation in, its gradient out
            into = costs.send(kinds[s - 1], k, mbs)
            t = t + (f_in[0] * into[0] + f_in[1] * into[1])[:, None]
        if s < S - 1:                                                    # at i: the activation out, its gradient in
            out = costs.send(k, kinds[s + 1], mbs)
            t = t + (f_out[0] * out[0] + f_out[1] * out[1])[None, :]
        ok = costs.fits(k, mbs, S, s, m) & upper
        tables.append(np.where(ok, t, math.inf))
        ars.append(costs.allreduce(k, dp))
    ceilings = np.unique(np.concatenate([a[upper & np.isfinite(tb)] for a, tb in zip(ars, tables)]))
    if len(ceilings) > 5:
        ceilings = np.unique(np.quantile(ceilings, np.linspace(0, 1, 6)[1:], method="higher"))
    best_est, best_bounds = math.inf, None
    for ceiling in ceilings if len(ceilings) else [0.0]:
        tabs = [np.where(a <= ceiling * (1 + 1e-12), t, math.inf) for t, a in zip(tables, ars)]
        got = _minmax_then_sum(tabs, L)
        if got is None:
            continue
        B, total, bounds = got
        est = (m - 1) * B + total + float(ceiling)
        if est < best_est:
            best_est, best_bounds = est, bounds
    return None if best_bounds is None else (best_est, best_bounds)


def _blocking(stages: int, stage: int) -> tuple[tuple[float, float], tuple[float, float]]:  # noqa: ARG001
    """Per micro-batch, (activation, gradient) transfers a stage pays at its input and at its output
    boundary: both, on both sides (blocking sends occupy both ends)."""
    return (1.0, 1.0), (1.0, 1.0)


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
           budget_s: float = 30.0, max_stages: int = 32, judged: int = 48) -> tuple[Plan, PlanEstimate, dict[str, float]]:
    """The best plan found, its estimate, and counters (templates, split, judged, local moves)."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    costs = Costs(profile, cluster, evaluator.sim)
    B = evaluator.global_batch
    ranked: list[tuple[float, Candidate]] = []
    kth: list[float] = []                                             # the best ``judged`` estimates (a max-heap)
    n_templates = n_split = n_pruned = 0
    seen: set[tuple[int, int, tuple[Kind, ...]]] = set()
    for mbs, dp, kinds in templates(profile, cluster, B, max_stages):
        if time.perf_counter() > deadline * 0.6 + t0 * 0.4:          # 60% of the budget for the templates
            break
        if (mbs, dp, kinds) in seen:
            continue
        seen.add((mbs, dp, kinds))
        n_templates += 1
        m = math.ceil(B / (mbs * dp))
        if len(kth) >= judged and objective.kind == "throughput" and _quick_bound(costs, kinds, mbs, m) >= -kth[0]:
            n_pruned += 1                                             # cannot enter the best ``judged``
            continue
        got = split(costs, kinds, mbs, m, dp)
        if got is None:
            continue
        n_split += 1
        est, bounds = got
        est += max(costs.update(k, mbs) for k in kinds)
        cand = Candidate(mbs, dp, kinds, bounds, est)
        ranked.append((_rank(objective, cand, cluster, est, B), cand))
        heapq.heappush(kth, -est)
        if len(kth) > judged:
            heapq.heappop(kth)
    ranked.sort(key=lambda x: x[0])
    best: tuple[float, Plan, PlanEstimate] | None = None
    n_judged = 0
    for _, cand in ranked[:judged]:
        if time.perf_counter() > deadline:
            break
        plan = cand.plan()
        est = evaluator.try_evaluate(plan)
        n_judged += 1
        if est is None:
            continue
        score = objective.score(est)
        if best is None or score < best[0]:
            best = (score, plan, est)
    if best is None or not math.isfinite(best[0]):
        from orchestrator.errors import InfeasiblePlacementError

        raise InfeasiblePlacementError(f"planner=joint: none of {n_templates} templates gave a plan that fits in memory "
                                       f"and meets planner.objective={objective.kind}")
    moves = 0
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for plan in _neighbours(best[1], profile.num_layers, cluster):
            if time.perf_counter() > deadline:
                break
            est = evaluator.try_evaluate(plan)
            moves += 1
            if est is not None and objective.score(est) < best[0] - 1e-12:
                best = (objective.score(est), plan, est)
                improved = True
                break
    stats = {"plan.templates": float(n_templates), "plan.templates_split": float(n_split),
             "plan.templates_pruned": float(n_pruned),
             "plan.templates_judged": float(n_judged), "plan.local_moves": float(moves)}
    return best[1], best[2], stats


def _quick_bound(costs: Costs, kinds: tuple[Kind, ...], mbs: int, m: int) -> float:
    """A lower bound on ``split``'s estimate: each layer at its cheapest kind of the template, the bottleneck
    at least the average stage and the largest layer, no sends, no all-reduce."""
    pres = [costs.prefix(k, mbs) for k in set(kinds)]
    if any(p is None for p in pres):
        return math.inf
    per_layer = np.min(np.stack([np.diff(p) for p in pres if p is not None]), axis=0)
    total = float(per_layer.sum())
    return (m - 1) * max(total / len(kinds), float(per_layer.max())) + total


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
    """The plan with one replica more or less in every stage (where the GPUs allow), or one layer moved
    across one stage boundary."""
    p = plan.pipelines[0]
    for d in (1, -1):
        stages = tuple(Stage(s.layers, s.replicas[:1] * (s.dp + d)) for s in p.stages)
        cand = Plan([Pipeline(stages)], plan.mbs)
        if all(s.dp >= 1 for s in stages) and all(n <= cluster.gpus.get(k, 0) for k, n in cand.gpus_used().items()):
            yield cand
    for s in range(len(p.stages) - 1):
        a, b = p.stages[s], p.stages[s + 1]
        for d in (-1, 1):
            cut = b.layers[0] + d
            if a.layers[0] < cut <= a.layers[-1] + 1 and cut <= b.layers[-1]:
                stages = list(p.stages)
                stages[s] = Stage(tuple(range(a.layers[0], cut)), a.replicas)
                stages[s + 1] = Stage(tuple(range(cut, b.layers[-1] + 1)), b.replicas)
                yield Plan([Pipeline(tuple(stages))], plan.mbs)
