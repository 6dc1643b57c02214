"""Placement quality: manual, greedy, random, optuna and rl, judged by the simulator, on

- the Keras models the trial extracts (``orchestrator.placement.graph.extract``, layer level, analytic roofline
  costs, batch 64 = the trial default): Inception-V3 (299), ResNet-50 (224), NMT 2/4/8 layers and
  the Transformer, each on ``sim_1cpu_4gpu`` and on a mixed-GPU host (``mixed_gpu_host``);
  manual = the manual placer's ``auto`` expert rule, as the trial's baseline (rnn for NMT,
  fastest otherwise);
- the shared msr-dnn-partitioning workloads (``--workloads DIR``; missing files are skipped with
  a note), throughput (ample memory) and latency (memory-tight) inputs; manual = the workload's
  expert split where one is given, else the better of the ``fastest``/``chain`` rules;
- synthetic layered DAGs of 300 and 2,000 nodes (the search-time targets).

rl runs with its packaged default budget (conf/placer/rl.yaml), so the table shows what a user
gets. Writes docs/benchmarks/placement.md.

Run: PYTHONPATH=. python benchmarks/placement_quality.py [--full] [--workloads DIR] [--out FILE]
(default: minutes on 2 cores; --full adds larger random/optuna budgets, rl on layered-2000 and
bert_l-6).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from orchestrator.graph import PlacementContext
from orchestrator.hardware.presets import sim_1cpu_4gpu
from orchestrator.paths import msr_workloads
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
from orchestrator.placement.graph.workload import load_msr_split, load_msr_workload

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = msr_workloads()   # ../shared beside the repository, or $ORCHESTRATOR_SHARED
DATA = ROOT / "tests" / "data" / "msr-dnn-partitioning"
EXPERT = {"resnet50": "resnet50_inference_expert.json", "bert24_inference": "bert24_inference_expert.json",
          "bert24_training": "bert24_training_expert.json", "inceptionv3": "inceptionv3_inference_expert.json"}
SPEEDUP, NEAR_LB, GEO, TIGHT = 1.2841, 1.05, 1.15, 1.35
HEADROOM = 0.1
BATCH = 64
EXTRACTED = [("Inception-V3", "inception_v3", {"input_size": 299}), ("ResNet-50", "resnet50", {"input_size": 224}),
             ("NMT-2", "nmt", {"layers": 2}), ("NMT-4", "nmt", {"layers": 4}), ("NMT-8", "nmt", {"layers": 8}),
             ("Transformer", "transformer", {})]


def mixed_gpu_host():
    """One host, one worker: 1 Xeon Platinum 8380 + 2 V100 (NVLink pair, each its own PCIe link)
    + 2 K80 (PCIe only, sharing one switch); V100 <-> K80 and GPU <-> CPU through host memory."""
    from orchestrator.hardware.cluster import Worker, host_memory
    from orchestrator.hardware.links import ConstantLink
    from orchestrator.hardware.presets import NVLINK_LATENCY_S, PCIE_LATENCY_S, make_device
    from orchestrator.hardware.profiles import profile
    from orchestrator.hardware.topology import Topology

    h, mem = "host0", host_memory("host0")
    devs = [make_device(profile("Xeon Platinum 8380 (datasheet)"), f"{h}/cpu:0", h)]
    links = Topology()
    for i, (gpu, switch) in enumerate((("V100", None), ("V100", None), ("K80", "k80-switch"), ("K80", "k80-switch"))):
        p = profile(f"{gpu} (datasheet)")
        d = make_device(p, f"{h}/gpu:{i}", h)
        devs.append(d)
        pcie = ConstantLink(p.host_link_bandwidth, PCIE_LATENCY_S)
        links.connect(d.name, mem, pcie, f"{h}/{switch}:up" if switch else None, "pcie")
        links.connect(mem, d.name, pcie, f"{h}/{switch}:down" if switch else None, "pcie")
    nvlink = ConstantLink(profile("V100 (datasheet)").peer_link_bandwidth, NVLINK_LATENCY_S)
    links.connect(devs[1].name, devs[2].name, nvlink, None, "nvlink")
    links.connect(devs[2].name, devs[1].name, nvlink, None, "nvlink")
    return Worker("mixed-gpu-host", devs, links, host=h)


def msr_cases(root: Path, full: bool, notes: list[str]):
    files = [(DATA, "latency-inputs/LayerGraphs/inceptionv3_inference.json"),
             (root, "latency-inputs/LayerGraphs/resnet50_inference.json"),
             (root, "latency-inputs/LayerGraphs/bert24_inference.json"),
             (root, "throughput-inputs/LayerGraphs/resnet50_inference.json"),
             (root, "throughput-inputs/LayerGraphs/bert24_inference.json"),
             (root, "throughput-inputs/LayerGraphs/bert24_training.json"),
             (root, "throughput-inputs/LayerGraphs/resnet50_training.json"),
             (root, "latency-inputs/OperatorGraphs/bert_l-3_inference.json"),
             (root, "latency-inputs/OperatorGraphs/resnet50_inference.json"),
             (root, "throughput-inputs/OperatorGraphs/bert_l-3_training.json"),
             (root, "throughput-inputs/OperatorGraphs/resnet50_training.json")]
    if full:
        files.append((root, "latency-inputs/OperatorGraphs/bert_l-6_inference.json"))
    missing = [rel for r, rel in files if not (r / rel).exists()]
    if missing:
        notes.append(f"msr workloads not found under {root} (skipped): {', '.join(missing)}.")
    for base, rel in files:
        if not (base / rel).exists():
            continue
        wl = load_msr_workload(base / rel)
        label = "msr " + rel.replace("-inputs/LayerGraphs/", " layer ").replace("-inputs/OperatorGraphs/", " op ").replace(".json", "")
        manual = None
        if "LayerGraphs" in rel:
            stem = Path(rel).stem
            key = stem if stem in EXPERT else next((k for k in ("resnet50", "inceptionv3") if stem.startswith(k)), None)
            for d in (root / "human-experts", DATA / "human-experts"):
                if key and (d / EXPERT[key]).exists():
                    try:
                        manual = ("expert split", load_msr_split(d / EXPERT[key], wl))
                    except Exception as exc:             # e.g. a split for other hardware
                        notes.append(f"{label}: {EXPERT[key]} not applicable ({exc}); manual = best rule.")
                    break
        yield label, "msr", wl.graph, wl.worker, manual


def synthetic_cases(full: bool, notes: list[str]):
    from benchmarks.simulator_speed import layered_dag

    w = sim_1cpu_4gpu().workers[0]
    yield "layered-300", "sim_1cpu_4gpu", layered_dag(300), w, None
    yield "layered-2000", "sim_1cpu_4gpu", layered_dag(2000), w, None


def extracted_cases(notes: list[str]):
    """The trial's graphs: ``extract(spec, 64, profile=None)`` (simulated cluster: analytic costs)."""
    from orchestrator.models import builtin
    from orchestrator.placement.graph.extract import extract

    workers = (("sim_1cpu_4gpu", sim_1cpu_4gpu().workers[0]), ("mixed V100/K80", mixed_gpu_host()))
    for label, name, cfg in EXTRACTED:
        try:
            g = extract(builtin(name, cfg), BATCH, profile=None)
        except Exception as exc:                           # noqa: BLE001  (reported, not fatal)
            notes.append(f"{label}: extraction failed ({type(exc).__name__}: {exc}).")
            continue
        for hw, w in workers:
            yield label, hw, g, w, ("auto rule", None)


