"""The report's columns: (key, header, value function) per column of the trial, plan and profiler tables, and
which table a run belongs to."""

from __future__ import annotations

from orchestrator.tracking import runs

# (key, header, value function); the order of the table's columns.
COLUMNS = [
    ("run_name", "run", lambda r: r.name),
    ("status", "status", lambda r: r.status),
    ("placer", "placer", lambda r: r.tag("placer")),
    ("sync", "sync", lambda r: r.tag("sync") + (f": {r.tags['sync.auto.choice']}" if "sync.auto.choice" in r.tags else "")),
    ("hardware", "hardware", lambda r: r.tag("hardware")),
    ("model", "model", lambda r: r.tag("model")),
    ("planner", "planner", lambda r: r.tag("planner", "")),
    ("workers", "workers", lambda r: None if r.tag("runtime") == "plan" else r.workers),
    ("step_time_s", "step time (s)", lambda r: r.metric("placement.step_time_s")),
    ("time_per_sample_s", "time per sample (s)", lambda r: r.metric("placement.time_per_sample_s")),
    ("placement_gap_to_bound", "gap to bound", None),      # over the runs shown: rows() fills it
    ("plan_iteration_s", "s/iteration (plan)", lambda r: r.metric("plan.iteration_s")),
    ("plan_gpus", "GPUs (plan)", lambda r: r.metric("plan.gpus")),
    ("speedup", "speedup", lambda r: r.metric("speedup")),
    ("speedup_spread", "over seeds", runs.seed_spread),
    ("speedup_over", "speedup over", lambda r: runs.speedup_over(r.tags, r.metrics)),
    ("versus", "versus: its speedup", lambda r: runs.versus(r.tags, r.metrics)),
    ("time_to_target_s", "time to target (s)", lambda r: r.metric("train.time_to_target_s")),
    ("final_test_accuracy", "final accuracy", lambda r: r.metric("train.final_test_accuracy")),
    ("figures", "figures", lambda r: runs.figures_kind(r.tags) if runs.has_figures(r) else None),   # none logged: '-'
    ("evaluator", "evaluator", lambda r: r.tag("evaluator", "")),
    ("runtime", "runtime", lambda r: r.tag("runtime", "")),
]
# The columns of plan trials (``runtime=plan``): what a planner comparison needs.
PLAN_COLUMNS = [
    ("plan_run", "run", lambda r: r.name.split(" [", 1)[0]),          # the sweep's overrides are the columns
    ("status", "status", lambda r: r.status),
    ("planner", "planner", lambda r: r.tag("planner", "")),
    ("plan_cluster", "cluster", lambda r: r.tag("plan.cluster", "")),
    ("plan_simulator", "simulator", lambda r: r.tag("plan.simulator", "")),
    ("plan_objective", "objective", lambda r: r.tag("plan.objective", "")),
    ("plan_training", "training", lambda r: None if _unplanned(r) else r.tag("plan.precision", "fp32")
     + (" + recompute" if r.tag("plan.recompute", "") == "true" else "")),
    ("plan_profile", "layer times", lambda r: None if _unplanned(r) else r.tag("plan.profile", "measured")),
    ("plan_iteration_s", "s/iteration (plan)", lambda r: r.metric("plan.iteration_s")),
    ("plan_samples_per_s", "samples/s", lambda r: r.metric("plan.samples_per_s")),
    ("plan_usd_per_hour", "USD/h", lambda r: r.metric("plan.usd_per_hour")),
    ("plan_gap_to_bound", "gap to bound", lambda r: r.metric("plan.optimality_gap")),
    ("plan_fits", "fits", lambda r: {"true": True, "false": False}.get(r.tag("plan.fits", ""))),
    ("plan_gpus", "GPUs (plan)", lambda r: r.metric("plan.gpus")),
]


def _unplanned(r) -> bool:
    """A plan trial that ended before it had a plan (failed or killed early): its plan columns say nothing."""
    return "plan.description" not in r.tags


def is_plan(r) -> bool:
    return r.tags.get("runtime") == "plan"


def is_profile(r) -> bool:
    """A run of ``python -m orchestrator.profile`` (layers or links): no trial, its own table."""
    return "profile.kind" in r.tags


def _steps(r) -> list[tuple[int, int, float]]:
    """A layer profile's (micro-batch, TP, step of one micro-batch) entries, sorted, from its
    ``profile.step_s.mbsM.tpT`` metrics."""
    out = []
    for k, v in r.metrics.items():
        if k.startswith("profile.step_s."):
            mbs, tp = k.split(".")[2:4]
            out.append((int(mbs[3:]), int(tp[2:]), v))
    return sorted(out)


def _entries(r) -> str | None:
    """A layer profile's (micro-batch, TP) entries: "mbs 1,2 x tp 1,2"."""
    steps = _steps(r)
    mbs, tps = sorted({m for m, _, _ in steps}), sorted({t for _, t, _ in steps})
    return f"mbs {','.join(map(str, mbs))} x tp {','.join(map(str, tps))}" if steps else None


def _step(r) -> float | None:
    """A layer profile's step of one micro-batch (the layers' sum) at its smallest entry."""
    steps = _steps(r)
    return steps[0][2] if steps else None


# The columns of profiler runs: what was profiled, where, and how well a link fit holds.
PROFILE_COLUMNS = [
    ("run_name", "run", lambda r: r.name),
    ("status", "status", lambda r: r.status),
    ("profile_kind", "profile", lambda r: r.tag("profile.kind")),
    ("model", "model", lambda r: r.tag("model", "")),
    ("profile_device_type", "device type", lambda r: r.tag("profile.device_type", "")),
    ("profile_where", "link", lambda r: r.tag("profile.link", "")),
    ("profile_entries", "entries", _entries),
    ("profile_step_s", "step of the smallest entry (s)", _step),
    ("profile_links", "links", lambda r: r.tag("profile.links", "")),
    ("profile_fit_error", "link fit |error| median", lambda r: r.metric("links.fit_error_median")),
    ("profile_held_out_error", "held-out |error| max", lambda r: r.metric("links.held_out_error_max")),
    ("profile_seconds", "took (s)", lambda r: r.metric("profile.seconds")),
]
_FIRST: dict[str, tuple] = {}
for _c in COLUMNS + PLAN_COLUMNS + PROFILE_COLUMNS:
    _FIRST.setdefault(_c[0], _c)              # a key two tables share: the first table's column
ALL_COLUMNS = list(_FIRST.values())
EXTRA = [("run_id", lambda r: r.run_id), ("experiment", lambda r: r.experiment),
         ("parent_run_id", lambda r: r.tags.get("mlflow.parentRunId")), ("start_time_ms", lambda r: r.start_time)]


def _percent(v: float) -> str:
    return f"{100 * v:.1f}%"


# How the tables for people show a column whose value is kept raw for csv and json.
SHOWN = {"plan_gap_to_bound": _percent, "plan_fits": lambda v: "yes" if v else "NO", "placement_gap_to_bound": _percent,
         "profile_fit_error": _percent, "profile_held_out_error": _percent}
