"""Sync strategies on the MNIST CNN: time to target, speedup over one worker, final accuracy.

    PYTHONPATH=. python benchmarks/sync_speedup.py            # representative subset + targets (~15 min CPU)
    PYTHONPATH=. python benchmarks/sync_speedup.py --full     # the whole grid (hours on 2 cores)
    ... --write docs/benchmarks/sync.md                         # also write the tables there (+ sync_scaling.png)

The default subset covers every dimension at least once:
- W=4, one 4x straggler: allreduce, async, delay s in {0,1,2,4,8} with and without speed-proportional batches;
- W=4, transient stragglers p=0.1 and p=0.25 (slowdown 4x): allreduce, delay;
- W=4, equal workers: allreduce, async, delay;
- scalability: W in {1,2,4,8,16} on the mixed pattern (speeds 1, 1/2, 1/4 cycled): allreduce, delay;
- equal budget (train.stop=budget): allreduce, async, delay on equal workers and on the straggler setting;
- MPI W in {1,2,4} ranks, equal speeds, wall clock: allreduce, delay (to 97% or a wall-time cap).
``--full`` runs W in {1,2,4,8,16,32} x every setting x {allreduce, async, delay s in {0,1,2,4,8} with and
without proportional batches}, the equal-budget rows for every setting, and MPI W in {1,2,4} for all three.

Virtual runs use one measured base step time (printed) on the virtual clock; MPI runs use wall time.
TensorFlow runs single-threaded here (``--threads``) so the benchmark takes one core of the shared machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

from orchestrator.sync.core import SyncOptions  # noqa: E402

SLOW = 4.0                       # a straggler's iteration is this many times longer
STALENESS = (0, 1, 2, 4, 8)
BUDGET_BASE_TIMES = 500          # equal-budget runs: this many base step times of virtual time
MPI_WALL_CAP_S = 60.0            # MPI runs stop at 97% or after this much wall time (training, evals excluded)
SETTINGS = ("equal", "mixed", "straggler", "transient0.1", "transient0.25")


def speeds_for(setting: str, w: int) -> tuple[list[float], dict | None]:
    if setting == "mixed":
        return [(1.0, 0.5, 0.25)[i % 3] for i in range(w)], None
    if setting == "straggler":
        return [1.0] * (w - 1) + [1.0 / SLOW] if w > 1 else [1.0], None
    if setting.startswith("transient"):
        return [1.0] * w, {"probability": float(setting[len("transient"):]), "slowdown": SLOW}
    return [1.0] * w, None


@dataclass(frozen=True)
class Strat:
    """A strategy with optional overrides; None keeps the strategy's default (conf/sync/<name>.yaml)."""

    name: str
    s: float | None = None
    prop: bool | None = None

    def cfg(self) -> dict:
        out = {"name": self.name}
        if self.s is not None:
            out["staleness"] = self.s
        if self.prop is not None:
            out["speed_proportional_batches"] = self.prop
        return out

    @property
    def default(self) -> bool:
        return self.s is None and self.prop is None


ALLREDUCE, ASYNC, DELAY = Strat("allreduce"), Strat("async"), Strat("delay")


def effective(strat: Strat) -> tuple[str, str]:
    """(s, proportional batches) as the runtime reads them."""
    o = SyncOptions.from_cfg(strat.cfg(), {"hardware": {"workers": 1}})
    s = "inf" if o.staleness == float("inf") else f"{o.staleness:g}"
    return s, "yes" if o.proportional_batches else "no"


