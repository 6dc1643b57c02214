"""Predicted vs measured iteration time and peak memory of every measured plan in one or more directories
laid out like shared/workloads/sailor (``measured/<set>/plan_config_*.json``: ``real``, ``max_mem``), for the
project's simulator and Sailor's, with the median and max |error| (docs/benchmarks/plans.md); then the
all-reduce term (each plan's error without and with ``Calibration.allreduce_factor``: on held-out plans given
with ``--data``, their before/after table), the trust table (each measured plan's shape, its nearest *other*
measured plan and that plan's error: what ``planning/trust.py`` would say of it were it not measured) and
what the trust line costs a trial.

    python benchmarks/plan_fidelity.py                       # the shared GH200 plans of OPT-350M
    python benchmarks/plan_fidelity.py --data DIR [DIR ...]  # other models, GPU types, clusters (held out)
    python benchmarks/plan_fidelity.py --fit                 # re-fit the memory constants and the all-reduce factor
    python benchmarks/plan_fidelity.py --disagree            # why the simulators disagree on several pipelines
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.errors import UserError  # noqa: E402
from orchestrator.hardware.gpu_cluster import GpuCluster  # noqa: E402
from orchestrator.plan import LayeredProfile, Plan  # noqa: E402
from orchestrator.planning.sailor import SailorSimulator  # noqa: E402
from orchestrator.planning.simulator import Calibration, ProjectSimulator  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "workloads" / "sailor"


def _model(root: Path, doc: dict) -> str:
    if "model" in doc:
        return str(doc["model"])
    for p in sorted((root / "cluster").glob("training_config_*.json")):
        return str(json.loads(p.read_text())["model"])
    return "OPT-350"


def rows(root: Path):
    cluster = GpuCluster.from_directory(root)
    sims = {"project": ProjectSimulator(), "sailor": SailorSimulator(),
            "before": ProjectSimulator(Calibration(allreduce_factor=1.0))}      # without the all-reduce term
    for f in sorted((root / "measured").glob("*/plan_config_*.json")):
        doc = json.loads(f.read_text())
        if not doc.get("real"):
            continue
        try:
            profile = LayeredProfile.from_directory(root, _model(root, doc))
            plan = Plan.from_sailor(doc, str(f))
            plan.check(profile.num_layers)             # a malformed plan (a layer twice, one missing) is skipped
            out = {"plan": f"{f.parent.name}/{f.stem.removeprefix('plan_config_')}", "real": doc["real"],
                   "max_mem": doc.get("max_mem")}
            out["red_grads"] = doc.get("red_grads")
            for name, sim in sims.items():
                est = sim.estimate(plan, profile, cluster, int(doc["gbs"]))
                out[name] = est.iteration_s
                out[f"ar_{name}"] = max(s.allreduce_s for s in est.stages)
                if name == "project":
                    out["mem"] = max(est.peak_memory.values())
                elif name == "sailor":
                    out["mem_sailor"] = max(SailorSimulator.memory(plan, profile, 0, s, r.tp)
                                            for s, st in enumerate(plan.pipelines[0].stages) for r in st.replicas)
            yield out
        except UserError as exc:
            print(f"  skipped {f.name}: {exc}", file=sys.stderr)


def table(all_rows: list[dict]) -> None:
    print("| plan | measured s | project s | error | Sailor's s | error | measured GB | project GB | error | Sailor's GB | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    err = {"project": [], "sailor": [], "mem": [], "mem_sailor": []}
    for r in all_rows:
        cells = [r["plan"], f"{r['real']:.3f}"]
        for k in ("project", "sailor"):
            e = (r[k] - r["real"]) / r["real"]
            err[k].append(abs(e))
            cells += [f"{r[k]:.3f}", f"{100 * e:+.1f}%"]
        cells.append(f"{r['max_mem'] / 1e9:.2f}" if r["max_mem"] else "-")
        for k in ("mem", "mem_sailor"):
            if r["max_mem"]:
                e = (r[k] - r["max_mem"]) / r["max_mem"]
                err[k].append(abs(e))
                cells += [f"{r[k] / 1e9:.2f}", f"{100 * e:+.1f}%"]
            else:
                cells += ["-", "-"]
        print("| " + " | ".join(cells) + " |")
    print()
    print("| |err| over all plans | project time | Sailor's time | project memory | Sailor's memory |")
    print("|---|---|---|---|---|")
    for label, f in (("median", statistics.median), ("max", max)):
        print(f"| {label} | " + " | ".join(f"{100 * f(err[k]):.1f}%" if err[k] else "-"
                                           for k in ("project", "sailor", "mem", "mem_sailor")) + " |")


def fit(root: Path) -> None:
    """Least squares of max_mem = a * params + b * in-flight activations + c over the measured plans."""
    X, y = [], []
    for f in sorted((root / "measured").glob("*/plan_config_*.json")):
        doc = json.loads(f.read_text())
        plan = Plan.from_sailor(doc)
        profile = LayeredProfile.from_directory(root, _model(root, doc))
        p = plan.pipelines[0]
        m = max(1, doc["gbs"] // (p.stages[0].dp * plan.mbs))
        best = (0.0, 0.0)
        for si, s in enumerate(p.stages):
            sz = profile.layer_sizes(s.replicas[0].tp)
            P = sum(sz.params[layer] for layer in s.layers)
            A = (sum(sz.act_mem[layer] for layer in s.layers) * plan.mbs * profile.float_bytes
                 * plan.schedule.in_flight(m, len(p.stages), si))
            if P * 16 + A > best[0] * 16 + best[1]:
                best = (P, A)
        X.append([best[0], best[1], 1.0])
        y.append(doc["max_mem"])
    Xa, ya = np.array(X), np.array(y)
    coef = np.linalg.lstsq(Xa, ya, rcond=None)[0]
    loo = []
    for i in range(len(ya)):
        keep = np.arange(len(ya)) != i
        c = np.linalg.lstsq(Xa[keep], ya[keep], rcond=None)[0]
        loo.append(abs(Xa[i] @ c - ya[i]) / ya[i])
    print(f"bytes per parameter {coef[0]:.3f} (param_factor {coef[0] / 16:.4f} of 16), activation_factor {coef[1]:.4f}, "
          f"framework_bytes {coef[2]:.4g}; leave-one-out |error| median {100 * np.median(loo):.1f}%, max {100 * max(loo):.1f}%")


def _pct(e: float) -> str:
    return f"{100 * e:+.1f}%"


def term_table(all_rows: list[dict]) -> None:
    """Each plan's error without and with the all-reduce term, beside the all-reduce seconds measured."""
    print("\nThe all-reduce term (`Calibration.allreduce_factor`, fitted on the measured `red_grads` by `--fit`):\n")
    print("| plan | measured all-reduce s | simulated before | after | time error before | after |")
    print("|---|---|---|---|---|---|")
    sets: dict[str, list[tuple[float, float]]] = {}
    for r in all_rows:
        before, after = r["before"] / r["real"] - 1, r["project"] / r["real"] - 1
        sets.setdefault(r["plan"].split("/")[0], []).append((abs(before), abs(after)))
        red = f"{r['red_grads']:.4f}" if r.get("red_grads") else "-"
        print(f"| {r['plan']} | {red} | {r['ar_before']:.4f} | {r['ar_project']:.4f} | {_pct(before)} | {_pct(after)} |")
    print("\n| set | plans | time error before (median, max of the absolute) | after |")
    print("|---|---|---|---|")
    for name, errs in sets.items():
        b, a = [x for x, _ in errs], [y for _, y in errs]
        print(f"| {name} | {len(errs)} | {100 * statistics.median(b):.1f}% / {100 * max(b):.1f}% | "
              f"{100 * statistics.median(a):.1f}% / {100 * max(a):.1f}% |")