def memory_facts(ev: SimulatedEvaluator) -> dict:
    """Whether the memory-blind bound can be approached (an estimate, not a proof): the bound assumes
    the critical path on the fastest device with free transfers. When that device cannot hold the
    graph, a chain-like graph (critical path >= half the work) is cut at least k - 1 times along
    the topological order at least k - 1 times, k = ceil(memory needed / the fastest device's
    memory); ``cut`` = for each of the k - 1 cuts of a contiguous split whose pieces fit, the cheapest
    transfer of everything crossing it (each tensor sent once between two such devices, one after
    another on the link)."""
    from orchestrator.placement.solve.problem import PlacementProblem

    prob = PlacementProblem(ev.graph, ev.worker, ev)
    s = ev.simulator
    need = float(s.resident.sum() + s.temp.max(initial=0.0))
    fast = int(np.argmin(np.where(np.isfinite(s.cost), s.cost, 0).sum(axis=0)))
    cap = float(prob.pool_cap[prob.pool_of[fast]])
    k = math.ceil(need / cap) if math.isfinite(cap) and cap > 0 else 1
    peers = [d for d in range(prob.nd) if d != fast and ev.worker.devices[d].profile == ev.worker.devices[fast].profile]
    cut = 0.0
    if k > 1 and peers:                  # frontier cost at each cut of the topological order
        n = prob.n
        diff = np.zeros(n + 1)
        for u in range(n):
            lo, hi = s.succ_ptr[u], s.succ_ptr[u + 1]
            if hi > lo:
                c = max(float(prob.comm_row(j, fast)[peers[0]]) for j in range(lo, hi))
                diff[prob.topo_pos[u] + 1] += c
                diff[prob.topo_pos[s.succ_idx[lo:hi]].max() + 1] -= c
        front = np.cumsum(diff)[1:n]                    # front[i - 1]: cut before topological position i
        order = np.argsort(prob.topo_pos)
        mem = np.cumsum(s.resident[order])[:n - 1]         # resident bytes before each cut
        for j in range(1, k):                              # cut j leaves pieces that can fit
            ok = (mem >= need - (k - j) * cap) & (mem <= j * cap)
            cut += float(front[ok].min()) if ok.any() else 0.0
    chain = float(s.rank.max(initial=0.0) / max(s.fastest.sum(), 1e-30))
    # what moving work off the critical path would cost: the inputs it takes from the path
    other = peers[0] if peers else next((d for d in range(prob.nd) if d != fast), fast)
    on_cp, u = np.zeros(prob.n, bool), int(np.argmax(s.rank)) if prob.n else 0
    while prob.n:
        on_cp[u] = True
        nxt = s.succ_idx[s.succ_ptr[u]:s.succ_ptr[u + 1]]
        if not len(nxt):
            break
        u = int(nxt[np.argmax(s.rank[nxt])])
    off = np.where(on_cp, -1.0, s.fastest)
    big = int(np.argmax(off)) if prob.n else 0          # the costliest node off the critical path
    feed = sum(float(prob.comm_row(k, fast)[other]) for _, k in prob.preds[big])
    return {"need_gb": need / 2**30, "fast_gb": cap / 2**30, "fast_fits": k <= 1, "k": k, "chain": chain,
            "cut": cut, "work": float(s.fastest.sum()), "off_work": float(s.fastest[~on_cp].sum()), "feed": feed,
            "big": ev.graph.nodes[big].name, "big_cost": float(max(off[big], 0.0)),
            "single": float(s.cost[:, fast].sum()) if np.isfinite(s.cost[:, fast]).all() else math.inf}