class Bench:
    def __init__(self, data, base: float):
        self.data, self.base = data, base
        self.rows: list[dict] = []
        self.cache: dict = {}
        self.ref_tt: float | None = None       # virtual: one speed-1.0 worker to 97%
        self.mpi_ref: float | None = None      # MPI: one allreduce rank to 97% (wall)

    def get(self, strat: Strat, setting: str, w: int, runtime: str = "virtual", mode: str = "target") -> dict:
        s, prop = effective(strat)
        key = (strat.name, s, prop, setting, w, runtime, mode)
        if key not in self.cache:
            self.cache[key] = self._run(strat, setting, w, runtime, mode)
            self.rows.append(self.cache[key])
        return self.cache[key]

    def _run(self, strat: Strat, setting: str, w: int, runtime: str, mode: str) -> dict:
        from orchestrator.sync.virtual import make_context, train_virtual

        speeds, strag = speeds_for(setting, w)
        sync = dict(strat.cfg(), runtime=runtime, base_time_s=self.base, timeout_s=900)
        train = {"budget_updates": 3000, "eval_samples": 1000}
        if mode == "budget":
            train.update(stop="budget", budget_s=BUDGET_BASE_TIMES * self.base, budget_updates=None)
        if runtime == "mpi":
            train.update(budget_s=MPI_WALL_CAP_S, budget_updates=None)
        cfg = {"hardware": {"workers": w, "worker_speeds": speeds, "stragglers": strag}, "sync": sync, "train": train}
        c0, t0 = _cpu(), time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            ctx = make_context(cfg, tmp, dataset=self.data)
            opts = SyncOptions.from_cfg(sync, cfg)
            if runtime == "mpi":
                from orchestrator.sync.mpi import train_mpi

                result, _ = train_mpi(opts, ctx, reference=False)
            else:
                # the W=1 reference run is made once (cached) with the to-target settings
                result, _, _ = train_virtual(opts, ctx, reference=mode == "target")
        tt = result.time_to_target_s
        if runtime == "virtual" and mode == "target" and self.ref_tt is None:
            self.ref_tt = result.reference_time_to_target_s
        if runtime == "mpi" and w == 1 and strat == ALLREDUCE:
            self.mpi_ref = tt
        ref = self.ref_tt if runtime == "virtual" else self.mpi_ref
        s, prop = effective(strat)
        row = {"runtime": runtime, "W": w, "setting": setting, "strategy": strat.name, "s": s, "prop": prop,
               "default": strat.default, "mode": mode, "tt": tt, "speedup": ref / tt if ref and tt else None,
               "final": result.final_test_accuracy, "updates": result.updates, "elapsed": result.elapsed_s,
               "wall": time.perf_counter() - t0, "cpu": _cpu() - c0}
        print(f"  {runtime:7s} W={w:<2d} {setting:13s} {strat.name:9s} s={s:3s} prop={prop:3s} {mode:6s} "
              f"t97={fmt(tt)} speedup={fmt(row['speedup'])} final={row['final']:.4f} updates={row['updates']} "
              f"elapsed={row['elapsed']:.1f}s ({row['wall']:.0f}s wall, {row['cpu']:.0f}s cpu)", flush=True)
        return row


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


HEAD = ("| runtime | W | setting | strategy | s | proportional batches | time to 97% [s] | speedup vs 1 worker "
        "| final acc | updates |\n|---|---|---|---|---|---|---|---|---|---|")


def table(rows, title, note="", elapsed=False):
    head = HEAD if not elapsed else HEAD.replace(" updates |\n", " updates | trained [s] |\n") + "---|"
    out = [f"### {title}", ""] + ([note, ""] if note else []) + [head]
    seen = set()
    for r in rows:
        if id(r) in seen:  # the default delay is also the (s=2, proportional) row of a sweep
            continue
        seen.add(id(r))
        line = (f"| {r['runtime']} | {r['W']} | {r['setting']} | {r['strategy']}{'' if r['default'] else '*'} | {r['s']} "
                f"| {r['prop']} | {fmt(r['tt'])} | {fmt(r['speedup'])} | {r['final']:.4f} | {r['updates']} |")
        out.append(line + (f" {r['elapsed']:.1f} |" if elapsed else ""))
    return "\n".join(out) + "\n"


def check(name, value, goal, ok, detail=""):
    return f"| {name} | {fmt(value)} | {goal} | {'met' if ok else 'MISSED'} | {detail} |"


