"""A certified lower bound on the iteration time of any plan of a model on a cluster (docs/plans.md, "The
bound"): the work every sample needs, spread over the cluster's GPUs at the best per-GPU efficiency a
memory-feasible replica can reach, as a linear program per micro-batch size, plus the optimizer step.

For a micro-batch size ``b`` (one per plan) and a GPU type ``g``:

    cap(g, tp, b)   the most contiguous layers one replica of ``tp`` GPUs can hold (the loosest memory
                    rule of the registered simulators, with one micro-batch in flight)
    whole(g, tp, b) the whole model fits on one such replica (a one-stage pipeline: no sends)
    kappa(g, tp, b) the cheapest transfer of one activation (the smallest layer output) between such a
                    replica and any replica of the cluster, on any registered simulator
    e_l(g, b) = min over tp of tp / b x (fwd_l + bwd_l)(g, b, tp) + [not whole] kappa / cap   GPU-s per sample
    T*(b) = min T  s.t.  sum_g x_lg = 1,  x >= 0,  B sum_l e_l(g, b) x_lg <= N_g T   for every type g
    bound = min over b of T*(b) + min update_s

Why it holds (both built-in simulators, plans whose every stage runs its pipeline's micro-batches on its own
replicas): a replica of stage ``s`` is busy at least ``m (c_r + k_s)`` (``m`` its micro-batches, ``c_r``
their forward and backward, ``k_s`` the transfers each costs it; Sailor's ``(m-1) max + sum`` and the
project's schedule both contain it), and its micro-batches carry its share of the pipeline's samples. A
replica that is not the whole pipeline sends or receives at least one activation per micro-batch (``k_s
>= kappa``) and holds at most ``cap`` layers, so ``k_s >= sum over its layers of kappa / cap``: charging
``kappa / cap`` to each layer never exceeds what the replica pays. Summing over a type's GPUs gives the
LP's constraint; bubbles, the rest of the sends and the all-reduces only add."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.errors import UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.partition.bounds import work_lp as partition_lp
from orchestrator.plan import LayeredProfile, Replica
from orchestrator.planning.simulators import simulators


def lower_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int) -> float:
    """The work bound, valid on both built-in simulators (``PlanSimulator.lower_bound``: the tightest one
    each simulator knows for its own figure)."""
    u_min = min_update(profile, cluster)
    t = min((work_lp(profile, cluster, global_batch, b) for b in cluster_micro_batches(profile, cluster)), default=math.inf)
    return t + (u_min if math.isfinite(u_min) else 0.0)


def cluster_micro_batches(profile: LayeredProfile, cluster: GpuCluster) -> list[int]:
    """The micro-batch sizes the profile has for some GPU type of the cluster."""
    return sorted({b for (g, _), n in cluster.gpus.items() if n > 0 for b in profile.micro_batches(g)})


def min_update(profile: LayeredProfile, cluster: GpuCluster) -> float:
    """The least optimizer step of any layer on any replica the cluster offers (inf: none)."""
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


def capacity(profile: LayeredProfile, cluster: GpuCluster, gpu: str, tp: int, mbs: int) -> tuple[int, bool]:
    """(the most contiguous layers a replica of ``tp`` GPUs of ``gpu`` holds at ``mbs``, whether it holds the
    whole model), by the loosest of the simulators' memory rules with one micro-batch in flight."""
    L = profile.num_layers
    ok = stage_fits(profile, cluster, gpu, tp, mbs)
    span = np.arange(L + 1)[None, :] - np.arange(L + 1)[:, None]
    fit = np.where(ok, span, 0)
    return int(fit.max()), bool(ok[0, L])


def stage_fits(profile: LayeredProfile, cluster: GpuCluster, gpu: str, tp: int, mbs: int) -> np.ndarray:
    """``ok[j, i]``: layers ``j .. i-1`` (at least one: ``j < i``) fit on one replica of ``tp`` GPUs of ``gpu`` at
    ``mbs`` by the looser of the registered simulators' memory rules, one micro-batch in flight. An empty or
    reversed range (``j >= i``) is no stage: its negative bytes would "fit" and its negative times loosen the bounds'
    DPs that read this table (the neighbours' two-stage seeding did)."""
    L = profile.num_layers
    sizes = profile.layer_sizes(tp)
    p = np.concatenate([[0.0], np.cumsum(sizes.params)])
    a = np.concatenate([[0.0], np.cumsum(sizes.act_mem)])
    params, acts = p[None, :] - p[:, None], a[None, :] - a[:, None]
    ok = np.zeros((L + 1, L + 1), dtype=bool)
    for sim in simulators():
        try:
            need, limit = sim.stage_memory(profile, tp, gpu, mbs, 1, 0, 1, cluster)
        except UserError:
            continue
        ok |= need(params, acts) <= limit
    return ok & (np.arange(L + 1)[:, None] < np.arange(L + 1)[None, :])


