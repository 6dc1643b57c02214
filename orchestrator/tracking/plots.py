"""Figures of a set of trials (PNG, matplotlib Agg). Every title says simulated or measured.

``make_plots(records, out_dir)`` draws what the runs have data for; ``log_sweep_plots(client,
parent_run_id)`` does it for a sweep's children and logs the PNGs on the parent run (``plots/``).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from orchestrator.tracking.runs import RunRecord


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def evaluated_by(records: Iterable[RunRecord]) -> str:
    """'simulated', 'emulated', 'measured', or e.g. 'emulated and measured' for a title (``figures_kind``)."""
    from orchestrator.tracking.runs import figures_kind

    kinds = sorted({figures_kind(r.tags) for r in records})
    return " and ".join(kinds) if kinds else "no runs"


def _finish(fig, ax, path: Path, title: str, xlabel: str | None = None, ylabel: str | None = None, *,
            grid: str = "both", legend: str | None = None, **title_kw) -> Path:
    """The axes' labels, title, grid and legend (``legend``: its location, None for none), then the PNG."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.set_title(title, **title_kw)
    ax.grid(axis=grid, alpha=0.3)
    if legend is not None:
        ax.legend(loc=legend)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def _colours(labels: Iterable[str]) -> dict[str, str]:
    cycle = [f"C{i}" for i in range(10)]
    return {label: cycle[i % len(cycle)] for i, label in enumerate(sorted(set(labels)))}


def strategy(r: RunRecord) -> str:
    """The data-parallel strategy a run used, with its placer when it had one."""
    placer = r.tag("placer")
    return f"sync={r.tag('sync')}" + ("" if placer == "none" else f", placer={placer}")


def accuracy_vs_time(records: list[RunRecord], path: Path) -> Path | None:
    """Test accuracy against training time, one line per run, coloured by strategy."""
    curves = []
    for r in records:
        acc, t = dict(r.history("train.test_accuracy")), dict(r.history("train.elapsed_s"))
        steps = sorted(set(acc) & set(t))
        if steps:
            curves.append((r, [t[s] for s in steps], [acc[s] for s in steps]))
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = _colours(strategy(r) for r, _, _ in curves)
    counts = defaultdict(int)
    for r, _, _ in curves:
        counts[strategy(r)] += 1
    labelled = set()
    for r, xs, ys in curves:
        s = strategy(r)
        label = None if s in labelled else f"{s} ({counts[s]} run{'s' * (counts[s] > 1)})"
        labelled.add(s)
        ax.plot(xs, ys, marker=".", color=colours[s], label=label, alpha=0.85)
    targets = {r.params.get("train.target_accuracy") for r, _, _ in curves} - {None, "null"}
    if len(targets) == 1:
        ax.axhline(float(targets.pop()), color="grey", linestyle="--", label="target accuracy")
    clocks = sorted({r.tags.get("train.clock", "wall") for r, _, _ in curves})
    return _finish(fig, ax, path, f"Test accuracy vs training time ({evaluated_by(r for r, _, _ in curves)})",
                   f"training time (s, {'/'.join(clocks)} clock, evaluation excluded)", "test accuracy (fraction)",
                   legend="lower right")


