"""The regime map of data-parallel sync strategies (issue 29, item 5): in which regime each strategy wins.

Emulated: virtual clock, real gradients of the MNIST CNN, the fixed compute model
``t = 0.0009 s + b x 0.000195 s`` of a speed-1.0 worker (``benchmarks/sync_tuned.py``'s), W = 8 workers,
time to the target accuracy on the virtual clock (the crossing interpolated, evaluation every 1,024 samples).

Regimes: a base (8 equal workers, no stragglers, no jitter, 10 Gbit/s) and one factor varied at a time
(speeds 1, 1/2, 1/4 cycled; transient stragglers p = 0.1 / 0.2 at 5x; lognormal jitter sigma 0.5; 1 Gbit/s
links), plus combined "bad" regimes. Strategies: each at its ``conf/sync/NAME.yaml`` defaults (not re-tuned
per regime): allreduce (static balancing), backup workers b = 1, 2, async, async with a staleness cut-off,
delay-sync. A seed's run stops at ``--cap`` x the best median of its regime so far (it cannot win; shown as
``> x``).

    PYTHONPATH=. python benchmarks/sync_regimes.py --seeds 2 --jobs 2 \\
        --write docs/benchmarks/sync_regimes.md --plot docs/benchmarks/sync_regimes.png
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.seeded import BUDGET, CADENCE, MIXED, T0, T1, TARGET, VirtualBench, load_cache, save_cache  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

W = 8
DATASET = "mnist"         # --dataset: its target, evaluation cadence and sample budget are seeded.py's
LABEL = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
EDGE_STEPS = 2            # --tune: steps past the grid's edge (x2 or /2) while the edge lr is the best

# label -> (speeds: equal | mixed (MIXED) | a tuple cycled over the workers, straggler p, jitter sigma,
#           bandwidth Gbit/s[, straggler slowdown (default 5)])
REGIMES = {
    "base: 8 equal": ("equal", 0.0, 0.0, 10),
    "mixed speeds": ("mixed", 0.0, 0.0, 10),
    "stragglers p=0.1 x5": ("equal", 0.1, 0.0, 10),
    "stragglers p=0.2 x5": ("equal", 0.2, 0.0, 10),
    "jitter sigma=0.5": ("equal", 0.0, 0.5, 10),
    "1 Gbit/s": ("equal", 0.0, 0.0, 1),
    "stragglers 0.2 + jitter 0.5": ("equal", 0.2, 0.5, 10),
    "bad: mixed + p=0.2 + jitter 0.5 + 1 Gbit/s": ("mixed", 0.2, 0.5, 1),
    "spread 2x (1, 1/2)": ((1.0, 0.5), 0.0, 0.0, 10),
    "spread 8x (1 .. 1/8)": ((1.0, 0.5, 0.25, 0.125), 0.0, 0.0, 10),
    "stragglers p=0.05 x10": ("equal", 0.05, 0.0, 10, 10.0),
    "100 Gbit/s": ("equal", 0.0, 0.0, 100),
}
# label -> (strategy name = conf/sync/NAME.yaml, sync overrides). The server strategies keep one server link
# (sync.shards=1), as the committed map was measured; the default is now colocated shards on the virtual runtime
# (docs/benchmarks/sync_shards.md).
STRATEGIES = {
    "allreduce": ("allreduce", {}),
    "backup b=1": ("backup", {"backup_workers": 1}),
    "backup b=2": ("backup", {"backup_workers": 2}),
    "async": ("async", {"shards": 1}),
    "async cut-off": ("async_cutoff", {"shards": 1}),
    "delay-sync": ("delay", {"shards": 1}),
    "allreduce online": ("allreduce", {"balance": "online"}),
    "delay dynamic s": ("delay", {"dynamic_staleness": True, "shards": 1}),
    "DC-ASGD-a": ("async", {"delay_compensation": 2.0, "delay_compensation_mode": "adaptive", "shards": 1}),
    "local SGD H=4": ("local_sgd", {"local_steps": 4}),
    # the default placement of the server since the map was first measured: one shard on each worker
    "async colocated": ("async", {"shards": "colocated"}),
    "delay-sync colocated": ("delay", {"shards": "colocated"}),
}
# strategies that are not built in: the worked plugin example of docs/plugins.md (examples/), run at allreduce's
# train.* defaults (conf/sync/allreduce.yaml)
EXAMPLE_SRC = ROOT / "examples" / "orchestrator-example-sync" / "src"


def conf_defaults(name: str) -> tuple[dict, dict]:
    """The ``sync`` and ``train`` sections of ``conf/sync/NAME.yaml`` (what ``+sync=NAME`` brings)."""
    import yaml

    if name == "local_sgd":
        return {}, conf_defaults("allreduce")[1]
    d = yaml.safe_load((ROOT / "conf" / "sync" / f"{name}.yaml").read_text())
    return dict(d.get("sync") or {}), dict(d.get("train") or {})


def strategy_class(name: str):
    """The strategy's class: a registered plugin, or local SGD from the worked example in examples/."""
    from orchestrator import plugins

    if name == "local_sgd":
        if str(EXAMPLE_SRC) not in sys.path:
            sys.path.insert(0, str(EXAMPLE_SRC))
        from orch_local_sgd.strategy import LocalSGD

        return LocalSGD
    return plugins.load("sync", name)


