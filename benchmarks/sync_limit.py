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

Fashion-MNIST (to 90%; a run takes minutes here, so the work splits over processes that keep what they measured in
one cache directory, then a last one joins them without measuring; docs/benchmarks/sync_tuned.md, "Fashion-MNIST on
the rows' footing", whose cache is committed in docs/benchmarks/sync_limit_fashion_mnist/):

    A="--dataset fashion_mnist --grid adam:0.002,0.003,0.004 --cache DIR"
    PYTHONPATH=. python benchmarks/sync_limit.py $A --batches 64,128 --rows '' &                 # reference, S(64), S(128)
    PYTHONPATH=. python benchmarks/sync_limit.py $A --batches 512,256 --curve-only &             # S(512), S(256)
    PYTHONPATH=. python benchmarks/sync_limit.py $A --only-rows --rows 6,4 --give-up-s 99 &      # the rows (3 x the reference)
    wait; PYTHONPATH=. python benchmarks/sync_limit.py $A --batches 64,128,256,512 --rows 6,4 --join

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
from benchmarks.seeded import BUDGET, T0, T1, TARGET, load_cache, save_cache  # noqa: E402
from benchmarks.sync_tuned import EXTEND, MISS_AT, Bench, _configs, _grid  # noqa: E402
from orchestrator.sync.reference import median_time  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# README's rows per dataset: (index into sync_tuned._configs(), the label README gives it, its coarse-grid limit speedup)
ROWS = {"mnist": [(6, "allreduce, 8 equal (`+sync=allreduce` default)", 3.15),
                  (4, "allreduce + static balancing, 16 mixed (default)", 3.03),
                  (5, "delay-sync, 16 mixed", 3.03),
                  (7, "async, 16 mixed", 3.03)],
        "fashion_mnist": [(6, "allreduce, 8 equal", 4.23),
                          (4, "allreduce + static balancing, 16 mixed", 4.07),
                          (5, "delay-sync, 16 mixed", 4.07),
                          (7, "async, 16 mixed", 4.07)]}
LABEL = {"mnist": "MNIST to 97%", "fashion_mnist": "Fashion-MNIST to 90%"}


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

    def curve(self, batches, grid, known=None, save=None):  # type: ignore[override]
        """S(G) per (optimizer, lr at 64) of the grid: the per-seed rounds (None: missed). Cells in ``known``
        (an earlier run's) are not measured again; ``save(cells)`` is called after each new cell."""
        from orchestrator.sync.reference import extend_past_edge

        cells: dict[tuple[int, str, float], list[float | None]] = dict(known or {})
        for G in batches:
            best: list[float | None] = [None]

            def run(lr: float, G: int = G, opt: str = "", best: list[float | None] = best) -> float | None:
                cap = None if best[0] is None else int(1.5 * best[0]) + 1
                if (G, opt, lr) not in cells:
                    cells[(G, opt, lr)] = self.synchronous_steps(G, opt, lr, cap)
                    if save is not None:
                        save(cells)
                ups = cells[(G, opt, lr)]
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


def _key(G: int, opt: str, lr: float) -> str:
    return f"{G}|{opt}|{lr!r}"


def _unkey(k: str) -> tuple[int, str, float]:
    G, opt, lr = k.split("|")
    return int(G), opt, float(lr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", choices=sorted(LABEL), default="mnist")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--grid", default="adam:0.001,0.002,0.004,0.008,0.016",
                    help="the (optimizer x lr at batch 64) grid of the reference, every row and S(G)")
    ap.add_argument("--batches", default="64,128,256,512,1024")
    ap.add_argument("--rows", default=None, help="which rows (indices into sync_tuned._configs(); default: the "
                    "dataset's four README rows; '' for none)")
    ap.add_argument("--cache", type=Path, default=None, help="a directory keeping the reference, the S(G) cells and "
                    "each row as measured; what is there is not measured again")
    ap.add_argument("--only-rows", action="store_true", help="measure the rows only (no reference, no S(G))")
    ap.add_argument("--give-up-s", type=float, default=None, help="stop a row's seeds at this many virtual seconds "
                    "(default: MISS_AT x the reference's time; with --only-rows it must be given)")
    ap.add_argument("--curve-only", action="store_true", help="measure S(G) only (no reference, no rows): a third "
                    "process can take some batches; --join merges every cells*.json of --cache")
    ap.add_argument("--join", action="store_true", help="measure nothing: the table from --cache")
    a = ap.parse_args(argv)
    if a.only_rows and a.give_up_s is None:
        ap.error("--only-rows needs --give-up-s (the rows stop at MISS_AT x the reference's time)")
    if a.join and a.cache is None:
        ap.error("--join needs --cache")
    grid, batches = _grid(a.grid), [int(x) for x in a.batches.split(",")]
    rows = ROWS[a.dataset] if a.rows is None else [r for r in ROWS[a.dataset] if str(r[0]) in a.rows.split(",")]
    cache = a.cache
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)   # one core per process (the split runs two at once)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    t0 = time.time()
    b = LimitBench(a.dataset, a.seeds, TARGET[a.dataset])

    measure = not a.join
    ref_file = cache / "reference.json" if cache else None
    ref = load_cache(ref_file) or None
    if ref is None and measure and not (a.only_rows or a.curve_only):
        r = b.reference(grid)
        ref = {"optimizer": r.optimizer, "lr": r.lr, "time_to_target_s": r.time_to_target_s}
        save_cache(ref_file, ref)
    cells_file = cache / ("cells.json" if not a.curve_only else f"cells_{a.batches.replace(',', '_')}.json") if cache else None
    known = {_unkey(k): v for f in (sorted(cache.glob("cells*.json")) if cache else []) for k, v in load_cache(f).items()}
    if measure and not a.only_rows:
        cells = b.curve(batches, grid, known, save=lambda c: save_cache(cells_file, {_key(*k): v for k, v in c.items()}))
    else:
        cells = known
    if a.curve_only:
        print(f"measured S(G) for G = {a.batches} into {cells_file} ({time.time() - t0:.0f} s wall)")
        return 0
    best_rows = {}
    configs = _configs()
    for idx, _label, _before in rows:
        row_file = cache / f"row_{idx}.json" if cache else None
        best = load_cache(row_file) or None
        if best is None and measure:
            _, name, speeds, sync, train = configs[idx]
            give_up = a.give_up_s if a.give_up_s is not None else MISS_AT * ref["time_to_target_s"]
            best = b.parallel(name, speeds, grid, sync, train, give_up_s=give_up)
            save_cache(row_file, {"missed": True} if best is None else list(best))
        if best is not None:                     # {"missed": True}: measured, no cell reached the target
            best_rows[idx] = None if isinstance(best, dict) else best
    if ref is None or (a.only_rows and not a.join):
        print(f"measured {len(best_rows)} row(s){' into ' + str(cache) if cache else ''}; "
              f"({time.time() - t0:.0f} s wall)")
        return 0
    lines = [f"{LABEL[a.dataset]}, emulated (virtual clock, real gradients), {a.seeds} seeds, grid `{a.grid}` (lr at "
             f"batch 64) for the tuned worker, every row and S(G); S(G) for G = {a.batches} as bulk-synchronous SGD (G/64 "
             f"workers, the allreduce rule's sqrt scaling after its warm-up). Tuned worker (baseline): {ref['optimizer']} "
             f"{ref['lr']:g}, {ref['time_to_target_s']:.3f} s. `python benchmarks/sync_limit.py {' '.join(argv or sys.argv[1:])}`",
             "", f"| {LABEL[a.dataset].split(' to ')[0]} configuration | best cell | time to target (s), median (min-max) | "
             "speedup vs tuned worker | limit before (coarse S(G), README) | limit now: speedup (seeds' range), cell | "
             "speedup / limit | beyond the spread? |",
             "|---|---|---|---|---|---|---|---|"]
    for idx, label, before in rows:
        _, name, speeds, sync, train = configs[idx]
        if idx not in best_rows:
            lines.append(f"| {label} | - | not measured in this run | - | {before:.2f}x | - | - | - |")
            continue
        best = best_rows[idx]
        lim = b.synchronous_limit(cells, speeds)
        if best is None or lim is None:
            lines.append(f"| {label} | - | missed | - | {before:.2f}x | - | - | - |")
            continue
        med, opt, lr, times = best
        done = [t for t in times if t is not None]
        t_ref = ref["time_to_target_s"]
        sp, lsp = t_ref / med, t_ref / lim[0]
        beyond = f"**yes**, by {100 * (lim[1] / med - 1):.1f}%" if med < lim[1] else "no"
        lines.append(f"| {label} | {opt} {lr:g} | {med:.3f} ({min(done):.3f}-{max(done):.3f}) | {sp:.2f}x | {before:.2f}x | "
                     f"{lsp:.2f}x ({t_ref / lim[2]:.2f}-{t_ref / lim[1]:.2f}), {lim[3]} | {sp / lsp:.2f} | {beyond} |")
        print(lines[-1], flush=True)
    lines += ["", f"({time.time() - t0:.0f} s wall)"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
