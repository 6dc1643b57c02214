"""Leave-one-out validation of derived GPU profiles (issue 43 item 4; docs/benchmarks/derived_profiles.md).

1. Layers: for every measured GPU type of the shared profile in turn, fit the derivation model (``plan.derive``) on
   the others and predict the one left out, layer by layer (its intra-node link derived from the catalog too, at
   the efficiency of the others' measured links): median and max |error| of forward, backward and update, and the
   median per TP degree.
2. Plans: the measured GH200 plans simulated (project's and Sailor's simulators) on the measured GH-96 profile and
   on GH-96 derived from A100-40, A100-80 and V100-16, against the measured ``real`` seconds.
3. The derived H200 beside the measured H200 rates (h200-measured.json).
4. The matmul prior's weight (``derive.PRIOR_WEIGHT``): the layer errors at other weights.
5. A partial profile filled (``planner.fill``, ``plan.fill.fill_measured``): each type keeps only one micro-batch size
   (the middle one of its profile) at TP 1 (one GPU) or at every TP degree (one machine); the rest is derived from
   the other types and calibrated on what was kept. Layer errors on the entries not kept, and the GH200 plans.

    PYTHONPATH=. python benchmarks/derived_profiles.py        # about 20 s on 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orchestrator.plan.derive as derive  # noqa: E402
import orchestrator.plan.fill as fill  # noqa: E402
from orchestrator.errors import WorkloadError  # noqa: E402
from orchestrator.hardware.catalog import (  # noqa: E402
    DEFAULT_INTRA_EFFICIENCY,
    default_catalog,
    derived_link,
    efficiency,
)
from orchestrator.hardware.gpu_cluster import GpuCluster  # noqa: E402
from orchestrator.hardware.profiles import PROFILES  # noqa: E402
from orchestrator.plan import LayeredProfile, Plan  # noqa: E402
from orchestrator.planning.sailor import SailorSimulator  # noqa: E402
from orchestrator.planning.simulator import ProjectSimulator  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "workloads" / "sailor"
PHASE = ("fwd", "bwd", "update")


def link_for_left_out(cluster: GpuCluster, out: str):
    """The intra-node links of the fit: measured for the fitted types, derived for the one left out (its datasheet
    times the median efficiency of the others' measured links)."""
    cat = default_catalog()
    pairs = [(max(per.values(), key=lambda lk: lk.max_bandwidth).max_bandwidth, cat.get(t).peer_link_bandwidth)
             for t, per in cluster.topology.intra.items() if t != out and cat.find(t) is not None and per]
    eff = efficiency(pairs, DEFAULT_INTRA_EFFICIENCY)
    own = derived_link(cat.get(out).peer_link_bandwidth, eff)

    def link_for(gpu: str, tp: int):
        return own if gpu == out else cluster.topology.intra_link(gpu, tp)
    return link_for, eff


def left_out(profile: LayeredProfile, cluster: GpuCluster, out: str) -> tuple[LayeredProfile, dict]:
    """``profile`` with ``out``'s times replaced by those derived from the other types, and the errors."""
    rest = [t for t in derive.measured_types(profile) if t != out]
    link_for, eff = link_for_left_out(cluster, out)
    model = derive.fit(profile, rest, link_for)
    spec = default_catalog().get(out)
    errs: dict = {"fwd": [], "bwd": [], "update": [], "tp": {}}
    table: dict = {}
    for mbs in profile.micro_batches(out):
        tps = profile.tp_degrees(out, mbs)
        got = derive.derive_times(model, profile, spec, link_for, [mbs], tps)[mbs]
        table[mbs] = got
        for tp in tps:
            meas = profile.layer_times(out, mbs, tp)
            for i in range(profile.num_layers):
                for j, ph in enumerate(PHASE):
                    if ph == "update" and i > 0:          # one update figure per (mbs, tp)
                        continue
                    e = got[tp][i][j] / meas[i][j] - 1.0
                    errs[ph].append(e)
                    if ph != "update":
                        errs["tp"].setdefault(tp, []).append(e)
                        errs.setdefault((derive.kind(profile, i), ph), []).append(e)
    derived = derive.with_derived(LayeredProfile(profile.model, profile.num_layers,
                                                 {t: v for t, v in profile.times.items() if t != out}, profile.sizes,
                                                 profile.global_batch, profile.optimizer, profile.float_bytes,
                                                 profile.hidden, profile.sequence, profile.source, profile.extra),
                                  {out: table}, model.describe())
    errs["model"], errs["link_eff"], errs["fitted_on"] = model, eff, rest
    return derived, errs


def pct(xs, f) -> str:
    return f"{100 * f([abs(x) for x in xs]):.1f}%" if xs else "-"


def layer_tables(profile: LayeredProfile, cluster: GpuCluster) -> dict[str, dict]:
    print("### Layer times of a GPU type left out (fitted on the other three)\n")
    print("| left out | fitted on | fwd median | fwd max | bwd median | bwd max | update median | update max | "
          "all median | all max | entries |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for out in derive.measured_types(profile):
        _, e = left_out(profile, cluster, out)
        results[out] = e
        every = e["fwd"] + e["bwd"] + e["update"]
        print(f"| {out} | {', '.join(e['fitted_on'])} | " + " | ".join(
            pct(e[k], f) for k in ("fwd", "bwd", "update") for f in (statistics.median, max))
            + f" | {pct(every, statistics.median)} | {pct(every, max)} | {len(every)} |")
    print("\n### Median |error| (max) of a left-out type's layer times (fwd and bwd) per TP degree\n")
    tps = sorted({tp for e in results.values() for tp in e["tp"]})
    print("| left out | " + " | ".join(f"TP {tp}" for tp in tps) + " |")
    print("|---|" + "---|" * len(tps))
    for out, e in results.items():
        print(f"| {out} | " + " | ".join(f"{pct(e['tp'][tp], statistics.median)} ({pct(e['tp'][tp], max)})"
                                         if tp in e["tp"] else "-" for tp in tps) + " |")
    kinds = [(k, ph) for k in derive.KINDS for ph in derive.PHASES]
    print("\n### Median |error| (max) of a left-out type's layer times per kind of layer\n")
    print("| left out | " + " | ".join(f"{k} {ph}" for k, ph in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for out, e in results.items():
        print(f"| {out} | " + " | ".join(f"{pct(e[key], statistics.median)} ({pct(e[key], max)})" for key in kinds) + " |")
    return results


def measured_plans(root: Path) -> list[tuple[str, dict]]:
    """The measured GH200 plans that have a measured iteration time (``real``): (name, plan_config)."""
    docs = [(f.stem.removeprefix("plan_config_"), json.loads(f.read_text()))
            for f in sorted((root / "measured").glob("*/plan_config_*.json"))]
    return [(name, doc) for name, doc in docs if doc.get("real")]


def simulated(doc: dict, prof: LayeredProfile, cluster: GpuCluster, sim) -> float:
    return sim.estimate(Plan.from_sailor(doc), prof, cluster, int(doc["gbs"])).iteration_s


def plan_errors(plans: list[tuple[str, dict]], prof: LayeredProfile, cluster: GpuCluster, sim) -> list[float]:
    """Simulated / measured - 1 of each plan on ``prof`` (a plan whose micro-batch ``prof`` lacks is left out)."""
    errs = []
    for _, doc in plans:
        try:
            errs.append(simulated(doc, prof, cluster, sim) / float(doc["real"]) - 1.0)
        except WorkloadError:
            continue                                  # a micro-batch no other type has (not filled)
    return errs


def plan_table(root: Path, profile: LayeredProfile, cluster: GpuCluster) -> LayeredProfile:
    derived, e = left_out(profile, cluster, "GH-96")
    print(f"\n### The measured GH200 plans on the derived GH-96 profile ({e['model'].describe()})\n")
    print("| plan | measured s | project, measured profile | error | project, derived | error | "
          "Sailor's, measured profile | error | Sailor's, derived | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    sims = (("project", ProjectSimulator()), ("sailor", SailorSimulator()))
    errs: dict[str, list[float]] = {}
    for name, doc in measured_plans(root):
        real = float(doc["real"])
        cells = [name, f"{real:.3f}"]
        for label, sim in sims:
            for which, prof in (("measured", profile), ("derived", derived)):
                t = simulated(doc, prof, cluster, sim)
                errs.setdefault(f"{label} {which}", []).append(t / real - 1.0)
                cells += [f"{t:.3f}", f"{100 * (t / real - 1.0):+.1f}%"]
        print("| " + " | ".join(cells) + " |")
    print("\n| |error| over the plans | " + " | ".join(errs) + " |")
    print("|---|" + "---|" * len(errs))
    for label, f in (("median", statistics.median), ("max", max)):
        print(f"| {label} | " + " | ".join(pct(v, f) for v in errs.values()) + " |")
    return derived


def with_measured_kind(derived: LayeredProfile, profile: LayeredProfile, gpu: str, what: str) -> LayeredProfile:
    """``derived`` with ``gpu``'s layers of kind ``what`` (or ``update``: every layer's update) back at ``profile``'s
    measured times."""
    def row(i: int, got: tuple, meas: tuple) -> tuple:
        if what == "update":
            return (got[0], got[1], meas[2])
        return meas if derive.kind(profile, i) == what else got
    table = {m: {tp: tuple(row(i, g, x) for i, (g, x) in enumerate(zip(rows, profile.times[gpu][m][tp])))
                 for tp, rows in per.items()} for m, per in derived.times[gpu].items()}
    return dataclasses.replace(derived, times={**derived.times, gpu: table})


def share_table(root: Path, profile: LayeredProfile, cluster: GpuCluster, derived: LayeredProfile) -> None:
    """The GH200 plans on the derived GH-96 with one kind of layer put back at its measured times: how much of the
    plans' error each kind carries."""
    print("\n### The GH200 plans on the derived GH-96 with one kind of layer measured (project simulator)\n")
    print("| GH-96 profile | median | max | signed median |")
    print("|---|---|---|---|")
    plans, sim = measured_plans(root), ProjectSimulator()
    for label, what in (("every layer derived", None), ("embedding measured", "embedding"),
                        ("blocks measured", "block"), ("head measured", "head"), ("update measured", "update")):
        prof = derived if what is None else with_measured_kind(derived, profile, "GH-96", what)
        e = plan_errors(plans, prof, cluster, sim)
        print(f"| {label} | {pct(e, statistics.median)} | {pct(e, max)} | {100 * statistics.median(e):+.1f}% |")


def h200_table(profile: LayeredProfile, cluster: GpuCluster) -> None:
    measured = PROFILES.get("H200 (measured)")
    sheet = default_catalog().get("H200")
    model = derive.fit(profile, derive.measured_types(profile), cluster.topology.intra_link)
    print("\n### H200: datasheet, measured (one H200, PyTorch) and what the derivation charges in a decoder block\n")
    if measured is None:
        print("(h200-measured.json is absent)")
        return
    print("| rate | datasheet | measured | measured / datasheet | derived: block fwd | block bwd |")
    print("|---|---|---|---|---|---|")
    for prec in ("fp32", "tf32", "bf16"):
        d, m = sheet.flops.get(prec), measured.flops.get(prec)
        eff = [model.efficiencies.get(f"{p}.block.matmul") for p in ("fwd", "bwd")] if prec == "tf32" else [None, None]
        cells = [f"{100 * x:.0f}% = {x * d / 1e12:.0f} TFLOP/s" if x is not None and d else "-" for x in eff]
        print(f"| matmul {prec} | {d / 1e12:.1f} TFLOP/s | {m / 1e12:.1f} TFLOP/s | {m / d:.2f} | " + " | ".join(cells) + " |")
    eff = [model.efficiencies[f"{p}.block.memory"] for p in ("fwd", "bwd")]
    print(f"| memory | {sheet.mem_bandwidth / 1e9:.0f} GB/s | {measured.mem_bandwidth / 1e9:.0f} GB/s (copy, read+write) | "
          f"{measured.mem_bandwidth / sheet.mem_bandwidth:.2f} | "
          + " | ".join(f"{100 * x:.0f}% = {x * sheet.mem_bandwidth / 1e9:.0f} GB/s" for x in eff) + " |")


def loo_cells(profile: LayeredProfile, cluster: GpuCluster, root: Path | None = None) -> list[str]:
    """'median / max' |error| of each left-out type's layers (fwd, bwd, update), then of the GH200 plans on the
    derived GH-96 (project simulator) when ``root`` is given."""
    cells = []
    for out in derive.measured_types(profile):
        _, e = left_out(profile, cluster, out)
        every = e["fwd"] + e["bwd"] + e["update"]
        cells.append(f"{pct(every, statistics.median)} / {pct(every, max)}")
    if root is not None:
        e = plan_errors(measured_plans(root), left_out(profile, cluster, "GH-96")[0], cluster, ProjectSimulator())
        cells.append(f"{pct(e, statistics.median)} / {pct(e, max)}")
    return cells


def prior_table(profile: LayeredProfile, cluster: GpuCluster) -> None:
    print("\n### The matmul prior's weight: median / max |error| of a left-out type's layers (fwd, bwd, update)\n")
    types = derive.measured_types(profile)
    print("| PRIOR_WEIGHT | " + " | ".join(types) + " |")
    print("|---|" + "---|" * len(types))
    keep = derive.PRIOR_WEIGHT
    try:
        for w in (0.0, 0.1, 0.3, 1.0):
            derive.PRIOR_WEIGHT = w
            print(f"| {w}{' (used)' if w == keep else ''} | " + " | ".join(loo_cells(profile, cluster)) + " |")
    finally:
        derive.PRIOR_WEIGHT = keep


def _no_attention(work):
    return lambda *a: (lambda w: derive.Work(w.flops + w.att_flops, w.nbytes))(work(*a))


def _no_tp_call(features):
    return lambda *a, **k: [x if i != derive.COLUMNS.index("tp_call") else 0.0 for i, x in enumerate(features(*a, **k))]


def _no_floor(_):
    return lambda x, y, prior=None: (derive._lsq_relative(x, y, prior), 0.0)


# The terms of the derivation, each taken out by replacing one function of derive.py.
TERMS = {"attention roofline": ("work", _no_attention), "TP call latency": ("features", _no_tp_call),
         "host floor": ("_lsq_floored", _no_floor)}


def terms_table(root: Path, profile: LayeredProfile, cluster: GpuCluster) -> None:
    """The leave-one-out errors with each term of the derivation taken out, and with none of them (the model
    before them)."""
    print("\n### Each term of the derivation taken out: median / max |error| of a left-out type's layers, and of "
          "the GH200 plans on derived GH-96 (project simulator)\n")
    types = derive.measured_types(profile)
    print("| model | " + " | ".join(types) + " | GH200 plans |")
    print("|---|" + "---|" * (len(types) + 1))
    variants = [("every term (used)", ())] + [(f"without the {t}", (t,)) for t in TERMS] + [("none of them", tuple(TERMS))]
    for label, without in variants:
        keep = {name: getattr(derive, name) for name, _ in TERMS.values()}
        try:
            for t in without:
                name, wrap = TERMS[t]
                setattr(derive, name, wrap(keep[name]))
            print(f"| {label} | " + " | ".join(loo_cells(profile, cluster, root)) + " |")
        finally:
            for name, f in keep.items():
                setattr(derive, name, f)


ANCHORS = (("one GPU", False), ("one machine", True))


def kept_only(profile: LayeredProfile, out: str, every_tp: bool) -> tuple[LayeredProfile, int]:
    """``profile`` with ``out`` holding only its middle micro-batch size, at TP 1 or at every TP degree."""
    mbss = profile.micro_batches(out)
    m0 = mbss[len(mbss) // 2]
    keep = {m0: {tp: rows for tp, rows in profile.times[out][m0].items() if every_tp or tp == 1}}
    return dataclasses.replace(profile, times={**profile.times, out: keep}), m0


def filled(profile: LayeredProfile, cluster: GpuCluster, out: str, every_tp: bool) -> tuple[LayeredProfile, int]:
    part, m0 = kept_only(profile, out, every_tp)
    link_for, _ = link_for_left_out(cluster, out)
    return fill.fill_measured(part, cluster.with_gpus({out: 8}), link_for), m0


def fill_tables(root: Path, profile: LayeredProfile, cluster: GpuCluster) -> None:
    print("\n### A partial profile filled (planner.fill): one micro-batch size measured, the rest derived and calibrated\n")
    print("| type | kept (measured) | fwd median | fwd max | bwd median | bwd max | update median | update max | "
          "all median | all max | entries |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for out in derive.measured_types(profile):
        for label, every_tp in ANCHORS:
            prof, m0 = filled(profile, cluster, out, every_tp)
            kept = prof.extra["derived_types"][out]
            errs: dict[str, list[float]] = {ph: [] for ph in PHASE}
            for mbs in profile.micro_batches(out):
                for tp in profile.tp_degrees(out, mbs):
                    if (mbs == m0 and (every_tp or tp == 1)) or not prof.has(out, mbs, tp):
                        continue
                    meas, got = profile.layer_times(out, mbs, tp), prof.layer_times(out, mbs, tp)
                    for i in range(profile.num_layers):
                        for j, ph in enumerate(PHASE):
                            if ph != "update" or i == 0:
                                errs[ph].append(got[i][j] / meas[i][j] - 1.0)
            every = errs["fwd"] + errs["bwd"] + errs["update"]
            print(f"| {out} | {label}: micro-batch {m0}, {kept.split(' measured')[0]} entries | " + " | ".join(
                pct(errs[k], f) for k in PHASE for f in (statistics.median, max))
                + f" | {pct(every, statistics.median)} | {pct(every, max)} | {len(every)} |")
    print("\nThe measured GH200 plans (simulated, project / Sailor's simulator) on GH-96 filled from each kept part:\n")
    print("| kept | project median | project max | Sailor's median | Sailor's max | plans |")
    print("|---|---|---|---|---|---|")
    plans = measured_plans(root)
    for label, every_tp in ANCHORS:
        prof, m0 = filled(profile, cluster, "GH-96", every_tp)
        cells, n = [], 0
        for sim in (ProjectSimulator(), SailorSimulator()):
            e = plan_errors(plans, prof, cluster, sim)
            cells += [pct(e, statistics.median), pct(e, max)]
            n = len(e)
        print(f"| {label} (micro-batch {m0}) | " + " | ".join(cells) + f" | {n} of {len(plans)} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT)
    ap.add_argument("--model", default="OPT-350")
    args = ap.parse_args(argv)
    profile = LayeredProfile.from_directory(args.data, args.model)
    cluster = GpuCluster.from_directory(args.data)
    print(f"Model {args.model} ({args.data}); every figure below is derived (from datasheets) or measured, as labelled.\n")
    layer_tables(profile, cluster)
    derived = plan_table(args.data, profile, cluster)
    share_table(args.data, profile, cluster, derived)
    h200_table(profile, cluster)
    prior_table(profile, cluster)
    terms_table(args.data, profile, cluster)
    fill_tables(args.data, profile, cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