def speedup_vs_workers(records: list[RunRecord], path: Path) -> Path | None:
    """Speedup against the number of workers, one marker series per strategy, with ideal scaling."""
    pts = [(r, r.workers, r.metric("speedup")) for r in records]
    pts = [(r, w, s) for r, w, s in pts if w is not None and s is not None]
    if not pts or all(w == 1 for _, w, _ in pts):       # one worker each (placements): no scaling to show
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    colours = _colours(strategy(r) for r, _, _ in pts)
    for s, c in colours.items():
        sel = sorted((w, v) for r, w, v in pts if strategy(r) == s)
        ax.plot([w for w, _ in sel], [v for _, v in sel], marker="o", linestyle="-" if len(sel) > 1 else "",
                color=c, label=s)
    top = max(max(w for _, w, _ in pts), 2)
    ax.plot([1, top], [1, top], color="black", linestyle="--", label="ideal for equal workers (speedup = workers)")
    for key, label, style in (("hardware.capacity", "capacity (sum of the workers' speeds)", "s"),
                              ("limit.speedup", "statistical limit of synchronous DP", "^")):
        seen = sorted({(w, r.metric(key)) for r, w, _ in pts if r.metric(key) is not None})
        if seen and (key != "hardware.capacity" or any(abs(c - w) > 1e-9 for w, c in seen)):   # unequal speeds
            ax.plot(*zip(*seen), color="grey", marker=style, linestyle=":", label=label)
    return _finish(fig, ax, path, f"Speedup vs workers ({evaluated_by(r for r, _, _ in pts)})",
                   "number of data-parallel workers", "speedup (x, vs one worker)", legend="best")


def _objective(r: RunRecord) -> float | None:
    """The trial's placement objective: time per sample (pipeline) or one step's latency."""
    v = r.metric("placement.time_per_sample_s")
    return v if v is not None else r.metric("placement.step_time_s")


def step_time_per_placer(records: list[RunRecord], path: Path) -> Path | None:
    """Placed step time (or time per sample, for the pipeline objective) per placer (best run of
    each), one group per model and hardware; each group's certified lower bound drawn as a line."""
    placed = [r for r in records if _objective(r) is not None]
    if not placed:
        return None
    best: dict[tuple[str, str], RunRecord] = {}
    for r in placed:
        context = f"{r.tag('model')}/{r.tag('hardware')}"
        model_path = r.params.get("model.path")
        if model_path and model_path != "null":
            context = f"{Path(model_path).stem}/{r.tag('hardware')}"
        key = (context, r.tag("placer"))
        if key not in best or _objective(r) < _objective(best[key]):
            best[key] = r
    keys = sorted(best)
    several = len({c for c, _ in keys}) > 1
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys) + 2), 5))
    colours = _colours(p for _, p in keys)
    bound_labelled = False
    for i, (context, placer) in enumerate(keys):
        r = best[(context, placer)]
        ax.bar(i, _objective(r), width=0.6, color=colours[placer], edgecolor="black")
        lb = r.metric("placement.lower_bound_s")
        if lb is not None:
            ax.hlines(lb, i - 0.4, i + 0.4, colors="black", linestyles="--",
                      label=None if bound_labelled else "lower bound (certified)")
            bound_labelled = True
    ax.set_xticks(range(len(keys)), [f"{p}\n{c}" if several else p for c, p in keys])
    pipe = any(r.metric("placement.time_per_sample_s") is not None for r in best.values())
    log = _log_if_wide(ax, [_objective(r) for r in best.values()])    # models 300x apart shared a linear axis
    return _finish(fig, ax, path, f"Step time per placer, best run each ({evaluated_by(best.values())})",
                   "placer" + (" / model/hardware" if several else f" (model/hardware {keys[0][0]})"),
                   "step time (s per training step)" + (" / time per sample (s, pipeline)" if pipe else "") + log,
                   grid="y", legend="lower right" if bound_labelled else None)


def _log_if_wide(ax, values) -> str:
    """A log y axis where the values span more than 10x; the axis label's note."""
    vals = [v for v in values if v is not None and v > 0]
    if vals and max(vals) > 10 * min(vals):
        ax.set_yscale("log")
        return ", log scale"
    return ""


def rl_learning_curve(records: list[RunRecord], path: Path) -> Path | None:
    """The RL placer's best and mean sampled step time per policy update, one pair of lines per run."""
    curves = [(r, r.history("rl.best_step_time_s"), r.history("rl.mean_step_time_s")) for r in records
              if r.metric("rl.best_step_time_s") is not None or r.metric("rl.mean_step_time_s") is not None]
    curves = [c for c in curves if c[1] or c[2]]
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (r, best, mean) in enumerate(curves):
        name = "" if len(curves) == 1 else f" ({r.name})"
        if best:
            ax.plot(*zip(*best), color=f"C{i}", label=f"best step time so far{name}")
        if mean:
            ax.plot(*zip(*mean), color=f"C{i}", linestyle=":", label=f"mean of sampled placements{name}")
    log = _log_if_wide(ax, [v for _, b, m in curves for _, v in b + m])
    return _finish(fig, ax, path, f"RL placer learning curve ({evaluated_by(r for r, _, _ in curves)})",
                   "policy update", "step time (s)" + log, legend="best")


