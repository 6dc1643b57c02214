"""The MLflow store: one run per trial (the parent run of a sweep is made by ``tracking.sweep``).

Store: ``tracking.uri`` from config, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in
the working directory (MLflow's own default). MLflow is imported lazily (it costs a second).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, Interrupt, UserError

PARENT_ENV = "ORCHESTRATOR_PARENT_RUN_ID"
DEFAULT_URI = "sqlite:///mlflow.db"


def disable_telemetry() -> None:
    """No usage telemetry unless the user asked for it (these machines have no network)."""
    if "MLFLOW_DISABLE_TELEMETRY" not in os.environ and "DO_NOT_TRACK" not in os.environ:
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"


def tracking_uri(cfg: Any = None) -> str:
    uri = None
    if cfg is not None:
        uri = (cfg.get("tracking") or {}).get("uri")
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def store_error(uri: str, exc: BaseException):
    """A ``ConfigError`` naming the store a trial or the report could not open or write (a corrupt
    file, a directory that is a file, a read-only disk): one line, not SQLAlchemy's traceback."""
    if isinstance(exc, UserError):
        return exc
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = lines[0][:300] if lines else type(exc).__name__
    if "maintenance mode" in detail and "filesystem" in detail:   # MLflow no longer writes a file store at all
        return ConfigError(f"tracking store {uri}: this MLflow writes no file stores (its filesystem backend is in "
                           "maintenance mode); use sqlite:///PATH (a file; `mlflow migrate-filestore` converts an old "
                           "file store) or an MLflow server")
    return ConfigError(f"tracking store {uri} cannot be used: {type(exc).__name__}: {detail} "
                       "(set tracking.uri or MLFLOW_TRACKING_URI to a writable sqlite:///PATH)")


def open_mlflow(uri: str):
    disable_telemetry()
    import mlflow

    mlflow.set_tracking_uri(uri)
    open_store(uri)
    return mlflow


def open_store(uri: str) -> None:
    """Create/upgrade the store and fail abandoned runs, once per process; a store that cannot be
    used is a one-line ``ConfigError``."""
    if uri in _REAPED:
        return
    try:
        init_store(uri)
        from mlflow.tracking import MlflowClient

        reap_abandoned(MlflowClient(uri))
    except Exception as exc:
        raise store_error(uri, exc) from None
    _REAPED.add(uri)


_REAPED: set[str] = set()
HOST_TAG, PID_TAG, START_TAG = "orchestrator.host", "orchestrator.pid", "orchestrator.pid_start"


def _process_start(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot): tells a pid apart from a reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


SLURM_JOB_TAG = "orchestrator.slurm_job"


def slurm_job_id() -> str | None:
    """This process's Slurm job (``JOBID``, or ``ARRAYJOB_TASK`` for an array task), or None."""
    jid = os.environ.get("SLURM_JOB_ID")
    if not jid:
        return None
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else jid


def process_tags() -> dict[str, str]:
    """Who writes this run: a later process can tell that a RUNNING run's writer is gone."""
    import socket

    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    start = _process_start(os.getpid())
    if start is not None:
        tags[START_TAG] = start
    if slurm_job_id() is not None:  # the Slurm job (or array task) that runs this process
        tags[SLURM_JOB_TAG] = slurm_job_id()
    return tags


def process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start is None or _process_start(pid) in (None, start)


def reap_abandoned(client) -> list[str]:
    """Mark FAILED the RUNNING runs whose process (recorded on this host) no longer exists: a
    ``kill -9``, an OOM kill or a crash left them; tag ``orchestrator.error`` says so."""
    import socket

    host = socket.gethostname()
    exps = [e.experiment_id for e in client.search_experiments()]
    if not exps:
        return []
    reaped = []
    for run in client.search_runs(exps, filter_string="attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or not str(tags.get(PID_TAG, "")).isdigit():
            continue
        pid = int(tags[PID_TAG])
        if pid == os.getpid() or process_alive(pid, tags.get(START_TAG)):
            continue
        client.set_tag(run.info.run_id, "orchestrator.error",
                       f"abandoned: its process {pid} on {host} ended without closing the run (killed, e.g. kill -9 "
                       "or out of memory); marked FAILED by the next process that opened the store")
        client.set_tag(run.info.run_id, "orchestrator.abandoned", "true")
        client.set_terminated(run.info.run_id, status="FAILED")
        reaped.append(run.info.run_id)
    return reaped


_READY: set[str] = set()


def init_store(uri: str) -> None:
    """Create/upgrade a SQLite store under a file lock: MLflow's schema migration is not safe when
    two processes (parallel trials, a reader) open a new database at the same moment. A new store is a copy of
    an empty one MLflow made once (``tracking.template``)."""
    if uri in _READY or not uri.startswith("sqlite:///"):
        return
    import fcntl

    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.template import create_from_template

    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            create_from_template(db)
            MlflowClient(uri).search_experiments(max_results=1)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _READY.add(uri)


# The MLflow 3 UI opens an experiment tagged ``custom_model_development`` on its model-training view
# (unless its global GenAI / Model training switch says otherwise: the link a trial prints names the view).
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}

