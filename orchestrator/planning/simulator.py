"""The project's plan simulator (``planner.simulator=project``, the default): one iteration of a plan,
task by task, on the shared link and collective cost model (``orchestrator.hardware.links``) and the
shared pipeline schedules (``orchestrator.schedules``). Formulas and sources in docs/plans.md.

Per pipeline, each stage is represented by its slowest replica. A stage with ``dp`` replicas runs
``m_s = ceil(b / (dp * mbs))`` micro-batches per replica for the pipeline's ``b`` samples; the schedule
runs ``m = max_s m_s`` pipeline micro-batches, a stage's task lasting ``m_s / m`` of one micro-batch's work.

- A forward task of stage s: receive the activation (s > 0), compute ``sum fwd``, send it on (s < S-1);
  a backward task: receive the gradient (s < S-1), compute ``sum bwd``, send it back (s > 0). A transfer
  occupies both ends for ``t(n)`` on the link between their machines (each TP rank sends its own copy
  on its own NIC: the fit for one GPU), starting once the sender computed it and the receiver is free.
  Middle stages thus pay four transfers per micro-batch, end stages two (blocking NCCL send/recv in
  DeepSpeed's and Megatron's pipeline engines).
- After its last backward, each stage all-reduces its gradients over its replicas (ring, bucketed, on the
  slowest link of the group; hierarchical when several replicas share a machine), then across pipelines,
  then steps its optimizer. Stages do this independently: a late stage's all-reduce overlaps the early
  stages' drain (DeepSpeed's ``ReduceGrads`` is per stage). Every data-parallel all-reduce is the ring's time
  x ``allreduce_factor``, fitted on the all-reduce seconds measured in the shared plans (``red_grads``).
- A TP group across machines (Metis' form) pays, per layer, Megatron's all-reduces (``tp_allreduces``) as
  hierarchical all-reduces instead of the in-machine ones the profile measured.
- Memory of a GPU: parameters x bytes per parameter (weights, gradients, optimizer states) + activations
  of the micro-batches in flight (the schedule's count) + a fixed framework overhead.

The constants in ``Calibration`` are the only numbers fitted to measurements (``benchmarks/plan_fidelity.py
--fit``, on the shared measured GH200 plans only); their values say so where they are set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.errors import UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import Link, bucketed_allreduce_time, hierarchical_allreduce_time
from orchestrator.plan import LayeredProfile, Plan, Replica, Stage
from orchestrator.planning.bound import lower_bound as work_bound
from orchestrator.planning.estimate import Event, PlanEstimate, StageFigures, usd_per_iteration
from orchestrator.planning.simulators import AllreduceRule, MemoryRule, PlanSimulator, SendFactors
from orchestrator.schedules import F, OneFOneB


@dataclass(frozen=True)
class Calibration:
    """Constants of the simulator. ``task_overhead_s`` and the memory constants were fitted by
    ``benchmarks/plan_fidelity.py --fit`` on the 15 shared GH200 plans of OPT-350M (docs/benchmarks/plans.md);
    the rest are the frameworks' documented values."""

    task_overhead_s: float = 0.0            # per forward or backward task (kernel launches, the engine's dispatch)
    p2p_latency_s: float = 0.0              # per point-to-point transfer, on top of the link fit: fitted
    bytes_per_param: float = 16.0           # fp32 weights 4 + gradients 4 + Adam's two moments 8 (SGD: 8 + 4 buffer)
    # fitted (least squares on the 15 measured max_mem; leave-one-out median 1.0%, max 8.9%):
    param_factor: float = 1.617             # x 16 = 25.9 B/param: DeepSpeed's extra fp32 copies (gradient buckets, comm buffer)
    activation_factor: float = 1.140        # over the profiled activation bytes: allocator fragmentation
    framework_bytes: float = 3.764e9        # per GPU: CUDA context, NCCL buffers, fused kernels
    bucket_bytes: float = 5e8 * 4           # DeepSpeed's allreduce_bucket_size (5e8 elements) in fp32 bytes
    # fitted (``--fit``: the median over the 11 shared plans with a data-parallel all-reduce of their measured
    # ``red_grads`` over the simulated all-reduce; |error| of the all-reduce: median 65% without, 48% with it,
    # leave-one-out; the iteration time of the 15 plans: median 4.6% -> 3.4%, max 16.0% -> 15.8%):
    allreduce_factor: float = 2.82          # DeepSpeed's gradient all-reduce takes 2.8x the ring on the link fits


