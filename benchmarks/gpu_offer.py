"""Which GPUs to rent, and how many: over an offer of GPU types (measured and derived from the GPU catalog), the
cheapest plan that reaches each throughput floor (``planner.objective=cost``) and the fastest within each budget
(``planner.objective=budget``), found by the joint planner and judged by the project's simulator, as one table
(docs/recipes.md, "Which GPUs to rent").

    PYTHONPATH=. python benchmarks/gpu_offer.py                                  # about 3 minutes on 2 cores
    PYTHONPATH=. python benchmarks/gpu_offer.py --offer H100=16 A100-40=16 L40S=16 --floors 100 200 --budgets 100
    PYTHONPATH=. python benchmarks/gpu_offer.py --precision fp16      # mixed precision: every type's times carried, derived

Each row is one planning run (the same as ``python -m orchestrator +planner=joint planner.objective=cost
planner.min_samples_per_s=F 'hardware.gpus={...}' model=llm ...``); the GPUs a plan uses are the ones to rent.
Figures are simulated; a type marked (derived) has layer times derived from its datasheet, not measured
(docs/benchmarks/derived_profiles.md gives their error on a type left out).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.config.choices import TRAINING_PRECISIONS  # noqa: E402
from orchestrator.errors import UserError  # noqa: E402
from orchestrator.hardware.gpu_cluster import GpuCluster  # noqa: E402
from orchestrator.plan import LayeredProfile  # noqa: E402
from orchestrator.plan.derive import at_precision  # noqa: E402
from orchestrator.plan.fill import derive_for_cluster  # noqa: E402
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective  # noqa: E402
from orchestrator.planning.simulators import simulator  # noqa: E402
from plugins.planners.joint import JointPlanner  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "workloads" / "sailor"


def offer_of(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, n = item.partition("=")
        if not n.isdigit():
            raise SystemExit(f"error: --offer {item!r}: write TYPE=COUNT, e.g. H100=16")
        out[name] = int(n)
    return out


def one(profile: LayeredProfile, cluster: GpuCluster, objective: PlanObjective, budget_s: float,
        work_limit: int | None = None) -> dict:
    batch = int(profile.global_batch or 1024)
    ev = PlanEvaluator(simulator("project"), profile, cluster, batch)
    planner = JointPlanner({"budget_s": budget_s, "work_limit": work_limit})
    t0 = time.perf_counter()
    plan = planner.plan(profile, cluster, objective, ev)
    est = ev.evaluate(plan)
    used: dict[str, int] = {}
    for (t, _), n in plan.gpus_used().items():
        used[t] = used.get(t, 0) + n
    return {"plan": plan, "est": est, "used": used, "search_s": time.perf_counter() - t0,
            "ok": objective.admissible(est), "stats": planner.stats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT)
    ap.add_argument("--model", default="OPT-350")
    ap.add_argument("--offer", nargs="+", default=["H100=16", "A100-40=16", "V100-16=32", "L40S=16"])
    ap.add_argument("--floors", nargs="*", type=float, default=[100.0, 200.0, 400.0], help="samples/s")
    ap.add_argument("--budgets", nargs="*", type=float, default=[50.0, 100.0, 200.0], help="USD/h")
    ap.add_argument("--budget-s", type=float, default=15.0, help="search seconds per run")
    ap.add_argument("--work-limit", type=int, default=None,
                    help="planner.work_limit: the walk's steps, so the rows do not move with the load (--budget-s is then a cap)")
    ap.add_argument("--precision", default="fp32", choices=TRAINING_PRECISIONS,
                    help="the training precision planned (planner.precision; docs/plans.md, 'Precision')")
    args = ap.parse_args(argv)
    try:
        cluster = GpuCluster.from_directory(args.data).with_gpus(offer_of(args.offer))
        profile = at_precision(derive_for_cluster(LayeredProfile.from_directory(args.data, args.model), cluster),
                               cluster, args.precision)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    carried = (profile.extra or {}).get("derived_types", {}) if args.precision != "fp32" else {}
    names = {t: f"{t} (derived)" if t in cluster.derived or t in carried else f"{t} (measured)" for t in cluster.types}
    prices = ", ".join(f"{names[t]} {cluster.gpu_type(t).usd_per_gpu_hour} USD/h" for (t, _), n in sorted(cluster.gpus.items()) if n)
    print(f"Offer: {cluster.describe()} ({prices}); model {args.model}, global batch {profile.global_batch}, "
          f"training in {args.precision}; figures simulated (project simulator)\n")
    print("| question | GPUs to rent | plan | samples/s | USD/h | USD per 1M samples | met | search s |")
    print("|---|---|---|---|---|---|---|---|")
    runs = [(f"cheapest at >= {f:g} samples/s", PlanObjective("cost", min_samples_per_s=f)) for f in args.floors]
    runs += [(f"fastest at <= {b:g} USD/h", PlanObjective("budget", max_usd_per_hour=b)) for b in args.budgets]
    for label, objective in runs:
        try:
            r = one(profile, cluster, objective, args.budget_s, args.work_limit)
        except UserError as exc:
            print(f"| {label} | none: no plan on this offer meets it ({str(exc)[:90]}) | | | | | no | |")
            continue
        est = r["est"]
        usd_h = est.usd_per_iteration * 3600.0 / est.iteration_s
        rent = " + ".join(f"{n} {names[t]}" for t, n in sorted(r["used"].items()))
        per_m = est.usd_per_iteration / est.global_batch * 1e6
        print(f"| {label} | {rent} | {r['plan'].describe()[:120].replace('|', '/')} | {est.samples_per_s:.1f} | {usd_h:.1f} | {per_m:.2f} | "
              f"{'yes' if r['ok'] else 'NO'} | {r['search_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
