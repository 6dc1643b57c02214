"""Placement speed at op-graph scale: each phase of a placement trial, timed, with peak memory.

Phases (what ``orchestrator.phases.placement.PlacementPhase.place`` does, in-process, without
MLflow): ``imports`` (TensorFlow, for rl), ``load`` (read the workload file), ``setup`` (the simulated evaluator: simulator arrays,
ranks, routes; and the placer-side problem: colocation atoms, transfer tables), ``search``
(``placer.place``), ``baseline`` (the best single accelerator, as the trial's baseline),
``bound`` (the certified lower bound), ``verdict`` (the final simulation with its schedule) and
``gantt`` (the chart the trial logs). ``trial`` rows time the whole command
(``python -m orchestrator model=workload ...``, MLflow included) in a fresh process.

Every case runs in its own child process, so ``peak MiB`` is that process's maximum resident set
(``resource.getrusage``: imports included; TensorFlow's alone is about 600 MiB for rl).
``--before DIR`` also runs each case on another source tree (a copy of the code before a change:
``DIR/orchestrator`` and ``DIR/orchestrator_plugins``) right after the current one, so the two
columns come from one run on one (possibly shared) machine.

Graphs: the public op graphs (Inception-V3's layer graph from the tests' data, with the default
rl search of 12,000 evaluations; the shared workloads' op graphs, when present) and seeded random layered DAGs
(``orchestrator.placement.graph.synthetic``) of 300, 2,000 and 20,000 ops (100,000 with ``--full``),
written under a temporary ``latency-inputs`` folder (objective ``step``: one step's latency).

Run: PYTHONPATH=. python benchmarks/placement_speed.py [--full] [--before DIR] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("imports", "load", "setup", "search", "baseline", "bound", "verdict", "gantt")
# (placer, config) per name (zero-shot as docs/placer_policy.md runs it: the policy alone); rl and
# optimal only where they finish in the default run's time
PLACERS = {"greedy": ("greedy", {}), "zero_shot": ("rl", {"mode": "zero_shot", "refine": "none"}),
           "rl": ("rl", {"budget_evaluations": 2000}), "rl_default": ("rl", {}), "optimal": ("optimal", {})}


def child(path: str, placer: str) -> dict[str, float]:
    """One case in this process: the phases' seconds and the peak resident set (MiB)."""
    import resource

    from orchestrator import plugins
    from orchestrator.graph.placement import PlacementContext
    from orchestrator.phases.placement import best_accelerator
    from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
    from orchestrator.placement.graph.workload import load_msr_workload
    from orchestrator.placement.simulate.gantt import gantt
    from orchestrator.placement.solve.problem import PlacementProblem

    name, cfg = PLACERS[placer]
    cls = plugins.load("placer", name)
    out: dict[str, float] = {}
    t = time.perf_counter()

    def lap(key: str) -> None:
        nonlocal t
        now = time.perf_counter()
        out[key] = out.get(key, 0.0) + now - t
        t = now

    if name == "rl":        # TensorFlow (the policy network): imported at the placer's first use
        import tensorflow  # noqa: F401
    lap("imports")
    wl = load_msr_workload(path)
    lap("load")
    headroom = 0.1 if wl.graph.meta.get("objective") == "pipeline" else 0.0
    ev = SimulatedEvaluator(wl.graph, wl.worker, str(wl.graph.meta.get("objective", "step")), headroom)
    PlacementProblem(wl.graph, wl.worker, ev)
    lap("setup")
    with tempfile.TemporaryDirectory() as tmp:
        pl = cls(cfg).place(wl.graph, wl.worker, ev, PlacementContext(seed=0, output_dir=Path(tmp)))
        lap("search")
        best_accelerator(ev, wl.graph, wl.worker)
        lap("baseline")
        ev.bound_parts()
        lap("bound")
        v = ev.evaluate(pl, schedule=True)
        lap("verdict")
        assert v.result is not None
        gantt(v.result, Path(tmp) / "gantt.png")
        lap("gantt")
    out["value"] = v.value
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_case(path: Path, placer: str, tree: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]))
    code = f"import json, benchmarks.placement_speed as b; print(json.dumps(b.child({str(path)!r}, {placer!r})))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tree)
    if r.returncode != 0:
        raise RuntimeError(f"{path.name} {placer} on {tree}: {r.stderr[-2000:]}")
    res: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return res


