"""Lower bounds that order and prune the joint planner's best-first search (``orchestrator.planning.search``;
docs/plans.md, "The joint planner", 3): per template (or choice of blocks) and per group ``(mbs, dp)``, a
bound on the dynamic program's estimate; the objective's priority and admissibility of a choice."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile
from orchestrator.planning.costs import Costs
from orchestrator.planning.evaluator import PlanObjective
from orchestrator.planning.templates import Kind, kinds_of


def quick_bound(costs: Costs, kinds: tuple[Kind, ...], mbs: int, m: int, dp: int, floor_c: float = 0.0,
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


def group_bound(costs: Costs, cluster: GpuCluster, mbs: int, dp: int, B: int, lp_s: float, max_stages: int) -> float:
    """A lower bound on every template of the group (mbs, dp): ``quick_bound`` with every kind of every
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
    quick_bound(costs, tuple(ks), mbs, m, dp, floor_c, pairs=True)
    total, biggest, ar_layer, upd, kmin = costs.layer_floor[(frozenset(ks), mbs, dp)]
    if not math.isfinite(total):
        return math.inf
    single = (m - 1) * max(total, floor_c) + total
    multi = (m - 1) * max(total / most + kmin, biggest, floor_c) + total + 2 * kmin if most > 1 else math.inf
    return min(single, multi) + ar_layer + min(costs.update(k, mbs) for k in ks)


def per_mbs_lp(profile: LayeredProfile, cluster: GpuCluster, B: int) -> dict[int, float]:
    """Per micro-batch size, the work LP of ``bound.work_lp`` (0 where it cannot be solved)."""
    from orchestrator.planning.bound import work_lp

    out = {}
    for mbs in sorted({m for (g, _) in cluster.gpus for m in profile.micro_batches(g)}):
        t = work_lp(profile, cluster, B, mbs)
        out[mbs] = t if math.isfinite(t) else 0.0
    return out


def price(cluster: GpuCluster, kind: Kind) -> float:
    return cluster.gpu_type(kind.gpu).usd_per_gpu_hour or 0.0


def priority(objective: PlanObjective, bound: float, usd_h: float) -> float:
    """A lower bound on ``_rank`` from a lower bound on the iteration and the USD per hour (cost: their
    product; otherwise the time)."""
    return bound * usd_h if objective.kind == "cost" else bound


def may_admit(objective: PlanObjective, bound: float, usd_h: float, batch: int) -> bool:
    """False when no template of this choice can meet the objective's constraint."""
    if objective.kind == "budget" and objective.max_usd_per_hour is not None:
        return usd_h <= objective.max_usd_per_hour
    if objective.kind == "cost" and objective.min_samples_per_s is not None:
        return batch / bound >= objective.min_samples_per_s
    return True