def regime_hardware(regime: str) -> dict:
    speeds, p, sigma, bw, *rest = REGIMES[regime]
    cycle = (1.0,) if speeds == "equal" else MIXED if speeds == "mixed" else tuple(speeds)
    hw: dict = {"workers": W, "worker_speeds": [cycle[i % len(cycle)] for i in range(W)],
                "network": {"bandwidth_Gbps": bw}}
    if p:
        hw["stragglers"] = {"probability": p, "slowdown": float(rest[0]) if rest else 5.0}
    if sigma:
        hw["jitter"] = {"distribution": "lognormal", "sigma": sigma}
    return hw


class Bench(VirtualBench):
    def __init__(self, target: float):
        super().__init__(DATASET, target, prefix="sync-regimes-")

    def run(self, regime: str, strategy: str, seed: int, cap_s: float | None, lr: float | None = None) -> dict:
        """One run; returns its time to target (None: missed or stopped at ``cap_s``) and the per-worker
        time breakdown (``sync.worker*.compute_s / wait_s / comm_s / queue_s``)."""
        from orchestrator.execution.training import TrainSettings
        from orchestrator.sync.virtual import VirtualRun

        name, over = STRATEGIES[strategy]
        sync, train = conf_defaults(name)
        sync = {**sync, **over, "name": name, "step_overhead_s": T0, "per_sample_s": T1}
        if lr is not None:
            train["lr"] = lr
        cfg = {"hardware": regime_hardware(regime), "sync": sync, "train": train}
        strat = strategy_class(name)(cfg["sync"])
        opts = strat.options(cfg)
        s = TrainSettings(batch_size=64, lr=float(train["lr"]), optimizer=str(train["optimizer"]),
                          target_accuracy=self.target, stop="target", eval_every=CADENCE[DATASET] // 64,
                          budget_updates=BUDGET[DATASET] // 64, seed=seed, budget_s=cap_s)
        t = time.time()
        r, st = VirtualRun(strat, opts, s, self.runtime(seed), self.ds, self.cm).run()
        m = strat.metrics(r, st)
        per = {k: [m.get(f"sync.worker{i}.{k}", 0.0) for i in range(W)] for k in ("compute_s", "wait_s", "comm_s", "queue_s")}
        out = {"time": r.time_to_target_s, "updates": r.updates_to_target, "wall": time.time() - t, "per": per,
               "dropped": m.get("sync.gradients_dropped", 0.0) + m.get("sync.pushes_rejected", 0.0),
               "lr": float(train["lr"])}
        print(f"  {regime} | {strategy} seed {seed} lr {train['lr']}: {out['time']} ({out['wall']:.0f} s wall)", flush=True)
        return out


def _worker_setup(names: list[str], dataset: str) -> None:
    """Set up this process for one regime's runs: keep ``names`` of STRATEGIES (``--strategies``) and the
    dataset (a worker of ``--jobs`` imports the module afresh), one TensorFlow thread each way (two regimes run
    side by side)."""
    global STRATEGIES, DATASET
    STRATEGIES = {k: v for k, v in STRATEGIES.items() if k in names}
    DATASET = dataset
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def median_time(times) -> float | None:
    m = statistics.median(math.inf if t is None else t for t in times)
    return None if math.isinf(m) else float(m)


def run_regime(args) -> tuple[str, dict]:
    """Every strategy of one regime (allreduce first: the others' runs stop at cap x the best median so far)."""
    regime, seeds, target, cap, lrs, done, names, dataset = args
    _worker_setup(names, dataset)
    b = Bench(target)
    cells: dict = dict(done)          # cells already measured (--cache): kept, and their best caps the new runs
    meds = [c["median"] for c in cells.values() if c.get("median") is not None]
    best = min(meds) if meds else None
    for strategy, cell in list(cells.items()):   # --seeds above the cache's: top its cells up, same lr and cap
        have = len(cell["runs"])
        if have >= seeds:
            continue
        known = [math.inf if r["time"] is None else r["time"] for r in cell["runs"]]
        if sum(math.isinf(t) for t in known) > seeds // 2:   # the median is a miss whatever the new seeds give
            continue
        runs = cell["runs"] + [b.run(regime, strategy, seed, cell["cap"], cell["lr"]) for seed in range(have, seeds)]
        cells[strategy] = {**cell, "runs": runs, "median": median_time([r["time"] for r in runs])}
    meds = [c["median"] for c in cells.values() if c.get("median") is not None]
    best = min(meds) if meds else None
    for strategy in STRATEGIES:
        if strategy in cells:
            continue
        cands = lrs or [None]
        cell = None
        for lr in cands:
            runs = [b.run(regime, strategy, seed, None if best is None else cap * best, lr) for seed in range(seeds)]
            med = median_time([r["time"] for r in runs])
            c = {"median": med, "runs": runs, "lr": runs[0]["lr"], "cap": None if best is None else cap * best}
            if cell is None or (med is not None and (cell["median"] is None or med < cell["median"])):
                cell = c
            if med is not None and (best is None or med < best):
                best = med
        cells[strategy] = cell
    return regime, cells


def _attempt(b, regime: str, strategy: str, seeds: int, cell: dict, tried: dict, lr: float, best, cap: float):
    """One lr of ``--tune`` for one cell: its seeds, each stopped at the cell's median (at the regime's cap
    where the cell has none), given up once more than half are past it. Records the lr's median in ``tried``;
    returns (the cell, kept or replaced by this lr's runs, the regime's best median, whether this lr won)."""
    stop = cell["median"] if cell["median"] is not None else (None if best is None else cap * best)
    runs: list = []
    for seed in range(seeds):
        runs.append(b.run(regime, strategy, seed, stop, lr))
        if sum(r["time"] is None for r in runs) > seeds // 2:
            break
    med = median_time([r["time"] for r in runs]) if len(runs) == seeds else None
    tried[lr] = med
    if med is not None and (cell["median"] is None or med < cell["median"]):
        return {"median": med, "runs": runs, "lr": lr, "cap": stop}, (med if best is None else min(best, med)), True
    return cell, best, False


def tune_regime(args) -> tuple[str, dict]:
    """``--tune``: each cached cell of one regime also run at every lr of the grid it has not tried, on the
    same seeds, then past the grid's edge (x2 or /2, at most ``EDGE_STEPS`` steps) while the edge lr is the
    best, as the tuned reference does; the cell keeps the lr of the least median (``tried``: every lr's
    median, None = stopped or missed). A run of a new lr stops at the cell's median (at the regime's cap
    where it has none): past it that seed cannot bring the median below the cell's, and once more than half
    the seeds are past it the lr is dropped."""
    regime, seeds, target, cap, lrs, done, names, dataset = args
    _worker_setup(names, dataset)
    b, cells = Bench(target), dict(done)
    best = min((c["median"] for c in cells.values() if c.get("median") is not None), default=None)
    for strategy in [k for k in STRATEGIES if k in cells]:
        cell = cells[strategy]
        tried = {float(k): v for k, v in cell.get("tried", {str(cell["lr"]): cell["median"]}).items()}
        for lr in (x for x in lrs if x not in tried):
            cell, best, _ = _attempt(b, regime, strategy, seeds, cell, tried, lr, best, cap)
        for factor, edge in ((2.0, max), (0.5, min)):
            for _ in range(EDGE_STEPS):
                lr = float(cell["lr"]) * factor
                if cell["median"] is None or cell["lr"] != edge(tried) or lr in tried:
                    break
                cell, best, better = _attempt(b, regime, strategy, seeds, cell, tried, lr, best, cap)
                if not better:
                    break
        cells[strategy] = {**cell, "tried": {str(k): v for k, v in sorted(tried.items())}}
    return regime, cells


def breakdown(cell: dict) -> dict:
    """Seed 0's per-worker seconds: the mean over workers and the range of the wait."""
    per = cell["runs"][0]["per"]
    mean = {k: sum(v) / len(v) for k, v in per.items()}
    return {**mean, "wait_max": max(per["wait_s"]), "wait_min": min(per["wait_s"])}


def fmt(cell: dict) -> str:
    if cell["median"] is not None:
        return f"{cell['median']:.3f}"
    return f"> {cell['cap']:.2f}" if cell["cap"] else "missed"


def table(results: dict) -> tuple[list[str], list[tuple[str, str, float | None]]]:
    names = list(STRATEGIES)
    lines = ["| regime | " + " | ".join(names) + " | best | best / allreduce |", "|---|" + "---|" * (len(names) + 2)]
    verdicts = []
    for regime, cells in results.items():
        meds = {s: cells[s]["median"] for s in names if s in cells}
        reached = {s: t for s, t in meds.items() if t is not None}
        win = min(reached, key=reached.get) if reached else None
        ar = meds.get("allreduce")
        margin = ar / reached[win] if win and ar else None
        row = [f"**{fmt(cells[s])}**" if s == win else fmt(cells[s]) for s in names]
        lines.append(f"| {regime} | " + " | ".join(row) + f" | {win or '-'} | "
                     + (f"{margin:.2f}x" if margin else "-") + " |")
        verdicts.append((regime, win or "-", margin))
    return lines, verdicts


def tuning_table(results: dict) -> list[str]:
    """Every lr each cell tried (``--tune``): its median, ``>`` where it was stopped past the kept one."""
    names = [s for s in STRATEGIES if any("tried" in c.get(s, {}) for c in results.values())]
    if not names:
        return []
    rows = []
    for regime, cells in results.items():
        row = []
        for s in names:
            tried = cells[s].get("tried", {str(cells[s]["lr"]): cells[s]["median"]})
            marks = {k: "**" if float(k) == cells[s]["lr"] else "" for k in tried}
            row.append(", ".join(f"{marks[k]}{float(k):g}: {'>' if v is None else f'{v:.3f}'}{marks[k]}"
                                 for k, v in tried.items()))
        rows.append(f"| {regime} | " + " | ".join(row) + " |")
    return ["## The lr each cell kept (bold) and every lr it tried (median s; `>`: stopped, no better)", "",
            "| regime | " + " | ".join(names) + " |", "|---|" + "---|" * len(names), *rows, ""]


def breakdown_table(results: dict) -> list[str]:
    lines = ["| regime | strategy | updates to target | compute | wait (min-max over workers) | comm | queue | "
             "gradients dropped |", "|---|---|---|---|---|---|---|---|"]
    for regime, cells in results.items():
        for s, cell in cells.items():
            r0 = cell["runs"][0]
            bd = breakdown(cell)
            upd = "-" if r0["updates"] is None else f"{r0['updates']:.0f}"
            lines.append(f"| {regime} | {s} | {upd} | {bd['compute_s']:.3f} | "
                         f"{bd['wait_s']:.3f} ({bd['wait_min']:.3f}-{bd['wait_max']:.3f}) | {bd['comm_s']:.3f} | "
                         f"{bd['queue_s']:.3f} | {r0['dropped']:.0f} |")
    return lines


def plot(results: dict, path: Path, target: float, seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap, LogNorm

    names, regimes = list(STRATEGIES), list(results)
    ratio = np.full((len(regimes), len(names)), np.nan)
    for i, reg in enumerate(regimes):
        ar = results[reg]["allreduce"]["median"]
        for j, s in enumerate(names):
            t = results[reg][s]["median"]
            if t is not None and ar:
                ratio[i, j] = ar / t
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 3, 0.55 * len(regimes) + 2.6))
    cmap = LinearSegmentedColormap.from_list("rb", ["#b2182b", "#f7f7f7", "#2166ac"])
    cmap.set_bad("#cccccc")
    lim = max(2.0, float(np.nanmax(np.abs(np.log2(ratio)))) if np.isfinite(ratio).any() else 2.0)
    im = ax.imshow(ratio, cmap=cmap, norm=LogNorm(vmin=2 ** -lim, vmax=2 ** lim), aspect="auto")
    palette = dict(zip(names, plt.cm.tab10.colors + plt.cm.Dark2.colors))
    for i, reg in enumerate(regimes):
        reached = {s: results[reg][s]["median"] for s in names if results[reg][s]["median"] is not None}
        win = min(reached, key=reached.get) if reached else None
        for j, s in enumerate(names):
            c = results[reg][s]
            txt = fmt(c) + " s" + (f"\n{ratio[i, j]:.2f}x" if np.isfinite(ratio[i, j]) else "")
            ax.text(j, i, txt, ha="center", va="center", fontsize=7.5, fontweight="bold" if s == win else "normal")
            if s == win:
                ax.add_patch(plt.Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, lw=2.5, ec=palette[s]))
    ax.set_xticks(range(len(names)), names, fontsize=8, rotation=30, ha="right")
    ax.set_yticks(range(len(regimes)),
                  [f"{r}  [best: {min((s for s in names if results[r][s]['median'] is not None), key=lambda s: results[r][s]['median'], default='-')}]"
                   for r in regimes], fontsize=8)
    cb = fig.colorbar(im, ax=ax, label="speedup over allreduce (allreduce time / this time)")
    ticks = [2.0 ** k for k in range(-math.ceil(lim), math.ceil(lim) + 1) if abs(k) <= lim]
    cb.set_ticks(ticks, labels=[f"{t:g}x" for t in ticks])
    cb.minorticks_off()
    ax.set_title(f"Sync strategy regime map, W = {W}, {LABEL[DATASET]} to {target:.0%}\nvirtual s to target "
                 f"(median of {seeds} seed(s); best boxed)\nemulated: virtual clock, real gradients", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


RUNS = {"mnist": ROOT / "docs" / "benchmarks" / "sync_regimes_runs.json",
        "fashion_mnist": ROOT / "docs" / "benchmarks" / "sync_regimes_fashion_runs.json"}
MAP = ROOT / "orchestrator" / "sync" / "regime_map.json"


def export_map(runs: dict[str, Path] | None = None) -> dict:
    """The packaged regime map ``+sync=auto`` decides from (``--export-map``; ``orchestrator/sync/regimes.py``
    reads it), derived from the committed runs of each dataset: per regime its hardware (``regime_hardware``),
    per strategy its sync name and the sync group it ran with (``conf/sync/NAME.yaml``'s and ``STRATEGIES``'s
    overrides), median seconds to target over the seeds (None:
    missed or stopped), the seeds' min and max (of those that reached it), the seeds that reached it of those
    run, and the tuned lr; the winner (``table``'s: the least median, the first in ``STRATEGIES`` on a tie)
    and its margin over allreduce (allreduce's median / the winner's)."""
    out: dict = {"workers": W, "baseline": "allreduce", "maps": {}}   # the label auto runs where no cell is near
    for dataset, path in (runs or RUNS).items():
        results = load_cache(path)
        cells = []
        for regime in (r for r in REGIMES if r in results):
            strategies = {}
            for label in (s for s in STRATEGIES if s in results[regime]):
                c = results[regime][label]
                times = [r["time"] for r in c["runs"] if r["time"] is not None]
                name, over = STRATEGIES[label]
                config = {**conf_defaults(name)[0], **over, "name": name}   # what +sync=NAME and the overrides run
                strategies[label] = {"sync": name, "config": config, "median_s": c["median"], "lr": float(c["lr"]),
                                     "min_s": min(times, default=None), "max_s": max(times, default=None),
                                     "reached": len(times), "seeds": len(c["runs"])}
            reached = {s: v["median_s"] for s, v in strategies.items() if v["median_s"] is not None}
            win = min(reached, key=reached.get) if reached else None
            ar = reached.get("allreduce")
            cells.append({"regime": regime, "hardware": regime_hardware(regime), "strategies": strategies,
                          "winner": win, "margin": ar / reached[win] if win and ar else None})
        out["maps"][dataset] = {"target": TARGET[dataset], "cells": cells}
    return out


def write_map(path: Path = MAP) -> None:
    import json

    path.write_text(json.dumps(export_map(), indent=1) + "\n")
    print(f"wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--dataset", choices=list(TARGET), default="mnist")
    ap.add_argument("--target", type=float, default=None, help="default: the dataset's (0.97 MNIST, 0.90 Fashion)")
    ap.add_argument("--cap", type=float, default=2.0, help="stop a run at this x the regime's best median so far")
    ap.add_argument("--jobs", type=int, default=1, help="regimes run in parallel processes")
    ap.add_argument("--regimes", default=None, help="indices into REGIMES (comma-separated; default all)")
    ap.add_argument("--strategies", default=None, help="labels of STRATEGIES (comma-separated; default all)")
    ap.add_argument("--lrs", default=None, help="tune lr over these (e.g. 0.004,0.008); default each conf's")
    ap.add_argument("--tune", default=None, help="re-run the cached cells at these lrs too (e.g. 0.004,0.008)")
    ap.add_argument("--cache", type=Path, default=None, help="keep each regime's cells in this JSON and reuse them")
    ap.add_argument("--write", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--export-map", action="store_true", help=f"write {MAP.relative_to(ROOT)} from the committed "
                    "runs (the map +sync=auto decides from) and stop")
    a = ap.parse_args(argv)
    if a.export_map:
        write_map()
        return 0
    global STRATEGIES, DATASET
    DATASET = a.dataset
    a.target = TARGET[a.dataset] if a.target is None else a.target
    if a.strategies:
        STRATEGIES = {k: STRATEGIES[k] for k in a.strategies.split(",")}
    regimes = [list(REGIMES)[int(i)] for i in a.regimes.split(",")] if a.regimes else list(REGIMES)
    lrs = [float(x) for x in a.lrs.split(",")] if a.lrs else None
    cache = load_cache(a.cache)
    t_start = time.time()
    tune = [float(x) for x in a.tune.split(",")] if a.tune else None
    todo = [(r, a.seeds, a.target, a.cap, tune or lrs, cache.get(r, {}), list(STRATEGIES), a.dataset)
            for r in regimes
            if tune or any(k not in cache.get(r, {}) or len(cache[r][k]["runs"]) < a.seeds for k in STRATEGIES)]
    work = tune_regime if tune else run_regime
    if a.jobs > 1 and len(todo) > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(a.jobs) as pool:
            for reg, cells in pool.imap_unordered(work, todo):
                cache[reg] = cells
                save_cache(a.cache, cache, indent=1)
    else:
        for args in todo:
            reg, cells = work(args)
            cache[reg] = cells
            save_cache(a.cache, cache, indent=1)
    wall = time.time() - t_start
    results = {r: cache[r] for r in regimes}
    tab, verdicts = table(results)
    cmd = "PYTHONPATH=. python benchmarks/sync_regimes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# Sync strategies: the regime map (emulated: virtual clock, real gradients; {time.strftime('%Y-%m-%d')})", "",
             f"W = {W} workers, the MNIST CNN on {LABEL[DATASET]} to {a.target:.0%}, time to target in virtual seconds, median of {a.seeds} "
             f"seed(s) (a missed target counts as infinitely slow); compute model t = {T0} s + b x {T1} s per speed-1.0 "
             f"worker; evaluation every {CADENCE[DATASET]:,} samples, crossing interpolated. A run stops at {a.cap:g}x the best "
             "median of its regime so far (`> x`: stopped there, it cannot win). Bold: the best of the row; "
             "best / allreduce: allreduce's time over the best's.", "",
             f"Command (wall time {wall / 60:.1f} min on a shared 2-core machine"
             f"{'' if not cache or len(todo) == len(regimes) else ', partly from --cache'}):", "",
             f"    {cmd}", "", *tab, "",
             "Best strategy per regime: " + "; ".join(f"{r}: **{w}**" + (f" ({m:.2f}x allreduce)" if m else "")
                                                    for r, w, m in verdicts) + ".", "",
             f"![regime map]({a.plot.name if a.plot else 'sync_regimes.png'})", "", *tuning_table(results),
             "## Where the time goes (seed 0, mean seconds per worker up to the stop)", "",
             *breakdown_table(results), ""]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    print(f"wall {wall:.0f} s")
    if a.write:
        a.write.write_text(text)
    if a.plot:
        plot(results, a.plot, a.target, a.seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
