"""Simulator speed (placements/s, one core) and the shared workloads' expert splits vs the lower bound.

Run: PYTHONPATH=. python benchmarks/simulator_speed.py   (numba is used when importable)
"""

from __future__ import annotations

import time

import numpy as np

from orchestrator.errors import WorkloadError
from orchestrator.graph import Edge, Node, OpGraph
from orchestrator.hardware.presets import sim_1cpu_4gpu
from orchestrator.paths import msr_workloads, repo_root
from orchestrator.placement.graph.workload import load_msr_split, load_msr_workload
from orchestrator.placement.simulate.simulator import HAVE_NUMBA, Simulator, lower_bound, simulate

SHARED = msr_workloads()   # ../shared beside the repository, or $ORCHESTRATOR_SHARED
DATA = repo_root() / "tests" / "data" / "msr-dnn-partitioning"


def layered_dag(n: int, width: int = 10, seed: int = 0) -> OpGraph:
    """Synthetic layered DAG: ``width`` nodes a layer, each fed by 1-3 nodes of the layer before."""
    rng = np.random.default_rng(seed)
    nodes = [Node(f"n{i}", flops=float(rng.uniform(1e9, 1e11)), bytes_accessed=float(rng.uniform(1e6, 1e8)),
                  activation_bytes=float(rng.uniform(1e6, 5e7))) for i in range(n)]
    edges = []
    for i in range(width, n):
        layer_start = (i // width - 1) * width
        for j in rng.choice(width, size=int(rng.integers(1, 4)), replace=False):
            edges.append(Edge(f"n{layer_start + j}", f"n{i}", float(rng.uniform(1e6, 5e7))))
    return OpGraph(f"layered-{n}", nodes, edges).validate()


def random_placements(sim: Simulator, k: int, seed: int) -> list[np.ndarray]:
    """Random placements that keep colocation groups and cpu_only nodes legal (so each one is simulated)."""
    rng = np.random.default_rng(seed)
    g, nd = sim.graph, len(sim.worker.devices)
    cpus = [i for i, d in enumerate(sim.worker.devices) if d.kind == "cpu"]
    key = [n.group if n.group is not None else f"#{i}" for i, n in enumerate(g.nodes)]
    cpu_groups = {key[i] for i, n in enumerate(g.nodes) if n.cpu_only}
    out = []
    for _ in range(k):
        pick = {kk: (rng.choice(cpus) if kk in cpu_groups else rng.integers(0, nd)) for kk in dict.fromkeys(key)}
        out.append(np.array([pick[kk] for kk in key], dtype=np.int64))
    return out


def rate(sim: Simulator, seconds: float = 2.0, seed: int = 1) -> tuple[float, float]:
    batch = random_placements(sim, 64, seed)
    feasible = float(np.mean([np.isfinite(sim.step_time(a)) for a in batch]))   # also compiles / warms up
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in batch:
            sim.step_time(a)
        done += len(batch)
    return done / (time.perf_counter() - t0), feasible


def speed_table() -> list[str]:
    rows = ["| graph | nodes | worker | placements/s | target | met | feasible share |", "|---|---|---|---|---|---|---|"]
    w = sim_1cpu_4gpu().workers[0]
    cases = [(layered_dag(300), w, 2000), (layered_dag(2000), w, 200)]
    big = SHARED / "throughput-inputs/OperatorGraphs/resnet50_training.json"
    if big.exists():
        wl = load_msr_workload(big)
        cases.append((wl.graph, wl.worker, 200))
    for g, wk, target in cases:
        r, feas = rate(Simulator(g, wk))
        rows.append(f"| {g.name} | {len(g.nodes)} | {wk.name} ({len(wk.devices)} devices) | {r:,.0f} | {target:,} | "
                    f"{'met' if r >= target else 'missed'} | {feas:.0%} |")
    return rows


def expert_table() -> list[str]:
    rows = ["| workload | expert split | step (file unit) | feasible | lower bound | step / bound |", "|---|---|---|---|---|---|"]
    pairs = [(DATA, "latency-inputs/LayerGraphs/inceptionv3_inference.json", "inceptionv3_inference_expert.json")]
    for kind in ("latency-inputs", "throughput-inputs"):
        pairs += [(SHARED, f"{kind}/LayerGraphs/resnet50_inference.json", "resnet50_inference_expert.json"),
                  (SHARED, f"{kind}/LayerGraphs/bert24_inference.json", "bert24_inference_expert.json")]
    pairs += [(SHARED, "throughput-inputs/LayerGraphs/bert24_training.json", "bert24_training_expert.json"),
              (SHARED, "throughput-inputs/LayerGraphs/resnet50_training.json", "resnet50_inference_expert.json")]
    for root, rel, split in pairs:
        if not (root / rel).exists():
            continue
        wl = load_msr_workload(root / rel)
        try:
            r = simulate(wl.graph, wl.worker, load_msr_split(root / "human-experts" / split, wl))
        except WorkloadError as exc:
            rows.append(f"| {rel} | {split} | not applicable: {str(exc).split(': ', 1)[1]} | | | |")
            continue
        u = wl.graph.time_unit_s
        lb = lower_bound(wl.graph, wl.worker)
        oom = "" if r.feasible else " (OOM: " + ", ".join(d for d, _ in r.oom) + ")"
        rows.append(f"| {rel} | {split} | {r.makespan_s / u:.3f} | {'yes' if r.feasible else 'no' + oom} | "
                    f"{lb / u:.3f} | {r.makespan_s / lb:.2f} |")
    return rows


if __name__ == "__main__":
    print(f"numba: {'yes' if HAVE_NUMBA else 'no (plain Python kernel)'}\n")
    print("\n".join(speed_table()) + "\n")
    print("\n".join(expert_table()))
