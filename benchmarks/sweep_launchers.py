"""What a scheduler costs a sweep: the same 8 placement-only trials (``+placer=random`` on the BERT-24
workload, no training: a few seconds of work each) through Hydra's ``basic`` launcher (one process, one
trial after another), ``joblib`` (2 local worker processes) and ``submitit_slurm`` (each trial a task of
one Slurm job array, 2 running at a time on the one-node cluster of tests/slurm.py, which this script
starts and stops), all into one MLflow server.

Per launcher: the sweep's wall time (command start to exit), the mean trial run (MLflow start to end of
a child run: the trial's own work), and the overhead per trial = (wall time x parallel slots - sum of
the trial runs) / trials: what each trial cost besides its own run (process start and imports,
submission, scheduling, collecting the result, the sweep's own start and end).

    python benchmarks/sweep_launchers.py            # needs root and Debian's slurm-wlm + munge

Prints a markdown table (quoted in docs/cluster.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
TRIALS = 8
WORKLOAD = ROOT / "tests/data/msr-dnn-partitioning/throughput-inputs/LayerGraphs/bert24_training.json"
PLACE = ["model=workload", f"model.path={WORKLOAD}", "hardware=auto", "+placer=random",
         "placer.samples=" + ",".join(str(5 + i) for i in range(TRIALS))]
LAUNCHERS = {   # name: (overrides, parallel slots)
    "basic": ([], 1),
    "joblib": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
    "submitit_slurm": (["hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10",
                        "hydra.launcher.cpus_per_task=1"], 2),
}


def sweep(name: str, work: Path, env: dict[str, str], uri: str) -> dict[str, float]:
    overrides, slots = LAUNCHERS[name]
    d = work / name
    d.mkdir()
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "orchestrator", "-m", *overrides, *PLACE,
                          f"tracking.experiment=launchers-{name}"], check=False, cwd=d, capture_output=True, text=True,
                         env={**env, "MLFLOW_TRACKING_URI": uri}, timeout=1800)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"{name}: exit {out.returncode}\n{out.stderr[-3000:]}")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(f"launchers-{name}")
    runs = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    if len(runs) != TRIALS or any(r.info.status != "FINISHED" for r in runs):
        raise SystemExit(f"{name}: {[r.info.status for r in runs]}")
    busy = sum((r.info.end_time - r.info.start_time) / 1000 for r in runs)
    return {"wall": wall, "trial": busy / TRIALS, "overhead": (wall * slots - busy) / TRIALS, "slots": slots}


def main() -> None:
    from slurm import slurm_cluster, unavailable

    from services import mlflow_server

    why = unavailable()
    if why:
        raise SystemExit(f"cannot run: {why}")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    with tempfile.TemporaryDirectory(prefix="orch-launchers-") as tmp:
        work = Path(tmp)
        with slurm_cluster() as cluster, \
                mlflow_server(work, f"sqlite:///{work / 'server.db'}", "127.0.0.1") as uri:
            rows = {name: sweep(name, work, cluster.env, uri) for name in LAUNCHERS}
    load = os.getloadavg()[0]
    print(f"\n{TRIALS} placement-only trials, {os.cpu_count()} cores, load average {load:.1f} at the end\n")
    print("| launcher | parallel | sweep wall time | mean trial run | overhead per trial |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| `{name}` | {r['slots']} | {r['wall']:.1f} s | {r['trial']:.2f} s | {r['overhead']:.1f} s |")


if __name__ == "__main__":
    main()
