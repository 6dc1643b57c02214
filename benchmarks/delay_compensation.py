"""Delay compensation (DC-ASGD, ``sync.delay_compensation``) on the parameter-server strategies: pushes and
virtual time to the target, with and without it, median of several seeds (min-max in brackets).

Emulated: the virtual clock with a fixed compute model (t0 = 0.9 ms, t1 = 0.195 ms/sample, the figures of
issue 20), real gradients of the MNIST CNN on the packaged 8,000/2,000 split; evaluated on the whole
held-out split every ``--eval-every`` sample-equivalent updates. Workers: W = 16 mixed (speeds 1, 1/2, 1/4
cycled; capacity 9.75). The baseline is the same strategy without compensation, same seeds.

    PYTHONPATH=. python benchmarks/delay_compensation.py            # 3 seeds, delay and async (~10 min)
    ... --batch-policy per_worker --lr 0.1                          # per-worker batches (G = 16 x 64)
    PYTHONPATH=. python benchmarks/delay_compensation.py --seeds 5 --lambdas 0.04,0.5,2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

MIXED = (1.0, 0.5, 0.25)


def run(name: str, lam: float, mode: str, seed: int, args, data):
    """(pushes to target, virtual seconds to target, mean update staleness, median ||correction|| / ||g||)
    of one run; None where it missed (or, for the ratio, without compensation)."""
    from orchestrator import plugins
    from orchestrator.sync.virtual import make_context, train_virtual

    sync = {"name": name, "step_overhead_s": 0.0009, "per_sample_s": 0.000195, "shards": 1}   # one server link, as measured
    if lam > 0:
        sync.update(delay_compensation=lam, delay_compensation_mode=mode)
    cfg = {"seed": seed, "hardware": {"workers": args.workers, "worker_speeds": [MIXED[i % 3] for i in range(args.workers)]},
           "sync": sync, "train": {"target_accuracy": args.target, "eval_every": args.eval_every,
                                   "budget_updates": args.budget, "lr": args.lr, "optimizer": args.optimizer,
                                   "batch_policy": args.batch_policy, "global_batch_max": args.global_batch_max}}
    strategy = plugins.load("sync", name)(sync)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = make_context(cfg, tmp, dataset=data)
        result, stats, _ = train_virtual(strategy, strategy.options(cfg), ctx)
    hist = stats.update_staleness
    mean_stale = sum(k * v for k, v in hist.items()) / max(1, sum(hist.values()))
    return (result.updates_to_target, result.time_to_target_s, mean_stale,
            stats.server_metrics.get("sync.dc_correction_ratio"))


def summary(values: list[float | None]) -> str:
    hit = [v for v in values if v is not None]
    if len(hit) < len(values):
        return f"missed in {len(values) - len(hit)} of {len(values)}" + (f" ({statistics.median(hit):.4g})" if hit else "")
    return f"{statistics.median(hit):.4g} ({min(hit):.4g}-{max(hit):.4g})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--target", type=float, default=0.97)
    ap.add_argument("--eval-every", type=int, default=16, help="batch_size-sample updates between evaluations")
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--batch-policy", default="hybrid", choices=("per_worker", "global", "hybrid"))
    ap.add_argument("--global-batch-max", type=int, default=256)
    ap.add_argument("--strategies", default="delay,async")
    ap.add_argument("--lambdas", default="0.04,2", help="lambda values; the first constant, the rest adaptive")
    args = ap.parse_args()
    from orchestrator.data import load_mnist

    data = load_mnist(seed=0)
    lams = [float(v) for v in args.lambdas.split(",") if v]
    cases = [(0.0, "constant")] + [(lam, "constant" if i == 0 else "adaptive") for i, lam in enumerate(lams)]
    t_start = time.perf_counter()
    print(f"W={args.workers} mixed (1, 1/2, 1/4 cycled), MNIST CNN to {args.target:.0%}, virtual clock (emulated), "
          f"train.optimizer {args.optimizer}, lr {args.lr}, batch_policy {args.batch_policy} (G <= {args.global_batch_max}), "
          f"evaluated every {args.eval_every} x 64 samples, seeds 0..{args.seeds - 1}; median (min-max)\n")
    print("| strategy | delay compensation | pushes to target | virtual s to target | pushes vs none | mean staleness "
          "(pushes between pull and push) | median correction / gradient norm |")
    print("|---|---|---|---|---|---|---|")
    for name in args.strategies.split(","):
        base = None
        for lam, mode in cases:
            rows = [run(name, lam, mode, seed, args, data) for seed in range(args.seeds)]
            pushes, secs = [r[0] for r in rows], [r[1] for r in rows]
            hit = [p for p in pushes if p is not None]
            med = statistics.median(hit) if len(hit) == len(pushes) else None
            if lam == 0:
                base = med
            ratio = f"{med / base:.2f}" if med is not None and base else "-"
            label = "none (baseline)" if lam == 0 else f"lambda {lam:g} ({mode})"
            stale = statistics.median(r[2] for r in rows)
            corr = [r[3] for r in rows if r[3] is not None]
            print(f"| {name} | {label} | {summary(pushes)} | {summary(secs)} | {ratio} | {stale:.1f} | "
                  f"{statistics.median(corr):.2g} |" if corr else f"| {name} | {label} | {summary(pushes)} | "
                  f"{summary(secs)} | {ratio} | {stale:.1f} | - |", flush=True)
    print(f"\nThis run: {(time.perf_counter() - t_start) / 60:.1f} min (2-core machine).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
