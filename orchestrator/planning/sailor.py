"""Sailor's published simulator (Strati et al., SOSP'25, arXiv 2504.17096; ``runtime_simulator.py`` and
``check_config_fits`` of eth-easl/sailor), written again from the paper's and the code's formulas so that
any plan's figure on the anchor's own metric is one option away (``planner.simulator=sailor``).

Its rules (docs/plans.md, "Sailor's simulator"), kept as published, including what we think is wrong:

- micro-batches ``m = ceil(B / (mbs * dp0 * P))`` with ``dp0`` the first stage's replicas and ``P`` pipelines;
- per pipeline ``T_pp = (m-1) * max_s (c_s + k_s) + sum_s k_s + sum_s c_s + max_s u_s``, ``c_s`` a replica's
  forward + backward (the slowest replica), ``k_s`` its point-to-point sends (stage 0: one activation, or two
  when more than 3 stages; last: two gradients; others: one of each), ``u_s`` the profiled update;
- sends and all-reduces on the inter-node fit (never intra-node), uncapped; activation bytes at TP 1;
- ``T_sync`` = the slowest stage's bucketed ring all-reduce (buckets of 5e8 bytes, stage bytes divided by
  the smallest TP degree, at most 4) + a ring across pipelines of the largest pipeline's stages;
- memory: ``24 x params`` (Adam: fp32 model, 2 states, gradients, comm buffer, DeepSpeed's copies) plus the
  stage's activations times ``S - s`` in-flight micro-batches, plus 5.06 GB (Megatron's kernels) as the
  peak figure; whether a plan fits is the planner's rule: 2 GB (TP 1) or 3 GB instead, against the type's
  nominal memory (40 GiB for an A100-40).

A TP group across machines (Metis' form) costs only its TP all-reduces, as published (see ``_megatron_ar``).
One deviation: a profile entry the plan needs and the files lack is an error here (Sailor reads it as 0 s).
"""

from __future__ import annotations

import math

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import Link, bucketed_allreduce_time, ring_allreduce_time
from orchestrator.plan import LayeredProfile, Plan, Replica
from orchestrator.planning.bound import lower_bound as work_bound
from orchestrator.planning.estimate import PlanEstimate, StageFigures, usd_per_iteration
from orchestrator.planning.sailor_bound import sailor_lower_bound
from orchestrator.planning.sailor_rules import (
    BUCKET_BYTES,
    cross_pipeline,
    cross_pipeline_undercharge,
    sailor_scores_honestly,
    uncapped,
)
from orchestrator.planning.simulators import AllreduceRule, MemoryRule, PlanSimulator, SendFactors

__all__ = ["BUCKET_BYTES", "KERNEL_BYTES", "SailorSimulator", "cross_pipeline_undercharge"]

KERNEL_BYTES = 4.76e9 + 300e6