class ProjectSimulator(PlanSimulator):
    name = "project"

    def __init__(self, calibration: Calibration | None = None):
        self.cal = calibration or Calibration()

    # -- time and memory of a plan ---------------------------------------------------------------
    def estimate(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                 timeline: bool = False) -> PlanEstimate:
        sched = plan.schedule
        net = cluster.topology
        figures: list[StageFigures] = []
        events: list[Event] = []
        ends: list[float] = []
        pipeline_s: list[float] = []
        work = 0.0
        gpu_time = 0.0
        for pi, (p, batch) in enumerate(zip(plan.pipelines, plan.batches(global_batch))):
            S = len(p.stages)
            per_stage = [self._stage_compute(plan, profile, s, net) for s in p.stages]   # (fwd, bwd, update, gpu)
            m_s = [max(1, math.ceil(batch / (s.dp * plan.mbs))) for s in p.stages]
            m = max(m_s)
            if m > TIMELINE_MAX_MICRO_BATCHES:
                timeline = False
                events.clear()
            scale = [ms / m for ms in m_s]
            act = [self._boundary_time(plan, profile, net, p.stages[i], p.stages[i + 1]) for i in range(S - 1)]
            ov = self.cal.task_overhead_s
            f = [per_stage[i][0] * scale[i] + ov for i in range(S)]
            b = [per_stage[i][1] * scale[i] + ov for i in range(S)]
            # recv/send of one micro-batch, in each direction, scaled like the compute
            k_in = [0.0] + [act[i - 1] * scale[i] for i in range(1, S)]
            k_out = [act[i] * scale[i] for i in range(S - 1)] + [0.0]
            flush = _flush_times(sched, S, m, f, b, k_in, k_out, events if timeline else None, pi)
            pipeline_s.append(max(flush))
            for si, s in enumerate(p.stages):
                ar = self._stage_allreduce(plan, profile, net, s)
                upd = per_stage[si][2]
                end = flush[si] + ar
                if timeline and ar > 0:
                    events.append(Event(pi, si, "all-reduce", flush[si], end))
                ends.append((pi, si, end, upd))  # type: ignore[arg-type]
                comp = m * (f[si] + b[si])
                work += comp * s.gpus
                mem = max(self.memory(plan, profile, pi, si, r, m, cluster) for r in s.replicas)
                limit = min(cluster.gpu_type(r.gpu).memory_bytes for r in s.replicas)
                figures.append(StageFigures(pi, si, per_stage[si][3], m_s[si], comp, m * (k_in[si] + k_out[si]),
                                            ar, upd, mem, limit))
        cross = self._cross_pipeline(plan, profile, net)
        iteration = 0.0
        for pi, si, end, upd in ends:  # type: ignore[misc]
            t0 = end + cross
            if timeline and cross > 0:
                events.append(Event(pi, si, "all-reduce", end, t0))
            if timeline and upd > 0:
                events.append(Event(pi, si, "update", t0, t0 + upd))
            iteration = max(iteration, t0 + upd)
        gpu_time = plan.gpus * iteration
        return PlanEstimate(iteration, self.name, figures, global_batch, usd_per_iteration(plan, cluster, iteration),
                            bubble_fraction=max(0.0, 1.0 - work / gpu_time) if gpu_time else 0.0,
                            pipeline_s=pipeline_s, sync_s=iteration - max(pipeline_s), events=events)

    @staticmethod
    def _tp_across_machines(plan: Plan, profile: LayeredProfile, net, r: Replica, stage: Stage) -> float:
        """A TP group over ``k`` machines: the profile measured its all-reduces inside one machine; across
        machines each becomes hierarchical (inside each machine, then between them). Returns the extra
        seconds per micro-batch: sum over layers of ``n_l x (hierarchical - intra ring)``."""
        k = max(r.machines, math.ceil(r.tp / r.node_gpus))
        per = max(1, r.tp // k)
        size = profile.tp_allreduce_bytes(plan.mbs)
        intra = net.intra_link(r.gpu, max(per, 2))
        inter = net.inter_link(r.zone, r.gpu, 1, r.zone, r.gpu, 1)
        across = hierarchical_allreduce_time(intra, inter, size, k, per)
        inside = bucketed_allreduce_time(net.intra_link(r.gpu, min(r.tp, r.node_gpus) if r.tp > 1 else 2), size, r.tp)
        return sum(profile.tp_allreduces(layer) for layer in stage.layers) * max(0.0, across - inside)

    def _stage_compute(self, plan: Plan, profile: LayeredProfile, stage: Stage, net) -> tuple[float, float, float, str]:
        """(forward, backward, update) seconds of the stage's slowest replica, and its GPU type."""
        worst = (-1.0, 0.0, 0.0, stage.replicas[0].gpu)
        for r in stage.replicas:
            t = profile.layer_times(r.gpu, plan.mbs, r.tp)
            fwd = sum(t[layer][0] for layer in stage.layers)
            bwd = sum(t[layer][1] for layer in stage.layers)
            if r.machines > 1 or r.tp > r.node_gpus:
                extra = self._tp_across_machines(plan, profile, net, r, stage)
                fwd, bwd = fwd + extra / 2, bwd + extra / 2
            if fwd + bwd > worst[0] + worst[1]:
                worst = (fwd, bwd, t[stage.layers[0]][2], r.gpu)
        return worst

    def _boundary_time(self, plan: Plan, profile: LayeredProfile, net, a: Stage, b: Stage) -> float:
        """One activation (or its gradient) across the boundary a -> b: the slowest replica pair."""
        nbytes = profile.layer_sizes(1).act_output[a.layers[-1]] * profile.act_float_bytes * plan.mbs
        worst = 0.0
        pairs = max(a.dp, b.dp)
        for j in range(pairs):
            x, y = a.replicas[j % a.dp], b.replicas[j % b.dp]
            worst = max(worst, _rank_p2p_time(net, x, y, nbytes) + self.cal.p2p_latency_s)
        return worst

    def _stage_allreduce(self, plan: Plan, profile: LayeredProfile, net, stage: Stage) -> float:
        if stage.dp <= 1:
            return 0.0
        worst = 0.0
        for tp in sorted({r.tp for r in stage.replicas}):
            sizes = profile.layer_sizes(tp)
            nbytes = sum(sizes.params[layer] for layer in stage.layers) * profile.float_bytes
            worst = max(worst, _group_allreduce(net, list(stage.replicas), nbytes, self.cal.bucket_bytes))
        return worst * self.cal.allreduce_factor

    def _cross_pipeline(self, plan: Plan, profile: LayeredProfile, net) -> float:
        """Gradients of each layer all-reduced across pipelines: a ring over one replica per pipeline, the
        largest stage's bytes, on the slowest link between the pipelines' first replicas."""
        P = len(plan.pipelines)
        if P <= 1:
            return 0.0
        sizes = profile.layer_sizes(1)
        largest = max(sum(sizes.params[layer] for layer in s.layers) for p in plan.pipelines for s in p.stages)
        firsts = [p.stages[0].replicas[0] for p in plan.pipelines]
        return _group_allreduce(net, firsts, largest * profile.float_bytes, self.cal.bucket_bytes) * self.cal.allreduce_factor

    # -- the rules a search and the bounds read --------------------------------------------------
    def send_factors(self, stages: int, stage: int) -> SendFactors:  # noqa: ARG002
        """Per micro-batch, (activation, gradient) transfers a stage pays at its input and at its output
        boundary: both, on both sides (blocking sends occupy both ends)."""
        return (1.0, 1.0), (1.0, 1.0)

    def gradient_layer(self, first: int) -> int:
        """The gradient a stage starting at ``first`` sends back is layer ``first - 1``'s output's."""
        return first - 1

    def scores_honestly(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster) -> bool:  # noqa: ARG002
        """The task-by-task simulation charges every plan all its work."""
        return True

    def lower_bound(self, profile: LayeredProfile, cluster: GpuCluster, global_batch: int,
                    plan: Plan | None = None) -> float:  # noqa: ARG002
        """The work bound (``bound.lower_bound``), valid on every plan."""
        return work_bound(profile, cluster, global_batch)

    def boundary_time(self, a: Replica, b: Replica, nbytes, cluster: GpuCluster):
        """Seconds of one activation of ``nbytes`` (a number or an array) from a replica of ``a`` to one of ``b``."""
        return _rank_p2p_time(cluster.topology, a, b, nbytes) + self.cal.p2p_latency_s

    def stage_allreduce(self, profile: LayeredProfile, replica: Replica, dp: int, cluster: GpuCluster) -> AllreduceRule:
        """f(params floats at TP 1, at the replica's TP) -> the stage's all-reduce seconds, for a search."""
        members = [replica] * dp
        net, fb, bucket, factor = cluster.topology, profile.float_bytes, self.cal.bucket_bytes, self.cal.allreduce_factor
        return lambda p1, pt: _group_allreduce(net, members, pt * fb, bucket) * factor  # noqa: ARG005

    def stage_memory(self, profile: LayeredProfile, tp: int, gpu: str, mbs: int, stages: int, stage: int,
                     micro_batches: int, cluster: GpuCluster) -> MemoryRule:
        """(need(params floats, activation floats per sample), limit) of one stage's GPU, for a search (whose
        plans run 1F1B, ``Plan``'s default)."""
        per_param = (self.cal.bytes_per_param if profile.optimizer != "sgd" else 12.0) * self.cal.param_factor
        inflight = OneFOneB().in_flight(micro_batches, stages, stage)
        scale = mbs * profile.act_float_bytes * inflight * self.cal.activation_factor
        fixed = self.framework(cluster, gpu) + profile.transient_bytes(tp, mbs)
        return (lambda params, acts: params * per_param + acts * scale + fixed), cluster.gpu_type(gpu).memory_bytes

    def framework(self, cluster: GpuCluster | None, gpu: str) -> float:
        """The framework's fixed bytes per device: a GPU's CUDA context and buffers; none on a CPU type."""
        return 0.0 if cluster is not None and cluster.gpu_type(gpu).kind == "cpu" else self.cal.framework_bytes

    def memory(self, plan: Plan, profile: LayeredProfile, pipeline: int, stage: int, replica: Replica,
               micro_batches: int, cluster: GpuCluster | None = None) -> float:
        p = plan.pipelines[pipeline]
        s = p.stages[stage]
        sizes = profile.layer_sizes(replica.tp)
        per_param = self.cal.bytes_per_param if profile.optimizer != "sgd" else 12.0
        params = sum(sizes.params[layer] for layer in s.layers)
        act = sum(sizes.act_mem[layer] for layer in s.layers) * plan.mbs * profile.act_float_bytes
        inflight = plan.schedule.in_flight(micro_batches, len(p.stages), stage)
        return (params * per_param * self.cal.param_factor + act * inflight * self.cal.activation_factor
                + self.framework(cluster, replica.gpu) + profile.transient_bytes(replica.tp, plan.mbs))


def _rank_p2p_time(net, x: Replica, y: Replica, nbytes: float) -> float:
    """Each TP rank of ``x`` sends its own copy of the activation to its peer in ``y``, all at once: the
    best, over the fits for ``j = 1 .. k`` communicating GPUs (``k`` the TP group's GPUs on one machine), of
    the link's time with its bandwidth ``B(j)`` shared by ``j`` senders: ``B(1)`` where every GPU has its own
    NIC (the fits grow with ``j``), ``B(k) / k`` where they share one."""
    k = min(x.tp, x.node_gpus, y.tp, y.node_gpus)
    best = None
    for j in sorted({1, 2, 4, 8, k}):
        if j > k:
            continue
        try:
            link = net.inter_link(x.zone, x.gpu, j, y.zone, y.gpu, j)
        except UserError:
            continue
        t = link.time(nbytes, senders=j)
        best = t if best is None else np.minimum(best, t)
    return _p2p_link(net, x, y).time(nbytes) if best is None else best


def _p2p_link(net, x: Replica, y: Replica) -> Link:
    """Consecutive stages sit on different machines (Megatron's rank order: TP, then DP, then PP); the fit
    for the GPUs of each machine that take part (the TP group's, at most the machine's)."""
    return net.inter_link(x.zone, x.gpu, min(x.tp, x.node_gpus), y.zone, y.gpu, min(y.tp, y.node_gpus))


def _group_allreduce(net, members: list[Replica], nbytes: float, bucket: float) -> float:
    """Ring all-reduce over ``members`` (one TP rank each; all ranks of a TP group run their rings at once),
    on the slowest link between ring neighbours; hierarchical when several members share a machine."""
    k = len(members)
    if k <= 1:
        return 0.0
    first = members[0]
    per_node = max(1, first.node_gpus // max(first.tp, 1))
    same = all(r.gpu == first.gpu and r.zone == first.zone and r.node_gpus == first.node_gpus and r.tp == first.tp
               for r in members)
    if same and per_node > 1:
        nodes = math.ceil(k / per_node)
        intra = net.intra_link(first.gpu, min(first.node_gpus, per_node * first.tp))
        if nodes == 1:
            return bucketed_allreduce_time(intra, nbytes, k, bucket)
        inter = net.inter_link(first.zone, first.gpu, 1, first.zone, first.gpu, 1)
        return hierarchical_allreduce_time(intra, inter, nbytes, nodes, per_node, bucket)
    worst = 0.0
    pairs = {(members[j], members[(j + 1) % k]) for j in range(k)}       # a ring's distinct neighbour links
    for a, b in pairs:
        link = net.inter_link(a.zone, a.gpu, 1, b.zone, b.gpu, 1)
        worst = np.maximum(worst, bucketed_allreduce_time(link, nbytes, k, bucket))
    return worst


# A plan's timeline (its Gantt) is drawn while no pipeline has more micro-batches than this; past it (a global batch
# of millions) the plan is extrapolated as in the search and draws no Gantt: it would hold tens of millions of boxes.
TIMELINE_MAX_MICRO_BATCHES = 4096


def _flush_times(sched, S: int, m: int, f, b, k_in, k_out, events: list[Event] | None, pi: int) -> list[float]:
    """When each stage finishes its last task (and its last send). Long pipelines (m > 4S + 16) are
    scheduled with m0 and m0 + S micro-batches and extrapolated along the steady state, whose period
    repeats exactly (deterministic task lengths): T(m) = T(m0 + S) + (m - m0 - S) (T(m0 + S) - T(m0)) / S.
    With ``events`` (a timeline, at most ``TIMELINE_MAX_MICRO_BATCHES``), the pipeline is scheduled in full."""
    m0 = 4 * S + 16
    if m <= m0 + S or events is not None:
        return _schedule(sched, S, m, f, b, k_in, k_out, events, pi)
    a = _schedule(sched, S, m0, f, b, k_in, k_out, None, pi)
    c = _schedule(sched, S, m0 + S, f, b, k_in, k_out, None, pi)
    return [y + (m - m0 - S) * (y - x) / S for x, y in zip(a, c)]


def _schedule(sched, S: int, m: int, f, b, k_in, k_out, events: list[Event] | None, pi: int) -> list[float]:
    done_f = [[-1.0] * m for _ in range(S)]   # when stage s finished computing F(j) (before its send)
    done_b = [[-1.0] * m for _ in range(S)]
    free = [0.0] * S
    orders = [sched.order(m, S, s) for s in range(S)]
    ptr = [0] * S
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(S):
            while ptr[s] < len(orders[s]):
                phase, j = orders[s][ptr[s]]
                # a forward waits for the previous stage's forward of j, a backward for the next stage's
                # backward; it receives on one side, computes, and sends on the other
                fwd = phase == F
                done, dep = (done_f, s - 1) if fwd else (done_b, s + 1)
                ready = done[dep][j] if 0 <= dep < S else 0.0
                if ready < 0:
                    break
                before, work, after = (k_in[s], f[s], k_out[s]) if fwd else (k_out[s], b[s], k_in[s])
                start = max(free[s], ready)
                c0 = start + before
                c1 = c0 + work
                done[s][j] = c1
                free[s] = c1 + after
                if events is not None:
                    kind = "fwd" if phase == F else "bwd"
                    events.append(Event(pi, s, kind, c0, c1, j))
                    if c0 > start:
                        events.append(Event(pi, s, "send", start, c0, j))
                    if free[s] > c1:
                        events.append(Event(pi, s, "send", c1, free[s], j))
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:       # cannot happen with a valid schedule; never loop forever
            raise RuntimeError(f"schedule {sched.name} deadlocked in pipeline {pi}")
    return free