def run_trial(path: Path, tree: Path, workdir: Path) -> dict[str, float]:
    """The whole command, MLflow store included, in a fresh working directory and process; its
    peak resident set is written by the child at exit."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]), MLFLOW_DISABLE_TELEMETRY="true")
    workdir.mkdir(parents=True, exist_ok=True)
    rss = workdir / "maxrss"
    argv = ["orchestrator", "model=workload", f"model.path={path}", "+placer=greedy"]
    code = (f"import atexit, resource, runpy, sys; atexit.register(lambda: open({str(rss)!r}, 'w').write("
            f"str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); sys.argv = {argv!r}; "
            "runpy.run_module('orchestrator', run_name='__main__')")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"trial on {path.name}: {r.stdout[-1000:]}{r.stderr[-1000:]}")
    return {"trial": wall, "peak_mib": float(rss.read_text()) / 1024 if rss.exists() else float("nan")}


def graphs(tmp: Path, full: bool) -> list[tuple[Path, list[str], bool]]:
    """(workload file, placers to run, also time the whole trial)."""
    from orchestrator.paths import msr_workloads
    from orchestrator.placement.graph.synthetic import write_layered_workload

    out: list[tuple[Path, list[str], bool]] = []
    inception = ROOT / "tests/data/msr-dnn-partitioning/latency-inputs/LayerGraphs/inceptionv3_inference.json"
    out.append((inception, ["greedy", "zero_shot", "rl_default"], False))
    shared = msr_workloads()
    for rel, placers in (("latency-inputs/OperatorGraphs/resnet50_inference.json", ["greedy", "zero_shot", "rl"]),
                         ("throughput-inputs/OperatorGraphs/bert_l-3_training.json", ["greedy", "zero_shot", "optimal"]),
                         ("throughput-inputs/OperatorGraphs/resnet50_training.json", ["greedy", "zero_shot"])):
        if (shared / rel).exists():
            out.append((shared / rel, placers, False))
    sizes = [(300, ["greedy", "zero_shot", "rl"]), (2000, ["greedy", "zero_shot"]), (20000, ["greedy"])]
    if full:
        sizes += [(100000, ["greedy"])]
    for n, placers in sizes:
        p = write_layered_workload(tmp / "latency-inputs" / f"layered-{n}.json", n, seed=0)
        out.append((p, placers, n >= 20000))
    return out


def fmt(x: float) -> str:
    return "-" if x != x else (f"{x:.2f}" if x < 100 else f"{x:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="also the 100,000-op graph")
    ap.add_argument("--before", type=Path, help="a source tree with the code before a change, run beside")
    ap.add_argument("--only", default="", help="only graphs whose file name contains this")
    args = ap.parse_args()
    trees = [("now", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    head = "| graph | ops | placer | code | " + " | ".join(PHASES) + " | total s | peak MiB | objective value |"
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    with tempfile.TemporaryDirectory() as tmp:
        cases = graphs(Path(tmp), args.full)
        for _, tree in trees:    # compile (and cache) each tree's numba kernels before timing anything
            for placer in ("greedy", "zero_shot"):
                run_case(cases[0][0], placer, tree)
        for path, placers, trial in cases:
            if args.only not in path.name:
                continue
            ops = len(json.loads(path.read_text())["nodes"])
            for placer in placers:
                for label, tree in trees:
                    r = run_case(path, placer, tree)
                    total = sum(r[k] for k in PHASES)
                    rows.append(f"| {path.stem} | {ops:,} | {placer} | {label} | " + " | ".join(fmt(r[k]) for k in PHASES)
                                + f" | {fmt(total)} | {r['peak_mib']:.0f} | {r['value']:.6g} |")
                    print(rows[-1], flush=True)
            if trial:
                for label, tree in trees:
                    r = run_trial(path, tree, Path(tmp) / f"trial-{label}-{ops}")
                    rows.append(f"| {path.stem} | {ops:,} | greedy (whole trial) | {label} | " + " | ".join("" for _ in PHASES)
                                + f" | {fmt(r['trial'])} | {fmt(r['peak_mib'])} | |")
                    print(rows[-1], flush=True)
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