def run_case(label, hw, g, w, manual, budgets, placers):
    from orchestrator_plugins.placers.expert_rules import expert_placement
    from orchestrator_plugins.placers.manual import ManualPlacer

    ev0 = SimulatedEvaluator(g, w)
    lb = ev0.lower_bound()
    row = {"graph": label, "hw": hw, "nodes": len(g), "lb": lb, **memory_facts(ev0)}
    if manual and manual[0] == "auto rule":
        p = ManualPlacer({"strategy": "auto"}).place(g, w, ev0)
        r = ev0.simulator.evaluate(ev0.assignment(p))
        row["manual"], row["manual_src"], row["manual_makespan"] = r.step_time_s, f"rule {p.meta['strategy']}", r.makespan_s
    elif manual and manual[1] is not None:
        r = ev0.simulator.evaluate(ev0.assignment(manual[1]))
        row["manual"], row["manual_src"], row["manual_makespan"] = r.step_time_s, "expert split", r.makespan_s
    else:
        best = (math.inf, "none", math.inf)
        for strat in ("fastest", "chain"):
            try:
                p = expert_placement(strat, g, w)
            except Exception:                              # noqa: BLE001  (e.g. no single device fits)
                continue
            r = ev0.simulator.evaluate(ev0.assignment(p))
            best = min(best, (r.step_time_s, f"rule {strat}", r.makespan_s))
        row["manual"], row["manual_src"], row["manual_makespan"] = best
    for name, placer in placers(budgets, len(g)):
        ev = SimulatedEvaluator(g, w, "step", HEADROOM)
        ev.objective_value(np.zeros(len(g), dtype=np.int64))   # numba warm-up, not timed
        ev.evaluations = 0
        t0 = time.perf_counter()
        p = placer.place(g, w, ev, PlacementContext(seed=0))
        dt = time.perf_counter() - t0
        n_ev = ev.evaluations
        v = ev.evaluate(p)
        row[name] = v.step_time_s if v.feasible else math.inf
        row[f"{name}_time"], row[f"{name}_evals"] = dt, n_ev
    return row


