"""The bound on Sailor's metric per form of plan on issue 28's mixed clusters (docs/benchmarks/plans.md, "The bound
per form of plan"): over plans of one pipeline, of two or more, and so over any plan (the smaller), against issue
28's targets, the joint planner's plans and the published plans of these clusters (../shared/workloads/sailor/
planner-plans: each that Sailor's formula scores honestly must be at or above the bound). Simulated (Sailor's
formula and memory rule, OPT-350M, batch 1024).

    PYTHONPATH=. python benchmarks/sailor_bound_forms.py          # about 3.5 minutes on 2 cores

Each figure is certified for the plans Sailor's formula scores honestly (docs/plans.md). The test suite checks
the bound's soundness (below the exhaustive optimum, random plans, the planners' and the published plans); this
table pins its figures on the two largest clusters (minutes of CPU each) and ``benchmarks/check_figures.py``
reproduces it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAILOR = ROOT.parent / "shared" / "workloads" / "sailor"
# (cluster, issue 28's target s/iteration, the joint plan's s/iteration: docs/benchmarks/plans.md's targets table)
CLUSTERS = (({"A100-40": 32, "V100-16": 96}, 4.90, 4.963), ({"A100-40": 80, "V100-16": 240}, 2.49, 2.429),
            ({"A100-40": 128, "V100-16": 384}, 1.66, 1.706))


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan import LayeredProfile, Plan
    from orchestrator.planning.evaluator import simulator
    from orchestrator.planning.sailor_bound import sailor_lower_bound, sailor_scores_honestly

    if not SAILOR.is_dir():
        print(f"needs {SAILOR} (../shared/workloads/sailor)", file=sys.stderr)
        return 2
    profile = LayeredProfile.from_directory(SAILOR, "OPT-350")
    print("| cluster | issue 28's target (s) | bound, one pipeline (s) | bound, two or more (s) | bound, any plan (s) "
          "| where (any plan) | joint plan (s) | target out of reach | joint plan above the bound "
          "| published plans scored honestly, at or above the bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for gpus, target, joint in CLUSTERS:
        cluster = GpuCluster.from_directory(SAILOR).with_gpus(gpus)
        t0 = time.perf_counter()
        detail: dict[str, dict] = {"one": {}, "several": {}}
        one, several = (sailor_lower_bound(profile, cluster, 1024, detail[form], pipelines=form) for form in detail)
        best = min(one, several)
        d = detail["one" if one <= several else "several"]
        where = f"{d['columns']} columns, mbs {d['mbs']}, all-reduce {d['allreduce_s']:.3f} s"
        name = " + ".join(f"{n} {g}" for g, n in gpus.items())
        published = []
        for f in sorted((SAILOR / "planner-plans").glob("*.json")):
            doc = json.loads(f.read_text())
            plan = Plan.from_sailor(doc)
            if doc["cluster"] == gpus and doc["gbs"] == 1024 and sailor_scores_honestly(plan, profile, cluster):
                t = simulator("sailor").estimate(plan, profile, cluster, 1024).iteration_s
                published.append(f"{f.stem} {t:.3f}" + ("" if t >= best else " BELOW"))
        print(f"| {name} | {target:.2f} | {one:.3f} | {several:.3f} | {best:.3f} | {where} | {joint:.3f} | "
              f"{'yes' if best > target else 'no'} | {100 * (joint / best - 1):.1f}% | {', '.join(published) or '-'} |",
              flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
