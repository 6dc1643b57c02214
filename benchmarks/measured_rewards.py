"""Placements found with measured, mixed and simulated rewards (``placer.reward``), each then measured,
on this machine's two logical CPU devices (``hardware=local``, ``runtime.split_cpu(2)``).

Models: the reference study's MNIST CNN (batch 64) and ``small_inception`` (below: a stem and two
Inception modules of four branches each, 32x32x3 input, batch 32). ``keras.applications.InceptionV3``
is too slow to measure many candidates on this machine (``--probe-inception`` times one placement's
build, trace and steps). For each model the rl placer (its defaults but ``placer.budget_evaluations``
= ``--evaluations``, seed 0) searches once per reward, on the graph extracted and profiled here
(``extract(profile="local-cpu")``, as a trial does): ``simulated`` (the simulator on the profiled
costs), ``measured`` and ``mixed`` (``orchestrator.placement.evaluate.measured``; measuring budget
``--budget-s`` seconds, ``placer.measure_steps`` = 5).

Then every found placement, and the single-device placement (all on cpu:0, the reference), is
measured again in the same process: a fresh runtime each, 3 warm-up steps, then ``--steps`` rounds,
each round one timed training step of every placement in a new random order (interleaved, so that
all of them see the same load on this shared machine); the median per placement is reported, and
the per-round ratio (simulated-reward placement's step / this one's, same round) with its quartiles.
"layers on cpu:1" tells placements apart: the runtime places layers (a layer's backward and update
go with it; the loss runs on cpu:0), so a placement with 0 layers on cpu:1 runs exactly like "all on
cpu:0" and the difference between the two is the measurement's noise. Figures labelled
``measured`` are wall times; ``simulated`` ones are the cost model's.

Usage: python benchmarks/measured_rewards.py [--models cnn,small_inception] [--budget-s 30]
       [--evaluations 3000] [--steps 20] [--json FILE] [--probe-inception] [--full]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from orchestrator.execution.runtime import ModelRuntime, split_cpu  # noqa: E402

CPUS = split_cpu(2)

import numpy as np  # noqa: E402

from orchestrator.graph import Placement, PlacementContext  # noqa: E402
from orchestrator.models import ModelSpec, builtin  # noqa: E402
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator  # noqa: E402
from orchestrator.placement.evaluate.measured import MeasuredRewardEvaluator, RewardSettings, TFMeasure  # noqa: E402
from orchestrator.placement.graph.extract import extract  # noqa: E402
from orchestrator_plugins.hardware.local import LocalHardware  # noqa: E402
from orchestrator_plugins.placers.rl import RLPlacer  # noqa: E402

REWARDS = ("simulated", "measured", "mixed")


def small_inception(width: int = 16, size: int = 32, classes: int = 10):
    """A small Inception-style network: conv stem, two Inception modules (1x1 | 1x1-3x3 |
    1x1-3x3-3x3 | pool-1x1, concatenated), global pooling and a dense classifier."""
    import keras
    from keras import layers as L

    def conv(x, f, k, name):
        return L.Conv2D(f, k, padding="same", activation="relu", name=name)(x)

    def module(x, f, p):
        b1 = conv(x, f, 1, f"{p}_1x1")
        b2 = conv(conv(x, f, 1, f"{p}_3x3_reduce"), f, 3, f"{p}_3x3")
        b3 = conv(conv(conv(x, f // 2, 1, f"{p}_dbl_reduce"), f, 3, f"{p}_dbl_a"), f, 3, f"{p}_dbl_b")
        b4 = conv(L.AveragePooling2D(3, 1, padding="same", name=f"{p}_pool")(x), f, 1, f"{p}_pool_proj")
        return L.Concatenate(name=f"{p}_concat")([b1, b2, b3, b4])

    inp = keras.Input((size, size, 3))
    x = conv(inp, width, 3, "stem_conv")
    x = L.MaxPooling2D(2, name="stem_pool")(x)
    x = module(x, width, "mixed0")
    x = L.MaxPooling2D(2, name="pool1")(x)
    x = module(x, 2 * width, "mixed1")
    x = L.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inp, L.Dense(classes, name="logits")(x), name="small_inception")


def model(name: str) -> tuple[ModelSpec, int]:
    if name == "cnn":
        return builtin("cnn"), 64
    if name == "small_inception":
        return ModelSpec("small_inception", build=small_inception, input_shape=(32, 32, 3), num_classes=10,
                         trainable_on_mnist=False), 32
    raise SystemExit(f"--models: unknown model {name!r} (cnn, small_inception)")


def batch(spec: ModelSpec, size: int):
    if spec.name == "cnn":
        from orchestrator.data import load_mnist

        ds = load_mnist(None, seed=0)
        return ds.x_train[:size], ds.y_train[:size]
    return spec.sample(size, 0)


def search(reward, spec, graph, worker, x, y, args):
    if reward == "simulated":
        ev = SimulatedEvaluator(graph, worker)
    else:
        ev = MeasuredRewardEvaluator(graph, worker, RewardSettings(reward, args.budget_s, 5, 0.1),
                                     TFMeasure(spec, worker, x, y, seed=0, graph=graph), log=lambda line: None)
    t0 = time.perf_counter()
    p = RLPlacer({"budget_evaluations": args.evaluations}).place(graph, worker, ev, PlacementContext(seed=0))
    info = {"search_s": time.perf_counter() - t0}
    if reward != "simulated":
        info.update(ev.end_search())
    return p, info


def interleaved(spec, worker, placements: dict[str, Placement], x, y, steps: int) -> dict[str, np.ndarray]:
    """``steps`` timed steps per placement, one step of each in turn per round."""
    tf_dev = {d.name: d.tf_device for d in worker.devices}
    rts = {k: ModelRuntime(spec, seed=0, device_of={n: tf_dev[d] for n, d in p.assignment.items()},
                           default_device=worker.devices[0].tf_device) for k, p in placements.items()}
    for rt in rts.values():
        for _ in range(3):
            rt.train_step(x, y)
    times = {k: [] for k in rts}
    rng = np.random.default_rng(0)
    for _ in range(steps):
        for k in rng.permutation(list(rts)):        # a new order each round: no position effect
            rt = rts[k]
            t0 = time.perf_counter()
            rt.train_step(x, y)
            times[k].append(time.perf_counter() - t0)
    return {k: np.array(v) for k, v in times.items()}


def probe_inception() -> str:
    spec = builtin("inception_v3", {"input_size": 75, "classes": 10})
    x, y = spec.sample(8, 0)
    worker = local_worker()
    graph = extract(spec, 8)
    half = {n.name: CPUS[int(i >= len(graph.nodes) // 2)] for i, n in enumerate(graph.nodes)}
    t0 = time.perf_counter()
    rt = ModelRuntime(spec, seed=0, device_of=half, default_device=worker.devices[0].tf_device)
    times, _ = rt.time_steps(x, y, warmup=2, repeats=5)
    return (f"InceptionV3 (input 75, batch 8, {len(graph.nodes)} graph nodes): one placement's build, trace, "
            f"2 warm-up + 5 timed steps took {time.perf_counter() - t0:.1f} s (measured; step median "
            f"{np.median(times) * 1e3:.0f} ms)")


def local_worker():
    return LocalHardware({"logical_cpus": 2, "gpus": False}).cluster(SimpleNamespace(has_sync=False)).workers[0]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "uptime unavailable"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn,small_inception")
    ap.add_argument("--budget-s", type=float, default=30.0, help="measuring budget per search (placer.budget_s)")
    ap.add_argument("--evaluations", type=int, default=3000, help="placer.budget_evaluations of each search")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per placement in the final measurement")
    ap.add_argument("--json", default=None)
    ap.add_argument("--probe-inception", action="store_true")
    ap.add_argument("--full", action="store_true", help="--budget-s 120 --evaluations 12000")
    args = ap.parse_args(argv)
    if args.full:
        args.budget_s, args.evaluations = 120.0, 12000
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}: {os.cpu_count()} CPU cores, "
          f"2 logical TF CPU devices; load at start: {uptime()}")
    worker = local_worker()
    rows = []
    for name in args.models.split(","):
        spec, bs = model(name)
        x, y = batch(spec, bs)
        graph = extract(spec, bs, profile="local-cpu", seed=0)
        sim = SimulatedEvaluator(graph, worker)
        found = {}
        for reward in REWARDS:
            p, info = search(reward, spec, graph, worker, x, y, args)
            found[reward] = (p, info)
            print(f"  {name} reward={reward}: search {info['search_s']:.1f} s, "
                  f"{int(info.get('placement.measured_placements', 0))} placements measured", flush=True)
        single = Placement(worker.device_names, {n.name: "cpu:0" for n in graph.nodes}, {})
        runs = interleaved(spec, worker, {**{r: p for r, (p, _) in found.items()}, "single": single}, x, y, args.steps)
        final = {k: float(np.median(v)) for k, v in runs.items()}
        layers = [n.name for n in graph.nodes if n.role == "forward" and n.layer]
        on = {r: [p.assignment[n] for n in layers] for r, (p, _) in found.items()}
        for reward, (p, info) in found.items():
            per_round = runs["simulated"] / runs[reward]       # the same round: the same load
            q1, q3 = np.percentile(per_round, [25, 75])
            rows.append({"model": name, "reward": reward, "nodes": len(graph.nodes),
                         "devices_used": len(set(p.assignment.values())),
                         "layers_on_cpu1": sum(p.assignment[n.name] == "cpu:1" for n in graph.nodes
                                               if n.role == "forward" and n.layer),
                         "layers": len(layers), "layer_devices": on[reward],
                         "same_layers_as_simulated": on[reward] == on["simulated"],
                         "simulated_ms": sim.evaluate(p).step_time_s * 1e3,
                         "measured_ms": final[reward] * 1e3, "single_ms": final["single"] * 1e3,
                         "vs_simulated": final["simulated"] / final[reward],
                         "round_ratio_median": float(np.median(per_round)), "round_ratio_q1": float(q1),
                         "round_ratio_q3": float(q3), **info})
    print(f"# load at end: {uptime()}")
    print()
    print("| model | reward | search (s) | placements measured | sim error raw / re-calibrated | layers on cpu:1 "
          f"| simulated step (ms) | **measured** step, median of {args.steps} (ms) | all on cpu:0, measured (ms) "
          "| simulated-reward placement / this (measured; per-round median [IQR]) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = (f"{r['placement.sim_error']:.0%} / {r.get('placement.sim_error_calibrated', math.nan):.0%}"
               if "placement.sim_error" in r else "-")
        print(f"| {r['model']} ({r['nodes']} nodes) | {r['reward']} | {r['search_s']:.1f} "
              f"| {int(r.get('placement.measured_placements', 0))} | {err} | {r['layers_on_cpu1']} of {r['layers']}"
              f"{' (same as simulated)' if r['same_layers_as_simulated'] and r['reward'] != 'simulated' else ''} "
              f"| {r['simulated_ms']:.2f} | {r['measured_ms']:.2f} | {r['single_ms']:.2f} | {r['vs_simulated']:.3f} "
              f"({r['round_ratio_median']:.3f} [{r['round_ratio_q1']:.2f}, {r['round_ratio_q3']:.2f}]) |")
    if args.probe_inception:
        print()
        print(probe_inception())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
