"""One parent MLflow run per Hydra multirun / Optuna sweep; the trials become its children, and the
sweep ends with its comparison table and plots."""

from __future__ import annotations

import os
import sys
from typing import Any

from hydra.experimental.callback import Callback

from orchestrator.tracking.store import PARENT_ENV, experiment_id, open_mlflow, process_tags, retry_locked, tracking_uri

# What the last sweep of this process came to; the entry point exits 1 when a trial failed.
OUTCOME: dict[str, Any] = {}


def summary(statuses: list[str], first_error: str | None) -> str:
    """One line: n finished, n failed (and killed), the first error."""
    n_fin, n_fail, n_kill = statuses.count("FINISHED"), statuses.count("FAILED"), statuses.count("KILLED")
    line = f"sweep: {len(statuses)} trial{'s' * (len(statuses) != 1)}, {n_fin} finished, {n_fail} failed"
    if n_kill:
        line += f", {n_kill} killed"
    if first_error:
        line += f"; first error: {first_error.splitlines()[0][:300]}"
    return line


class SweepCallback(Callback):
    """Makes one parent MLflow run per Hydra multirun; trials become its children."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.uri: str | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from orchestrator.errors import UserError

        self.uri = tracking_uri(config)
        try:
            open_mlflow(self.uri)
        except UserError as exc:  # Hydra would turn an exception here into a warning and go on
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(exc.exit_code) from None
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        exp_id = experiment_id(client, config)
        sweeper = config.hydra.sweeper.get("_target_", "basic").rsplit(".", 1)[-1]
        run = client.create_run(exp_id, run_name=sweep_name(sweeper, list(config.hydra.overrides.task)),
                                tags={"orchestrator.kind": "sweep", "orchestrator.sweeper": sweeper,
                                      "orchestrator.sweep_dir": str(config.hydra.sweep.dir), **process_tags()})
        self.parent_run_id = run.info.run_id
        os.environ[PARENT_ENV] = self.parent_run_id

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """In a trial that runs as a Slurm job (submitit), the scheduler's SIGTERM/SIGUSR2 end it KILLED."""
        from orchestrator.tracking.slurm import install_handlers

        install_handlers()

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self.parent_run_id is None:
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        children = client.search_runs(
            [client.get_run(self.parent_run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
        )
        children = sorted(children, key=lambda c: c.info.start_time or 0)
        statuses = [c.info.status for c in children]
        first_error = next((c.data.tags.get("orchestrator.error") for c in children
                            if c.info.status != "FINISHED" and c.data.tags.get("orchestrator.error")), None)
        client.log_metric(self.parent_run_id, "sweep.trials", len(children))
        client.log_metric(self.parent_run_id, "sweep.failed_trials", statuses.count("FAILED"))
        # A sweep none of whose trials finished has failed as a whole; an interrupted one was KILLED
        # (Hydra calls this in a ``finally``, so it runs on Ctrl-C and SIGTERM too).
        from orchestrator.errors import Interrupt

        interrupted = Interrupt.signal is not None
        if not children and not interrupted:       # range(0), choice() of nothing, n_trials=0: exit 0 before
            msg = "the sweep launched no trial (a swept list without a value, or hydra.sweeper.n_trials=0)"
            client.set_tag(self.parent_run_id, "orchestrator.error", msg)
            client.set_terminated(self.parent_run_id, status="FAILED")
            os.environ.pop(PARENT_ENV, None)
            OUTCOME.update(trials=0, empty=True)
            print(f"error: {msg}", file=sys.stderr, flush=True)
            return
        sweep_status = "KILLED" if interrupted else ("FINISHED" if "FINISHED" in statuses else "FAILED")
        if interrupted:
            client.set_terminated(self.parent_run_id, status="KILLED")  # first: a second signal may follow
            client.set_tag(self.parent_run_id, "orchestrator.error", f"interrupted by signal {Interrupt.signal}")
        try:  # the figures are a convenience: a plotting failure must not fail the sweep
            from orchestrator.tracking.plots import log_sweep_plots

            if not interrupted:  # end an interrupted sweep quickly
                log_sweep_plots(client, self.parent_run_id)
        except Exception as exc:
            print(f"sweep plots not logged: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            client.set_tag(self.parent_run_id, "orchestrator.plots_error", f"{type(exc).__name__}: {exc}"[:5000])
        try:  # end the sweep with its comparison, as `python -m orchestrator.report --parent` prints it
            from orchestrator.tracking import report, runs

            records = runs.load(client, parent_run_id=self.parent_run_id)
            objective = config.get("objective") or {}
            print(f"\nsweep {self.parent_run_id} ({len(children)} trial{'s' * (len(children) != 1)}):\n"
                  + report.comparison(records, str(objective.get("metric", "speedup")),
                                      str(objective.get("direction", "maximize"))), flush=True)
        except Exception as exc:
            print(f"sweep comparison not printed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        retry_locked(client.set_terminated, self.parent_run_id, status=sweep_status)
        os.environ.pop(PARENT_ENV, None)
        line = summary(statuses, first_error)
        OUTCOME.update(trials=len(statuses), failed=len(statuses) - statuses.count("FINISHED"), line=line)
        print(line, file=sys.stderr, flush=True)


# What optuna's Study.best_trial raises when no trial completed (RDB storage / in-memory storage).
_NO_BEST = ("Record does not exist.", "No trials are completed yet.")


def guard_optuna_best_trial() -> None:
    """Hydra's Optuna sweeper ends by reading ``study.best_trial``, which raises a ValueError (and Hydra
    prints its traceback) when no trial reported a value: every trial failed or missed its objective.
    Turn that into one line naming the objective, and let the entry point exit 1 (``OUTCOME["no_value"]``);
    the trials' runs and the sweep's table are already in the store and on the screen."""
    try:
        from hydra_plugins.hydra_optuna_sweeper import _impl
    except ImportError:  # the sweeper plugin is optional for a sweep that does not use it
        return
    sweep = _impl.OptunaSweeperImpl.sweep
    if getattr(sweep, "orchestrator_guard", False):
        return

    def guarded(self: Any, arguments: Any) -> None:
        try:
            sweep(self, arguments)
        except ValueError as exc:
            if str(exc) not in _NO_BEST:
                raise
            if not getattr(self, "n_trials", 1):     # nothing ran: the sweep's end says so
                return
            from omegaconf import OmegaConf

            metric = OmegaConf.select(self.config, "objective.metric", default="the objective")
            print(f"error: no trial of the Optuna sweep reported {metric} (each failed or missed its target), so "
                  "the study has no best trial; widen the search space or the budget (train.budget_updates)",
                  file=sys.stderr, flush=True)
            OUTCOME["no_value"] = True

    guarded.orchestrator_guard = True  # type: ignore[attr-defined]
    _impl.OptunaSweeperImpl.sweep = guarded


def sweep_name(sweeper: str, task: list[str]) -> str:
    """The parent run's name: the sweeper (when not Hydra's basic one) and what the command line gave, without
    where it is recorded (tracking.*, progress, hydra.*) and with a path by its file name."""
    shown = [o if "/" not in o.partition("=")[2] else f"{o.partition('=')[0]}={o.rsplit('/', 1)[-1]}"
             for o in task if not o.lstrip("+").startswith(("tracking.", "progress=", "hydra."))]
    kind = "" if sweeper in ("basic", "BasicSweeper") else sweeper.replace("Sweeper", "").lower() + " "
    return f"{kind}sweep: {' '.join(shown)}"[:250]


STUDY_ENV = "ORCHESTRATOR_OPTUNA_STUDY"   # '["storage", "study name"]' of the running Optuna sweep
VALUE_ATTR = "orchestrator.value"
OWNER_ATTR = "orchestrator.owner"   # "host pid start" of the process running the trial


def _study(storage: str, study_name: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet
        return None


def note_trial_value(cfg: Any, value: float) -> None:
    """Record a finished trial's objective on its Optuna trial at once (the sweeper tells the study
    only when a whole batch of ``n_jobs`` trials is done): an interrupted sweep keeps it."""
    import json
    import math

    from omegaconf import OmegaConf
    from optuna.trial import TrialState

    spec = os.environ.get(STUDY_ENV)
    if not spec or value is None or not math.isfinite(value):
        return
    study = _study(*json.loads(spec))
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if study is not None else []:
        if t.params and all(OmegaConf.select(cfg, k) == v for k, v in t.params.items()) and VALUE_ATTR not in t.user_attrs:
            study._storage.set_trial_user_attr(t._trial_id, VALUE_ATTR, float(value))
            return


def _running_trial(study, cfg):
    from omegaconf import OmegaConf
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.params and all(OmegaConf.select(cfg, k) == v for k, v in t.params.items()):
            yield t


def claim_trial(cfg: Any) -> None:
    """Mark the study's trial this process runs as its own (host, pid, start time), so that a sweep
    resuming on the same study closes only trials whose process is gone, never those another host's
    sweep is running at the same time."""
    import json

    from orchestrator.tracking.store import HOST_TAG, PID_TAG, START_TAG, process_tags

    spec = os.environ.get(STUDY_ENV)
    study = _study(*json.loads(spec)) if spec else None
    for t in _running_trial(study, cfg) if study is not None else []:
        if OWNER_ATTR not in t.user_attrs:
            tags = process_tags()
            owner = " ".join(tags.get(k, "") for k in (HOST_TAG, PID_TAG, START_TAG))
            study._storage.set_trial_user_attr(t._trial_id, OWNER_ATTR, owner)
            return


def _abandoned(trial, interrupted_here: bool) -> bool:
    """A RUNNING trial nobody runs any more: its process (on this host) is gone, or it is this very
    process, interrupted; a trial asked but not started belongs to the interrupted sweep here."""
    import socket

    from orchestrator.tracking.store import process_alive

    owner = trial.user_attrs.get(OWNER_ATTR)
    if not owner:
        return interrupted_here
    host, pid, start = (owner.split(" ") + ["", "", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False           # another host's: it knows best
    return int(pid) == os.getpid() or not process_alive(int(pid), start or None)


def resume_optuna(storage: str, study_name: str, interrupted_here: bool = False) -> int:
    """Close what an interrupted Optuna sweep left RUNNING in its study: a trial whose run finished
    becomes COMPLETE with its value, the others FAIL; trials that other running sweeps (other hosts,
    other processes) own are left alone. Returns how many trials the study holds (the entry point
    shifts the sampler's seed by it, so a seeded re-run proposes new points, not the same ones)."""
    from optuna.trial import TrialState

    study = _study(storage, study_name)
    if study is None:
        return 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        if not _abandoned(t, interrupted_here):
            continue
        if VALUE_ATTR in t.user_attrs and len(study.directions) == 1:
            study._storage.set_trial_state_values(t._trial_id, TrialState.COMPLETE, [t.user_attrs[VALUE_ATTR]])
        else:
            study._storage.set_trial_user_attr(t._trial_id, "orchestrator.error", "interrupted: its sweep was stopped")
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    return len(study.get_trials(deepcopy=False))
