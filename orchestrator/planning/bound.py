"""A certified lower bound on the iteration time of any plan of a model on a cluster (docs/plans.md, "The
bound"): the work every sample needs, spread over the cluster's GPUs at their best per-GPU efficiency, as a
linear program, plus the optimizer step no plan avoids.

    e_l(g) = min over (mbs, tp) of (fwd_l + bwd_l)(g, mbs, tp) x tp / mbs      GPU-seconds per sample
    minimise T  s.t.  sum_g x_lg = 1 (every layer's work done),  x >= 0,
                      B x sum_l e_l(g) x_lg <= N_g x T   (no GPU type busier than T)
    bound = T* + min over entries of update_s

Valid for both simulators over plans whose every stage runs its pipeline's micro-batches on its own replicas
(each replica's compute at least the profile's, a GPU busy at most the iteration): the bubble, the sends and
the all-reduces only add to it."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.plan import GpuCluster, LayeredProfile


def lower_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int) -> float:
    u_min = _min_update(profile, cluster)
    return work_lp(profile, cluster, global_batch) + (u_min if math.isfinite(u_min) else 0.0)


def _min_update(profile: LayeredProfile, cluster: GpuCluster) -> float:
    u = math.inf
    for (g, _), n in cluster.gpus.items():
        if n <= 0 or g not in profile.times:
            continue
        per_node = cluster.gpu_type(g).gpus_per_node
        for mbs in profile.micro_batches(g):
            for tp in profile.tp_degrees(g, mbs):
                if tp <= per_node:
                    u = min(u, min(x[2] for x in profile.layer_times(g, mbs, tp)))
    return u


def work_lp(profile: LayeredProfile, cluster: GpuCluster, global_batch: int, mbs: int | None = None) -> float:
    """The work LP's optimum T* (seconds), over every micro-batch size or at ``mbs`` only."""
    from scipy.optimize import linprog

    types: dict[str, int] = {}
    for (gpu, _), n in cluster.gpus.items():
        if n > 0 and gpu in profile.times:
            types[gpu] = types.get(gpu, 0) + n
    if not types:
        return math.inf
    L, names = profile.num_layers, sorted(types)
    G = len(names)
    e = np.full((L, G), math.inf)
    for gi, g in enumerate(names):
        per_node = cluster.gpu_type(g).gpus_per_node
        for b in profile.micro_batches(g):
            if mbs is not None and b != mbs:
                continue
            for tp in profile.tp_degrees(g, b):
                if tp > per_node:
                    continue
                t = profile.layer_times(g, b, tp)
                for layer in range(L):
                    e[layer, gi] = min(e[layer, gi], (t[layer][0] + t[layer][1]) * tp / b)
    if not np.isfinite(e).any(axis=1).all():
        return math.inf
    # variables: x (L x G, row-major), then T
    n = L * G + 1
    c = np.zeros(n)
    c[-1] = 1.0
    a_eq = np.zeros((L, n))
    for layer in range(L):
        a_eq[layer, layer * G:(layer + 1) * G] = 1.0
    a_ub = np.zeros((G, n))
    for gi, g in enumerate(names):
        for layer in range(L):
            a_ub[gi, layer * G + gi] = global_batch * (e[layer, gi] if math.isfinite(e[layer, gi]) else 1e30)
        a_ub[gi, -1] = -types[g]
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(G), A_eq=a_eq, b_eq=np.ones(L), bounds=[(0, None)] * n, method="highs")
    if res.status != 0:
        return math.inf
    return float(res.x[-1])
