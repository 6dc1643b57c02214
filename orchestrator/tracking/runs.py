"""Read trials back from an MLflow store: one ``RunRecord`` per trial run (sweep parents skipped).

Shared by the report (``orchestrator.tracking.report``) and the plots (``orchestrator.tracking.plots``). No TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SWEEP_KIND = "sweep"


@dataclass
class RunRecord:
    """One trial's run: tags, params, latest metrics, and its metric histories on demand."""

    run_id: str
    name: str
    status: str
    experiment: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    start_time: int | None = None
    client: Any = field(default=None, repr=False)
    _histories: dict[str, list[tuple[int, float]]] = field(default_factory=dict, repr=False)

    def tag(self, key: str, default: str = "none") -> str:
        return self.tags.get(key, default)

    def metric(self, key: str) -> float | None:
        v = self.metrics.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    @property
    def workers(self) -> int | None:
        """The number of data-parallel workers: the trial's ``workers`` metric (the cluster it ran on),
        else ``hardware.workers`` (runs of older versions), else 1 without a sync strategy."""
        if self.metric("workers") is not None:
            return int(self.metrics["workers"])
        raw = self.params.get("hardware.workers", "null")
        try:
            return int(float(raw))
        except ValueError:
            return 1 if self.tag("sync") == "none" else None

    def history(self, key: str) -> list[tuple[int, float]]:
        """``[(step, value)]`` of one metric, sorted by step (the last value per step)."""
        if key not in self._histories:
            points = self.client.get_metric_history(self.run_id, key) if self.client is not None else []
            by_step = {}
            for m in sorted(points, key=lambda m: (m.step, m.timestamp)):
                by_step[m.step] = m.value
            self._histories[key] = sorted(by_step.items())
        return self._histories[key]


def is_sweep(run) -> bool:
    return run.data.tags.get("orchestrator.kind") == SWEEP_KIND


def record(run, experiment: str, client=None) -> RunRecord:
    return RunRecord(run_id=run.info.run_id, name=run.info.run_name or run.info.run_id, status=run.info.status,
                     experiment=experiment, tags=dict(run.data.tags), params=dict(run.data.params),
                     metrics=dict(run.data.metrics), start_time=run.info.start_time, client=client)


def _search(client, exp_ids: list[str], filter_string: str = "") -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(exp_ids, filter_string=filter_string, max_results=1000,
                                  order_by=["attributes.start_time ASC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def load(client, experiment_ids: list[str] | None = None, parent_run_id: str | None = None) -> list[RunRecord]:
    """Trial runs of the given experiments (default: all), or the children of one sweep run."""
    names = {e.experiment_id: e.name for e in client.search_experiments()}
    if parent_run_id is not None:
        parent = client.get_run(parent_run_id)
        exp_ids = [parent.info.experiment_id]
        runs = _search(client, exp_ids, f"tags.mlflow.parentRunId = '{parent_run_id}'")
    else:
        exp_ids = experiment_ids if experiment_ids is not None else list(names)
        runs = _search(client, exp_ids) if exp_ids else []
    return [record(r, names.get(r.info.experiment_id, r.info.experiment_id), client) for r in runs if not is_sweep(r)]


def figures_kind(tags: dict[str, str]) -> str:
    """What a run's figures are: simulated (a cost model), emulated (real gradients on a virtual
    clock) or measured (wall clock on real devices)."""
    if tags.get("runtime") == "plan":
        return "simulated"
    clock = tags.get("train.clock")
    if clock == "virtual":
        return "emulated"
    if clock == "wall":
        return "measured"
    return "simulated" if tags.get("evaluator") == "simulated" or tags.get("cluster.simulated") == "true" else "measured"


def speedup_over(tags: dict[str, str], metrics: dict[str, float]) -> str | None:
    """What a run's ``speedup`` is over, in a few words (a report column)."""
    if "speedup" not in metrics:
        return None
    if "train.speedup" in metrics:
        ref = tags.get("train.reference", "")
        est = " (estimated)" if tags.get("runtime") == "mpi" else ""     # the reference on the virtual clock
        t = metrics.get("train.reference_time_to_target_s")
        est += f", {t:.4g} s" if t else ""          # which reference: trials of two clusters or datasets differ
        if tags.get("train.reference_method") == "tuned":
            return "tuned 1 worker" + est
        if tags.get("train.reference_method") == "same":
            return "1 worker, same settings" + est
        if ref.startswith("this trial"):
            return "itself (baseline)"
        return "baseline placement's steps" if "baseline placement" in ref else (ref[:40] or "?")
    return f"placement: {tags.get('placement.baseline', 'baseline')}"[:60]


def versus(tags: dict[str, str], metrics: dict[str, float]) -> str | None:
    """A data-parallel trial's comparison on the same workers and its speedup over the trial's own baseline
    (``compare.speedup``; the summary's ``versus:`` line): "allreduce, sync.balance=static: 1.66"."""
    if "compare.speedup" not in metrics:
        return None
    label = ", ".join(tags.get("compare.label", "?").split(", ")[:2])
    return f"{label}: {metrics['compare.speedup']:.4g}"


def has_figures(r) -> bool:
    """Whether the run logged a result (a failed or killed one may have logged only its worker count)."""
    return any(k.startswith(("placement.", "train.", "plan.", "speedup")) for k in r.metrics)


def placement_gap(r, bound: float | None = None) -> float | None:
    """A placement's objective over its certified lower bound, minus 1 (simulated placements: the bound is on
    the simulated times); ``bound``: a tighter one certified for the same problem by another run."""
    lb = max(r.metric("placement.lower_bound_s") or 0.0, bound or 0.0)
    v = r.metric("placement.time_per_sample_s") or r.metric("placement.step_time_s")
    return None if not lb or v is None else v / lb - 1.0


def seed_spread(r) -> str | None:
    """A sync trial's speedup over its seeds: the speedup column holds their median (``train.seeds`` > 1)."""
    lo, hi, n = r.metric("train.speedup_min"), r.metric("train.speedup_max"), r.params.get("train.seeds", "1")
    if not n.isdigit() or int(n) < 2 or r.metric("speedup") is None:
        return None
    return f"median of {n}, {'a seed missed' if lo is None else f'{lo:.4g}'} to {'-' if hi is None else f'{hi:.4g}'}"


def placement_problem(r) -> tuple | None:
    """What a placement's bound is a bound of: the model, hardware, placement and dataset keys, the objective,
    the worker and the evaluator (runs of different placers on one problem share it); None without a bound."""
    if r.metric("placement.lower_bound_s") is None:
        return None
    keys = tuple(sorted((k, v) for k, v in r.params.items() if k.split(".")[0] in ("model", "hardware", "placement", "dataset")))
    return keys, r.tag("placement.objective"), r.tag("placement.worker"), r.tag("evaluator")


def placement_gaps(records) -> list[float | None]:
    """Each run's ``placement_gap`` to the tightest certified bound of its placement problem over the runs (each
    placer's run certifies its own, by the MILP or the configuration LP within a time limit: the gaps of one table
    are then on one bound)."""
    best: dict[tuple, float] = {}
    for r in records:
        k = placement_problem(r)
        if k is not None:
            best[k] = max(best.get(k, 0.0), r.metric("placement.lower_bound_s") or 0.0)
    return [placement_gap(r, best.get(placement_problem(r))) for r in records]