class SailorSimulator(PlanSimulator):
    name = "sailor"

    def estimate(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                 timeline: bool = False) -> PlanEstimate:  # noqa: ARG002 (no timeline: Sailor's is a formula)
        net = cluster.topology
        fb = profile.float_bytes
        act1 = profile.layer_sizes(1).act_output
        params1 = profile.layer_sizes(1).params
        dp0 = plan.pipelines[-1].stages[0].dp
        m = math.ceil(global_batch / (plan.mbs * dp0 * len(plan.pipelines)))
        figures: list[StageFigures] = []
        pipeline_s = []
        for pi, p in enumerate(plan.pipelines):
            comp, upd, gpus = [], [], []
            for s in p.stages:
                c = u = 0.0
                slow = s.replicas[0].gpu
                for r in s.replicas:
                    t = profile.layer_times(r.gpu, plan.mbs, r.tp)
                    if r.machines > 1:
                        cr = 2 * sum(_megatron_ar(profile, plan.mbs, r, layer, net) for layer in s.layers)
                    else:
                        cr = sum(t[layer][0] + t[layer][1] for layer in s.layers)
                    if cr > c:
                        c, slow = cr, r.gpu
                    u = max(u, t[s.layers[0]][2])
                comp.append(c)
                upd.append(u)
                gpus.append(slow)
            sends = _sends(plan, pi, act1, profile.act_float_bytes, net)
            straggler = max(c + k for c, k in zip(comp, sends))
            t_pp = (m - 1) * straggler + sum(sends) + sum(comp) + max(upd)
            pipeline_s.append(t_pp)
            ars = _stage_allreduce(p, params1, fb, net)
            for si, s in enumerate(p.stages):
                mem = max(self.memory(plan, profile, pi, si, r.tp) for r in s.replicas)
                # fits: the planner's rule (check_config_fits), each replica against its GPU's nominal GB
                over = max(self.fit_memory(profile, s.layers, r.tp, plan.mbs, len(p.stages), si) - _nominal(cluster, r.gpu)
                           for r in s.replicas)
                limit = mem - over
                figures.append(StageFigures(pi, si, gpus[si], m, m * comp[si], m * sends[si], ars[si], upd[si], mem, limit))
        t_sync = max(max(_stage_allreduce(p, params1, fb, net), default=0.0) for p in plan.pipelines)
        t_sync += cross_pipeline(plan, params1, fb, net)
        iteration = max(pipeline_s) + t_sync
        work = sum(f.compute_s for f in figures)
        busy = sum(len(p.stages) for p in plan.pipelines) * iteration
        return PlanEstimate(iteration, self.name, figures, global_batch, usd_per_iteration(plan, cluster, iteration),
                            bubble_fraction=max(0.0, 1.0 - work / busy) if busy else 0.0,
                            pipeline_s=pipeline_s, sync_s=t_sync)

    def gradient_layer(self, first: int) -> int:
        """The layer whose output size Sailor charges for the gradient a stage starting at ``first`` sends
        back: ``first`` itself (its own output; physically it is layer ``first - 1``'s)."""
        return first

    def send_factors(self, stages: int, stage: int) -> SendFactors:
        """The sends Sailor counts per micro-batch (activation, gradient) at a stage's input and output:
        stage 0 one activation (two when more than 3 stages), the last two gradients, others one of each."""
        if stage == 0:
            return (0.0, 0.0), (2.0 if stages > 3 else 1.0, 0.0)
        if stage == stages - 1:
            return (0.0, 2.0), (0.0, 0.0)
        return (0.0, 1.0), (1.0, 0.0)

    def boundary_time(self, a: Replica, b: Replica, nbytes, cluster: GpuCluster):
        """Seconds of one activation of ``nbytes`` (a number or an array) from a replica of ``a`` to one of ``b``."""
        return _link(cluster.topology, a, b).time(nbytes)

    def stage_allreduce(self, profile: LayeredProfile, replica: Replica, dp: int, cluster: GpuCluster) -> AllreduceRule:
        """f(params floats at TP 1, at the replica's TP) -> the stage's all-reduce seconds, for a search."""
        link = uncapped(cluster.topology.inter_link(replica.zone, replica.gpu, 1, replica.zone, replica.gpu, 1))
        tp_min = min(4, replica.tp)
        fb = profile.float_bytes
        return lambda p1, pt: bucketed_allreduce_time(link, p1 * fb / tp_min, dp, BUCKET_BYTES)  # noqa: ARG005

    def stage_memory(self, profile: LayeredProfile, tp: int, gpu: str, mbs: int, stages: int, stage: int,
                     micro_batches: int, cluster: GpuCluster) -> MemoryRule:  # noqa: ARG002
        """(need(params floats, activation floats per sample), limit): the fit rule, for a search."""
        mult = (4 if profile.optimizer == "sgd" else 8) + 16
        fixed = (2e9 if tp == 1 else 3e9) + profile.transient_bytes(tp, mbs)
        scale = mbs * profile.act_float_bytes * (stages - stage)
        return (lambda params, acts: params * mult + acts * scale + fixed), _nominal(cluster, gpu)

    def scores_honestly(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster) -> bool:
        """Sailor's formula under-charges some plans (``sailor_rules.sailor_scores_honestly``)."""
        return sailor_scores_honestly(plan, profile, cluster)

    def lower_bound(self, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                    plan: Plan | None = None) -> float:
        """The work bound (``bound.lower_bound``), and the larger of it and the bound on Sailor's metric
        (``sailor_bound.sailor_lower_bound``) unless ``plan`` is given and the formula under-charges it."""
        t = work_bound(profile, cluster, global_batch)
        if plan is None or self.scores_honestly(plan, profile, cluster):
            detail: dict[str, float] = {}
            t = max(t, sailor_lower_bound(profile, cluster, global_batch, detail, time_limit_s=self.bound_time_limit_s))
            self.bound_cut = self.bound_cut or bool(detail.get("cut"))
        return t

    @staticmethod
    def fit_memory(profile: LayeredProfile, layers, tp: int, mbs: int, stages: int, stage: int) -> float:
        """The planner's memory rule (``check_config_fits``): the same terms with 2 GB (TP 1) or 3 GB of
        Megatron's memory outside PyTorch's allocator instead of the 5.06 GB of the validation figure."""
        sizes = profile.layer_sizes(tp)
        multiplier = (4 if profile.optimizer == "sgd" else 8) + 16
        params = sum(sizes.params[layer] for layer in layers)
        act = sum(sizes.act_mem[layer] for layer in layers) * mbs * profile.act_float_bytes
        return params * multiplier + act * (stages - stage) + (2e9 if tp == 1 else 3e9) + profile.transient_bytes(tp, mbs)

    @staticmethod
    def memory(plan: Plan, profile: LayeredProfile, pipeline: int, stage: int, tp: int) -> float:
        """Sailor's validation figure of one GPU's peak memory (``get_memory_footprint_on_gpu``)."""
        p = plan.pipelines[pipeline]
        s = p.stages[stage]
        sizes = profile.layer_sizes(tp)
        multiplier = (4 if profile.optimizer == "sgd" else 8) + 4 + 4 + 4 + 4
        params = sum(sizes.params[layer] for layer in s.layers)
        act = sum(sizes.act_mem[layer] for layer in s.layers) * plan.mbs * profile.act_float_bytes
        return params * multiplier + act * (len(p.stages) - stage) + KERNEL_BYTES + profile.transient_bytes(tp, plan.mbs)