def min_transfer(profile: LayeredProfile, cluster: GpuCluster, gpu: str, tp: int, mbs: int) -> float:
    """The cheapest transfer of one activation (the smallest layer output at ``mbs``) from or to a replica of
    ``tp`` GPUs of ``gpu``, over every partner replica the cluster offers and every simulator (>= 0)."""
    nbytes = min(profile.layer_sizes(1).act_output) * profile.act_float_bytes * mbs
    zone_of = {g: z for (g, z), n in cluster.gpus.items() if n > 0}
    me = Replica(gpu, tp, cluster.gpu_type(gpu).gpus_per_node, zone_of.get(gpu, cluster.zone))
    partners = [Replica(g, t, cluster.gpu_type(g).gpus_per_node, z) for (g, z), n in cluster.gpus.items() if n > 0
                for t in (1, 2, 4, 8, 16) if t <= cluster.gpu_type(g).gpus_per_node]
    best = least_send(simulators(), [(me, other) for other in partners], nbytes, cluster)
    return best if math.isfinite(best) else 0.0


def least_send(sims: list, pairs: list[tuple[Replica, Replica]], nbytes: float, cluster: GpuCluster) -> float:
    """The least ``boundary_time`` of ``nbytes`` between the replicas of any pair, either direction, on any of
    ``sims`` (>= 0; inf: none gives a finite time)."""
    best = math.inf
    for x, y in pairs:
        for sim in sims:
            for a, b in ((x, y), (y, x)):
                try:
                    v = float(np.asarray(sim.boundary_time(a, b, nbytes, cluster)))
                except UserError:
                    continue
                if math.isfinite(v):
                    best = min(best, max(v, 0.0))
    return best


def per_sample_costs(profile: LayeredProfile, cluster: GpuCluster, mbs: int) -> tuple[list[str], np.ndarray]:
    """(GPU types, e[l, g]): the LP's GPU-seconds per sample of layer ``l`` on type ``g`` at ``mbs``."""
    types = sorted({g for (g, _), n in cluster.gpus.items() if n > 0 and g in profile.times})
    L = profile.num_layers
    e = np.full((L, len(types)), math.inf)
    for gi, g in enumerate(types):
        if mbs not in profile.times[g]:
            continue
        per_node = cluster.gpu_type(g).gpus_per_node
        for tp in profile.tp_degrees(g, mbs):
            if tp > per_node:
                continue
            cap, whole = capacity(profile, cluster, g, tp, mbs)
            if cap < 1:
                continue
            penalty = 0.0 if whole else min_transfer(profile, cluster, g, tp, mbs) / cap
            t = profile.layer_times(g, mbs, tp)
            for layer in range(L):
                e[layer, gi] = min(e[layer, gi], (t[layer][0] + t[layer][1] + penalty) * tp / mbs)
    return types, e


def work_lp(profile: LayeredProfile, cluster: GpuCluster, global_batch: int, mbs: int) -> float:
    """The work LP's optimum T*(mbs) in seconds (inf: no memory-feasible replica covers some layer):
    ``partition.bounds.work_lp`` with the layers as items and the GPU types as resources."""
    names, e = per_sample_costs(profile, cluster, mbs)
    if not names or not np.isfinite(e).any(axis=1).all():
        return math.inf
    counts = {g: 0 for g in names}
    for (g, _), n in cluster.gpus.items():
        if g in counts:
            counts[g] += n
    res = partition_lp(global_batch * e, np.array([float(counts[g]) for g in names]))
    if res is None or res.status != 0:
        return math.inf
    return float(res.x[-1])


def replica_kinds(profile: LayeredProfile, cluster: GpuCluster, mbs: int):
    """The (GPU type, TP degree) of every replica the cluster offers at ``mbs`` (a TP group in one machine)."""
    for (g, _), n in cluster.gpus.items():
        if n <= 0 or g not in profile.times or mbs not in profile.times[g]:
            continue
        per_node = cluster.gpu_type(g).gpus_per_node
        for tp in profile.tp_degrees(g, mbs):
            if tp <= min(per_node, n):
                yield g, tp