def targets(b: Bench) -> str:
    lines = ["| target | measured | goal | verdict | numbers |", "|---|---|---|---|---|"]

    def vs(setting, w=4):
        a, d = b.get(ALLREDUCE, setting, w), b.get(DELAY, setting, w)
        r = a["tt"] / d["tt"] if a["tt"] and d["tt"] else None
        return r, f"t97 allreduce {fmt(a['tt'])} s, delay {fmt(d['tt'])} s"

    r, det = vs("straggler")
    lines.append(check("persistent 4x straggler, W=4: t97(allreduce) / t97(delay)", r, ">= 1.5", bool(r and r >= 1.5), det))
    r, det = vs("transient0.25")
    lines.append(check("transient p=0.25, W=4: t97(allreduce) / t97(delay)", r, ">= 1.3", bool(r and r >= 1.3), det))
    r, det = vs("equal")
    r = 1 / r if r else None
    lines.append(check("equal workers, W=4: t97(delay) / t97(allreduce)", r, "<= 1.10", bool(r and r <= 1.10), det))
    for setting in ("equal", "straggler"):
        ar = b.get(ALLREDUCE, setting, 4, mode="budget")["final"]
        for st in (ASYNC, DELAY):
            f = b.get(st, setting, 4, mode="budget")["final"]
            d = (ar - f) * 100
            lines.append(check(f"equal budget, {setting}, W=4: allreduce - {st.name} final accuracy [points]", d,
                               "<= 0.5", d <= 0.5, f"allreduce {ar:.4f}, {st.name} {f:.4f}"))
    a, d = b.get(ALLREDUCE, "mixed", 16), b.get(DELAY, "mixed", 16)
    r = d["speedup"] / a["speedup"] if a["speedup"] and d["speedup"] else None
    lines.append(check("16 mixed workers: speedup(delay) / speedup(allreduce)", r, ">= 2", bool(r and r >= 2),
                       f"speedup allreduce {fmt(a['speedup'])}, delay {fmt(d['speedup'])}"))
    return "\n".join(lines) + "\n"