def trust_table(roots: list[Path]) -> None:
    """Each measured plan's shape, its nearest other measured plan (leave one out) and both errors."""
    from orchestrator.planning import trust

    refs = trust.reference(tuple(str(r) for r in roots), ("project", "sailor"))
    print("\nTrust, leave one out: each measured plan's nearest *other* measured plan (planning/trust.py's distance) "
          "and its error, what a trial would be told of this plan's shape were it not measured:\n")
    print("| plan | shape | nearest other (distance) | its project error | own project error | its Sailor's error "
          "| own Sailor's error |")
    print("|---|---|---|---|---|---|---|")
    covered = {"project": 0, "sailor": 0}
    gaps: dict[str, list[float]] = {"project": [], "sailor": []}
    for m in refs:
        others = sorted((trust.distance(m.shape, o.shape), o.name) for o in refs if o.name != m.name)
        near = [o for o in refs if o.name in {n for _, n in others[:trust.NEAREST]}]
        first = next(o for o in refs if o.name == others[0][1])
        for sim in covered:
            own, quoted = m.error(sim), max(abs(e) for o in near if (e := o.error(sim)) is not None)
            covered[sim] += abs(own) <= quoted
            gaps[sim].append(abs(abs(own) - abs(first.error(sim))))
        print(f"| {m.name} | {m.shape.describe()} | {first.name.split('/')[-1]} ({others[0][0]:.2f}) | "
              f"{_pct(first.error('project'))} | {_pct(m.error('project'))} | {_pct(first.error('sailor'))} | "
              f"{_pct(m.error('sailor'))} |")
    n = len(refs)
    print(f"\nA plan's |error| within the largest of its {trust.NEAREST} nearest others' (the trust line's figure): "
          f"project {covered['project']} of {n}, Sailor's {covered['sailor']} of {n}; its absolute error and its "
          f"nearest other's differ by a median {100 * statistics.median(gaps['project']):.1f} points (project), "
          f"{100 * statistics.median(gaps['sailor']):.1f} (Sailor's).")


