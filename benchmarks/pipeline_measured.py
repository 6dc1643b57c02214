"""A pipelined model on this machine's two logical CPU devices: measured vs simulated time per
micro-batch, for GPipe and 1F1B.

Simulated = ``orchestrator.placement.schedule.PipelineSchedule`` on the layer graph extracted and
profiled here (``extract.extract(profile="local-cpu")``: each layer's forward, backward and update
timed alone) on the worker ``hardware=local`` builds (2 logical CPUs, transfers between them free).
Measured = median wall time of ``--steps`` real pipelined mini-batches
(``orchestrator.execution.pipelined.PipelinedRuntime``: m micro-batches through the stages under
``tf.device``, gradients accumulated, one SGD step), after 2 untimed ones (the first traces).
Time per micro-batch = mini-batch time / m (bubble and update included) for both; error =
simulated / measured - 1.

The 2 stages: the cut of the layer order (contiguous split) with the best simulated mini-batch
time. Baseline: the same micro-batches on one logical CPU (S = 1), simulated and measured.
Note: the logical CPUs share TensorFlow's thread pools and this machine's cores (shared with other
work): two stages run truly in parallel only while two cores are free; ``uptime`` is printed.

Usage: python benchmarks/pipeline_measured.py [--model inception_v3] [--input-size 75]
       [--micro-batch 8] [--micro-batches 4] [--schedules gpipe,1f1b] [--steps 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from orchestrator.execution.runtime import configure_threads, split_cpu  # noqa: E402

CPUS = split_cpu(2)

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from orchestrator.hardware.cluster import Device, Worker  # noqa: E402
from orchestrator.models import builtin  # noqa: E402
from orchestrator.placement.extract import extract  # noqa: E402
from orchestrator.placement.schedule import PipelineSchedule, task_order  # noqa: E402


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        return "uptime: n/a"


def best_cut(graph, worker, m: int, kind: str) -> tuple[np.ndarray, str]:
    """The contiguous 2-stage split (a cut of the forward layer order, each layer's backward and
    update with it, the loss with the last layer) with the best simulated mini-batch time."""
    fwd = [n.name for n in graph.nodes if n.role == "forward"]
    stage_of_layer = {}
    best, best_t, at = None, np.inf, ""
    sched = PipelineSchedule(graph, worker, m, kind)
    for cut in range(1, len(fwd)):
        stage_of_layer = {name: 0 if i < cut else 1 for i, name in enumerate(fwd)}
        a = np.array([stage_of_layer.get(n.group or n.name, 1) for n in graph.nodes], dtype=np.int64)
        t = sched.minibatch_time(a)
        if t < best_t:
            best, best_t, at = a, t, f"cut before layer {cut} ({fwd[cut]})"
    return best, at


def measure(spec, graph, worker, assign, m, kind, x, y, steps):
    from orchestrator.execution.pipelined import PipelinedRuntime

    r = PipelineSchedule(graph, worker, m, kind).evaluate(assign)
    layers = [n for n in graph.nodes if n.role == "forward"]
    tf_dev = [d.tf_device for d in worker.devices]
    device_of = {n.name: tf_dev[assign[graph.index(n.name)]] for n in layers}
    stages = [worker.device(s).tf_device for s in r.stages]
    orders = [task_order(kind, m, len(stages), s) for s in range(len(stages))]
    t0 = time.perf_counter()
    rt = PipelinedRuntime(spec, device_of, stages, orders, seed=0, lr=0.01, reference_names=[n.name for n in layers])
    times, losses = rt.time_steps(x, y, warmup=2, repeats=steps)
    return r, float(np.median(times)), time.perf_counter() - t0, losses, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="inception_v3")
    ap.add_argument("--input-size", type=int, default=75)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--micro-batches", default="4")
    ap.add_argument("--schedules", default="gpipe,1f1b")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="TF intra-op threads (0: TF's default); inter-op = 2")
    args = ap.parse_args()
    if args.threads:
        configure_threads(args.threads, 2)
    cfg = {"name": args.model}
    if args.model in ("inception_v3", "resnet50"):
        cfg.update(input_size=args.input_size, classes=args.classes)
    spec = builtin(args.model, OmegaConf.create(cfg))
    print(f"# {datetime.datetime.now().isoformat(timespec='minutes')}  {uptime()}")
    t0 = time.perf_counter()
    graph = extract(spec, args.micro_batch, profile="local-cpu")
    print(f"# {spec.name} ({cfg}): {sum(n.role == 'forward' for n in graph.nodes)} layers, micro-batch "
          f"{args.micro_batch}, profiled in {time.perf_counter() - t0:.0f} s; threads: "
          f"{args.threads or 'TF default'}")
    worker = Worker("local", [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=n) for i, n in enumerate(CPUS)])
    rows = []
    for m in [int(v) for v in args.micro_batches.split(",")]:
        x, y = spec.sample(args.micro_batch * m, 0)
        one = np.zeros(len(graph.nodes), dtype=np.int64)
        cases = [("1 device (S=1)", "gpipe", (one, "everything on cpu:0"))]
        cases += [(f"2 stages, {k}", k, None) for k in args.schedules.split(",")]
        for label, kind, a in cases:
            a, where = best_cut(graph, worker, m, kind) if a is None else a
            r, meas, wall, losses, r_times = measure(spec, graph, worker, a, m, kind, x, y, args.steps)
            sim, mb = r.minibatch_time_s / m, meas / m
            rows.append((label, m, sim, mb, sim / mb - 1, r, wall, losses))
            print(f"#   {label}, m={m}: {where}; stages {r.stages} stage time (F+B) "
                  f"{', '.join(f'{v * 1e3:.1f} ms' for v in r.stage_time_s.values())}; in flight {r.in_flight}; "
                  f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; measured {[round(t, 4) for t in r_times]}; {wall:.0f} s",
                  flush=True)
    print(f"# {uptime()}")
    print("| placement | m | simulated s / micro-batch | measured s / micro-batch | measured / simulated | error (sim / meas - 1) | bubble (sim) |")
    print("|---|---|---|---|---|---|---|")
    for label, m, sim, mb, err, r, _, _ in rows:
        print(f"| {label} | {m} | {sim:.4f} | {mb:.4f} | {mb / sim:.2f} | {err:+.1%} | {r.bubble_fraction:.0%} |")
    base = {m: mb for label, m, _, mb, *_ in rows if label.startswith("1 device")}
    for label, m, _, mb, *_ in rows:
        if not label.startswith("1 device"):
            print(f"# {label}, m={m}: measured speedup over 1 device {base[m] / mb:.2f}x")


if __name__ == "__main__":
    main()
