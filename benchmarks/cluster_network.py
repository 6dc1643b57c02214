"""Emulated multi-host network (``python -m orchestrator.netlab``): measured communication vs the cost
model, on hosts that are network namespaces of this machine with tbf-shaped links (no emulated latency).

1. Horovod allreduce of the MNIST CNN's gradients (its real variables, fp32) across 4 hosts, one rank
   each, at 1 Gbit/s, 100 Mbit/s, and with one host at 100 Mbit/s: the measured median time of one
   ``hvd.grouped_allreduce`` (Open MPI ring algorithm) vs the ring formula
   ``2 (W-1)/W * bytes / B_min + 2 (W-1) * L`` (orchestrator.sync.costmodel.ring_allreduce_s; B_min the
   slowest link's TCP payload rate), once with L = 50 us and once with L fitted to a 4-byte allreduce
   measured on the same hosts (Horovod's own fixed cost per step: negotiation, cycle time, scheduling
   on a shared machine).
2. A model-parallel training step of the CNN split over two hosts' TensorFlow servers (the expert's
   split, ``+placer=manual``), measured, vs the simulator's step time with the hosts' bandwidths
   (``hardware.netlab``).

3. Delay-sync with 4 workers on 4 hosts (one on a 100 Mbit/s link in the second row) trained to 97% under
   MPI (wall clock, ``hardware.emulated_step_s``) vs the virtual clock's prediction for the same hardware
   config (``hardware.netlab``: the lab's links feed the cost model).

    python benchmarks/cluster_network.py            # all parts (~15 min on 2 cores)
    python benchmarks/cluster_network.py --quick    # part 1 at 100 Mbit/s only

Needs root (network namespaces). Prints markdown tables (quoted in docs/cluster.md).
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
sys.path.insert(0, str(ROOT))
PREFIX, SUBNET = "orbench", "10.79.0"
STEPS = 20


def _rank_main(out: str) -> None:
    """Under mpiexec: time grouped_allreduce of the CNN's gradient-shaped tensors."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    from orchestrator.models.cnn import build

    hvd.init()
    model = build()
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    nbytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)

    def timed(tensors, name):
        times = []
        for i in range(STEPS + 3):
            t0 = time.perf_counter()
            _ = [r.numpy() for r in hvd.grouped_allreduce(tensors, op=hvd.Average, name=name)]
            if i >= 3:
                times.append(time.perf_counter() - t0)
        return times

    tiny = timed([tf.constant([1.0])], "tiny")       # Horovod's fixed cost per step on these hosts
    times = timed(grads, "grads")
    if hvd.rank() == 0:
        Path(out).write_text(json.dumps({"bytes": nbytes, "times": times, "tiny": tiny, "size": hvd.size()}))


