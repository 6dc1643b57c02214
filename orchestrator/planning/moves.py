"""The joint planner's local search moves (docs/plans.md, "The joint planner"): the plans one step from a
plan, judged in turn by ``search._Judging.local``."""

from __future__ import annotations

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import Pipeline, Plan, Stage


def neighbours(plan: Plan, num_layers: int, cluster: GpuCluster):
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