def make_placers(full: bool):
    from orchestrator_plugins.placers.greedy import GreedyPlacer
    from orchestrator_plugins.placers.optuna_placer import OptunaPlacer
    from orchestrator_plugins.placers.random import RandomPlacer
    from orchestrator_plugins.placers.rl import RLPlacer

    def placers(budgets, n):
        yield "greedy", GreedyPlacer()
        yield "random", RandomPlacer({"samples": budgets["random"]})
        yield "optuna", OptunaPlacer({"trials": budgets["optuna"]})
        if n <= 1500 or full:
            yield "rl", RLPlacer({"budget_evaluations": budgets["rl"]})
    return placers


def rl_default_budget() -> int:
    """The rl placer's default budget: its schema's (conf/placer/rl.yaml no longer repeats it)."""
    from orchestrator.config.placer import RLPlacerConfig

    return int(RLPlacerConfig().budget_evaluations)


def fmt(x, unit=1e3):
    return "inf" if not math.isfinite(x) else f"{x * unit:.2f}" if x * unit < 100 else f"{x * unit:.1f}"


def _mark(ok):
    return "-" if ok is None else ("met" if ok else "**missed**")


def judge(r) -> None:
    """Per-graph targets: None = does not apply."""
    man, lb, rl = r["manual"], r["lb"], r.get("rl", math.nan)
    has_rl = "rl" in r
    tight = math.isfinite(man) and man > TIGHT * lb
    r["speedup"] = man / rl if has_rl and math.isfinite(man) and math.isfinite(rl) else math.nan
    r["t_speedup"] = (r["speedup"] >= SPEEDUP) if has_rl and tight else None
    r["t_near"] = (rl <= NEAR_LB * lb) if has_rl and not tight else None
    r["t_greedy"] = (rl <= r["greedy"] * (1 + 1e-9)) if has_rl else None
    placed = [k for k in ("greedy", "random", "optuna", "rl") if k in r]
    r["infeasible"] = [k for k in placed if not math.isfinite(r[k])]
    best = min(r.get(k, math.inf) for k in ("manual", *placed))
    r["best"] = best
    # memory forces a split of a graph whose bound is its critical path (all of it on the fastest
    # device, transfers free): every feasible placement pays transfers the bound does not count
    r["near_possible"] = r["fast_fits"] or r["chain"] < 0.5 or r["cut"] <= (GEO - 1) * lb