def _run(cmd: list[str], cwd: Path) -> None:
    out = subprocess.run(cmd, cwd=cwd, env={**os.environ, **_env()}, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")


def _env() -> dict[str, str]:
    from orchestrator.sync.mpi import rank_env

    return rank_env()


def allreduce_rows(bandwidths: list[str], tmp: Path) -> list[dict]:
    from orchestrator.hardware import netlab
    from orchestrator.sync.costmodel import ring_allreduce_s
    from orchestrator.sync.mpi import host_args, mpiexec_path

    rows = []
    for bw in bandwidths:
        lab = netlab.up(4, bw, state_dir=tmp / "lab", prefix=PREFIX, subnet=SUBNET)
        try:
            out = tmp / "allreduce.json"
            env = _env()
            cmd = [mpiexec_path(), "--map-by", "slot:OVERSUBSCRIBE", "-n", "4", *host_args(str(lab.hostfile), env),
                   sys.executable, str(Path(__file__).resolve()), "--rank", str(out)]
            subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
            r = json.loads(out.read_text())
        finally:
            netlab.down(tmp / "lab")
        median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        measured, fixed = median(r["times"]), median(r["tiny"])
        slowest = min(h.payload_Bps for h in lab.hosts)   # TCP payload rate of the slowest link
        predicted = ring_allreduce_s(r["bytes"], 4, slowest, 50e-6)
        # the latency term fitted on these hosts: a 4-byte allreduce is all latency, 2 (W-1) L
        calibrated = ring_allreduce_s(r["bytes"], 4, slowest, fixed / 6)
        rows.append({"links": bw, "bytes": r["bytes"], "measured_s": measured, "predicted_s": predicted,
                     "fixed_s": fixed, "calibrated_s": calibrated, "error": measured / calibrated - 1})
    return rows


def tf_step_rows(bandwidths: list[str], tmp: Path) -> list[dict]:
    from mlflow.tracking import MlflowClient

    from orchestrator.hardware import netlab

    rows = []
    for bw in bandwidths:
        lab = netlab.up(2, bw, state_dir=tmp / "lab", prefix=PREFIX, subnet=SUBNET)
        addresses = [f"{h.address}:2222" for h in lab.hosts]
        servers = [subprocess.Popen(lab.exec_prefix(h) + [sys.executable, "-m", "orchestrator.tf_server", "--cluster",
                                                          ",".join(addresses), "--task", str(i), "--threads", "1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                   for i, h in enumerate(lab.hosts)]
        work = Path(tempfile.mkdtemp(dir=tmp))
        try:
            for s in servers:
                assert s.stdout.readline().strip() == "ready"
            _run([sys.executable, "-m", "orchestrator", "hardware=tf_cluster", f"hardware.addresses=[{','.join(addresses)}]",
                  f"hardware.netlab={lab.dir}", "+placer=manual", "placer.evaluator=simulated",
                  "train.budget_updates=30", "train.target_accuracy=0.5", "progress=false"], work)
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=20)
            netlab.down(tmp / "lab")
        c = MlflowClient(f"sqlite:///{work}/mlflow.db")
        (run,) = c.search_runs([e.experiment_id for e in c.search_experiments()])
        m = run.data.metrics
        rows.append({"links": bw, "simulated_s": m["placement.step_time_s"],
                     "measured_s": m["placement.measured_step_time_s"],
                     "error": m["placement.measured_step_time_s"] / m["placement.step_time_s"] - 1})
    return rows


def _trial(work: Path, *overrides: str) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    work.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "orchestrator", *overrides, "progress=false"], work)
    c = MlflowClient(f"sqlite:///{work}/mlflow.db")
    (run,) = c.search_runs([e.experiment_id for e in c.search_experiments()])
    return run.data.metrics


def delay_rows(bandwidths: list[str], tmp: Path, step_s: float) -> list[dict]:
    """Delay-sync, 4 workers on 4 hosts, to 97%: measured under MPI vs the virtual clock's prediction
    from the same hardware config (the lab's links, hardware.emulated_step_s)."""
    from orchestrator.hardware import netlab

    rows = []
    for bw in bandwidths:
        lab = netlab.up(4, bw, state_dir=tmp / "lab", prefix=PREFIX, subnet=SUBNET)
        common = ["+sync=delay", "hardware.workers=4", f"hardware.netlab={lab.dir}",
                  f"hardware.emulated_step_s={step_s}", "sync.timeout_s=1500", "sync.oversubscribe=true"]
        try:
            measured = _trial(Path(tempfile.mkdtemp(dir=tmp)), *common, "sync.runtime=mpi")
        finally:
            netlab.down(tmp / "lab")
        lab = netlab.up(4, bw, state_dir=tmp / "lab", prefix=PREFIX, subnet=SUBNET)   # the config needs it
        try:
            predicted = _trial(Path(tempfile.mkdtemp(dir=tmp)), *common, "sync.runtime=virtual")
        finally:
            netlab.down(tmp / "lab")
        m, p = measured.get("train.time_to_target_s"), predicted.get("train.time_to_target_s")
        rows.append({"links": bw, "measured_s": m, "predicted_s": p,
                     "acc": measured.get("train.final_test_accuracy"),
                     "error": (m / p - 1) if m and p else None})
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--parts", default="allreduce,delay,tf", help="which tables, comma-separated")
    p.add_argument("--step-s", type=float, default=0.3, help="hardware.emulated_step_s of the delay-sync rows")
    args = p.parse_args()
    if args.rank:
        _rank_main(args.rank)
        return
    tmp = Path(tempfile.mkdtemp(prefix="orch-cluster-bench-"))
    bws = ["100mbit"] if args.quick else ["1gbit", "100mbit", "1gbit,1gbit,1gbit,100mbit"]
    parts = {"allreduce"} if args.quick else set(args.parts.split(","))
    if "allreduce" in parts:
        allreduce_table(bws, tmp)
    if "delay" in parts:
        delay_table(tmp, args.step_s)
    if "tf" in parts:
        tf_table(tmp)


def allreduce_table(bws: list[str], tmp: Path) -> None:
    print("### Horovod allreduce across 4 emulated hosts (measured wall time vs ring formula; MNIST CNN gradients)\n")
    print("| host links | bytes | measured (median of 20) | ring formula, L = 50 us | 4-byte allreduce (measured) "
          "| ring formula, L fitted to it | measured / fitted formula - 1 |")
    print("|---|---|---|---|---|---|---|")
    for r in allreduce_rows(bws, tmp):
        print(f"| {r['links']} | {r['bytes']:,} | {r['measured_s'] * 1e3:.1f} ms | {r['predicted_s'] * 1e3:.1f} ms "
              f"| {r['fixed_s'] * 1e3:.1f} ms | {r['calibrated_s'] * 1e3:.1f} ms | {r['error']:+.0%} |")


def delay_table(tmp: Path, step_s: float) -> None:
    print("\n### Delay-sync (s=2), 4 workers on 4 emulated hosts, MNIST CNN to 97% "
          f"(hardware.emulated_step_s={step_s}): measured (MPI, wall clock) vs predicted (virtual clock)\n")
    print("| host links | measured time to 97% | predicted | measured / predicted - 1 | final accuracy (MPI) |")
    print("|---|---|---|---|---|")
    for r in delay_rows(["1gbit", "1gbit,1gbit,1gbit,100mbit"], tmp, step_s):
        err = f"{r['error']:+.0%}" if r["error"] is not None else "target missed"
        fmt = lambda v: f"{v:.1f} s" if v else "-"  # noqa: E731
        print(f"| {r['links']} | {fmt(r['measured_s'])} | {fmt(r['predicted_s'])} | {err} | {r['acc']:.4f} |")


def tf_table(tmp: Path) -> None:
    print("\n### A model-parallel CNN step across 2 emulated hosts' TF servers (expert split; measured vs simulated)\n")
    print("| host links | simulated step | measured step (median) | measured / simulated - 1 |")
    print("|---|---|---|---|")
    for r in tf_step_rows(["1gbit", "100mbit"], tmp):
        print(f"| {r['links']} | {r['simulated_s'] * 1e3:.1f} ms | {r['measured_s'] * 1e3:.1f} ms | {r['error']:+.0%} |")


if __name__ == "__main__":
    main()
