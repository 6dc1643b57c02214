"""The tracking store under signals and load: N trials, each ended by SIGTERM or SIGINT at a random moment
(during start-up, the store's set-up, training or a placement search, or after it finished), C at a time,
against one SQLite store that a reader polls all along (what the MLflow UI or ``orchestrator.report``
does), on a machine kept busy by spinning processes (one per core).

Counted, per trial: its exit (0 finished, 130 SIGINT, 143 SIGTERM, other), whether it hung (still alive
60 s after its signal: killed and counted), whether its stderr holds a Python traceback; and in the store,
read directly with sqlite3 after every trial process is gone (no reaping by a later trial): the runs by
status. The issue's target (issue 44, item 8): 0 runs left RUNNING, 0 tracebacks, 0 hangs.

    python benchmarks/store_signals.py                  # 50 trials, 4 at a time (~10 min on 2 cores)
    python benchmarks/store_signals.py --trials 8 --parallel 4 --seed 1

Prints a markdown table (quoted in docs/cluster.md, "The store under signals").
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORKLOAD = ROOT / "tests/data/msr-dnn-partitioning/throughput-inputs/LayerGraphs/bert24_training.json"
QUICK = ["train.target_accuracy=0.8", "train.eval_every=10", "train.eval_samples=500"]
# Trial kinds: each writes to the store in its own pattern (metrics every few updates, a search's
# progress, a sync trial's per-worker metrics and its comparison run).
KINDS = {
    "train": ["train.stop=budget", "train.budget_updates=300", *QUICK],
    "search": ["model=workload", f"model.path={WORKLOAD}", "hardware=auto", "+placer=rl", "placer.budget_s=20"],
    "sync": ["+sync=delay", "train.budget_updates=300", "train.compare_with=null", *QUICK],
}
HANG_S = 60.0


@dataclass
class Outcome:
    kind: str
    signal: str
    delay_s: float
    code: int | None = None
    hung: bool = False
    traceback: bool = False
    stderr_tail: str = ""
    extra: dict = field(default_factory=dict)


def spin(stop: threading.Event) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def poll_store(db: Path, stop: threading.Event) -> None:
    """A reader holding the file the way the UI does: repeated queries over every run."""
    while not stop.is_set():
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=1)
                con.execute("SELECT r.status, count(*) FROM runs r JOIN metrics m ON m.run_uuid = r.run_uuid "
                            "GROUP BY r.status").fetchall()
                con.close()
            except sqlite3.Error:
                pass
        time.sleep(0.05)


def one_trial(workdir: Path, kind: str, sig: int, delay: float, env: dict) -> Outcome:
    out = Outcome(kind, signal.Signals(sig).name, delay)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *KINDS[kind]], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        out.hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    try:  # nothing of the trial's process group may be left behind
        os.killpg(proc.pid, 0)
        out.extra["left_behind"] = True
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out.code = proc.returncode
    out.traceback = "Traceback (most recent call last)" in (err or "")
    out.stderr_tail = (err or "")[-1500:]
    return out


def store_statuses(db: Path) -> Counter:
    con = sqlite3.connect(db, timeout=30)
    try:
        return Counter(dict(con.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()))
    finally:
        con.close()


def run(trials: int, parallel: int, seed: int, max_delay: float, load: int) -> tuple[list[Outcome], Counter]:
    rng = random.Random(seed)
    plan = [(rng.choice(list(KINDS)), rng.choice([signal.SIGTERM, signal.SIGINT]), rng.uniform(0.5, max_delay))
            for _ in range(trials)]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="store-signals-") as tmp:
        workdir = Path(tmp)
        db = workdir / "mlflow.db"
        stop = threading.Event()
        spinners = [spin(stop) for _ in range(load)]
        reader = threading.Thread(target=poll_store, args=(db, stop), daemon=True)
        reader.start()
        lock = threading.Lock()
        queue = list(plan)

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    kind, sig, delay = queue.pop(0)
                o = one_trial(workdir, kind, sig, delay, env)
                with lock:
                    outcomes.append(o)
                    print(f"  {len(outcomes):3d}/{trials} {kind:6s} {o.signal:7s} after {delay:5.1f} s: exit {o.code}"
                          + (" HUNG" if o.hung else "") + (" TRACEBACK" if o.traceback else ""), file=sys.stderr)

        threads = [threading.Thread(target=worker) for _ in range(parallel)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            stop.set()
            for p in spinners:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        statuses = store_statuses(db) if db.exists() else Counter()
    return outcomes, statuses


def table(outcomes: list[Outcome], statuses: Counter, args: argparse.Namespace) -> str:
    codes = Counter(o.code for o in outcomes)
    rows = [
        ("trials (train / search / sync)", f"{len(outcomes)} ({Counter(o.kind for o in outcomes)['train']} / "
         f"{Counter(o.kind for o in outcomes)['search']} / {Counter(o.kind for o in outcomes)['sync']})"),
        ("signals (SIGTERM / SIGINT)", f"{Counter(o.signal for o in outcomes)['SIGTERM']} / "
         f"{Counter(o.signal for o in outcomes)['SIGINT']}, after 0.5-{args.max_delay:g} s"),
        ("load", f"{args.load} spinning processes, {args.parallel} trials at a time, a reader polling the store every 50 ms"),
        ("exits 143 / 130 / 0 (finished first) / other",
         f"{codes[143]} / {codes[130]} / {codes[0]} / {sum(n for c, n in codes.items() if c not in (0, 130, 143))}"),
        ("runs in the store by status", ", ".join(f"{s} {n}" for s, n in sorted(statuses.items())) or "none"),
        ("**runs left RUNNING** (target 0)", str(statuses.get("RUNNING", 0))),
        ("**trials with a traceback** (target 0)", str(sum(o.traceback for o in outcomes))),
        ("**trials hung** (alive 60 s after the signal; target 0)", str(sum(o.hung for o in outcomes))),
        ("processes left behind (target 0)", str(sum(bool(o.extra.get("left_behind")) for o in outcomes))),
    ]
    lines = ["| store under signals (measured) | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-delay", type=float, default=30.0, help="latest signal, seconds after the trial's start")
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2, help="spinning processes (default: one per core)")
    args = ap.parse_args(argv)
    outcomes, statuses = run(args.trials, args.parallel, args.seed, args.max_delay, args.load)
    print(table(outcomes, statuses, args))
    bad = [o for o in outcomes if o.traceback or o.hung or o.code not in (0, 130, 143)]
    for o in bad[:5]:
        print(f"\n{o.kind} {o.signal} after {o.delay_s:.1f} s, exit {o.code}:\n{o.stderr_tail}", file=sys.stderr)
    return 1 if bad or statuses.get("RUNNING", 0) else 0


if __name__ == "__main__":
    sys.exit(main())
