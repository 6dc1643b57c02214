"""Rules of Sailor's published formula that its simulator (``planning.sailor``) and the bound on its metric
(``planning.sailor_bound``, ``planning.sync_bound``) share: the all-reduce bucket, the uncapped link fits,
the ring across pipelines, and which plans the formula scores honestly (docs/plans.md, "Sailor's
simulator" and "The bound on Sailor's metric")."""

from __future__ import annotations

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import FittedLink, Link, bucketed_allreduce_time
from orchestrator.plan import LayeredProfile, Plan

BUCKET_BYTES = 5e8


def uncapped(link: Link) -> Link:
    """Sailor evaluates its fits uncapped."""
    return FittedLink(link.coeffs) if isinstance(link, FittedLink) else link


def cross_pipeline(plan: Plan, params1, fb: int, net, pipeline=None) -> float:
    """The ring across the pipelines, over the stages of the longest pipeline as published (or of
    ``pipeline``: what the ring would carry if that pipeline's stages were charged)."""
    if len(plan.pipelines) <= 1:
        return 0.0
    longest = pipeline if pipeline is not None else max(plan.pipelines, key=lambda p: len(p.stages))
    t = 0.0
    for s in longest.stages:
        size = sum(params1[layer] * fb for layer in s.layers)
        for r in s.replicas:
            link = uncapped(net.inter_link(r.zone, r.gpu, 1, r.zone, r.gpu, 1))
            t = max(t, bucketed_allreduce_time(link, size, len(plan.pipelines), BUCKET_BYTES))
    return t


def cross_pipeline_undercharge(plan: Plan, profile: LayeredProfile, cluster: GpuCluster) -> float:
    """Seconds by which Sailor's ring across pipelines (the longest pipeline's stages only) falls short of
    the ring another pipeline's stages would need (0 for one pipeline, or when the longest is the largest)."""
    if len(plan.pipelines) <= 1:
        return 0.0
    params1, fb, net = profile.layer_sizes(1).params, profile.float_bytes, cluster.topology
    charged = cross_pipeline(plan, params1, fb, net)
    return max(0.0, max(cross_pipeline(plan, params1, fb, net, p) for p in plan.pipelines) - charged)


def sailor_scores_honestly(plan: Plan, profile: LayeredProfile | None = None, cluster: GpuCluster | None = None) -> bool:
    """Whether Sailor's formula charges ``plan`` all the work it does: every stage has at least as many
    replicas as its pipeline's first (Sailor counts micro-batches by the first stage's replicas and charges
    each stage one micro-batch's time), the last pipeline's first stage has at most the average of the
    pipelines' first stages (Sailor counts micro-batches by the last one), and every TP group sits on one
    machine (Sailor drops the computation of a TP group across machines); and, given the profile and the
    cluster, the ring across pipelines Sailor charges (the longest pipeline's stages) is at least the one
    any pipeline's stages need (``cross_pipeline_undercharge``)."""
    firsts = [p.stages[0].dp for p in plan.pipelines]
    if firsts[-1] * len(firsts) > sum(firsts):
        return False
    if profile is not None and cluster is not None and len(plan.pipelines) > 1:
        if cross_pipeline_undercharge(plan, profile, cluster) > 1e-12:
            return False
    return all(s.dp >= p.stages[0].dp and all(r.machines == 1 for r in s.replicas)
               for p in plan.pipelines for s in p.stages)