# A saved view of the runs table (MLflow 3's experiment tag ``mlflow.sharedViewState.<id>``: a JSON
# envelope {name, createdAt, state}, ``state`` the page's UI state + search facets as JSON). The link a
# trial prints opens it (``viewStateShareKey=<id>``), so the comparison columns show without clicking;
# the UI also lists it under its saved views.
VIEW_ID = "orchestrator-runs"
VIEW_COLUMNS = ("speedup", "train.time_to_target_s", "train.final_test_accuracy", "placement.step_time_s",
                "placement.time_per_sample_s", "workers", "plan.iteration_s", "plan.samples_per_s", "plan.fits")


def view_state() -> dict[str, Any]:
    return {"selectedColumns": [f"metrics.`{m}`" for m in VIEW_COLUMNS] + ["tags.`placer`", "tags.`sync`",
                                                                                    "tags.`planner`"],
            "orderByKey": "attributes.start_time", "orderByAsc": False, "searchFilter": "",
            "lifecycleFilter": "Active", "startTime": "ALL"}


def experiment_tags() -> dict[str, str]:
    envelope = {"name": "orchestrator: speedup and time to target", "createdAt": 0,
                "state": json.dumps(view_state(), separators=(",", ":"))}
    return {**EXPERIMENT_TAGS, f"mlflow.sharedViewState.{VIEW_ID}": json.dumps(envelope, separators=(",", ":"))}


