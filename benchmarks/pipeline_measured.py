"""A pipelined model on this machine's two logical CPU devices: measured vs simulated time per
micro-batch, for GPipe and 1F1B.

Simulated = ``orchestrator.placement.simulate.microbatch.MicrobatchSchedule`` on the layer graph extracted and
profiled here (``extract.extract(profile="local-cpu")``: each layer's forward, backward and update
timed alone) on the worker ``hardware=local`` builds (2 logical CPUs, transfers between them free),
twice: ``independent`` (the two logical CPUs as independent devices: ``hardware.core_sharing=none``,
the simulator before the contention model) and ``shared cores`` (``hardware.core_sharing=auto``: they
share one core pool, k concurrent tasks each at eff(k) / k of their speed alone, eff(2) measured here
at the start on the fixed probe, ``contention.measure_efficiency``, as a trial does; ``--core-sharing
model``: on the model's own training step, ``measure_model_efficiency``; printed, and again at the
end), and a third time: **shared cores, step-normalised**, the profile scaled by one number so that
the layers' forward and backward add up to the model's training step measured whole on one logical
CPU (``placement.profile_scale=step``, what a trial reports beside its measured pipeline).
Measured = median wall time of ``--steps`` real pipelined mini-batches
(``orchestrator.execution.pipelined.PipelinedRuntime``: m micro-batches through the stages under
``tf.device``, gradients accumulated, one SGD step), after 2 untimed ones (the first traces).
Time per micro-batch = mini-batch time / m (bubble and update included) for both; error =
simulated / measured - 1.

The 2 stages: the cut of the layer order (contiguous split) with the best simulated mini-batch
time (``--cut-model``: under the shared-cores model, the default, or the independent one).
Baseline: the same micro-batches on one logical CPU (S = 1), simulated and measured.
Note: the machine's cores are shared with other work as well, which neither model covers;
``uptime`` is printed, and the load with every row.

Usage: python benchmarks/pipeline_measured.py [--model inception_v3] [--input-size 75]
       [--micro-batch 8] [--micro-batches 4] [--schedules gpipe,1f1b] [--steps 5] [--threads 0]
       [--cut-model shared|independent] [--core-sharing auto|<eff(2)>]
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

from orchestrator.hardware.calibration import Calibration, calibrate_graph  # noqa: E402
from orchestrator.hardware.cluster import CorePool, Device, Worker  # noqa: E402
from orchestrator.hardware.contention import measure_efficiency, measure_model_efficiency, measure_model_step, pool_name  # noqa: E402
from orchestrator.models import builtin  # noqa: E402
from orchestrator.phases.schedule import layer_profile_s  # noqa: E402
from orchestrator.placement.graph.extract import extract  # noqa: E402
from orchestrator.placement.simulate.microbatch import MicrobatchSchedule, task_order  # noqa: E402


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
    sched = MicrobatchSchedule(graph, worker, m, kind)
    for cut in range(1, len(fwd)):
        stage_of_layer = {name: 0 if i < cut else 1 for i, name in enumerate(fwd)}
        a = np.array([stage_of_layer.get(n.group or n.name, 1) for n in graph.nodes], dtype=np.int64)
        t = sched.minibatch_time(a)
        if t < best_t:
            best, best_t, at = a, t, f"cut before layer {cut} ({fwd[cut]})"
    return best, at


def measure(spec, graph, worker, assign, m, kind, x, y, steps):
    """The schedule of ``assign`` on ``worker`` (simulated) and its real pipelined run (measured)."""
    from orchestrator.execution.pipelined import PipelinedRuntime

    r = MicrobatchSchedule(graph, worker, m, kind).evaluate(assign)
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
    ap.add_argument("--cut-model", choices=("shared", "independent"), default="shared")
    ap.add_argument("--core-sharing", default="auto",
                    help="eff(2) of the shared-cores model: auto (measured on the fixed probe workload, as a trial with "
                         "hardware.core_sharing=auto does), model (on the model's own training step) or a number")
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
    indep = Worker("local", [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=n) for i, n in enumerate(CPUS)])
    t0 = time.perf_counter()
    xm, ym = spec.sample(args.micro_batch, 0)
    probe = measure_efficiency(CPUS)
    t1 = time.perf_counter()
    on_model = measure_model_efficiency(spec, xm, ym, CPUS) if args.core_sharing == "model" else None
    eff = {"auto": probe, "model": on_model}.get(args.core_sharing) or (float(args.core_sharing),)
    print(f"# eff(2) = {eff[0]:.3f} ({args.core_sharing}); on the fixed probe {probe[0]:.3f} ({t1 - t0:.1f} s)"
          + (f", on the model's training step {on_model[0]:.3f} ({time.perf_counter() - t1:.1f} s)" if on_model else "")
          + f"  {uptime()}", flush=True)
    step_s = measure_model_step(spec, xm, ym, CPUS[0])
    profiled = layer_profile_s(graph)
    scale = step_s / profiled if profiled > 0 else 1.0
    print(f"# the model's training step measured whole on one logical CPU: {step_s * 1e3:.2f} ms; its layers "
          f"profiled one by one add up to {profiled * 1e3:.2f} ms (profile scale {scale:.3f})", flush=True)
    ngraph = calibrate_graph(graph, Calibration(scale={"local-cpu": scale}))
    pool = pool_name("host0")
    shared = Worker("local", [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=n, core_pool=pool)
                              for i, n in enumerate(CPUS)], core_pools={pool: CorePool(eff, "measured")})
    cut_worker = shared if args.cut_model == "shared" else indep
    rows = []
    for m in [int(v) for v in args.micro_batches.split(",")]:
        x, y = spec.sample(args.micro_batch * m, 0)
        one = np.zeros(len(graph.nodes), dtype=np.int64)
        cases = [("1 device (S=1)", "gpipe", (one, "everything on cpu:0"))]
        cases += [(f"2 stages, {k}", k, None) for k in args.schedules.split(",")]
        for label, kind, a in cases:
            if a is None:
                a, where = best_cut(graph, cut_worker, m, kind)
                where += f" (best under the {args.cut_model} model; the other's: {best_cut(graph, indep if args.cut_model == 'shared' else shared, m, kind)[1]})"
            else:
                a, where = a
            r, meas, wall, losses, r_times = measure(spec, graph, shared, a, m, kind, x, y, args.steps)
            r0 = MicrobatchSchedule(graph, indep, m, kind).evaluate(a)
            rn = MicrobatchSchedule(ngraph, shared, m, kind).evaluate(a)
            sim0, sim, mb = r0.minibatch_time_s / m, r.minibatch_time_s / m, meas / m
            rows.append((label, m, sim0, sim, mb, r, wall, losses, uptime().split("load average:")[-1].strip(), rn.minibatch_time_s / m))
            print(f"#   {label}, m={m}: {where}; stages {r.stages} stage time (F+B) "
                  f"{', '.join(f'{v * 1e3:.1f} ms' for v in r.stage_time_s.values())}; in flight {r.in_flight}; "
                  f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; measured {[round(t, 4) for t in r_times]}; {wall:.0f} s",
                  flush=True)
    print(f"# {uptime()}; eff(2) measured again at the end: on the probe {measure_efficiency(CPUS, fresh=True)[0]:.3f}"
          + (f", on the model {measure_model_efficiency(spec, xm, ym, CPUS)[0]:.3f}" if on_model else ""))
    print("| placement | m | simulated, independent (s / micro-batch) | simulated, shared cores | shared cores, step-normalised | "
          "measured | error independent | error shared cores | error shared, normalised | bubble (sim, shared) | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, m, sim0, sim, mb, r, _, _, load, simn in rows:
        print(f"| {label} | {m} | {sim0:.4f} | {sim:.4f} | {simn:.4f} | {mb:.4f} | {sim0 / mb - 1:+.1%} | {sim / mb - 1:+.1%} | "
              f"{simn / mb - 1:+.1%} | {r.bubble_fraction:.0%} | {load.split(',')[0]} |")
    print("# error = simulated / measured - 1")
    base = {m: (mb, sim0, sim) for label, m, sim0, sim, mb, *_ in rows if label.startswith("1 device")}
    for label, m, sim0, sim, mb, *_ in rows:
        if not label.startswith("1 device"):
            b = base[m]
            print(f"# {label}, m={m}: speedup over 1 device: measured {b[0] / mb:.2f}x, simulated "
                  f"{b[1] / sim0:.2f}x (independent), {b[2] / sim:.2f}x (shared cores)")


if __name__ == "__main__":
    main()
