"""Sync strategies on the MNIST CNN: time to target, speedup over one worker, final accuracy.

    PYTHONPATH=. python benchmarks/sync_speedup.py            # representative subset + targets
    PYTHONPATH=. python benchmarks/sync_speedup.py --full     # the whole grid (long)
    ... --write docs/benchmarks/sync.md                         # also write the tables there

Virtual runs use one measured base step time (printed) on the virtual clock; MPI runs use wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import conftest  # noqa: E402,F401  (maps orchestrator_plugins to this tree when not installed)

from orchestrator.sync_core import SyncOptions  # noqa: E402
from orchestrator.sync_virtual import make_context, train_virtual  # noqa: E402

SLOW = 4.0


def speeds_for(setting: str, w: int) -> tuple[list[float], dict | None]:
    if setting == "mixed":
        return [(1.0, 0.5, 0.25)[i % 3] for i in range(w)], None
    if setting == "straggler":
        return [1.0] * (w - 1) + [1.0 / SLOW] if w > 1 else [1.0], None
    if setting.startswith("transient"):
        return [1.0] * w, {"probability": float(setting[len("transient"):]), "slowdown": SLOW}
    return [1.0] * w, None


def strategy_cfg(label: str) -> dict:
    """'allreduce', 'async', 'delay' (defaults), 'delay s=K', 'delay eq' (equal batches)."""
    if label.startswith("delay s="):
        return {"name": "delay", "staleness": float(label.split("=")[1])}
    if label == "delay eq":
        return {"name": "delay", "speed_proportional_batches": False}
    return {"name": label}


def run(label, setting, w, data, base, runtime="virtual", train=None):
    speeds, strag = speeds_for(setting, w)
    sync = dict(strategy_cfg(label), runtime=runtime, base_time_s=base, timeout_s=900)
    cfg = {"hardware": {"workers": w, "worker_speeds": speeds, "stragglers": strag}, "sync": sync,
           "train": dict({"budget_updates": 3000, "eval_samples": 1000}, **(train or {}))}
    with tempfile.TemporaryDirectory() as tmp:
        ctx = make_context(cfg, tmp, dataset=data)
        opts = SyncOptions.from_cfg(sync, cfg)
        t0 = time.perf_counter()
        if runtime == "mpi":
            from orchestrator.sync_mpi import train_mpi

            result, _ = train_mpi(opts, ctx)
        else:
            result, _, _ = train_virtual(opts, ctx)
    ref = result.reference_time_to_target_s
    tt = result.time_to_target_s
    row = {"W": w, "setting": setting, "strategy": label, "runtime": runtime, "tt": tt, "ref": ref,
           "speedup": ref / tt if ref and tt else None, "final": result.final_test_accuracy,
           "updates": result.updates, "elapsed": result.elapsed_s, "wall": time.perf_counter() - t0}
    print(f"  {runtime} W={w} {setting:14s} {label:10s} t97={fmt(tt)} speedup={fmt(row['speedup'])} "
          f"final={row['final']:.4f} ({row['wall']:.0f}s wall)", flush=True)
    return row


def fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def table(rows, title):
    out = [f"### {title}", "", "| runtime | W | setting | strategy | time to 97% [s] | speedup vs 1 worker | final acc | updates |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['runtime']} | {r['W']} | {r['setting']} | {r['strategy']} | {fmt(r['tt'])} | "
                   f"{fmt(r['speedup'])} | {r['final']:.4f} | {r['updates']} |")
    return "\n".join(out) + "\n"


def check(name, value, goal, ok):
    return f"| {name} | {fmt(value)} | {goal} | {'met' if ok else 'MISSED'} |"


def ratio(a, b):
    return a["tt"] / b["tt"] if a["tt"] and b["tt"] else None


def targets(get, budget_rows):
    lines = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    r = ratio(get("allreduce", "straggler", 4), get("delay", "straggler", 4))
    lines.append(check("persistent 4x straggler, W=4: t97(allreduce) / t97(delay)", r, ">= 1.5", bool(r and r >= 1.5)))
    r = ratio(get("allreduce", "transient0.25", 4), get("delay", "transient0.25", 4))
    lines.append(check("transient p=0.25, W=4: t97(allreduce) / t97(delay)", r, ">= 1.3", bool(r and r >= 1.3)))
    r = ratio(get("delay", "equal", 4), get("allreduce", "equal", 4))
    lines.append(check("equal workers, W=4: t97(delay) / t97(allreduce)", r, "<= 1.10", bool(r and r <= 1.10)))
    ar = budget_rows["allreduce"]["final"]
    for s in ("async", "delay"):
        d = (ar - budget_rows[s]["final"]) * 100
        lines.append(check(f"equal budget: allreduce - {s} final accuracy [points]", d, "<= 0.5", d <= 0.5))
    a, d = get("allreduce", "mixed", 16), get("delay", "mixed", 16)
    r = d["speedup"] / a["speedup"] if a["speedup"] and d["speedup"] else None
    lines.append(check("16 mixed workers: speedup(delay) / speedup(allreduce)", r, ">= 2", bool(r and r >= 2)))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="the whole grid (hours on 2 cores)")
    p.add_argument("--base-time", type=float, default=None, help="virtual base step time (default: measure)")
    p.add_argument("--no-mpi", action="store_true")
    p.add_argument("--write", type=Path, default=None, help="also write the tables to this markdown file")
    a = p.parse_args(argv)

    from orchestrator.data import load_mnist
    from orchestrator.models import cnn
    from orchestrator.runtime import ModelRuntime

    data = load_mnist()
    base = a.base_time or ModelRuntime(cnn.spec({})).measure_step_time(data.x_train[:64], data.y_train[:64], repeats=20)
    print(f"base step time (speed 1.0, batch 64): {base * 1000:.1f} ms", flush=True)
    rows, cache = [], {}

    def get(label, setting, w, runtime="virtual", train=None):
        key = (label, setting, w, runtime, str(train))
        if key not in cache:
            cache[key] = run(label, setting, w, data, base, runtime, train)
            rows.append(cache[key])
        return cache[key]

    if a.full:
        for w in (1, 2, 4, 8, 16, 32):
            for setting in ("equal", "mixed", "straggler", "transient0.1", "transient0.25"):
                for label in ("allreduce", "async", "delay", "delay s=0", "delay s=1", "delay s=2", "delay s=4", "delay s=8"):
                    get(label, setting, w)
    for setting in ("straggler", "transient0.25", "equal"):
        for label in ("allreduce", "delay"):
            get(label, setting, 4)
    for label in ("allreduce", "delay"):
        get(label, "mixed", 16)
    budget = {"stop": "budget", "budget_s": 300 * base, "budget_updates": None}
    budget_rows = {lab: run(lab, "straggler", 4, data, base, train=budget) for lab in ("allreduce", "async", "delay")}
    mpi_rows = []
    if not a.no_mpi:
        for w in ((1, 2, 4) if a.full else (2,)):
            for label in ("allreduce", "async", "delay"):
                train = None if a.full else {"stop": "budget", "budget_updates": 60}
                mpi_rows.append(run(label, "mixed", w, data, base, "mpi", train))
    text = [f"Base step time {base * 1000:.1f} ms (batch 64, speed 1.0, measured here). train.lr 0.1, batch 64, "
            "target 97% on the seeded 8000/2000 split (eval on the first 1000 test images).", "",
            table(rows, "Virtual runtime (virtual clock)"),
            table(list(budget_rows.values()), f"Equal budget: {300 * base:.2f} virtual s, 4 workers, one 4x straggler"),
            table(mpi_rows, "MPI runtime (wall clock)") if mpi_rows else "",
            "### Targets", "", targets(get, budget_rows)]
    out = "\n".join(text)
    print(out)
    if a.write:
        a.write.parent.mkdir(parents=True, exist_ok=True)
        a.write.write_text("# Sync strategies: speedup on the MNIST CNN (generated)\n\n" + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
