"""Predicted vs measured iteration time and peak memory of every measured plan in one or more directories
laid out like shared/workloads/sailor (``measured/<set>/plan_config_*.json``: ``real``, ``max_mem``), for the
project's simulator and Sailor's, with the median and max |error| (docs/benchmarks/plans.md).

    python benchmarks/plan_fidelity.py                       # the shared GH200 plans of OPT-350M
    python benchmarks/plan_fidelity.py --data DIR [DIR ...]  # other models, GPU types, clusters (held out)
    python benchmarks/plan_fidelity.py --fit                 # re-fit the memory constants (least squares, leave-one-out)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.errors import UserError  # noqa: E402
from orchestrator.plan import GpuCluster, LayeredProfile, Plan  # noqa: E402
from orchestrator.planning.sailor import SailorSimulator  # noqa: E402
from orchestrator.planning.simulator import ProjectSimulator  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "workloads" / "sailor"


def _model(root: Path, doc: dict) -> str:
    if "model" in doc:
        return str(doc["model"])
    for p in sorted((root / "cluster").glob("training_config_*.json")):
        return str(json.loads(p.read_text())["model"])
    return "OPT-350"


def rows(root: Path):
    cluster = GpuCluster.from_directory(root)
    sims = {"project": ProjectSimulator(), "sailor": SailorSimulator()}
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
            for name, sim in sims.items():
                est = sim.estimate(plan, profile, cluster, int(doc["gbs"]))
                out[name] = est.iteration_s
                if name == "project":
                    out["mem"] = max(est.peak_memory.values())
                else:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", type=Path, default=[DEFAULT])
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    if args.fit:
        for d in args.data:
            fit(d)
        return 0
    all_rows = [r for d in args.data for r in rows(d)]
    table(all_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
