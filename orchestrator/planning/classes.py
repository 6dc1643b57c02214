"""Several pipeline classes in one plan (docs/plans.md, "The joint planner", 5): two of the best templates,
each its own pipeline with its own data-parallel degree and stage structure, sharing the cluster's GPUs,
the global batch split between them by their throughput (a load-balanced split; the project's simulator
runs each pipeline's ``batch``). A plan is kept only if the judging simulator scores it honestly
(``PlanSimulator.scores_honestly``; on Sailor's metric ``sailor_rules.sailor_scores_honestly``: every pipeline
runs ``ceil(B / (mbs dp_0,last P))`` micro-batches and the ring across pipelines must carry every pipeline's
stages)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import Pipeline, Plan, Stage


def _gpus(cand: Any, dp: int) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for k in cand.kinds:
        out[(k.gpu, k.zone)] = out.get((k.gpu, k.zone), 0) + dp * k.tp
    return out


def _most_dp(cand: Any, left: dict[tuple[str, str], int]) -> int:
    per = _gpus(cand, 1)
    return min((left.get(key, 0) // n for key, n in per.items()), default=0)


def _pipeline(cand: Any, dp: int, batch: int | None) -> Pipeline:
    stages = tuple(Stage(tuple(range(cand.bounds[s], cand.bounds[s + 1])), (k.replica(),) * dp)
                   for s, k in enumerate(cand.kinds))
    return Pipeline(stages, batch)


def class_plans(ranked: list[Any], cluster: GpuCluster, batch: int, top: int = 10,
                shares: tuple[float, ...] = (0.25, 0.5, 0.75)) -> Iterator[Plan]:
    """Plans of two pipelines from two of the ``top`` templates (same micro-batch size): the first gets a
    share of its largest data-parallel degree on the cluster, the second the most the GPUs left allow; the
    smaller degree last (Sailor counts micro-batches by the last pipeline's); the batch split in proportion
    to ``dp / bottleneck`` (each pipeline's samples per second), at least one micro-batch each."""
    seen = set()
    cands = []
    for _, c in ranked:
        ident = (c.mbs, c.kinds, c.bounds)
        if ident not in seen and math.isfinite(c.estimate_s):
            seen.add(ident)
            cands.append(c)
        if len(cands) >= top:
            break
    for i, a in enumerate(cands):
        for b in cands[i:]:
            if a.mbs != b.mbs:
                continue
            full = _most_dp(a, dict(cluster.gpus))
            for f in shares:
                da = max(1, int(round(f * full)))
                left = dict(cluster.gpus)
                for key, n in _gpus(a, da).items():
                    left[key] = left.get(key, 0) - n
                if any(v < 0 for v in left.values()):
                    continue
                db = _most_dp(b, left)
                if db < 1:
                    continue
                rate_a, rate_b = da / max(a.bottleneck_s, 1e-12), db / max(b.bottleneck_s, 1e-12)
                ba = min(batch - a.mbs, max(a.mbs, int(round(batch * rate_a / (rate_a + rate_b)))))
                pa, pb = _pipeline(a, da, ba), _pipeline(b, db, batch - ba)
                yield Plan([pa, pb] if db <= da else [pb, pa], a.mbs)
