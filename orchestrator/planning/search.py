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
from orchestrator.planning.templates import Kind, arrangements, kinds_of, template_groups

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
        self.layer_floor: dict[tuple[frozenset, int, int], tuple[float, float, float]] = {}
        self._min_send: dict[tuple[Kind, Kind, int], float] = {}
        self._rho: dict[int, dict] = {}
        self._tables: dict[tuple, np.ndarray | None] = {}
        L = profile.num_layers
        self.upper = np.arange(L + 1)[None, :] > np.arange(L + 1)[:, None]
        self._transfers: dict[int, list[float]] = {}
        self._share: dict[tuple, float] = {}
        self._ar_fn: dict[tuple[Kind, int], Any] = {}

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

    def table(self, prev: Kind | None, kind: Kind, nxt: Kind | None, stages: int, stage: int, mbs: int,
              m: int) -> np.ndarray | None:
        """t[j, i]: a micro-batch's forward + backward of layers j .. i-1 on ``kind`` as stage ``stage`` of
        ``stages`` plus its sends to ``prev`` and ``nxt`` (the simulator's ``send_factors``); +inf where the
        segment does not fit in memory (None: no profile for ``kind`` at ``mbs``)."""
        key = (prev, kind, nxt, stages, stage, mbs, m)
        got = self._tables.get(key, False)
        if got is not False:
            return got
        pre = self.prefix(kind, mbs)
        if pre is None:
            self._tables[key] = None
            return None
        factors = getattr(self.sim, "send_factors", _blocking)
        t = pre[None, :] - pre[:, None]                                  # t[j, i] = compute of j..i-1
        f_in, f_out = factors(stages, stage)
        if prev is not None:                                             # at j: the activation in, its gradient out
            into = self.send(prev, kind, mbs)
            t = t + _weighted(f_in, into)[:, None]
        if nxt is not None:                                              # at i: the activation out, its gradient in
            out = self.send(kind, nxt, mbs)
            t = t + _weighted(f_out, out)[None, :]
        ok = self.fits(kind, mbs, stages, stage, m) & self.upper
        t = np.where(ok, t, math.inf)
        if len(self._tables) > 200_000:
            self._tables.clear()
        self._tables[key] = t
        return t

    def speed(self, kinds: tuple[Kind, ...], mbs: int) -> tuple[float, list[float]]:
        """(T_ref, rho per stage) for ``_quick_bound``: ``rho_k = min_l t_l(k) / t_l(ref)`` over the layers
        but the first and the last (an embedding and a head differ most between kinds; leaving layers out
        keeps it a bound: the others must still be covered), the reference the first kind seen at ``mbs``."""
        rho = self._rho.get(mbs)
        if rho is None:
            rho = self._rho[mbs] = {}
        out = []
        for k in kinds:
            r = rho.get(k)
            if r is None:
                pre = self.prefix(k, mbs)
                if "ref" not in rho and pre is not None:
                    rho["ref"] = np.diff(pre)[1:-1] if len(pre) > 3 else np.diff(pre)
                base = rho.get("ref")
                if pre is None or base is None:
                    r = math.inf
                else:
                    mine = np.diff(pre)[1:-1] if len(pre) > 3 else np.diff(pre)
                    ok = base > 0
                    r = float(np.min(mine[ok] / base[ok])) if ok.any() else math.inf
                rho[k] = r
            out.append(r)
        base = rho.get("ref")
        return (float(base.sum()) if base is not None else 0.0), out

    def transfers(self, stages: int) -> list[float]:
        """Per stage, the transfers per micro-batch the simulator charges (``send_factors``)."""
        if stages not in self._transfers:
            factors = getattr(self.sim, "send_factors", _blocking)
            out = []
            for s in range(stages):
                f_in, f_out = factors(stages, s)
                out.append((sum(f_in) if s > 0 else 0.0) + (sum(f_out) if s < stages - 1 else 0.0))
            self._transfers[stages] = out
        return self._transfers[stages]

    def share_allreduce(self, kinds: frozenset, dp: int, stages: int) -> float:
        """The all-reduce of ``1 / stages`` of the parameters on the cheapest of ``kinds`` (the largest stage
        holds at least that share)."""
        key = (kinds, dp, stages)
        if key not in self._share:
            best = math.inf
            p1 = sum(self.profile.layer_sizes(1).params) / stages
            for k in kinds:
                self.allreduce(k, dp)
                f = self._ar_fn.get((k, dp))
                if f is None:
                    best = 0.0
                    break
                pt = sum(self.profile.layer_sizes(k.tp).params) / stages
                best = min(best, float(f(np.array([p1]), np.array([pt]))[0]) if np.ndim(f(p1, pt)) else float(f(p1, pt)))
            self._share[key] = best if math.isfinite(best) else 0.0
        return self._share[key]

    def min_send(self, a: Kind, b: Kind, mbs: int) -> float:
        """The cheapest transfer (activation or gradient) across any boundary between ``a`` and ``b``."""
        key = (a, b, mbs)
        if key not in self._min_send:
            s = self.send(a, b, mbs)[:, 1:]
            self._min_send[key] = float(s.min()) if s.size and np.isfinite(s).any() else 0.0
        return self._min_send[key]

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
                self._ar_fn[key] = f
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


