"""The adaptive global batch under MPI (issue 29 item 6, "both runtimes"): real ranks, real gradients, Horovod's
all-reduce, each rank's speed emulated by sleeps (``hardware.emulated_step_s``) on the compute model
``t(b) = t0 + b t1`` of benchmarks/adaptive_batch.py, measured in wall-clock seconds, beside the virtual clock's
prediction of the same trial.

Rows: balanced allreduce at a fixed global batch G (``train.batch_policy=hybrid``, ``train.global_batch_max=G``;
G = 256 is ``+sync=allreduce``'s default) and the adaptive batch (``train.batch_policy=adaptive``, its defaults),
all at ``+sync=allreduce``'s lr (adam 0.008, sqrt scaling): the same tuning budget, none. A cell is the median of
``train.time_to_target_s`` over the seeds (MNIST CNN to 97%).

    PYTHONPATH=. python benchmarks/adaptive_batch_mpi.py --seeds 0,1 --write docs/benchmarks/adaptive_batch_mpi.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.sync_regimes_mpi import fmt, med, run_trial  # noqa: E402

T0, T1 = 0.0009, 0.000195          # benchmarks/adaptive_batch.py's compute model (speed 1.0)
ROWS = {"fixed G=128": ["train.batch_policy=hybrid", "train.global_batch_max=128"],
        "fixed G=256 (+sync=allreduce default)": [],
        "adaptive (defaults)": ["train.batch_policy=adaptive"]}
BATCH = re.compile(r"batch: +adaptive .*?: (\d+) at first, (\d+) at the end, largest (\d+), (\d+) changes(?:; noise scale (\d+))?")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--speed-pattern", default="[1,0.5]", help="hardware.speed_pattern (cycled over the workers)")
    ap.add_argument("--emulated-step-s", type=float, default=0.2, help="a speed-1.0 step of train.batch_size samples")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--write", type=Path, default=None)
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    t_start, load0 = time.perf_counter(), os.getloadavg()[0]
    cells, chosen = {}, {}
    for row, extra in ROWS.items():
        for runtime in ("mpi", "virtual"):
            runs = []
            for seed in seeds:
                r = run_trial(["+sync=allreduce", f"sync.runtime={runtime}", f"hardware.workers={a.workers}",
                               f"hardware.speed_pattern={a.speed_pattern}", f"hardware.emulated_step_s={a.emulated_step_s}",
                               f"sync.step_overhead_s={T0}", f"sync.per_sample_s={T1}", *extra, f"train.seed={seed}"],
                              f"{row} | {runtime} seed {seed}")
                runs.append(r)
                m = BATCH.search(r["stdout"])
                if m:
                    chosen.setdefault((row, runtime), []).append(
                        f"{m.group(1)}->{m.group(2)} (max {m.group(3)}, B_noise {m.group(5) or '?'})")
            cells[row, runtime] = (med([r["time"] for r in runs]),
                                   [r["time"] for r in runs])
    base = {rt: cells["fixed G=256 (+sync=allreduce default)", rt][0] for rt in ("mpi", "virtual")}
    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# Adaptive global batch under MPI (measured) and on the virtual clock (emulated); {datetime.date.today()}",
             "",
             f"W = {a.workers} ranks on one host, speeds `{a.speed_pattern}` cycled, emulated: a speed-v rank's step of "
             f"b samples lasts at least `{a.emulated_step_s} x t(b) / t(64) / v` with `t(b) = {T0} + b x {T1}` "
             "(`hardware.emulated_step_s`, `sync.step_overhead_s`, `sync.per_sample_s`); MNIST CNN to 97%; "
             "`+sync=allreduce` (adam 0.008, balanced); median over seeds "
             f"{', '.join(map(str, seeds))} of `train.time_to_target_s` (MPI: wall clock, real Horovod all-reduce; "
             "virtual: the virtual clock's prediction of the same trial, 10 Gbit/s). Baseline: the fixed G = 256 row "
             f"in the same runtime. Command: `PYTHONPATH=. python benchmarks/adaptive_batch_mpi.py {cmd}` "
             f"({(time.perf_counter() - t_start) / 60:.1f} min, load {load0:.1f} at the start, {os.cpu_count()} cores).",
             "",
             "| row | MPI measured (s) | per seed | vs baseline | virtual predicted (s) | vs baseline | "
             "prediction error | batches chosen (MPI; virtual) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        m, ms = cells[row, "mpi"]
        v, _ = cells[row, "virtual"]
        err = f"{(v - m) / m:+.0%}" if m and v else "-"
        picks = "; ".join(", ".join(chosen.get((row, rt), [])) or "-" for rt in ("mpi", "virtual"))
        lines.append(f"| {row} | {fmt(m)} | {', '.join(fmt(x) for x in ms)} | "
                     f"{fmt(m / base['mpi'] if m and base['mpi'] else None)}x | {fmt(v)} | "
                     f"{fmt(v / base['virtual'] if v and base['virtual'] else None)}x | {err} | "
                     f"{picks if row.startswith('adaptive') else '-'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        a.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