def plan_label(r: RunRecord) -> str:
    """A plan trial as a bar's label: its planner, cluster and simulator."""
    return f"{r.tag('planner')}\n{r.tag('plan.cluster', '?')}\n({r.tag('plan.simulator', '?')} sim.)"


def plan_comparison(records: list[RunRecord], path: Path) -> Path | None:
    """Plan trials side by side: each plan's samples/s (hatched where it does not fit: the figure it would
    have), its bound's samples/s as a dashed line, and its USD/h written on the bar."""
    plans = [r for r in records if r.tag("runtime") == "plan" and r.status == "FINISHED"
             and (r.metric("plan.iteration_s") or r.metric("plan.iteration_s_if_it_fitted"))]
    if not plans:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7, 1.8 * len(plans) + 2), 5.5))
    colours = _colours(r.tag("planner") for r in plans)
    bound_labelled = False
    for i, r in enumerate(plans):
        fits = r.tag("plan.fits") == "true"
        it = r.metric("plan.iteration_s") if fits else r.metric("plan.iteration_s_if_it_fitted")
        sps = (r.metric("plan.global_batch") or 0.0) / it
        ax.bar(i, sps, width=0.6, color=colours[r.tag("planner")], edgecolor="black", hatch=None if fits else "//")
        usd = r.metric("plan.usd_per_hour")
        ax.text(i, sps, ("" if fits else "does not fit\n") + (f"{usd:.3g} USD/h" if usd is not None else ""),
                ha="center", va="bottom", fontsize=7)
        bound = r.metric("plan.bound_iteration_s")
        if bound:
            ax.hlines((r.metric("plan.global_batch") or 0.0) / bound, i - 0.4, i + 0.4, colors="black", linestyles="--")
            bound_labelled = True
    ax.set_xticks(range(len(plans)), [plan_label(r) for r in plans], fontsize=7)
    ax.margins(y=0.15)
    return _finish(fig, ax, path, f"Plans compared ({evaluated_by(plans)}): samples/s per planner and cluster"
                   + ("\ndashed: the bound (no plan on that cluster is faster)" if bound_labelled else ""),
                   ylabel="samples/s (plan)", grid="y", fontsize=10)


PLAN_PLOTS = {"plan_comparison": plan_comparison}    # plan trials' (runtime=plan)
PLOTS = {
    "accuracy_vs_time": accuracy_vs_time,
    "speedup_vs_workers": speedup_vs_workers,
    "step_time_per_placer": step_time_per_placer,
    "rl_learning_curve": rl_learning_curve,
}


def make_plots(records: list[RunRecord], out_dir: str | Path) -> dict[str, Path]:
    """Every plot the runs have data for, as ``out_dir/NAME.png``; ``{name: path}``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, fn in {**PLAN_PLOTS, **PLOTS}.items():
        path = fn(records, out / f"{name}.png")
        if path is not None:
            made[name] = path
    return made


def log_sweep_plots(client, parent_run_id: str) -> dict[str, Path]:
    """Plot a sweep's children and log the PNGs on the parent run under ``plots/``."""
    from orchestrator.tracking import runs

    records = runs.load(client, parent_run_id=parent_run_id)
    with tempfile.TemporaryDirectory(prefix="orchestrator-plots-") as tmp:
        made = make_plots(records, tmp)
        for path in made.values():
            client.log_artifact(parent_run_id, str(path), artifact_path="plots")
    return {name: Path("plots") / p.name for name, p in made.items()}