def table(rows) -> str:
    out = ["| graph | hardware | nodes | manual (ms) | greedy | random | optuna | rl | lower bound | manual/LB | rl/LB | "
           "rl speedup over manual | feasible | rl search s (evals) | speedup >= 1.2841 | rl <= 1.05 LB | rl <= greedy |",
           "|" + "---|" * 17]
    for r in rows:
        rl = r.get("rl", math.nan)
        feas = "all" if not r["infeasible"] else "no: " + ", ".join(r["infeasible"])
        spd = f"{r['speedup']:.3f}" if math.isfinite(r["speedup"]) else "n/a (manual inf)" if "rl" in r else "-"
        if not math.isfinite(r["manual"]):
            feas += " (manual: no)"
        out.append(f"| {r['graph']} | {r['hw']} | {r['nodes']} | {fmt(r['manual'])} ({r['manual_src']}) | {fmt(r['greedy'])} | "
                   f"{fmt(r['random'])} | {fmt(r['optuna'])} | {fmt(rl) if 'rl' in r else 'skipped'} | {fmt(r['lb'])} | "
                   f"{r['manual'] / r['lb']:.2f} | {rl / r['lb']:.3f} | {spd} | {feas} | "
                   f"{r.get('rl_time', math.nan):.1f} ({r.get('rl_evals', 0)}) | {_mark(r['t_speedup'])} | "
                   f"{_mark(r['t_near'])}{' (memory-tight)' if r['t_near'] is False and not r['near_possible'] else ''} | "
                   f"{_mark(r['t_greedy'])} |")
    return "\n".join(out)


