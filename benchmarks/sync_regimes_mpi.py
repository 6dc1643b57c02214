"""Key cells of the regime map (benchmarks/sync_regimes.py) under MPI: real ranks, real gradients, Horovod/MPI
messages, each rank's speed, stragglers and jitter emulated by sleeps (``hardware.emulated_step_s``), measured in
wall-clock seconds, next to the virtual clock's prediction of the same trial (issue 29 item 5).

Each cell is one trial run as a user runs it (``python -m orchestrator +sync=NAME sync.runtime=mpi|virtual ...``,
its own store in a temporary directory); the time to target is the trial's ``train.time_to_target_s``.

    PYTHONPATH=. python benchmarks/sync_regimes_mpi.py                 # W = 4, 3 regimes x 2 strategies x 2 runtimes
    PYTHONPATH=. python benchmarks/sync_regimes_mpi.py --seeds 0,1 --write docs/benchmarks/sync_regimes_mpi.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# label -> hardware overrides (on top of W equal workers)
REGIMES = {
    "equal": [],
    "stragglers p=0.1 x5": ["+hardware.stragglers={probability:0.1,slowdown:5.0}"],
    "jitter sigma=0.5": ["+hardware.jitter={distribution:lognormal,sigma:0.5}"],
}
# label -> the trial's sync overrides
STRATEGIES = {
    "allreduce": ["+sync=allreduce"],
    "backup b=1": ["+sync=backup", "sync.backup_workers=1"],
}
TIME = re.compile(r"time to target ([0-9.]+) s")


def run_trial(overrides: list[str], label: str) -> dict:
    """One trial as a user runs it (``python -m orchestrator OVERRIDES``, its own store in a temporary directory):
    its time to target (None: missed), wall time and printed summary."""
    with tempfile.TemporaryDirectory(prefix="regime-mpi-") as tmp:
        (Path(tmp) / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
        cmd = [sys.executable, "-m", "orchestrator", *overrides, "train.compare_with=null",
               "train.statistical_limit=false", "train.reference=same", "progress=false"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_DISABLE_TELEMETRY": "true"}
        t0 = time.perf_counter()
        out = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"{label} failed (exit {out.returncode}): {last}")
    m = TIME.search(out.stdout)
    t = float(m.group(1)) if m else None
    print(f"  {label}: {t} s to target ({wall:.0f} s wall)", flush=True)
    return {"time": t, "wall": wall, "stdout": out.stdout}


def run_cell(regime: str, strategy: str, runtime: str, seed: int, workers: int, step_s: float) -> dict:
    """One trial of the map; its time to target (None: missed) and wall time."""
    hw = [o.replace("+hardware.", "hardware.") for o in REGIMES[regime]]
    return run_trial([*STRATEGIES[strategy], f"sync.runtime={runtime}", f"hardware.workers={workers}",
                      f"hardware.emulated_step_s={step_s}", *hw, f"train.seed={seed}"],
                     f"{regime} | {strategy} | {runtime} seed {seed}")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--emulated-step-s", type=float, default=0.2)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--regimes", default=",".join(REGIMES), help="labels of REGIMES, comma-separated")
    ap.add_argument("--write", type=Path, default=None)
    a = ap.parse_args(argv)
    regimes = a.regimes.split(",")
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown:
        ap.error(f"--regimes: unknown {', '.join(unknown)} (accepted: {', '.join(REGIMES)})")
    seeds = [int(s) for s in a.seeds.split(",")]
    t_start, load0 = time.perf_counter(), os.getloadavg()[0]
    cells: dict = {}
    for regime in regimes:
        for strategy in STRATEGIES:
            for runtime in ("mpi", "virtual"):
                runs = [run_cell(regime, strategy, runtime, s, a.workers, a.emulated_step_s) for s in seeds]
                cells[regime, strategy, runtime] = med([r["time"] for r in runs])
    lines = [f"# Regime map, key cells under MPI (measured) and on the virtual clock (emulated); {datetime.date.today()}",
             "",
             f"W = {a.workers} ranks of speed 1.0 on one host, `hardware.emulated_step_s={a.emulated_step_s}` (a rank's "
             "iteration lasts at least this long; stragglers and jitter stretch it by sleeping), MNIST CNN to 97%, each "
             "option at its `conf/sync` defaults; median over seeds "
             f"{', '.join(map(str, seeds))} of `train.time_to_target_s` (MPI: wall clock; virtual: the virtual clock "
             "with the same step time). Baseline in each row: allreduce in the same regime and runtime. Command: "
             f"`PYTHONPATH=. python benchmarks/sync_regimes_mpi.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
             f"({(time.perf_counter() - t_start) / 60:.1f} min, load {load0:.1f} at the start, {os.cpu_count()} cores).",
             "",
             "| regime | strategy | MPI measured (s) | virtual predicted (s) | prediction error | MPI: allreduce / this | "
             "virtual: allreduce / this |",
             "|---|---|---|---|---|---|---|"]
    for regime in regimes:
        for strategy in STRATEGIES:
            m, v = cells[regime, strategy, "mpi"], cells[regime, strategy, "virtual"]
            am, av = cells[regime, "allreduce", "mpi"], cells[regime, "allreduce", "virtual"]
            err = f"{(v - m) / m:+.0%}" if m and v else "-"
            lines.append(f"| {regime} | {strategy} | {fmt(m)} | {fmt(v)} | {err} | "
                         f"{fmt(am / m if am and m else None)}x | {fmt(av / v if av and v else None)}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        a.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