def _weighted(factors: tuple[float, float], sends: np.ndarray) -> np.ndarray:
    """factors[0] x activation + factors[1] x gradient, a term with factor 0 counting 0 even where +inf."""
    out = np.zeros(sends.shape[1])
    for f, row in zip(factors, sends):
        if f:
            out = out + f * row
    return out


def _blocking(stages: int, stage: int) -> tuple[tuple[float, float], tuple[float, float]]:  # noqa: ARG001
    """Per micro-batch, (activation, gradient) transfers a stage pays at its input and at its output
    boundary: both, on both sides (blocking sends occupy both ends)."""
    return (1.0, 1.0), (1.0, 1.0)


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
           slack: float = 0.05, fill: int = 16) -> tuple[Plan, PlanEstimate, dict[str, float]]:
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
        while heap and time.perf_counter() < soft:
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
    # mixed replicas from the GPUs the templates leave idle (``_fill``): scanned over the ranked templates
    # (to 75% of the budget), estimated by the template's bottleneck, the ``fill`` most promising judged
    n_filled = 0
    filled: list[tuple[float, int, Plan]] = []
    for _, cand in ranked:
        if time.perf_counter() > t0 + 0.75 * budget_s or fill <= 0 or objective.kind == "cost":
            break
        for plan, m_new in _fill(cand, costs, cluster, B):
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
             "plan.best_template_found_s": found_s, "plan.narrow_pass_s": narrow_s,
             "plan.templates_judged": float(n_judged), "plan.local_moves": float(moves),
             "plan.filled": float(n_filled)}
    return best[1], best[2], stats