def summary(rows) -> str:
    def fmt_list(items):
        return "; ".join(items) if items else "none"

    sp = [r for r in rows if r["t_speedup"] is not None]
    near = [r for r in rows if r["t_near"] is not None]
    gr = [r for r in rows if r["t_greedy"] is not None]
    name = lambda r: f"{r['graph']} ({r['hw']})"
    lines = ["## Targets", ""]
    miss = [f"{name(r)} {r['speedup']:.3f}" for r in sp if not r["t_speedup"]]
    lines.append(f"- rl speedup over manual >= {SPEEDUP} where manual > {TIGHT}x the lower bound ({len(sp)} graphs): "
                 f"{'met' if not miss else 'missed'}. Speedups: "
                 + ", ".join(f"{name(r)} {r['speedup']:.3f}" for r in sp) + (f". Missed: {fmt_list(miss)}." if miss else "."))
    miss = [r for r in near if not r["t_near"]]
    lines.append(f"- rl within {NEAR_LB}x the lower bound on the others ({len(near)} graphs): {'met' if not miss else 'missed'}"
                 + (f" on {len(miss)}, met on {len(near) - len(miss)}. Missed:" if miss else "."))
    for r in miss:
        if not r["near_possible"]:
            why = "memory-tight: excluded from the geometric mean below (forced cuts)"
        else:
            why = f"critical path {fmt(r['lb'])} ms, whole graph on the fastest device {fmt(r['single'])} ms"
            if r["off_work"] > 0.01 * r["lb"]:
                why += (f"; {fmt(r['off_work'])} ms of work lie off the critical path, the costliest off-path node "
                        f"({r['big']}, {fmt(r['big_cost'])} ms) needs {fmt(r['feed'])} ms of input transfers to run on "
                        "another such device")
            if r["cut"]:
                why += f"; memory forces a split whose cheapest cuts cost {fmt(r['cut'])} ms"
        lines.append(f"  - {name(r)}: rl {r['rl'] / r['lb']:.3f}x LB ({why}).")
    miss = [name(r) for r in gr if not r["t_greedy"]]
    lines.append(f"- rl never worse than greedy ({len(gr)} graphs): {'met' if not miss else 'missed: ' + fmt_list(miss)}.")
    inf = [f"{name(r)}: {', '.join(r['infeasible'])}" for r in rows if r["infeasible"]]
    man_inf = [name(r) for r in rows if not math.isfinite(r["manual"])]
    lines.append(f"- every placer's placement feasible: {'met' if not inf else 'missed: ' + fmt_list(inf)}."
                 + (f" (The given manual expert split itself breaks device memory on: {fmt_list(man_inf)}.)" if man_inf else ""))
    inc = [r for r in rows if r["near_possible"]]
    exc = [r for r in rows if not r["near_possible"]]
    geo = float(np.exp(np.mean(np.log([r["best"] / r["lb"] for r in inc])))) if inc else math.nan
    geo_all = float(np.exp(np.mean(np.log([r["best"] / r["lb"] for r in rows]))))
    lines.append(f"- best placer within {GEO}x the lower bound, geometric mean over the {len(inc)} graphs where a feasible "
                 f"placement near the bound can exist: {geo:.3f} ({'met' if geo <= GEO else 'missed'}); over all "
                 f"{len(rows)} graphs {geo_all:.3f}. Excluded ({len(exc)}): the fastest device cannot hold the graph and its "
                 "critical path is most of the work, so a feasible placement cuts that path at least k - 1 times, and those "
                 f"transfers (not counted by the bound) exceed {GEO - 1:.0%} of it (estimate: the cheapest k - 1 cuts of a "
                 "contiguous split of the topological order into pieces that fit): "
                 + fmt_list([f"{name(r)} (needs {r['need_gb']:.2f} GiB, fastest device {r['fast_gb']:.2f} GiB, k = {r['k']}; "
                             f"critical path {r['chain']:.0%} of the work; cuts >= {fmt(r['cut'])} ms vs LB {fmt(r['lb'])} ms; "
                             f"best placer {r['best'] / r['lb']:.2f}x LB)" for r in exc]) + ".")
    r300 = [r for r in rows if 250 <= r["nodes"] <= 400 and "rl_time" in r]
    slow = [r for r in r300 if r["rl_time"] >= 300]
    lines.append(f"- rl search under 5 min on 2 cores for a ~300-node graph: {'met' if r300 and not slow else 'missed' if slow else 'not measured'} ("
                 + ", ".join(f"{name(r)} {r['nodes']} nodes {r['rl_time']:.1f} s" for r in r300) + ").")
    big = [r for r in rows if r["nodes"] >= 2000]
    lines.append(f"- greedy under 1 s for 2,000 nodes: {'met' if big and all(r['greedy_time'] < 1 for r in big) else 'missed' if big else 'not measured'} ("
                 + ", ".join(f"{name(r)} {r['greedy_time']:.2f} s" for r in big) + ").")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="larger random/optuna budgets, rl on the 2,000-node graph, bert_l-6")
    ap.add_argument("--workloads", default=str(DEFAULT_WORKLOADS), help="msr-dnn-partitioning folder (missing files are skipped)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "placement.md"))
    ap.add_argument("--part", choices=("all", "step", "pipeline"), default="all",
                    help="step: the one-step objective's table; pipeline: the throughput inputs under the pipeline objective")
    ap.add_argument("--headroom", type=float, default=None,
                    help="placement.memory_headroom of the search placers (default: the trial's auto, 0 for step, 0.1 for pipeline)")
    args = ap.parse_args()
    rl_budget = rl_default_budget()
    budgets = {"random": 1000, "optuna": 300, "rl": rl_budget} if args.full else {"random": 200, "optuna": 100, "rl": rl_budget}
    notes: list[str] = []
    rows = []
    t_all = time.perf_counter()
    cases = [*extracted_cases(notes), *msr_cases(Path(args.workloads), args.full, notes), *synthetic_cases(args.full, notes)]
    global HEADROOM
    HEADROOM = 0.0 if args.headroom is None else args.headroom
    p_headroom = 0.1 if args.headroom is None else args.headroom
    prows = []
    if args.part in ("all", "pipeline"):
        from benchmarks.pipeline_quality import pipeline_rows

        prows = pipeline_rows([Path(args.workloads), DATA], rl_budget, p_headroom, notes)
    if args.part == "pipeline":
        cases = []
    for case in cases:
        rows.append(run_case(*case, budgets, make_placers(args.full)))
        r = rows[-1]
        judge(r)
        print(f"{r['graph']} ({r['hw']}): manual {fmt(r['manual'])} greedy {fmt(r['greedy'])} rl {fmt(r.get('rl', math.nan))} "
              f"LB {fmt(r['lb'])} rl s {r.get('rl_time', math.nan):.1f}", flush=True)
    if not args.full:
        notes.append("rl is skipped on layered-2000 in the default run (it is the greedy-timing graph); --full runs it.")
    head = (f"# Placement quality\n\n`PYTHONPATH=. python benchmarks/placement_quality.py{' --full' if args.full else ''}`, "
            f"2-core shared machine, {time.strftime('%Y-%m-%d')}, {time.perf_counter() - t_all:.0f} s in all. Budgets: "
            f"random {budgets['random']} samples, optuna {budgets['optuna']} trials, rl {budgets['rl']} evaluations "
            "(its default, conf/placer/rl.yaml); seed 0. Step times in ms, simulated; inf = the placement breaks device "
            f"memory. Extracted models: batch {BATCH}, layer level, analytic roofline costs (`extract(spec, {BATCH}, "
            "profile=None)`, as a trial on a simulated cluster). Hardware: `sim_1cpu_4gpu` = 1 Xeon 8380 + 4 K80 (two per "
            "PCIe switch); `mixed V100/K80` = one host with 1 Xeon 8380 + 2 V100 (NVLink pair) + 2 K80 (PCIe, one shared "
            "switch); msr = each workload's own hardware. LB = max(critical path at fastest costs, total fastest work / "
            "devices), memory-blind. rl evals = simulator runs (placements rejected by the memory check count against "
            "the budget without a run). Target columns: `-` = does not apply (speedup target where manual > 1.35x LB, "
            "within-5% target elsewhere).\n\n")
    note_text = "".join(f"\nNote: {n}\n" for n in notes)
    step_text = (head + table(rows) + "\n\n" + summary(rows) + "\n" + note_text + READING) if rows else ""
    pipe_text = ""
    if prows:
        from benchmarks.pipeline_quality import pipeline_summary, pipeline_table

        pipe_text = (f"\n## Pipeline objective (throughput inputs)\n\n`--part pipeline`: time per sample in the file's units "
                     "(ms), **simulated** with the workload authors' load rule (docs/pipeline.md); expert = the published "
                     "human-expert split; contiguous DP = `placer=optimal`'s exact DP over contiguous splits (`ideals`: all "
                     "of them searched); optimal = `placer=optimal`'s answer (the DP, or the MILP over any split when "
                     "better; MILP `optimal` = proven optimum over every split); rl = `placer=rl`, default budget, started "
                     "from the better of greedy and the DP; certified bound = max(LP relaxation of the node-to-device "
                     "assignment with memory, the costliest node, the MILP's proven bound, the configuration LP's certified bound: docs/pipeline.md), valid for every placement; "
                     f"search placers keep {p_headroom:.0%} of memory free; seed 0; {time.strftime('%Y-%m-%d')}, 2-core "
                     "shared machine (the MILP's time limit is wall time: under load it proves less).\n\n"
                     + pipeline_table(prows) + "\n\n" + pipeline_summary(prows) + "\n" + ("" if rows else note_text))
    print(step_text + pipe_text)
    out, marker = Path(args.out), "\n## Pipeline objective"
    old = out.read_text() if out.exists() else ""
    if args.part == "step" and marker in old:            # keep the pipeline section of an earlier run
        pipe_text = marker + old.split(marker, 1)[1]
    elif args.part == "pipeline" and old:                # keep the step section of an earlier run
        step_text = old.split(marker, 1)[0].rstrip("\n") + "\n"
    out.write_text(step_text + pipe_text)


READING = """
## Reading the table

- **Baselines.** Extracted models: the manual placer's `auto` rule, as in a trial (`rnn` for NMT:
  one LSTM layer per accelerator, attention and softmax on the last; `fastest` otherwise: the whole
  model on the fastest device that holds it). msr: the workload's expert split where one applies,
  else the better of `fastest`/`chain`.
- **Extracted models.** rl's 1.2841x target is met wherever it applies (Inception-V3, NMT 2/4/8 on
  both hosts). On `sim_1cpu_4gpu`, NMT-4 is the tightest (1.285x: rl keeps greedy's placement,
  1.11x the bound). ResNet-50 and the Transformer are almost chains (manual 1.01-1.09x the bound),
  so the within-5% target applies; ResNet-50 on four K80s misses it (1.064x): its only work off the
  critical path is the four projection shortcuts (42.6 ms of 530.3 ms), and moving one of them to
  another K80 or the CPU makes the step longer (538-585 ms, except conv5's shortcut on the CPU,
  525.5 ms) because its 25-205 MB activations (batch 64) cross PCIe twice at 15.75 GB/s; rl's
  518.8 ms comes from moving three parallel main-branch convolutions instead. On the mixed host
  (NVLink V100 pair) ResNet-50 is at 1.013x.
- **msr latency inputs (memory-tight).** The accelerators hold a fraction of the model (e.g. 15.6 GiB
  of Inception-V3 on 2 GiB devices: at least 8 pieces) and a transfer costs more than the compute
  it feeds (fixed edge costs), so every feasible placement pays cuts the memory-blind bound does not
  count: the script's estimate of those cuts (1.4-1.9 s on the layer graphs, 0.36-0.76 s on the
  operator graphs) alone exceeds the bound several times. These four graphs are excluded from the
  geometric mean (listed above). The expert splits of inceptionv3/resnet50 break device memory, so
  "manual" is inf and the speedup is not defined there; on the operator graphs rl beats the
  `fastest` rule 2.8-3.8x. bert24 (layer) needs 3 pieces of 0.59 GiB: the cheapest cuts are 7.8 ms,
  which is exactly rl's gap (100.2 vs 92.4 ms, 1.085x).
- **msr throughput inputs.** The layer graphs are at the bound. On the operator graphs the best
  placement is the whole graph on one device (greedy's `single` candidate; rl keeps it): the work
  off the critical path (9.6 ms of bert_l-3, 92.6 ms of resnet50) needs its inputs shipped at
  fixed transfer costs several times larger (e.g. a 12.8 ms BatchNormalization whose input takes
  95.7 ms to move, with 39 ms of slack), so the 1.08x / 1.16x gaps are the bound's free transfers.
- **rl** = (since issue 12: the pre-trained graph policy, fine-tuned by REINFORCE from the better of greedy
  and its zero-shot placement, docs/placer_policy.md; before: a per-group table policy from greedy) for
  70% of the budget, then iterated local search on
  the best placement: single nodes/groups, then runs of 2-16 consecutive groups moved to each
  device, and seeded kicks when no move helps. The result is never worse than greedy; the budget
  counts every placement scored, so runs are reproducible. The policy phase earns little here: with
  `placer.local_fraction=1.0` (local search only) Inception-V3 on `sim_1cpu_4gpu` reaches 502.2 ms
  (1.318x) in less time, ResNet-50 and NMT-4 are unchanged; the default stays 0.3.
"""

if __name__ == "__main__":
    main()
