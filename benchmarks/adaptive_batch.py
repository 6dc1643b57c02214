"""The adaptive global batch against the best fixed one (issue 29 item 6). Simulated: the virtual clock with
the fixed compute model of ``benchmarks/sync_tuned.py`` (``t = 0.0009 s + b x 0.000195 s`` on a speed-1.0
worker), the default 10 Gbit/s network, real gradients of the MNIST CNN.

For each cluster (8 equal workers; 16 mixed, speeds 1, 1/2, 1/4 cycled) and dataset (Fashion-MNIST to 90%,
MNIST to 97%), balanced allreduce (``sync.balance=static``) runs

- **fixed**: every global batch G of ``--fixed`` (``train.batch_policy=hybrid``, ``global_batch_max=G``,
  ``batch_size=64``: the lr is for 64 samples and scaled by sqrt(G/64), 20 warm-up updates), and
- **adaptive**: ``train.batch_policy=adaptive`` (the noise scale and goodput, its defaults: from
  max(64, W) up to 1024, re-decided every 20 rounds),

each at every lr of ``--grid`` (the same grid for both: the same tuning budget), ``--seeds`` seeds; a cell is
the median time to target over the seeds (a miss is infinitely slow), a row the best cell. A seed's run stops
at 1.5x the best median of its cluster so far (it cannot win; the rule of sync_tuned.py), so a stopped cell
shows as missed. Evaluations every 8,192 samples (Fashion-MNIST) / 1,024 (MNIST), the crossing interpolated.

    PYTHONPATH=. python benchmarks/adaptive_batch.py                         # Fashion-MNIST, both clusters
    PYTHONPATH=. python benchmarks/adaptive_batch.py --datasets mnist --clusters 8eq --write docs/benchmarks/adaptive_batch.md
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.seeded import BUDGET, CADENCE, MIXED, T0, T1, TARGET, VirtualBench, load_cache, save_cache  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CLUSTERS = {"8eq": [1.0] * 8, "16mixed": [MIXED[i % 3] for i in range(16)]}
CLUSTER_LABEL = {"8eq": "W=8 equal", "16mixed": "W=16 mixed (1, 1/2, 1/4)"}


def median(times: list[float | None]) -> float | None:
    from orchestrator.sync.reference import median_time

    return median_time(times)


class Bench(VirtualBench):
    def __init__(self, dataset: str, seeds: int, results: Path | None):
        self.seeds = seeds
        self.adaptive_min: int | None = None       # train.adaptive_min_batch of the adaptive row (None: its default)
        self.adaptive_lr: str | None = None        # train.lr_scaling of the adaptive row (None: the default sqrt)
        super().__init__(dataset, TARGET[dataset])
        self.results_path = results
        self.results: dict[str, dict] = load_cache(results)

    @property
    def adaptive_label(self) -> str:
        return ("adaptive" + (f" (min batch {self.adaptive_min})" if self.adaptive_min else "")
                + (f" ({self.adaptive_lr})" if self.adaptive_lr else ""))

    def run(self, cluster: str, policy: str, G: int | None, opt: str, lr: float, seed: int, cap_s: float | None):
        """One seed of one cell; cached in the results file by its key (a stopped run is kept with its cap)."""
        from orchestrator import plugins
        from orchestrator.execution.training import TrainSettings
        from orchestrator.sync.virtual import VirtualRun

        key = f"{self.name}|{cluster}|{policy}|{G}|{opt}|{lr:g}|{seed}" + (f"|min{self.adaptive_min}" if
                                                                             policy == "adaptive" and self.adaptive_min else "")
        key += f"|{self.adaptive_lr}" if policy == "adaptive" and self.adaptive_lr else ""
        old = self.results.get(key)
        # reused: a run that reached the target; one that missed on its whole budget (no cap: a rerun misses too);
        # one stopped at a cap at least this run's
        if old is not None and (old["time"] is not None or old["cap"] is None
                                or (cap_s is not None and old["cap"] >= cap_s)):
            return old
        speeds = CLUSTERS[cluster]
        train = {"optimizer": opt, "lr": lr, "batch_policy": policy}
        if policy == "hybrid":
            train["global_batch_max"] = G
        elif self.adaptive_min:
            train["adaptive_min_batch"] = self.adaptive_min
        if policy == "adaptive" and self.adaptive_lr:
            train["lr_scaling"] = self.adaptive_lr
        cfg = {"hardware": {"workers": len(speeds), "worker_speeds": list(speeds)},
               "sync": {"name": "allreduce", "balance": "static", "step_overhead_s": T0, "per_sample_s": T1},
               "train": train}
        strat = plugins.load("sync", "allreduce")(cfg["sync"])
        opts = strat.options(cfg)
        s = TrainSettings(batch_size=64, lr=lr, optimizer=opt, target_accuracy=TARGET[self.name], stop="target",
                          eval_every=CADENCE[self.name] // 64, budget_updates=BUDGET[self.name] // 64, seed=seed,
                          budget_s=cap_s)
        r, st = VirtualRun(strat, opts, s, self.runtime(seed), self.ds, self.cm).run()
        hist = st.batch_history
        out = {"time": r.time_to_target_s, "cap": cap_s, "rounds": r.updates, "samples": r.samples,
               "batches": sorted({h[2] for h in hist}) if hist else [opts.total_batch(64)],
               "final_batch": hist[-1][2] if hist else opts.total_batch(64),
               "noise": [round(h[3], 1) for h in hist if h[3] is not None and math.isfinite(h[3])][-1:] if hist else [],
               "path": [(h[0], round(h[1], 3), h[2]) for h in hist if h[0] % 100 == 0] if hist else []}
        self.results[key] = out
        save_cache(self.results_path, self.results, indent=0)
        return out

    def cluster(self, cluster: str, fixed: list[int], grid: list[tuple[str, float]]) -> dict:
        """Every cell of the cluster; returns {row: {(opt, lr): [seed results]}} and the best median so far."""
        best = [math.inf]
        rows: dict[str, dict] = {}
        order = [("hybrid", G) for G in fixed] + [("adaptive", None)]

        def cell(policy, G, opt, lr):
            res = []
            for seed in range(self.seeds):
                cap = 1.5 * best[0] if math.isfinite(best[0]) else None
                res.append(self.run(cluster, policy, G, opt, lr, seed, cap))
            med = median([r["time"] for r in res])
            label = f"fixed G={G}" if policy == "hybrid" else self.adaptive_label
            print(f"  {self.name} {cluster} {label} {opt} {lr:g}: {med} {[r['time'] for r in res]}"
                  + (f" batches {[r['final_batch'] for r in res]} noise {[r['noise'] for r in res]}"
                     if policy == "adaptive" else ""), flush=True)
            if med is not None:
                best[0] = min(best[0], med)
            return res

        for policy, G in order:
            label = f"fixed G={G}" if policy == "hybrid" else self.adaptive_label
            rows[label] = {(opt, lr): cell(policy, G, opt, lr) for opt, lr in grid}
        return rows


def summarise(rows: dict) -> dict[str, tuple]:
    """Per row: (median, min, max, opt, lr, cells) of its best cell."""
    out = {}
    for label, cells in rows.items():
        best = None
        for (opt, lr), res in cells.items():
            med = median([r["time"] for r in res])
            if med is not None and (best is None or med < best[0]):
                times = [r["time"] for r in res if r["time"] is not None]
                best = (med, min(times), max(times), opt, lr, res)
        out[label] = best
    return out


def table(dataset: str, cluster: str, rows: dict, seeds: int) -> list[str]:
    summ = summarise(rows)
    fixed = {k: v for k, v in summ.items() if k.startswith("fixed") and v is not None}
    base_label, base = min(fixed.items(), key=lambda kv: kv[1][0]) if fixed else (None, None)
    lines = [f"### {dataset}, {CLUSTER_LABEL[cluster]} (simulated, virtual clock; median of {seeds} seeds)", "",
             "| row | best lr | time to target (s), median (min-max) | vs best fixed | every cell (median s) | batches chosen |",
             "|---|---|---|---|---|---|"]
    for label, best in summ.items():
        cells = "; ".join(f"{opt} {lr:g}: " + (f"{m:.3f}" if (m := median([r['time'] for r in res])) is not None
                                                else "missed/stopped") for (opt, lr), res in rows[label].items())
        if best is None:
            lines.append(f"| {label} | - | missed | - | {cells} | - |")
            continue
        ratio = f"{best[0] / base[0]:.3f}x" if base else "-"
        chosen = "-"
        if label.startswith("adaptive"):
            chosen = ", ".join(f"{r['batches'][0]}-{r['final_batch']} (B_noise {r['noise'][0] if r['noise'] else '?'})"
                               for r in best[5] if r["time"] is not None)
        lines.append(f"| {label}{' (baseline)' if label == base_label else ''} | {best[3]} {best[4]:g} | "
                     f"{best[0]:.3f} ({best[1]:.3f}-{best[2]:.3f}) | {ratio} | {cells} | {chosen} |")
    return lines + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default="fashion_mnist")
    p.add_argument("--clusters", default="8eq,16mixed")
    p.add_argument("--fixed", default="256,512,128", help="fixed global batches (the first is run first)")
    p.add_argument("--grid", default="adam:0.002,adam:0.004", help="optimizer:lr cells, the same for every row")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--adaptive-min", type=int, default=None, help="train.adaptive_min_batch of the adaptive row")
    p.add_argument("--adaptive-lr", default=None, choices=("sqrt", "linear", "adascale"),
                   help="train.lr_scaling of the adaptive row (default: sqrt, the fixed rows' rule)")
    p.add_argument("--results", default=None, help="a JSON file of finished runs (read, and extended)")
    p.add_argument("--write", default=None, help="write the tables (markdown) here")
    a = p.parse_args(argv)
    grid = [(c.split(":")[0], float(c.split(":")[1])) for c in a.grid.split(",")]
    fixed = [int(g) for g in a.fixed.split(",") if g]
    lines = ["Every figure here is **simulated** (virtual clock; real gradients of the MNIST CNN; compute model "
             f"t = {T0} s + b x {T1} s at speed 1; 10 Gbit/s). `benchmarks/adaptive_batch.py --datasets {a.datasets} "
             f"--clusters {a.clusters} --fixed {a.fixed} --grid {a.grid} --seeds {a.seeds}"
             + (f" --adaptive-min {a.adaptive_min}" if a.adaptive_min else "")
             + (f" --adaptive-lr {a.adaptive_lr}" if a.adaptive_lr else "") + "`.", ""]
    for ds in a.datasets.split(","):
        bench = Bench(ds, a.seeds, Path(a.results) if a.results else None)
        bench.adaptive_min, bench.adaptive_lr = a.adaptive_min, a.adaptive_lr
        for cl in a.clusters.split(","):
            rows = bench.cluster(cl, fixed, grid)
            t = table(ds, cl, rows, a.seeds)
            print("\n".join(t), flush=True)
            lines += t
            if a.write:
                Path(a.write).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