def _quick_bound(costs: Costs, kinds: tuple[Kind, ...], mbs: int, m: int, dp: int, floor_c: float = 0.0,
                 pairs: bool = False) -> float:
    """A lower bound on ``split``'s estimate ``(m - 1) max_s (c_s + k_s) + sum_s (c_s + k_s) + A + u``:

    - stage ``s`` pays at least ``n_s`` transfers (the simulator's ``send_factors``) of the cheapest send
      ``k`` between adjacent kinds (between any two when ``pairs``: the order is not fixed yet);
    - the bottleneck ``C`` is at least the largest layer on its cheapest kind, ``floor_c`` (the work LP's
      per-micro-batch floor), and the balance: stage ``s`` of kind ``k`` holds at most ``(C - n_s k) /
      rho_k`` seconds of the reference kind's layers, ``rho_k`` the least ratio over the layers but the
      first and the last, so ``C >= (T_ref + sum_s n_s k / rho_s) / sum_s 1 / rho_s``;
    - the sum at least each layer on its cheapest kind plus the sends; the all-reduce at least the
      largest layer's and the one of the largest stage's share of the parameters (``1 / S`` of them, on
      the template's cheapest kind); the update the largest of the kinds'."""
    key = (frozenset(kinds), mbs, dp)
    got = costs.layer_floor.get(key)
    if got is None:
        pres = [costs.prefix(k, mbs) for k in key[0]]
        if any(p is None for p in pres):
            got = (math.inf, math.inf, math.inf, math.inf, math.inf)
        else:
            per_layer = np.min(np.stack([np.diff(p) for p in pres if p is not None]), axis=0)
            ar = np.min(np.stack([np.diagonal(costs.allreduce(k, dp), 1) for k in key[0]]), axis=0)
            upd = max(costs.update(k, mbs) for k in key[0])
            got = (float(per_layer.sum()), float(per_layer.max()), max(float(ar.max()), 0.0), upd,
                   min(costs.min_send(a, b, mbs) for a in key[0] for b in key[0]))
        costs.layer_floor[key] = got
    total, biggest, ar_layer, upd, k_all = got
    if not math.isfinite(total):
        return math.inf
    S = len(kinds)
    n = costs.transfers(S)
    k = 0.0
    if S > 1:
        k = k_all if pairs else min(costs.min_send(a, b, mbs) for a, b in zip(kinds, kinds[1:]))
    ref, rho = costs.speed(kinds, mbs)
    inv = sum(1.0 / r for r in rho if r > 0)
    balance = (ref + k * sum(ns / r for ns, r in zip(n, rho))) / inv if inv > 0 else math.inf
    bottleneck = max(balance, biggest + k * min(n), floor_c)
    ar_share = costs.share_allreduce(key[0], dp, S) if dp > 1 else 0.0
    return (m - 1) * bottleneck + total + k * sum(n) + max(ar_layer, ar_share) + upd


