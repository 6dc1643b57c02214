"""The trial's MLflow run: opened with its tags, its listeners told of its start and of how it ended
(FINISHED, FAILED or KILLED), the objective noted on an Optuna sweep's trial, and what the trial's
summary reads back (``TrialRecord.outcome``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from orchestrator import plugins
from orchestrator.errors import Interrupt


def stop_if_interrupted(sink: Any, phase: str, kept: str = "") -> None:
    """A phase that kept its best result when interrupted (a placer's search) returned normally: the
    run still ends KILLED, and what it logged is tagged partial; ``kept`` says what was kept (printed)."""
    if Interrupt.signal is not None:
        sink.set_tags({"orchestrator.partial": "true", "orchestrator.interrupted_in": phase})
        if kept:
            print(f"interrupted during the {phase}: {kept} (logged in the run, tagged orchestrator.partial)",
                  file=sys.stderr, flush=True)
        raise KeyboardInterrupt(f"signal {Interrupt.signal} during {phase}")


def note_sweep_value(cfg: Any, value: Any) -> None:
    """In an Optuna sweep, the objective goes on the study's trial before the run is marked FINISHED,
    so a sweep interrupted from here on resumes with this trial COMPLETE, not FAIL."""
    from orchestrator.tracking.sweep import note_trial_value
    try:
        note_trial_value(cfg, value)
    except Exception as exc:  # the study is a convenience for resuming; the trial is recorded
        print(f"could not note the value in the Optuna study: {type(exc).__name__}: {exc}", file=sys.stderr)


class TrialRecord:
    """Records one trial: ``open`` is its MLflow run; once it closed FINISHED, ``outcome`` holds the
    run's ID, store, metrics, tags and experiment."""

    def __init__(self, cfg: Any, output_dir: Path, objective_metric: str) -> None:
        self.cfg, self.output_dir, self.objective_metric = cfg, output_dir, objective_metric
        self.outcome: dict[str, Any] = {}

    @contextmanager
    def open(self, run_name: str, tags: dict[str, str]) -> Iterator[tuple[Any, dict[str, float]]]:
        """The trial's MLflow run, with the listeners told of its start and of how it ended; yields
        (sink, metrics), the metrics a FINISHED trial hands its listeners."""
        from orchestrator.tracking import store as tracking

        cfg = self.cfg
        commit = tracking.git_commit()
        if commit:
            tags["orchestrator.git_commit"] = commit
        pm = plugins.get_plugin_manager()
        with tracking.trial_run(cfg, run_name=run_name, tags=tags, output_dir=self.output_dir,
                                config_yaml=OmegaConf.to_yaml(cfg, resolve=True)) as sink:
            pm.hook.orchestrator_trial_start(run_id=sink.run_id, cfg=cfg)
            metrics: dict[str, float] = {}
            try:
                yield sink, metrics
                note_sweep_value(cfg, metrics.get(self.objective_metric, sink.latest.get(self.objective_metric)))
            except BaseException as exc:  # listeners hear of failed and killed trials too
                status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
                _tell_end(pm, sink, status, dict(sink.latest), cfg)
                raise
            _tell_end(pm, sink, "FINISHED", metrics, cfg)
        self.outcome = {"run_id": sink.run_id, "uri": tracking.tracking_uri(cfg), "metrics": dict(sink.latest),
                        "tags": {**tags, **sink.tags}, "experiment_id": getattr(sink, "experiment_id", None),
                        "experiment": (cfg.get("tracking") or {}).get("experiment") or "orchestrator"}


def _tell_end(pm: Any, sink: Any, status: str, metrics: dict[str, float], cfg: Any) -> None:
    """The listeners told how the trial ended; one that raises is a warning line naming it (the trial's own status
    stands: a FINISHED trial became FAILED on a listener's bug, before)."""
    given = {"run_id": sink.run_id, "cfg": cfg, "status": status, "metrics": metrics}
    for impl in pm.hook.orchestrator_trial_end.get_hookimpls():     # each on its own (a hook call stops at a raise)
        try:
            impl.function(*(given[name] for name in impl.argnames))
        except Exception as exc:
            print(f"WARNING: plugin {impl.plugin_name!r}: orchestrator_trial_end raised {type(exc).__name__}: {exc}"[:400],
                  file=sys.stderr, flush=True)
