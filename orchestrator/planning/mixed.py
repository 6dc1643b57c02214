"""Mixed GPU types inside a data-parallel group (docs/plans.md, "The joint planner", 4): the GPUs a template
leaves idle become extra replicas of its stages, each as fast as the stage's own, for fewer micro-batches."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import Pipeline, Plan, Stage
from orchestrator.planning.costs import Costs
from orchestrator.planning.templates import Kind, kinds_of


def fill_plans(cand: Any, costs: Costs, cluster: GpuCluster, batch: int):
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