def plot(b: Bench, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    ws_all = sorted({r["W"] for r in b.rows if r["runtime"] == "virtual"})
    ax.plot(ws_all, ws_all, "k--", lw=1, label="ideal (W)")
    mixed_ws = sorted({r["W"] for r in b.rows if r["setting"] == "mixed"})
    if mixed_ws:
        ax.plot(mixed_ws, [sum(speeds_for("mixed", w)[0]) for w in mixed_ws], "k:", lw=1,
                label="ideal for mixed speeds (sum of speeds)")
    for setting, marker in (("mixed", "o"), ("equal", "s"), ("straggler", "^"), ("transient0.25", "v")):
        for name, colour in (("allreduce", "tab:blue"), ("delay", "tab:orange"), ("async", "tab:green")):
            pts = sorted((r["W"], r["speedup"]) for r in b.rows if r["runtime"] == "virtual" and r["mode"] == "target"
                         and r["setting"] == setting and r["strategy"] == name and r["default"] and r["speedup"])
            if len(pts) > 1:
                ax.plot(*zip(*pts), marker=marker, color=colour, label=f"{name} ({setting})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(ws_all, [str(w) for w in ws_all])
    ax.set_xlabel("workers W")
    ax.set_ylabel("speedup in time to 97% vs one speed-1.0 worker")
    ax.set_title("MNIST CNN, virtual runtime (simulated clock, measured base step time)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="the whole grid (hours on 2 cores)")
    p.add_argument("--base-time", type=float, default=None, help="virtual base step time (default: measure)")
    p.add_argument("--no-mpi", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow intra-op threads (default 1)")
    p.add_argument("--write", type=Path, default=None, help="also write the tables to this markdown file")
    p.add_argument("--plot", type=Path, default=None, help="speedup-vs-W figure (default: next to --write)")
    a = p.parse_args(argv)
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(a.threads)

    from orchestrator.execution.runtime import ModelRuntime, configure_threads

    configure_threads(a.threads, 1)
    from orchestrator.data import load_mnist
    from orchestrator.models import cnn

    t_start, c_start = time.perf_counter(), _cpu()
    data = load_mnist()
    base = a.base_time or ModelRuntime(cnn.spec({})).measure_step_time(data.x_train[:64], data.y_train[:64], repeats=20)
    print(f"base step time (speed 1.0, batch 64): {base * 1000:.1f} ms", flush=True)
    b = Bench(data, base)
    sdelays = [Strat("delay", s=float(s), prop=prop) for prop in (True, False) for s in STALENESS]

    if a.full:
        for w in (1, 2, 4, 8, 16, 32):
            for setting in SETTINGS:
                for st in [ALLREDUCE, ASYNC, DELAY] + sdelays:
                    b.get(st, setting, w)
    # 1. persistent straggler: the staleness sweep with and without proportional batches
    sweep = [b.get(st, "straggler", 4) for st in [ALLREDUCE, ASYNC, DELAY] + sdelays]
    # 2. transient stragglers; 3. equal workers
    transient = [b.get(st, f"transient{pp}", 4) for pp in ("0.1", "0.25") for st in (ALLREDUCE, DELAY)]
    equal = [b.get(st, "equal", 4) for st in (ALLREDUCE, ASYNC, DELAY)]
    # 4. scalability on the mixed pattern
    scal = [b.get(st, "mixed", w) for st in (ALLREDUCE, DELAY) for w in (1, 2, 4, 8, 16)]
    # 5. equal budget
    budget_settings = SETTINGS if a.full else ("equal", "straggler")
    budget = [b.get(st, s, 4, mode="budget") for s in budget_settings for st in (ALLREDUCE, ASYNC, DELAY)]
    # 6. MPI
    mpi = []
    if not a.no_mpi:
        for w in (1, 2, 4):
            for st in (ALLREDUCE, ASYNC, DELAY) if a.full else (ALLREDUCE, DELAY):
                mpi.append(b.get(st, "equal", w, runtime="mpi"))
    tgt = targets(b)
    wall, cpu = time.perf_counter() - t_start, _cpu() - c_start

    text = [f"Base step time {base * 1000:.1f} ms (batch 64, speed 1.0, TensorFlow on {a.threads} thread(s), measured "
            f"here). train.lr 0.1, batch 64 per worker, target 97% on the seeded 8000/2000 split (evaluated on the "
            f"first 1000 test images every 25 sample-equivalent steps). Speedup: the one-worker (speed 1.0) time to 97% "
            f"divided by the row's ({fmt(b.ref_tt)} virtual s{'' if b.mpi_ref is None else f'; MPI: one allreduce rank, {fmt(b.mpi_ref)} s wall'}). "
            f"`*` marks an overridden default; `delay` without `*` is the default (s=2, proportional batches). "
            f"Updates: synchronous steps for allreduce, applied pushes for async/delay. "
            f"This run: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU ({'full grid' if a.full else 'default subset'}).", "",
            "### Targets (virtual runtime, against allreduce with equal batches)", "", tgt,
            table(sweep, "Persistent heterogeneity: W=4, one worker 4x slower (staleness sweep)"),
            table(transient, "Transient stragglers: W=4, each iteration a worker is 4x slower with probability p"),
            table(equal, "Equal workers: W=4"),
            table(scal, "Scalability: mixed speeds (1, 1/2, 1/4 cycled)"),
            table(budget, f"Equal budget (train.stop=budget): {BUDGET_BASE_TIMES} base step times = "
                          f"{BUDGET_BASE_TIMES * base:.2f} virtual s, W=4",
                  "time to 97% is shown where the run crossed 97% within the budget."),
            table(mpi, f"MPI runtime (wall clock, equal speeds; stop at 97% or after {MPI_WALL_CAP_S:.0f} s of training)",
                  "Speedup vs the measured one-rank allreduce run. async/delay add a server rank (rank 0).",
                  elapsed=True) if mpi else ""]
    if a.full:
        shown = {id(r) for r in sweep + transient + equal + scal + budget + mpi}
        text.append(table([r for r in b.rows if id(r) not in shown], "Full grid: the remaining rows"))
    out = "\n".join(text)
    print(out)
    if a.write:
        a.write.parent.mkdir(parents=True, exist_ok=True)
        a.write.write_text("# Sync strategies: speedup on the MNIST CNN (generated)\n\n" + out)
    plot_path = a.plot or (a.write.parent / "sync_scaling.png" if a.write else None)
    if plot_path:
        plot(b, plot_path)
        print(f"wrote {plot_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