def _group_bound(costs: Costs, cluster: GpuCluster, mbs: int, dp: int, B: int, lp_s: float, max_stages: int) -> float:
    """A lower bound on every template of the group (mbs, dp): ``_quick_bound`` with every kind of every
    type, one stage (no send) or at most as many stages as the GPUs allow, each of its fastest kind."""
    per_type = kinds_of(costs.profile, cluster, mbs)
    ks = [k for kk in per_type.values() for k in kk if costs.prefix(k, mbs) is not None]
    if not ks:
        return math.inf
    most = sum(cluster.gpus[key] // (dp * min(k.tp for k in kk)) for key, kk in per_type.items())
    most = min(most, costs.profile.num_layers, max_stages)
    if most < 1:
        return math.inf
    m = math.ceil(B / (mbs * dp))
    floor_c = lp_s * mbs * dp / B
    _quick_bound(costs, tuple(ks), mbs, m, dp, floor_c, pairs=True)
    total, biggest, ar_layer, upd, kmin = costs.layer_floor[(frozenset(ks), mbs, dp)]
    if not math.isfinite(total):
        return math.inf
    single = (m - 1) * max(total, floor_c) + total
    multi = (m - 1) * max(total / most + kmin, biggest, floor_c) + total + 2 * kmin if most > 1 else math.inf
    return min(single, multi) + ar_layer + min(costs.update(k, mbs) for k in ks)


def _per_mbs_lp(profile: LayeredProfile, cluster: GpuCluster, B: int) -> dict[int, float]:
    """Per micro-batch size, the work LP of ``bound.work_lp`` (0 where it cannot be solved)."""
    from orchestrator.planning.bound import work_lp

    out = {}
    for mbs in sorted({m for (g, _) in cluster.gpus for m in profile.micro_batches(g)}):
        t = work_lp(profile, cluster, B, mbs)
        out[mbs] = t if math.isfinite(t) else 0.0
    return out


def _price(cluster: GpuCluster, kind: Kind) -> float:
    return cluster.gpu_type(kind.gpu).usd_per_gpu_hour or 0.0


def _priority(objective: PlanObjective, bound: float, usd_h: float) -> float:
    """A lower bound on ``_rank`` from a lower bound on the iteration and the USD per hour (cost: their
    product; otherwise the time)."""
    return bound * usd_h if objective.kind == "cost" else bound


def _may_admit(objective: PlanObjective, bound: float, usd_h: float, batch: int) -> bool:
    """False when no template of this choice can meet the objective's constraint."""
    if objective.kind == "budget" and objective.max_usd_per_hour is not None:
        return usd_h <= objective.max_usd_per_hour
    if objective.kind == "cost" and objective.min_samples_per_s is not None:
        return batch / bound >= objective.min_samples_per_s
    return True


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


def _fill(cand: Candidate, costs: Costs, cluster: GpuCluster, batch: int):
    """Plans of ``cand`` with ``d`` more replicas in every stage (so fewer micro-batches), taken from the GPUs
    the template leaves idle, of any type and TP degree whose replica runs the stage's layers (and its
    sends) within the template's bottleneck and fits in memory: mixed GPU types inside a data-parallel group,
    each replica as fast as the stage's own. For each micro-batch count below the template's, the least
    ``d`` that reaches it, while the GPUs last."""
    S, mbs, dp, b = len(cand.kinds), cand.mbs, cand.dp, cand.bounds
    m = math.ceil(batch / (mbs * dp))
    left = dict(cluster.gpus)
    for k in cand.kinds:
        left[(k.gpu, k.zone)] = left.get((k.gpu, k.zone), 0) - dp * k.tp
    if not any(v > 0 for v in left.values()):
        return
    pool = [k for key, ks in kinds_of(costs.profile, cluster, mbs).items() if left.get(key, 0) > 0 for k in ks]
    tables = [costs.table(cand.kinds[s - 1] if s else None, k, cand.kinds[s + 1] if s < S - 1 else None, S, s, mbs, m)
              for s, k in enumerate(cand.kinds)]
    if any(t is None for t in tables):
        return
    ceiling = max(float(t[b[s], b[s + 1]]) for s, t in enumerate(tables)) * (1 + 1e-9)
    # per stage, the extra kinds that keep it within the bottleneck, fewest GPUs first (then the larger TP)
    fits: list[list[Kind]] = []
    for s in range(S):
        ok = []
        for k in pool:
            t = costs.table(cand.kinds[s - 1] if s else None, k, cand.kinds[s + 1] if s < S - 1 else None, S, s, mbs, m)
            if t is not None and float(t[b[s], b[s + 1]]) <= ceiling:
                ok.append(k)
        if not ok:
            return
        fits.append(sorted(ok, key=lambda k: (k.tp, -k.tp)))
    target = m - 1
    while target >= 1:
        d = math.ceil(batch / (mbs * target)) - dp
        extra = _allocate(fits, left, d)
        if extra is None:
            return
        stages = tuple(Stage(tuple(range(b[s], b[s + 1])), (cand.kinds[s].replica(),) * dp + tuple(k.replica() for k in extra[s]))
                       for s in range(S))
        yield Plan([Pipeline(stages)], mbs), math.ceil(batch / (mbs * (dp + d)))
        target = math.ceil(batch / (mbs * (dp + d))) - 1


def _allocate(fits: list[list[Kind]], left: dict, d: int) -> list[list[Kind]] | None:
    """``d`` extra replicas per stage from the GPUs ``left``, each stage's from its allowed kinds in order
    (stages with the fewest choices first); None when the GPUs run out."""
    have = dict(left)
    out: list[list[Kind]] = [[] for _ in fits]
    for s in sorted(range(len(fits)), key=lambda s: len(fits[s])):
        need = d
        for k in fits[s]:
            key = (k.gpu, k.zone)
            n = min(need, max(have.get(key, 0), 0) // k.tp)
            if n > 0:
                out[s] += [k] * n
                have[key] -= n * k.tp
                need -= n
            if need == 0:
                break
        if need > 0:
            return None
    return out


def _neighbours(plan: Plan, num_layers: int, cluster: GpuCluster):
    """The plan with one replica more or less in every stage (where the GPUs allow; a mixed stage keeps its
    mix), or one layer moved across one stage boundary."""
    p = plan.pipelines[0]
    for d in (1, -1):                                   # a copy of each stage's last replica, or the last dropped
        stages = tuple(Stage(s.layers, s.replicas + s.replicas[-1:] if d > 0 else s.replicas[:-1]) for s in p.stages)
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