def _megatron_ar(profile: LayeredProfile, mbs: int, r, layer: int, net) -> float:
    """A layer's time for a TP group across machines, as published (``get_comm_time_megatron_ar``): only
    its TP all-reduces (the computation term is computed there and dropped), one for the embedding, two for
    layers below the training config's ``num_layers - 1``, none above (so the last decoder blocks and the
    head of OPT-350M count 0)."""
    size = profile.tp_allreduce_bytes(mbs)
    coef = uncapped(net.inter_link(r.zone, r.gpu, r.node_gpus, r.zone, r.gpu, r.node_gpus))
    ar = ring_allreduce_time(coef, size, r.tp)
    num_layers = int(profile.extra.get("training_config", {}).get("num_layers", profile.num_layers))
    if layer == 0:
        return ar
    return 2 * ar if layer < num_layers - 1 else 0.0


def _nominal(cluster: GpuCluster, gpu: str) -> float:
    """Sailor's GPU memory for its fit rule: the nominal GB its name ends with x 2^30 (A100-40: 40 GiB, where the
    cluster's figure is 39.4 GiB), where that number is the type's memory within 10%; else the cluster's memory (a
    number that is a model, not a size: RTX-3090 has 24 GiB, not 3090)."""
    memory = cluster.gpu_type(gpu).memory_bytes
    digits = gpu.rsplit("-", 1)[-1]
    nominal = float(digits) * 2**30 if digits.isdigit() else 0.0
    return nominal if 0.9 <= nominal / memory <= 1.1 else memory


def _link(net, a, b) -> Link:
    return uncapped(net.inter_link(a.zone, a.gpu, min(a.tp, a.node_gpus), b.zone, b.gpu, min(b.tp, b.node_gpus)))


def _sends(plan: Plan, pi: int, act1, fb: int, net) -> list[float]:
    p = plan.pipelines[pi]
    n = len(p.stages)
    out = []
    for i, s in enumerate(p.stages):
        act_bytes = act1[s.layers[-1]] * fb * plan.mbs
        grad_bytes = act1[s.layers[0]] * fb * plan.mbs
        fwd = bwd = 0.0
        if i < n - 1:
            nxt = p.stages[i + 1]
            fwd = max(_link(net, r, nxt.replicas[j % nxt.dp]).time(act_bytes) for j, r in enumerate(s.replicas))
        if i > 0:
            prv = p.stages[i - 1]
            bwd = max(_link(net, r, prv.replicas[j % prv.dp]).time(grad_bytes) for j, r in enumerate(s.replicas))
        if 0 < i < n - 1:
            out.append(fwd + bwd)
        elif i == n - 1:
            out.append(2 * bwd)
        else:
            out.append(fwd if n <= 3 else 2 * fwd)
    return out


def _stage_allreduce(p, params1, fb: int, net) -> list[float]:
    out = []
    for s in p.stages:
        tp_min = min([4] + [r.tp for r in s.replicas])
        size = sum(params1[layer] * fb / tp_min for layer in s.layers)
        t = 0.0
        for j in range(s.dp - 1):
            a, b = s.replicas[j], s.replicas[j + 1]
            link = uncapped(net.inter_link(a.zone, a.gpu, 1, b.zone, b.gpu, 1))
            t = max(t, bucketed_allreduce_time(link, size, s.dp, BUCKET_BYTES))
        out.append(t)
    return out
