"""Ablation of ``placer=rl`` at equal evaluation budgets (simulated, one-step objective unless the row
says pipeline), per graph and worker:

- greedy: ``placer=greedy`` (HEFT / topological list scheduling / single device, best of them);
- local: greedy, then rl's iterated local search for the rest of the budget (``refine=local`` alone);
- scratch: ``mode=scratch refine=none`` (random weights, table biased to greedy), whole budget;
- finetune: ``mode=finetune refine=none`` (from the shipped checkpoint), whole budget;
- zero-shot: ``mode=zero_shot refine=none`` (decode + 16 samples; its own few evaluations);
  ``policy`` = the best of the policy's own placements (greedy not counted), with its wall time;
- default: ``mode=finetune refine=local`` (what ``+placer=rl`` does), whole budget.

Graphs held out of pre-training are marked; the pre-training set is read from the checkpoint.
Fine-tune vs scratch: evaluations each needs to first reach scratch's final value (best-so-far after
every policy update). Writes docs/benchmarks/placer_ablation.md and the table section of
docs/placer_policy.md.

Run: PYTHONPATH=. python benchmarks/placer_ablation.py [--quick] [--budget N] [--workloads DIR]
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def cases(quick: bool, workloads: Path):
    from orchestrator.placement.graph.workload import load_msr_workload
    from orchestrator.placement.learn.pretrain import extracted_graph, msr_file, workers

    ws = workers()
    inc = extracted_graph("inception_v3")
    yield "Inception-V3 (extracted)", "sim_1cpu_4gpu", inc, ws["sim_1cpu_4gpu"], True, "step"
    msr = [("throughput-inputs/LayerGraphs/bert24_training.json", "step"),
           ("throughput-inputs/LayerGraphs/bert24_training.json", "pipeline"),
           ("latency-inputs/LayerGraphs/inceptionv3_inference.json", "step")]
    if not quick:
        yield "Inception-V3 (extracted)", "1cpu_2v100", inc, ws["1cpu_2v100"], True, "step"
        msr.append(("throughput-inputs/LayerGraphs/resnet50_training.json", "step"))
    for rel, obj in msr:
        path = msr_file(workloads, rel)
        if path is not None:
            wl = load_msr_workload(path)
            yield f"msr {rel.split('-inputs/')[0]} {Path(rel).stem}", "own", wl.graph, wl.worker, True, obj
    yield "NMT-4 (extracted)", "sim_1cpu_4gpu", extracted_graph("nmt-4"), ws["sim_1cpu_4gpu"], True, "step"
    if not quick:
        yield "ResNet-50 (extracted)", "sim_1cpu_4gpu", extracted_graph("resnet50"), ws["sim_1cpu_4gpu"], False, "step"
        path = msr_file(workloads, "latency-inputs/LayerGraphs/bert24_inference.json")
        if path is not None:
            wl = load_msr_workload(path)
            yield "msr latency bert24_inference", "own", wl.graph, wl.worker, False, "step"


def run(g, w, objective, cfg, seed=0):
    from orchestrator.graph import PlacementContext
    from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
    from orchestrator_plugins.placers.rl import RLPlacer

    ev = SimulatedEvaluator(g, w, objective)
    placer = RLPlacer(cfg)
    t0 = time.perf_counter()
    p = placer.place(g, w, ev, PlacementContext(seed=seed))
    dt = time.perf_counter() - t0
    v = ev.evaluate(p)
    return v.value if v.feasible else math.inf, ev.evaluations, dt, placer, p


def local_only(g, w, objective, budget):
    from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
    from orchestrator.placement.solve.greedy import best_greedy
    from orchestrator.placement.solve.local_search import local_search
    from orchestrator.placement.solve.problem import PlacementProblem

    ev = SimulatedEvaluator(g, w, objective)
    prob = PlacementProblem(g, w, ev)
    a, variant, times = best_greedy(prob)
    best, _ = local_search(prob, a, budget - len(times), 0)
    return ev.evaluate(prob.placement(best)).value, times[variant], ev.evaluations


def reach(curve, target):
    return next((e for e, b in curve if b <= target * (1 + 1e-9)), math.inf)


def row(label, hw, g, w, held, objective, budget):
    r = {"graph": label, "hw": hw, "held": held, "objective": objective, "nodes": len(g)}
    r["local"], r["greedy"], r["local_evals"] = local_only(g, w, objective, budget)
    base = {"budget_evaluations": budget, "refine": "none"}
    r["scratch"], _, r["scratch_s"], ps, _ = run(g, w, objective, {**base, "mode": "scratch"})
    r["finetune"], _, r["finetune_s"], pf, _ = run(g, w, objective, {**base, "mode": "finetune"})
    r["zero"], r["zero_evals"], r["zero_s"], _, pz = run(g, w, objective, {**base, "mode": "zero_shot"})
    r["policy"] = pz.meta["policy_step_time_s"]
    r["default"], _, r["default_s"], _, _ = run(g, w, objective, {"budget_evaluations": budget})
    final = ps.curve[-1][1] if ps.curve else r["scratch"]
    r["reach_s"], r["reach_f"] = reach(ps.curve, final), reach(pf.curve, final)
    return r


def f(x):
    return "inf" if not math.isfinite(x) else f"{x * 1e3:.2f}" if x * 1e3 < 100 else f"{x * 1e3:.1f}"


def table(rows) -> str:
    out = ["| graph | hardware | objective | held out | greedy | local only | scratch (none) | fine-tune (none) | zero-shot "
           "(policy alone; s) | default (finetune+local) | evals to scratch's final: scratch / fine-tune |", "|" + "---|" * 11]
    for r in rows:
        out.append(f"| {r['graph']} | {r['hw']} | {r['objective']} | {'**held out**' if r['held'] else 'trained on'} | "
                   f"{f(r['greedy'])} | {f(r['local'])} | {f(r['scratch'])} | {f(r['finetune'])} | {f(r['zero'])} "
                   f"({f(r['policy'])}; {r['zero_s']:.2f} s) | {f(r['default'])} | {r['reach_s']} / {r['reach_f']} |")
    return "\n".join(out)


def geo(xs):
    xs = [x for x in xs if math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else math.nan


def targets(rows) -> str:
    held = [r for r in rows if r["held"]]
    name = lambda r: f"{r['graph']} ({r['hw']}, {r['objective']})"
    z_ok = [r for r in held if r["zero"] <= 1.15 * r["default"] and r["policy"] < r["greedy"] * (1 - 1e-9) and r["zero_s"] < 1]
    within = [r for r in held if r["zero"] <= 1.15 * r["default"]]
    beat = [r for r in held if r["policy"] < r["greedy"] * (1 - 1e-9)]
    ratio = geo([r["reach_s"] / r["reach_f"] if math.isfinite(r["reach_f"]) else 1e-9 for r in held])
    moved = [r for r in held if r["scratch"] < r["greedy"] * (1 - 1e-9)]
    got = [r for r in moved if math.isfinite(r["reach_f"])]
    got_txt = ", ".join(name(r) + " %.2fx" % (r["reach_s"] / r["reach_f"]) for r in got)
    rl_vs_local = geo([min(r["finetune"], r["scratch"]) / r["local"] for r in rows])
    ft_vs_local = geo([r["finetune"] / r["local"] for r in rows])
    name = lambda r: f"{r['graph']} ({r['hw']}, {r['objective']})"
    times = ", ".join(f"{r['zero_s']:.2f}" for r in held)
    return "\n".join([
        f"- zero-shot within 15% of the default rl **and** the policy alone better than greedy, under 1 s, on >= 2 held-out "
        f"graphs: {'met' if len(z_ok) >= 2 else '**missed**'} ({len(z_ok)} of {len(held)}: {', '.join(map(name, z_ok)) or 'none'}). "
        f"Within 15% (with greedy as incumbent): {len(within)} of {len(held)}; policy alone better than greedy: {len(beat)} "
        f"({', '.join(map(name, beat)) or 'none'}); zero-shot times {times} s.",
        f"- fine-tune reaches scratch's final value with >= 5x fewer evaluations (geo-mean over held-out): {ratio:.2f}x "
        f"({'met' if ratio >= 5 else '**missed**'}; a fine-tune that never reaches it counts as 1e-9). Where scratch "
        f"improved on greedy ({len(moved)} held-out rows) fine-tune reached its value on {len(got)}"
        + (f" ({got_txt})" if got else "") + ".",
        f"- rl without refinement beats local search alone at equal budget (geo-mean over all rows of rl / local, < 1 = rl "
        f"better): best of scratch/fine-tune {rl_vs_local:.3f}, fine-tune alone {ft_vs_local:.3f} "
        f"({'met' if ft_vs_local < 1 else '**missed**'})."])


def main() -> None:
    from orchestrator.placement.learn.graph_policy import SHIPPED, GraphPolicy
    from orchestrator.placement.learn.pretrain import DEFAULT_WORKLOADS

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="4 held-out rows + NMT-4, budget 2,000 (a few minutes)")
    ap.add_argument("--budget", type=int, default=None, help="evaluations per placer (default 12,000; --quick 2,000)")
    ap.add_argument("--workloads", default=str(DEFAULT_WORKLOADS))
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "placer_ablation.md"))
    args = ap.parse_args()
    budget = args.budget or (2000 if args.quick else 12000)
    t0 = time.perf_counter()
    rows = []
    for c in cases(args.quick, Path(args.workloads)):
        rows.append(row(*c, budget))
        r = rows[-1]
        print(f"{r['graph']} {r['hw']} {r['objective']}: greedy {f(r['greedy'])} local {f(r['local'])} scratch {f(r['scratch'])} "
              f"finetune {f(r['finetune'])} zero {f(r['zero'])} (policy {f(r['policy'])}) default {f(r['default'])} "
              f"reach {r['reach_s']}/{r['reach_f']}", flush=True)
    meta = GraphPolicy.load(SHIPPED).meta
    text = (f"`PYTHONPATH=. python benchmarks/placer_ablation.py{' --quick' if args.quick else ''}"
            f"{f' --budget {args.budget}' if args.budget else ''}`: {time.strftime('%Y-%m-%d')}, 2-core shared machine, "
            f"{time.perf_counter() - t0:.0f} s; budget {budget} evaluations per placer (zero-shot: its own count); seed 0; "
            "values in ms (msr: the file's unit x 1e3), **simulated**; inf = breaks device memory.\n\n"
            f"Pre-training set of the shipped checkpoint ({SHIPPED.name}): {'; '.join(meta.get('cases', []))}.\n\n"
            + table(rows) + "\n\n" + targets(rows) + "\n")
    print(text)
    Path(args.out).write_text("# Placer ablation\n\n" + text)
    doc = ROOT / "docs" / "placer_policy.md"
    if doc.exists():
        s = doc.read_text()
        new = re.sub(r"<!-- ablation:start -->.*<!-- ablation:end -->",
                     lambda _: "<!-- ablation:start -->\n" + text + "<!-- ablation:end -->", s, flags=re.S)
        doc.write_text(new)


if __name__ == "__main__":
    main()
