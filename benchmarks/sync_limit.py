"""The statistical limit measured on the footing of the rows it is printed beside (issue 44, item 6).

README's speedup table (``benchmarks/sync_tuned.py``) put allreduce at 1.05x and 1.08x of its limit on MNIST:
the limit's S(G) was one worker at batch G with the scaled lr from its first step, on an lr grid centred on
lr64 x sqrt(G/64), while the rows ran the allreduce rule (the lr given at B = 64, scaled to G by sqrt after the
warm-up of ``train.warmup_updates``) tuned over the table's grid. Here S(G) is bulk-synchronous SGD at G (G/64
equal workers under the allreduce rule, ``orchestrator.sync.limit``'s footing), on the same (optimizer x lr)
grid, seeds and evaluation cadence as the rows, each row is re-measured over that grid, and each limit is given
with its spread (its best cell's fastest and slowest seed). Emulated: virtual clock, real gradients of the MNIST
CNN, the compute model of ``benchmarks/seeded.py``.

    PYTHONPATH=. python benchmarks/sync_limit.py                      # MNIST to 97%, adam grid, 3 seeds (~30 min here)
    PYTHONPATH=. python benchmarks/sync_limit.py --grid 'adam:0.004,0.008' --batches 64,256 --seeds 2   # a quick look

Prints a markdown table (quoted in README, "Data-parallel speedups over a tuned worker").
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.seeded import BUDGET, T0, T1  # noqa: E402
from benchmarks.sync_tuned import EXTEND, MISS_AT, Bench, _configs, _grid  # noqa: E402
from orchestrator.sync.reference import median_time  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# README's MNIST rows: (index into sync_tuned._configs(), the label README gives it, its coarse-grid limit speedup)
ROWS = [(6, "allreduce, 8 equal (`+sync=allreduce` default)", 3.15),
        (4, "allreduce + static balancing, 16 mixed (default)", 3.03),
        (5, "delay-sync, 16 mixed", 3.03),
        (7, "async, 16 mixed", 3.03)]


class LimitBench(Bench):
    def synchronous_steps(self, G: int, opt: str, lr: float, cap_rounds: int | None) -> list[float | None]:
        """Rounds to the target of allreduce over G/64 equal workers of batch 64 (lr at 64, the rule's scaling)."""
        from orchestrator.sync.limit import BulkSynchronous
        from orchestrator.sync.virtual import VirtualRun

        w = max(1, G // 64)
        cfg = {"hardware": {"workers": w, "worker_speeds": [1.0] * w},
               "sync": {"step_overhead_s": T0, "per_sample_s": T1},
               "train": {"optimizer": opt, "lr": lr, "batch_policy": "per_worker"}}
        strat = BulkSynchronous(cfg["sync"])      # the trial's limit runs S(G) with the same strategy
        opts = strat.options(cfg)
        budget = BUDGET[self.name] if cap_rounds is None else min(BUDGET[self.name], cap_rounds * G)
        out = []
        for seed in range(self.seeds):
            s = self.settings(64, opt, lr, seed, budget)
            r, _ = VirtualRun(strat, opts, s, self.runtime(seed), self.ds, self.cm).run()
            out.append(r.updates_to_target)
        return out

    def curve(self, batches, grid):  # type: ignore[override]
        """S(G) per (optimizer, lr at 64) of the grid: the per-seed rounds (None: missed)."""
        from orchestrator.sync.reference import extend_past_edge

        cells: dict[tuple[int, str, float], list[float | None]] = {}
        for G in batches:
            best: list[float | None] = [None]

            def run(lr: float, G: int = G, opt: str = "", best: list[float | None] = best) -> float | None:
                cap = None if best[0] is None else int(1.5 * best[0]) + 1
                ups = cells[(G, opt, lr)] = self.synchronous_steps(G, opt, lr, cap)
                med = median_time(ups)
                print(f"  S({G}) {opt} lr={lr:g}: {med} {ups}", flush=True)
                if med is not None and (best[0] is None or med < best[0]):
                    best[0] = med
                return med

            for opt, lrs in grid.items():
                tried = {lr: run(lr, opt=opt) for lr in lrs}
                extend_past_edge(tried, lambda lr, opt=opt: run(lr, opt=opt), EXTEND)   # the rows' rule
        return cells

    def synchronous_limit(self, cells, speeds):
        """min over cells of median S(G) x T_k(G), with that cell's fastest and slowest seed."""
        from orchestrator.sync.limit import step_time

        nbytes = 4.0 * self.ctx.model.new_model().count_params()
        best = None
        for (G, opt, lr), ups in cells.items():
            med = median_time(ups)
            if med is None:
                continue
            T = step_time(list(speeds), G, self.cm, nbytes, None)[0]
            if best is None or med * T < best[0]:
                per_seed = [math.inf if u is None else u * T for u in ups]
                best = (med * T, min(per_seed), max(per_seed), f"{opt} {lr:g} G={G}")
        return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--grid", default="adam:0.001,0.002,0.004,0.008,0.016",
                    help="the (optimizer x lr at batch 64) grid of the reference, every row and S(G)")
    ap.add_argument("--batches", default="64,128,256,512,1024")
    a = ap.parse_args(argv)
    grid, batches = _grid(a.grid), [int(x) for x in a.batches.split(",")]
    t0 = time.time()
    b = LimitBench("mnist", a.seeds, 0.97)
    cells = b.curve(batches, grid)
    ref = b.reference(grid)
    lines = [f"MNIST to 97%, emulated (virtual clock, real gradients), {a.seeds} seeds, grid `{a.grid}` (lr at batch 64) for "
             f"the tuned worker, every row and S(G); S(G) for G = {a.batches} as bulk-synchronous SGD (G/64 workers, the "
             f"allreduce rule's sqrt scaling after its warm-up). Tuned worker (baseline): {ref.optimizer} {ref.lr:g}, "
             f"{ref.time_to_target_s:.3f} s. `python benchmarks/sync_limit.py {' '.join(argv or sys.argv[1:])}`", "",
             "| MNIST configuration | best cell | time to target (s), median (min-max) | speedup vs tuned worker | "
             "limit before (coarse S(G), README) | limit now: speedup (seeds' range), cell | speedup / limit | beyond the spread? |",
             "|---|---|---|---|---|---|---|---|"]
    configs = _configs()
    for idx, label, before in ROWS:
        _, name, speeds, sync, train = configs[idx]
        best = b.parallel(name, speeds, grid, sync, train, give_up_s=MISS_AT * ref.time_to_target_s)
        lim = b.synchronous_limit(cells, speeds)
        if best is None or lim is None:
            lines.append(f"| {label} | - | missed | - | {before:.2f}x | - | - | - |")
            continue
        med, opt, lr, times = best
        done = [t for t in times if t is not None]
        sp, lsp = ref.time_to_target_s / med, ref.time_to_target_s / lim[0]
        beyond = f"**yes**, by {100 * (lim[1] / med - 1):.1f}%" if med < lim[1] else "no"
        lines.append(f"| {label} | {opt} {lr:g} | {med:.3f} ({min(done):.3f}-{max(done):.3f}) | {sp:.2f}x | {before:.2f}x | "
                     f"{lsp:.2f}x ({ref.time_to_target_s / lim[2]:.2f}-{ref.time_to_target_s / lim[1]:.2f}), {lim[3]} | "
                     f"{sp / lsp:.2f} | {beyond} |")
        print(lines[-1], flush=True)
    lines += ["", f"({time.time() - t0:.0f} s wall)"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