def trust_cost(roots: list[Path]) -> None:
    """What the trust line costs a trial: the measured plans simulated once per process, then one plan's assessment."""
    from orchestrator.planning import trust

    plan = Plan.from_sailor(json.loads(next(iter(sorted(roots[0].glob("measured/*/plan_config_*.json")))).read_text()))
    trust.reference.cache_clear()
    t0 = time.perf_counter()
    refs = trust.reference(tuple(str(r) for r in roots), ("project", "sailor"))
    t1 = time.perf_counter()
    trust.assess(plan, 1024, "project", ("sailor",), tuple(roots))
    t2 = time.perf_counter()
    print(f"\nTrust line's cost (measured wall time, this machine): the {len(refs)} measured plans read and simulated by "
          f"both simulators once per process {1e3 * (t1 - t0):.0f} ms; each plan's assessment then {1e3 * (t2 - t1):.2f} ms.")


def disagree(root: Path) -> None:
    """A two-pipeline plan on 16 A100-40 + 16 V100-16 and the one-pipeline plan it equals, on both simulators."""
    from orchestrator.plan import Pipeline, Replica, Stage

    profile, cluster = LayeredProfile.from_directory(root, "OPT-350"), GpuCluster.from_directory(root)
    cluster = cluster.with_gpus({"A100-40": 16, "V100-16": 16})
    v, a = Replica("V100-16", 1, 4), Replica("A100-40", 1, 4)

    def pipe(dp: int) -> Pipeline:
        return Pipeline((Stage(tuple(range(0, 7)), (v,) * dp), Stage(tuple(range(7, 26)), (a,) * dp)))

    plans = {"2 pipelines x (L0-6: 8 V100, L7-25: 8 A100)": Plan([pipe(8), pipe(8)], 1),
             "1 pipeline x (L0-6: 16 V100, L7-25: 16 A100)": Plan([pipe(16)], 1)}
    sims = {"project": ProjectSimulator(), "project, factor 1": ProjectSimulator(Calibration(allreduce_factor=1.0)),
            "sailor": SailorSimulator()}
    print("OPT-350M, global batch 256, mbs 1, machines of 4 GPUs; simulated (s):\n")
    print("| plan | simulator | iteration | slowest pipeline | after it (sync) | stage all-reduces |")
    print("|---|---|---|---|---|---|")
    for label, plan in plans.items():
        for name, sim in sims.items():
            e = sim.estimate(plan, profile, cluster, 256)
            ars = ", ".join(f"{f.allreduce_s:.3f}" for f in e.stages)
            print(f"| {label} | {name} | {e.iteration_s:.3f} | {max(e.pipeline_s):.3f} | {e.sync_s:.3f} | {ars} |")


def fit_allreduce(root: Path) -> None:
    """``allreduce_factor``: the median, over the measured plans with a data-parallel all-reduce, of the measured
    all-reduce seconds (``red_grads``) over the simulated ones without the factor; leave-one-out."""
    pairs = []
    for r in rows(root):
        if r.get("red_grads") and r["ar_before"] > 0:
            pairs.append((r["plan"], r["ar_before"], r["red_grads"]))
    if not pairs:
        print("allreduce_factor: no measured plan with red_grads and a data-parallel all-reduce")
        return
    factor = statistics.median(m / s for _, s, m in pairs)
    loo, before = [], []
    for i, (_, sim, meas) in enumerate(pairs):
        k = statistics.median(m / s for j, (_, s, m) in enumerate(pairs) if j != i)
        loo.append(abs(k * sim / meas - 1))
        before.append(abs(sim / meas - 1))
    print(f"allreduce_factor {factor:.3f} (median of red_grads / simulated all-reduce over {len(pairs)} plans); "
          f"|error| of the all-reduce: without it median {100 * statistics.median(before):.0f}%, max "
          f"{100 * max(before):.0f}%; with it, leave-one-out, median {100 * statistics.median(loo):.0f}%, max {100 * max(loo):.0f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", type=Path, default=[DEFAULT])
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--disagree", action="store_true", help="several pipelines on both simulators (docs/plans.md)")
    args = ap.parse_args()
    if args.fit:
        for d in args.data:
            fit(d)
            fit_allreduce(d)
        return 0
    if args.disagree:
        disagree(args.data[0])
        return 0
    all_rows = [r for d in args.data for r in rows(d)]
    table(all_rows)
    term_table(all_rows)
    trust_table(args.data)
    trust_cost(args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