def ui_link(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The experiment's runs table in the model-training view with the saved view's columns."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_ID}"


def artifact_location(uri: str, name: str) -> str | None:
    """Where a new experiment of a sqlite store keeps its artifacts: ``mlruns/<name>`` beside the
    database file. MLflow's own default is ``./mlruns`` of whichever directory the first trial ran
    in, which scatters a store's artifacts away from it; other stores keep their server's default."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    from urllib.parse import quote

    return (Path(path).resolve().parent / "mlruns" / quote(name, safe="")).as_uri()


def experiment_id(client, cfg: Any) -> str:
    name = (cfg.get("tracking") or {}).get("experiment") or "orchestrator"
    exp = client.get_experiment_by_name(name)
    if exp is None:
        from mlflow.exceptions import MlflowException

        try:
            return client.create_experiment(name, tags=experiment_tags(),
                                            artifact_location=artifact_location(client.tracking_uri, name))
        except MlflowException:  # another process (a parallel trial, another host's sweep) made it first
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    for k, v in experiment_tags().items():  # stores made by older versions; a user's own kind stays
        if k not in exp.tags:
            client.set_experiment_tag(exp.experiment_id, k, v)
    return exp.experiment_id


def record_failed_trial(cfg: Any, run_name: str, tags: dict[str, str], error: str) -> None:
    """A sweep's trial that failed before its run could start (a bad config value) still gets a
    FAILED child run, so the sweep's record shows it."""
    uri = tracking_uri(cfg)
    open_mlflow(uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    all_tags = {**tags, "orchestrator.error": error[:5000]}
    if os.environ.get(PARENT_ENV):
        all_tags["mlflow.parentRunId"] = os.environ[PARENT_ENV]
    run = client.create_run(experiment_id(client, cfg), run_name=run_name, tags=all_tags)
    retry_locked(client.set_terminated, run.info.run_id, status="FAILED")


def flatten(d: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, (list, tuple)) and any(isinstance(x, (dict, list)) for x in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = "null" if d is None else str(d)
    return out


def git_commit() -> str | None:
    """The commit of the source tree this package runs from, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _locked(exc: BaseException) -> bool:
    return "database is locked" in str(exc)


def retry_locked(fn, *args, attempts: int = 8, **kwargs):
    """``fn(*args, **kwargs)``, retried with backoff (0.25 s doubling, 30 s in all) while a SQLite store
    answers "database is locked": another process (a reader such as the UI or ``orchestrator.report``,
    or a sibling trial) held the file past SQLite's busy timeout, which a loaded machine makes likely.
    A status or a tag written while the trial is being interrupted must not be lost to it."""
    delay = 0.25
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not _locked(exc) or i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 8.0)


class MlflowSink:
    """The ``MetricsSink`` of a trial: metrics, tags and artifacts of one MLflow run."""

    def __init__(self, client, run_id: str):
        self.client = client
        self.run_id = run_id
        self.latest: dict[str, float] = {}
        self.tags: dict[str, str] = {}

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, int(step or 0)) for k, v in metrics.items() if v is not None]
        for i in range(0, len(items), 500):
            retry_locked(self.client.log_batch, self.run_id, metrics=items[i : i + 500])
        self.latest.update({m.key: m.value for m in items})

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        self.tags.update({t.key: t.value for t in items})
        for i in range(0, len(items), 100):
            retry_locked(self.client.log_batch, self.run_id, tags=items[i : i + 100])

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        # MLflow keys allow alphanumerics and _ - . space : / only (config keys may be glob patterns).
        items = [Param(re.sub(r"[^\w\-. :/]", "_", k)[:250], v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            retry_locked(self.client.log_batch, self.run_id, params=items[i : i + 100])

    def log_artifact(self, path: str | Path) -> None:
        retry_locked(self.client.log_artifact, self.run_id, str(path))


@contextmanager
def trial_run(cfg: Any, *, run_name: str, tags: dict[str, str], config_yaml: str,
              output_dir: Path) -> Iterator[MlflowSink]:
    """One MLflow run for one trial. An exception ends it FAILED (error recorded), Ctrl-C/SIGTERM
    KILLED; either way the run is closed before the exception propagates."""
    uri = tracking_uri(cfg)
    mlflow = open_mlflow(uri)
    from mlflow.tracking import MlflowClient

    all_tags = {**tags, **process_tags()}
    parent = os.environ.get(PARENT_ENV)
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    try:
        client = MlflowClient(uri)
        exp_id = experiment_id(client, cfg)
        run = client.create_run(exp_id, run_name=run_name, tags=all_tags)
    except Exception as exc:
        raise store_error(uri, exc) from None
    sink = MlflowSink(client, run.info.run_id)
    sink.experiment_id = exp_id
    status = "FAILED"
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        from omegaconf import OmegaConf

        sink.log_params(flatten(OmegaConf.to_container(cfg, resolve=True)))
        cfg_path = output_dir / "config.yaml"
        cfg_path.write_text(config_yaml)
        sink.log_artifact(cfg_path)
        try:
            yield sink
        except Exception as exc:
            Interrupt.check(exc)
            raise
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        name = {2: "SIGINT (Ctrl-C)", 15: "SIGTERM", 12: "SIGUSR2"}.get(Interrupt.signal or 2, f"signal {Interrupt.signal}")
        note = getattr(Interrupt, "note", "")  # the scheduler's reason, in a Slurm job (tracking.slurm)
        sink.set_tags({"orchestrator.error": f"interrupted by {name}" + (f": {note}" if note else ""),
                       "orchestrator.partial": "true"})
        raise
    except BaseException as exc:
        try:
            exc.run_recorded = True  # the caller need not record this failure again
        except AttributeError:
            pass
        message = f"{type(exc).__name__}: {exc}"
        sink.set_tags({"orchestrator.error": message[:5000]})
        err = output_dir / "error.txt"
        err.write_text(message + "\n\n" + traceback.format_exc())
        try:
            sink.log_artifact(err)
        except Exception:  # the store may be the problem; the status below still records the failure
            pass
        raise
    finally:
        retry_locked(client.set_terminated, run.info.run_id, status=status)
        del mlflow
