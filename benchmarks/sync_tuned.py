"""Data-parallel speedups measured honestly (issue 20): the statistical limit S(G), a tuned single
worker, tuned parallel configurations, medians of seeds. Emulated: virtual clock, real gradients of
the MNIST CNN, the fixed compute model ``t = 0.0009 s + b x 0.000195 s`` of a speed-1.0 worker (the
issue's ``sync.step_overhead_s`` / ``sync.per_sample_s``), the default 10 Gbit/s network.

1. **S(G)**: updates to the target against the global batch G (one worker, batch G; Shallue et al.
   2019), per optimizer, the learning rate tuned per G (a grid around ``lr64 x sqrt(G/64)``), the
   median of the seeds; evaluation every 1,024 samples on the whole held-out split, the crossing
   interpolated.
2. **The limit** of a cluster (W, speeds): ``min over (optimizer, G, k) of S(G) x T_k(G)``, where
   ``T_k(G)`` is one synchronous step of G samples on the k fastest workers, split so that they finish
   together (``costmodel.balanced_batches``), plus the ring allreduce of the model's bytes. It is the
   best time to target synchronous data parallelism at any batch on that curve allows; a strategy
   that beats it got there with fewer updates than S(G) says (staleness can act as momentum).
3. **Measured**: the tuned single worker (``orchestrator.sync.reference``, the same grid), then each
   parallel configuration tuned over the same (optimizer x lr) grid, with the reference, speedup,
   limit and the ratio speedup / limit speedup.

    PYTHONPATH=. python benchmarks/sync_tuned.py                 # default (MNIST, nesterov, G <= 1024; ~50 min here)
    PYTHONPATH=. python benchmarks/sync_tuned.py --full          # 7 batches, adam, Fashion-MNIST too
    ... --write docs/benchmarks/sync_tuned.md
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.seeded import BUDGET, CADENCE, MIXED, T0, T1, VirtualBench, load_cache, save_cache  # noqa: E402
from orchestrator.sync.reference import median_time  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

LR64 = {"sgd": 0.2, "nesterov": 0.05, "adam": 0.001}      # the centre of each optimizer's grid at G = 64
EXTEND = 2                                                 # lr steps past an edge of a grid (train.reference_extend)
MISS_AT = 3.0                                              # a row slower than 1/3 of the tuned worker: missed
CURVE_BUDGET = {"mnist": (600_000, 12), "fashion_mnist": (3_000_000, 2)}   # S(G): samples, x the smallest G's samples


class Bench(VirtualBench):
    def __init__(self, dataset: str, seeds: int, target: float):
        super().__init__(dataset, target, prefix="sync-tuned-")
        self.seeds = seeds

    def settings(self, batch: int, opt: str, lr: float, seed: int, budget_samples: int, **kw):
        from orchestrator.execution.training import TrainSettings

        return TrainSettings(batch_size=batch, lr=lr, optimizer=opt, target_accuracy=self.target, stop="target",
                             eval_every=max(1, CADENCE[self.name] // batch), budget_updates=max(1, budget_samples // batch),
                             seed=seed, **kw)

    # -- 1. S(G) ------------------------------------------------------------------------------
    def steps(self, G: int, opt: str, lr: float, budget_samples: int):
        from orchestrator.config.root import TrainConfig
        from orchestrator.sync.core import SyncOptions
        from orchestrator.sync.reference import reference_options
        from orchestrator.sync.strategy import SingleWorker
        from orchestrator.sync.virtual import VirtualRun

        out = []
        for seed in range(self.seeds):
            s = self.settings(G, opt, lr, seed, budget_samples)
            r, _ = VirtualRun(SingleWorker(), reference_options(SyncOptions(train=TrainConfig(warmup_updates=0))), s, self.runtime(seed),
                              self.ds, self.cm).run()
            out.append(r.updates_to_target)
        return out

    def curve(self, batches, optimizers, budget_samples: int, mults=(1.0, 0.5, 2.0), growth: float = 12,
              known: dict | None = None, extend: int = 2, save=None):
        """S(G) per optimizer. A run's budget is ``budget_samples``, at most ``growth`` x the samples the
        smallest batch needed (samples to target grow with G; a G that needs ``growth`` x the samples cannot
        set the limit of a cluster of <= 16 workers of this compute model: its steps would have to be
        ``growth`` x more efficient per sample),
        at most 1.5x the best lr's updates at this G (it cannot win). ``mults`` are tried in order; the
        larger lr is skipped when the centre missed (it diverges sooner). When the best lr is the largest
        (smallest) tried, the search goes on x2 (/2) while it improves, at most ``extend`` steps (the
        reference's rule, ``orchestrator.sync.reference.extend_past_edge``). Cells in ``known`` (an earlier run's)
        are kept, not measured again; ``save(rows)`` is called after each new cell."""
        from orchestrator.sync.reference import extend_past_edge

        rows = dict(known or {})
        for opt in optimizers:
            first, prev = None, None      # prev: (G, best lr) of the last batch that reached the target
            for G in batches:
                if (opt, G) in rows:
                    best = rows[(opt, G)]
                else:
                    best, tried = None, {}
                    # the centre: the last reached batch's best lr, scaled by sqrt (else lr64's): a fixed
                    # lr64 x sqrt(G/64) centre missed Fashion-MNIST's Adam optimum (4x lr64 at G=256) by
                    # enough that G=512's whole grid missed
                    lr0 = prev[1] * math.sqrt(G / prev[0]) if prev else LR64[opt] * math.sqrt(G / 64)

                    def run(lr, m, G=G, opt=opt, first=first, tried=tried):
                        nonlocal best
                        cap = budget_samples if first is None else min(budget_samples, int(growth * first))
                        if best is not None:
                            cap = int(min(cap, 1.5 * best[0] * G))
                        med = median_time(self.steps(G, opt, lr, cap))
                        print(f"  S(G) {self.name} {opt} G={G} lr={lr:.4g}: {med} (budget {cap} samples)", flush=True)
                        tried[lr] = med
                        if med is not None and (best is None or med < best[0]):
                            best = (med, lr, m)
                        return med

                    for m in mults:
                        if m > 1.0 and tried.get(lr0) is None and lr0 in tried:
                            continue
                        run(lr0 * m, m)
                    extend_past_edge(tried, lambda lr, lr0=lr0, run=run: run(lr, lr / lr0), extend)
                    rows[(opt, G)] = best
                    if save is not None:
                        save(rows)
                if first is None and best is not None:
                    first = best[0] * G
                if best is not None:
                    prev = (G, best[1])
        return rows

    # -- 2. the limit ---------------------------------------------------------------------------
    def step_time(self, speeds, G: int) -> float:
        """One synchronous step of G on the best k fastest workers (``orchestrator.sync.limit.step_time``)."""
        from orchestrator.sync.limit import step_time

        nbytes = 4 * self.ctx.model.new_model().count_params() if not hasattr(self, "_nb") else self._nb
        self._nb = nbytes
        return step_time(list(speeds), G, self.cm, nbytes, None)[0]

    def limit(self, curve, speeds):
        cands = [(s[0] * self.step_time(speeds, G), opt, G) for (opt, G), s in curve.items() if s is not None]
        return min(cands) if cands else None

    def limits_table(self, curve) -> list[str]:
        """The limit of each cluster the measured rows use, over one speed-1.0 worker at the curve's best
        batch-64 cell (S(64) x t(64): the tuned worker, where the curve's lr grid at G=64 holds the best lr)."""
        one = [(s[0] * self.cm.time(64, 1.0), opt) for (opt, G), s in curve.items() if G == 64 and s]
        if not one:
            return []
        t1, opt1 = min(one)
        mixed = [MIXED[i % 3] for i in range(16)]
        out = [f"Limits from S(G) (emulated): one worker at batch 64 ({opt1}, S(64) x t(64)) takes {t1:.3f} s.", "",
               "| cluster | capacity | limit: time (s) | at | limit speedup over one worker |", "|---|---|---|---|---|"]
        for label, speeds in (("8 equal", [1.0] * 8), ("16 mixed (1, 1/2, 1/4)", mixed), ("16 equal", [1.0] * 16)):
            lim = self.limit(curve, speeds)
            if lim:
                out.append(f"| {label} | {sum(speeds):g} | {lim[0]:.3f} | {lim[1]} G={lim[2]} | {t1 / lim[0]:.2f}x |")
        return out + [""]

    # -- 3. measured ----------------------------------------------------------------------------
    def reference(self, grid):
        from orchestrator.config.root import TrainConfig
        from orchestrator.sync.core import SyncOptions
        from orchestrator.sync.reference import reference

        opt, lrs = next(iter(grid.items()))    # the reference's first cell is its "own": the grid's first
        ctx = dataclasses.replace(self.ctx, settings=self.settings(64, opt, lrs[0], 0, BUDGET[self.name], seeds=self.seeds))
        return reference(SyncOptions(speeds=[1.0], train=TrainConfig(warmup_updates=0)), ctx, self.cm, grid, "tuned", EXTEND)

    def parallel(self, name: str, speeds, grid, sync: dict, train: dict | None = None, give_up_s: float | None = None):
        """Each (optimizer, lr) of ``grid``, the median over the seeds; returns the best cell. A seed's run
        stops at 1.5x the best cell's median so far (it cannot win), and at ``give_up_s`` (MISS_AT x the
        reference's time: a configuration that slow counts as missed; a miss otherwise costs the whole budget)."""
        from orchestrator import plugins
        from orchestrator.sync.reference import extend_past_edge
        from orchestrator.sync.virtual import VirtualRun

        best = None

        def cell(opt: str, lr: float):
            nonlocal best
            times = []
            for seed in range(self.seeds):
                cfg = {"hardware": {"workers": len(speeds), "worker_speeds": list(speeds)},
                       "sync": {"name": name, "step_overhead_s": T0, "per_sample_s": T1, **sync},
                       "train": {"optimizer": opt, "lr": lr, **(train or {})}}
                strat = plugins.load("sync", name)(cfg["sync"])
                opts = strat.options(cfg)
                cap = give_up_s if best is None else 1.5 * best[0]
                s = self.settings(64, opt, lr, seed, BUDGET[self.name], budget_s=cap)
                r, st = VirtualRun(strat, opts, s, self.runtime(seed), self.ds, self.cm).run()
                times.append(r.time_to_target_s)
            med = median_time(times)
            print(f"  {name} W={len(speeds)} {sync} {opt} lr={lr:g}: {med} ({times})", flush=True)
            if med is not None and (best is None or med < best[0]):
                best = (med, opt, lr, times)
            return med

        for opt, lrs in grid.items():
            tried = {lr: cell(opt, lr) for lr in lrs}
            extend_past_edge(tried, lambda lr, opt=opt: cell(opt, lr), EXTEND)   # the reference's rule
        return best


def _flush(path, lines) -> None:
    """The tables so far (a long run leaves what it measured even if stopped)."""
    if path:
        path.write_text("\n".join(lines) + "\n")


def plot_curves(curves: dict, path: Path) -> None:
    """S(G) of each dataset and optimizer (log-log), with perfect scaling from the smallest batch: the
    figure of docs/benchmarks/sync_tuned.md."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 4), squeeze=False)
    for ax, (ds, curve) in zip(axes[0], curves.items()):
        for opt in sorted({o for o, _ in curve}):
            pts = sorted((G, v[0]) for (o, G), v in curve.items() if o == opt and v)
            missed = sorted(G for (o, G), v in curve.items() if o == opt and not v)
            if pts:
                line, = ax.plot(*zip(*pts), "o-", label=f"{opt} (lr tuned per G)")
                g0, s0 = pts[0]
                gmax = max(G for _, G in curve)
                ax.plot([g0, gmax], [s0, s0 * g0 / gmax], ":", color=line.get_color(), label=f"{opt}: perfect scaling")
                for G in missed:
                    ax.axvline(G, color=line.get_color(), alpha=0.3, ls="--")
                    ax.annotate("missed", (G, s0), rotation=90, fontsize=8, color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("global batch G")
        ax.set_ylabel("updates to target (median of seeds)")
        ax.set_title(f"{ds}: S(G) (emulated: virtual clock, real gradients)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def _grid(text: str) -> dict[str, list[float]]:
    """``nesterov:0.05,0.1;sgd:0.2`` -> {"nesterov": [0.05, 0.1], "sgd": [0.2]}."""
    out = {}
    for part in filter(None, text.split(";")):
        opt, _, lrs = part.partition(":")
        out[opt.strip()] = [float(x) for x in lrs.split(",") if x.strip()]
    return out


# the server strategies on one server link (sync.shards=1), as docs/benchmarks/sync_tuned.md was measured; the default
# is now colocated shards on the virtual runtime (docs/benchmarks/sync_shards.md)
ONE_LINK = {"shards": 1}


def _configs():
    mixed = [MIXED[i % 3] for i in range(16)]
    hybrid = {"batch_policy": "hybrid", "global_batch_max": 256}
    return [("allreduce W=8 equal", "allreduce", [1.0] * 8, {"balance": "none"}, None),
            ("allreduce + online balancing W=16 mixed", "allreduce", mixed, {"balance": "online"}, None),
            ("delay-sync (s=default) W=16 mixed", "delay", mixed, ONE_LINK, None),
            ("allreduce W=8 equal, global batch 64 (strong scaling)", "allreduce", [1.0] * 8,
             {"balance": "none"}, {"batch_policy": "global"}),
            ("allreduce + static balancing W=16 mixed, hybrid G <= 256", "allreduce", mixed, {"balance": "static"}, hybrid),
            ("delay-sync W=16 mixed, hybrid G <= 256", "delay", mixed, ONE_LINK, hybrid),
            ("allreduce W=8 equal, hybrid G <= 256", "allreduce", [1.0] * 8, {"balance": "static"}, hybrid),
            ("async W=16 mixed, hybrid G <= 256", "async", mixed, ONE_LINK, hybrid),
            ("delay-sync W=16 mixed, hybrid G <= 256, momentum 0.5", "delay", mixed, ONE_LINK, {**hybrid, "momentum": 0.5})]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--write", type=Path, default=None)
    ap.add_argument("--datasets", default=None, help="mnist,fashion_mnist (default: mnist; --full: both)")
    ap.add_argument("--batches", default=None, help="the S(G) batches, e.g. 64,256,1024")
    ap.add_argument("--optimizers", default=None, help="the S(G) optimizers, e.g. nesterov,sgd")
    ap.add_argument("--grid", default=None, help="the (optimizer x lr) grid of the reference and of every measured row, "
                    "e.g. 'nesterov:0.05,0.1;sgd:0.2'")
    ap.add_argument("--configs", default="0,1,2,3,4,5", help="which measured rows (indices into _configs(), "
                    "comma-separated; '' for none)")
    ap.add_argument("--curve-cache", type=Path, default=None,
                    help="keep the S(G) measurements in PATH.DATASET.json and reuse them on the next run")
    ap.add_argument("--results-cache", type=Path, default=None,
                    help="keep the reference and each measured row in PATH.DATASET.json and reuse them (a run split "
                         "over processes: one measures S(G), another the rows; a last one joins them)")
    ap.add_argument("--plot", type=Path, default=None, help="write the S(G) figure of the datasets run (PNG)")
    ap.add_argument("--give-up-s", type=float, default=None,
                    help="stop a row's seeds at this many virtual seconds (default: MISS_AT x the reference's time); for "
                         "a row split over processes, 1.5x the best cell another process measured")
    ap.add_argument("--no-curve", action="store_true", help="measure no S(G) (use --curve-cache's, else no limit)")
    a = ap.parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    targets = {"mnist": 0.97, "fashion_mnist": 0.9}
    names = a.datasets.split(",") if a.datasets else (["mnist", "fashion_mnist"] if a.full else ["mnist"])
    datasets = [(n, targets[n]) for n in names]
    batches = tuple(int(x) for x in a.batches.split(",")) if a.batches else \
        (64, 128, 256, 512, 1024, 2048, 4096) if a.full else (64, 256, 1024)
    optimizers = tuple(a.optimizers.split(",")) if a.optimizers else ("sgd", "nesterov", "adam") if a.full else ("nesterov",)
    mults = (1.0, 0.5, 2.0)
    grid = _grid(a.grid) if a.grid else \
        {"sgd": [0.1, 0.2, 0.4], "nesterov": [0.025, 0.05, 0.1], "adam": [0.0005, 0.001, 0.002]} if a.full else \
        {"sgd": [0.2], "nesterov": [0.05, 0.1]}
    lines = [f"# Data-parallel speedups, tuned (emulated: virtual clock, real gradients; {time.strftime('%Y-%m-%d')})", "",
             f"Compute model t = {T0} s + b x {T1} s per speed-1.0 worker, 10 Gbit/s network, {a.seeds} seeds "
             "(medians, min-max in brackets), evaluation on the whole held-out split every 1,024 samples (MNIST) or "
             "8,192 (Fashion-MNIST), crossing interpolated. `python benchmarks/sync_tuned.py "
             + " ".join(argv if argv is not None else sys.argv[1:]) + "`.", ""]
    curves = {}
    for ds, target in datasets:
        t_start = time.time()
        b = Bench(ds, a.seeds, target)
        saved = a.curve_cache.with_suffix(f".{ds}.json") if a.curve_cache else None
        results_path = a.results_cache.with_suffix(f".{ds}.json") if a.results_cache else None
        results = load_cache(results_path)

        def keep(results_path=results_path, results=results):
            save_cache(results_path, results, indent=1)

        # this benchmark's own earlier S(G) cells, same settings
        known = {(o, int(g)): (tuple(v) if v else None) for o, g, v in load_cache(saved, [])}

        def save_curve(rows, saved=saved):
            save_cache(saved, [[o, g, v] for (o, g), v in rows.items()])

        if a.no_curve:
            curve = known
        else:
            samples, growth = CURVE_BUDGET[ds]
            curve = b.curve(batches, optimizers, samples, mults, growth, known=known, save=save_curve)
        if curve:
            curves[ds] = curve
        shown_b = sorted({*batches, *(G for _, G in curve)})            # this run's and the cache's
        shown_o = list(dict.fromkeys([*(o for o, _ in curve), *optimizers]))
        lines += [f"## {ds} to {target:.0%}", "", "### S(G): updates to target (one worker, batch G, lr tuned per G)", "",
                  "| optimizer | " + " | ".join(f"G={G}" for G in shown_b) + " |", "|---|" + "---|" * len(shown_b)]
        for opt in shown_o:
            cells = []
            for G in shown_b:
                if (opt, G) not in curve:
                    cells.append("not measured")
                    continue
                s = curve[(opt, G)]
                cells.append("missed" if s is None else f"{s[0]:.0f} (lr {s[1]:.3g}{', edge' if s[2] != 1.0 else ''})")
            lines.append(f"| {opt} | " + " | ".join(cells) + " |")
        lines += ["", f"lr grid per G: centre x {mults}, the centre the best lr of the previous reached G scaled by "
                  f"sqrt (the smallest G: lr64 x sqrt(G/64), lr64: {LR64}; x2 skipped when x1 missed), then on past "
                  "the best lr while it is the largest or smallest tried (x2, /2; at most 2 steps); `edge`: the best "
                  f"lr was not the centre of that grid; `missed`: no lr reached the target within {CURVE_BUDGET[ds][1]:g}x "
                  "the samples the smallest batch needed.", ""]
        lines += b.limits_table(curve)
        _flush(a.write, lines)
        configs = [_configs()[int(i)] for i in a.configs.split(",") if i.strip()]   # in the order given
        if not configs:
            continue
        from orchestrator.sync.reference import Reference

        if "reference" in results:
            ref = Reference.from_tags(results["reference"], "results cache")
        else:
            ref = b.reference(grid)
            results["reference"] = ref.tags()
            keep()
        lines += [f"Tuned single worker (the reference): {ref.describe()}: **{ref.time_to_target_s:.3f} s** "
                  f"(seeds {', '.join('stopped' if t is None else f'{t:.3f}' for t in ref.times)}); grid medians: "
                  + ", ".join(f"{k} {v:.3f}" if v else f"{k} missed" for k, v in ref.grid.items()), ""]
        _flush(a.write, lines)
        lines += ["### Measured, every configuration tuned over the same optimizer x lr grid", "",
                  "| configuration | capacity | best (optimizer, lr) | time to target (s) | speedup vs tuned worker | "
                  "limit: time (s), speedup | speedup / limit |", "|---|---|---|---|---|---|---|"]
        for label, name, speeds, sync, train in configs:
            if label in results:
                best = results[label]
            else:
                best = b.parallel(name, speeds, grid, sync, train,
                                  give_up_s=a.give_up_s if a.give_up_s is not None else MISS_AT * ref.time_to_target_s)
                results[label] = best
                keep()
            lim = b.limit(curve, speeds)
            cap = sum(speeds)
            if best is None:
                lines.append(f"| {label} | {cap:g} | - | missed by every cell (within {MISS_AT:g}x the reference's "
                             f"time) | < {1 / MISS_AT:.2f}x | - | - |")
                continue
            med, opt, lr, times = best
            sp = ref.time_to_target_s / med
            spread = [t for t in times if t is not None]
            lsp = ref.time_to_target_s / lim[0] if lim else None
            lim_txt = f"{lim[0]:.3f} s ({lim[1]} G={lim[2]}), {lsp:.2f}x" if lim else "no S(G)"
            lines.append(f"| {label} | {cap:g} | {opt} {lr:g} | {med:.3f} ({min(spread):.3f}-{max(spread):.3f}"
                         f"{'' if len(spread) == len(times) else f'; {len(times) - len(spread)} seed(s) missed'}) | "
                         f"**{sp:.2f}x** | {lim_txt} | {f'{sp / lsp:.2f}' if lsp else '-'} |")
            _flush(a.write, lines)
        lines += ["", f"({ds}: {time.time() - t_start:.0f} s wall)", ""]
        print("\n".join(lines), flush=True)
    if a.plot and curves:
        plot_curves(curves, a.plot)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        a.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
