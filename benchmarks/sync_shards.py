"""Where the parameter server's shards sit (issue 29 item 3): the delay-sync gap at W = 16 mixed speeds.

One server link, 16 dedicated shard links, and 16 shards placed with the workers (``sync.shards=colocated``,
BytePS-style: each worker's link carries 1/16 of every push and pull besides its own), against balanced
allreduce, on the regime map's set-up (virtual clock, real MNIST gradients, t = 0.0009 s + b x 0.000195 s,
10 Gbit/s everywhere, MNIST to 97%, each strategy at its conf/sync defaults), seeds 0..N-1, medians, with the
per-worker time breakdown of seed 0. Emulated: nothing here ran on real workers.

    PYTHONPATH=. python benchmarks/sync_shards.py --seeds 3 --workers 16 --speeds 1,0.5,0.25   # a section of
    PYTHONPATH=. python benchmarks/sync_shards.py --seeds 3 --workers 4 --speeds 1,0.5,0.25,1   # docs/benchmarks/sync_shards.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sync_regimes as sr  # noqa: E402


def configs(w: int) -> dict:
    return {
        "allreduce (static split)": ("allreduce", {}),
        "delay-sync, 1 server link": ("delay", {"shards": 1}),
        f"delay-sync, {w} dedicated shards": ("delay", {"shards": w}),
        "delay-sync, colocated shards": ("delay", {"shards": "colocated"}),
        "async, 1 server link": ("async", {"shards": 1}),
        "async, colocated shards": ("async", {"shards": "colocated"}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--speeds", default="1,0.5,0.25", help="speeds cycled over the workers")
    ap.add_argument("--write", type=Path, default=None)
    a = ap.parse_args()
    speeds = tuple(float(x) for x in a.speeds.split(","))
    regime = f"W={a.workers}, speeds {', '.join(f'{v:g}' for v in speeds)} cycled"
    ROWS = configs(a.workers)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    sr.W = a.workers
    sr.REGIMES[regime] = (speeds, 0.0, 0.0, 10)
    sr.STRATEGIES.update(ROWS)
    b = sr.Bench(0.97)
    t0 = time.time()
    rows = []
    for label in ROWS:
        runs = [b.run(regime, label, seed, None) for seed in range(a.seeds)]
        times = [r["time"] for r in runs]
        med = sr.median_time(times)
        bd = sr.breakdown({"runs": runs})
        rows.append((label, med, times, runs[0], bd))
    ar = rows[0][1]
    lines = [f"## {regime} (emulated: virtual clock; {time.strftime('%Y-%m-%d')})", "",
             f"MNIST CNN to 97%, median of {a.seeds} seed(s) (spread min-max), compute model "
             f"t = {sr.T0} s + b x {sr.T1} s per speed-1.0 worker, 10 Gbit/s links; seed 0's mean seconds per worker "
             f"of compute / waiting / communication / server queueing. Baseline: balanced allreduce on the same "
             f"workers (last column: its time over the row's).", "",
             f"Command (wall {((time.time() - t0) / 60):.1f} min on a shared 2-core machine):", "",
             f"    PYTHONPATH=. python benchmarks/sync_shards.py --seeds {a.seeds} --workers {a.workers} --speeds {a.speeds}",
             "", "| configuration | time to 97% (median) | spread | updates (seed 0) | compute | wait | comm | queue | "
             "allreduce / row |", "|---|---|---|---|---|---|---|---|---|"]
    for label, med, times, r0, bd in rows:
        ok = [t for t in times if t is not None]
        spread = f"{min(ok):.3f}-{max(ok):.3f}" if ok else "-"
        upd = "-" if r0["updates"] is None else f"{r0['updates']:.0f}"
        ratio = f"{ar / med:.2f}" if med and ar else "-"
        lines.append(f"| {label} | {'missed' if med is None else f'{med:.3f} s'} | {spread} | {upd} | "
                     f"{bd['compute_s']:.3f} | {bd['wait_s']:.3f} | {bd['comm_s']:.3f} | {bd['queue_s']:.3f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        a.write.write_text(text)


if __name__ == "__main__":
    main()
