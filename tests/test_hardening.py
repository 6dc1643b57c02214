"""Issue 14's cases: bad input and broken stores are one line (exit 2, no run left RUNNING), resources
are bounded before a run starts, abandoned runs are marked FAILED, sweeps fail loudly."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NO_CONTEXT, run_cli, run_inprocess, store_runs
from tests.fakes import strategy, sync_options


def _one_line_error(out, expected: str) -> None:
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and "mlflow.store.db.utils" not in ln]
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr[-3000:]


def _no_running_run(workdir) -> None:
    assert not (workdir / "mlflow.db").exists() or all(r.info.status != "RUNNING" for r in store_runs(workdir))


def _bad_files(workdir):
    (workdir / "empty.json").write_text(json.dumps({"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1,
                                                    "nodes": [], "edges": []}))
    (workdir / "binary.json").write_bytes(bytes(range(256)) * 4)
    idx = workdir / "idx"
    idx.mkdir()
    (idx / "t10k-images-idx3-ubyte").write_bytes(struct.pack(">I", 2051) + b"\x00\x00\x27")  # header cut short
    (idx / "t10k-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, 1) + b"\x01")
    (workdir / "corrupt.db").write_bytes(b"this is not a database" * 100)
    (workdir / "a_file").write_text("x")


WORKLOAD = ["+placer=greedy", "model=workload", "hardware=auto"]
BERT = Path(__file__).parent / "data" / "msr-dnn-partitioning" / "throughput-inputs" / "LayerGraphs" / "bert24_training.json"


@pytest.mark.parametrize("args, expected", [
    ([*WORKLOAD, "model.path=empty.json"], "empty.json: the workload has no nodes"),
    ([*WORKLOAD, "model.path=binary.json"], "binary.json: not a text (UTF-8 JSON) file"),
    (["dataset.path=idx", "train.budget_updates=5"], "t10k-images-idx3-ubyte: truncated IDX header"),
    (["tracking.uri=sqlite:///corrupt.db"], "tracking store sqlite:///corrupt.db cannot be used: DatabaseError"),
    (["tracking.uri=sqlite:///a_file/mlflow.db"], "tracking store sqlite:///a_file/mlflow.db cannot be used"),
    (["+placer=greedy", "model=workload", f"model.path={BERT}", "hardware=sim_1cpu_4gpu"],   # no cost on its GPUs
     "model=workload is costed on accelerator, cpu devices only (no FLOPs for a roofline), not on host0/gpu:0"),
    (["+sync=delay", "sync.runtime=mpi", "hardware.workers=100000"],
     "hardware.workers=100000 needs 100001 MPI ranks (100000 workers + 1 server rank), more than"),
    (["+sync=allreduce", "train.compare_with=nosuch"],            # before the training (after it, before)
     "train.compare_with='nosuch': unknown sync strategy (available: "),
])
def test_bad_files_and_stores_are_one_line(workdir, args, expected):
    _bad_files(workdir)
    out = run_inprocess(workdir, *args)
    _one_line_error(out, expected)
    _no_running_run(workdir)


def test_a_virtual_run_that_cannot_fit_never_starts(workdir):
    """The memory bound is checked before the MLflow run starts: no run, not even a FAILED one."""
    out = run_inprocess(workdir, "+sync=delay", "hardware.workers=100000")
    _one_line_error(out, "hardware.workers=100000 needs about ")
    assert "at most about" in out.stderr and not store_runs(workdir)


@pytest.mark.parametrize("uri, expected", [
    ("sqlite:///corrupt.db", "tracking store sqlite:///corrupt.db cannot be used: DatabaseError"),
])
def test_report_on_a_corrupt_store_is_one_line(workdir, uri, expected):
    _bad_files(workdir)
    _one_line_error(run_inprocess(workdir, "--tracking-uri", uri, module="orchestrator.report"), expected)


def test_a_file_store_is_one_line_saying_what_to_use(workdir):
    """MLflow no longer writes file stores: its 'maintenance mode' message named no way on for this tool."""
    out = run_inprocess(workdir, f"tracking.uri=file://{workdir}/fs", "train.budget_updates=2", "train.eval_every=1")
    _one_line_error(out, f"tracking store file://{workdir}/fs: this MLflow writes no file stores")
    assert "use sqlite:///PATH" in out.stderr


def test_virtual_runtime_refuses_what_would_not_fit():
    import numpy as np

    from orchestrator.data import Dataset
    from orchestrator.errors import ConfigError
    from orchestrator.sync.limits import FIXED_BYTES, check_virtual_memory, estimate_virtual_bytes

    ds = Dataset(np.zeros((100, 28, 28, 1), np.float32), np.zeros(100, np.int32),
                 np.zeros((10, 28, 28, 1), np.float32), np.zeros(10, np.int32), "test")
    need = estimate_virtual_bytes(1000, 10_000, 100, 10, 784)
    assert need == 1000 * (4 * 10_000 + 8 * 100) + 4 * 784 * 110 + FIXED_BYTES
    assert check_virtual_memory(1000, 10_000, ds, available=2 * need) == need
    with pytest.raises(ConfigError, match=r"^hardware.workers=100000 needs about 4\.8 GiB .* at most about \d+ workers fit$"):
        check_virtual_memory(100_000, 10_000, ds, available=4 * 2**30)


def test_mpi_rank_bound_follows_the_hostfile(tmp_path):
    from orchestrator.errors import ConfigError
    from orchestrator.sync.limits import check_mpi_ranks, hostfile_slots

    hosts = tmp_path / "hosts"
    hosts.write_text("# two nodes\nnode1 slots=4\nnode2 slots=2 max_slots=8\nnode3\n")
    assert hostfile_slots(str(hosts)) == 7
    sync = {"name": "delay", "runtime": "mpi", "hostfile": str(hosts)}
    opts = sync_options(sync, {"hardware": {"workers": 6}})
    assert check_mpi_ranks(strategy(sync), opts) == 7
    opts = sync_options(sync, {"hardware": {"workers": 7}})
    with pytest.raises(ConfigError, match=r"hardware.workers=7 needs 8 MPI ranks .* hostfile's slots \(7\)"):
        check_mpi_ranks(strategy(sync), opts)
    assert check_mpi_ranks(strategy({**sync, "oversubscribe": True}), opts) == 8


def test_runs_of_a_dead_process_are_marked_failed(tmp_path):
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking import store

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store.init_store(uri)
    client = MlflowClient(uri)
    exp = client.create_experiment("e")
    tags = store.process_tags()
    mine = client.create_run(exp, tags=tags).info.run_id
    gone = client.create_run(exp, tags={**tags, store.PID_TAG: str(dead.pid), store.START_TAG: "1"}).info.run_id
    other_host = client.create_run(exp, tags={**tags, store.HOST_TAG: "elsewhere", store.PID_TAG: str(dead.pid)}).info.run_id
    store.open_store(uri)
    assert client.get_run(gone).info.status == "FAILED"
    assert f"process {dead.pid}" in client.get_run(gone).data.tags["orchestrator.error"]
    assert client.get_run(mine).info.status == "RUNNING"          # this process is alive
    assert client.get_run(other_host).info.status == "RUNNING"    # another host's process: cannot tell


def test_a_sweep_whose_trials_all_fail_exits_1_with_a_summary(workdir):
    # a failure only the trial can see (the worker's devices), not the config check before the sweep
    rules = "placer.rules=[{pattern:'*',device:'gpu:9'}]"
    out = run_inprocess(workdir, "-m", "+placer=manual", rules, "seed=1,2", timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == (
        "sweep: 2 trials, 0 finished, 2 failed; first error: ConfigError: placer.rules names device 'gpu:9'; "
        "this worker has cpu:0, cpu:1")
    runs = store_runs(workdir)
    parent = next(r for r in runs if r.data.tags.get("orchestrator.kind") == "sweep")
    assert parent.info.status == "FAILED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    # the rules are the same for both trials: the names carry only what was swept
    assert sorted(r.info.run_name for r in children) == [f"manual/none/local/cnn #{i} [seed={i + 1}]" for i in (0, 1)]
    assert {r.info.status for r in children} == {"FAILED"}


def test_a_bad_swept_value_is_refused_before_the_sweep(workdir):
    out = run_cli(workdir, "-m", "+sync=delay", "sync.staleness=1,-2", timeout=300)
    assert out.returncode == 2 and out.stderr.strip() == "error: sync.staleness=-2 must be a number >= 0 (or inf)"
    assert not store_runs(workdir)


def test_a_sweep_on_a_corrupt_store_stops_at_once(workdir):
    _bad_files(workdir)
    out = run_cli(workdir, "-m", "+sync=delay", "sync.staleness=1,2", "tracking.uri=sqlite:///corrupt.db", timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "error: tracking store sqlite:///corrupt.db cannot be used" in out.stderr and "Launching" not in out.stderr


def test_a_trial_ends_with_a_summary_that_says_the_target_was_missed(workdir):
    """A diverged run (it said only `speedup = nan` before) and the report's workers column for a
    sync trial with the default worker count (it showed `-`)."""
    # a child process: the summary names the default store as a user sees it (sqlite:///mlflow.db)
    out = run_cli(workdir, "+sync=delay", "train.lr=1000", "train.eval_every=10", "train.budget_updates=40",
                  "train.eval_samples=200", "progress=false", *NO_CONTEXT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "ran:      placer none, sync delay (virtual runtime, 4 workers), hardware local, model cnn" in text, text
    assert "target:   MISSED (test accuracy 0.97 not reached): diverged" in text, text
    assert "figures:  training emulated on a virtual clock (real gradients)" in text, text
    (run,) = store_runs(workdir)
    assert f"run:      {run.info.run_id} in sqlite:///mlflow.db (experiment orchestrator)" in text, text
    assert "python -m orchestrator.report" in text and "/runs?workflowType=machine_learning&viewStateShareKey=orchestrator-runs" in text, text
    assert run.data.tags["train.missed_target"].startswith("diverged")
    report = run_inprocess(workdir, "--format", "json", module="orchestrator.report")
    assert json.loads(report.stdout)[0]["workers"] == 4, report.stdout


def test_an_exploding_loss_stops_the_trial_at_once_with_a_line_naming_it(workdir):
    """train.lr=5 blew the loss up to 2e7 at the first update and the trial ran its whole budget, then
    advised raising it (issue 30): now the first evaluation past 10 x ln(classes) stops it."""
    out = run_inprocess(workdir, "train.lr=5", "train.eval_every=4", "train.eval_samples=200", "progress=false")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "target:   MISSED (test accuracy 0.97 not reached): diverged at update 4" in out.stdout, out.stdout
    assert "try a smaller train.lr" in out.stdout and "raise train.budget" not in out.stdout, out.stdout
    (run,) = store_runs(workdir)
    assert run.data.metrics["train.updates"] == 4 and run.info.status == "FINISHED"


def test_the_experiment_carries_a_saved_view_of_the_comparison_columns():
    from orchestrator.tracking.store import VIEW_ID, experiment_tags, ui_link

    envelope = json.loads(experiment_tags()[f"mlflow.sharedViewState.{VIEW_ID}"])
    assert isinstance(envelope["name"], str) and isinstance(envelope["createdAt"], int)
    columns = json.loads(envelope["state"])["selectedColumns"]
    assert {"metrics.`speedup`", "metrics.`train.time_to_target_s`", "metrics.`workers`"} <= set(columns)
    assert ui_link("7").endswith(f"/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey={VIEW_ID}")


def test_the_summary_of_a_pipeline_placement_speaks_in_time_per_sample():
    """The speedup of a pipeline trial is on time per sample: the summary shows that figure, its baseline
    and bound in one unit, and names the baseline (it showed the one-step times beside a per-sample bound)."""
    from orchestrator.summary import trial_summary

    outcome = {"uri": "sqlite:///mlflow.db", "runtime": "local", "workers": 1, "run_id": "r", "experiment": "e",
               "metrics": {"placement.step_time_s": 0.2179, "placement.baseline_step_time_s": 0.2179,
                           "placement.time_per_sample_s": 0.04175, "placement.baseline_time_per_sample_s": 0.0494,
                           "placement.lower_bound_s": 0.03979, "speedup": 1.183},
               "tags": {"placement.objective": "pipeline", "placement.baseline": "expert split (model.split)",
                        "evaluator": "simulated", "placer": "greedy", "model": "workload", "hardware": "auto"}}
    text = trial_summary(outcome, "speedup", 1.183)
    assert "placement: time per sample 0.04175 s (baseline 0.0494 s, lower bound 0.03979 s); one step 0.2179 s" in text, text
    assert "1.183x relative to expert split (model.split) (placement.baseline_time_per_sample_s)" in text, text
    outcome["tags"]["placement.objective"] = "step"
    text = trial_summary(outcome, "speedup", 1.183)
    assert "placement: step time 0.2179 s (baseline 0.2179 s" in text and "(placement.baseline_step_time_s)" in text, text
    assert "(local runtime, 1 worker)" in text
    outcome["tags"]["train.clock"] = "virtual"          # trained on simulated hardware: the ran line says on what clock
    assert "(local runtime, on a virtual clock, 1 worker)" in trial_summary(outcome, "speedup", 1.183)
    # a data-parallel trial on MPI says why it has no comparison and no limit
    mpi = {**outcome, "runtime": "mpi", "workers": 2, "metrics": {"speedup": 1.1, "train.speedup": 1.1},
           "tags": {"sync": "delay", "train.reference_method": "tuned", "train.reference": "adam lr=0.008"}}
    assert "  versus:   none on sync.runtime=mpi: the comparison with balanced allreduce and the statistical limit run" \
        in trial_summary(mpi, "speedup", 1.1)


def test_the_summary_warns_of_a_faster_single_worker_and_of_a_clock_fitted_now():
    """Probe G: a tuned reference slower than one worker at the trial's own lr made 0.89x read 1.158x, said only as
    a hint; and the same seed gave other figures on a rerun, the virtual clock's step times fitted anew each run."""
    from orchestrator.summary import trial_summary

    tags = {"sync": "allreduce", "train.reference_method": "tuned", "train.reference": "adam lr=0.004",
            "train.clock": "virtual", "sync.compute_model": "t0=0.001400s t1=0.00002000s/sample (measured, fitted)"}
    m = {"speedup": 1.158, "train.speedup": 1.158, "train.time_to_target_s": 1.301,
         "train.reference_time_to_target_s": 1.507, "train.speedup_same_settings": 0.8906,
         "train.same_settings_reference_time_to_target_s": 1.1586}
    outcome = {"uri": "sqlite:///mlflow.db", "runtime": "virtual", "workers": 2, "run_id": "r", "experiment": "e",
               "metrics": m, "tags": tags}
    text = trial_summary(outcome, "speedup", 1.158)
    assert ("WARNING: one worker at this trial's own optimizer and lr reached the target in 1.159 s, faster than the "
            "tuned reference's 1.507 s: over the fastest single worker measured the speedup is 0.8906x, not 1.158x") in text, text
    assert "sync.step_overhead_s=0.001400 sync.per_sample_s=0.00002000 fixes the clock" in text, text
    m["train.speedup_same_settings"], tags["sync.compute_model"] = 1.3, "t0=0.001000s t1=0.00020000s/sample (configured)"
    text = trial_summary(outcome, "speedup", 1.158)
    assert "WARNING" not in text and "fixes the clock" not in text, text


def test_a_measured_search_slower_than_its_baseline_returns_the_baseline():
    """Issue 30: a measured-reward search whose answer measured slower than the baseline keeps the baseline's
    placement; a faster answer, an unfit or missing baseline keep the search's."""
    from types import SimpleNamespace as V

    from orchestrator.phases.placement import keep_baseline

    searched = V(value=0.12, feasible=True)
    placement = object()
    assert keep_baseline(searched, V(value=0.10, feasible=True), placement)
    assert not keep_baseline(searched, V(value=0.13, feasible=True), placement)
    assert not keep_baseline(searched, V(value=0.10, feasible=False), placement)
    assert not keep_baseline(searched, V(value=float("nan"), feasible=True), placement)
    assert not keep_baseline(searched, None, placement)
    assert not keep_baseline(searched, V(value=0.10, feasible=True), None)


@pytest.mark.slow   # holds the lock past SQLite's 5 s busy timeout
def test_a_write_to_a_store_another_process_holds_locked_waits_for_it(tmp_path):
    """A reader (the UI, `orchestrator.report`, a test polling the store) holding the SQLite file past its
    busy timeout must not cost the trial a tag or its final status: the sink's writes retry."""
    import sqlite3
    import threading

    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.store import MlflowSink, init_store, retry_locked

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    init_store(uri)
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("e"))
    holder = sqlite3.connect(tmp_path / "mlflow.db", timeout=0, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(6.0, holder.rollback).start()   # past pysqlite's 5 s busy timeout
    sink = MlflowSink(client, run.info.run_id)
    sink.set_tags({"orchestrator.partial": "true"})
    retry_locked(client.set_terminated, run.info.run_id, status="KILLED")
    got = client.get_run(run.info.run_id)
    assert got.info.status == "KILLED" and got.data.tags["orchestrator.partial"] == "true"
    with pytest.raises(ValueError):   # anything else is not retried
        retry_locked(int, "x")


def test_a_collective_on_mpi_ranks_without_horovod_is_one_line(monkeypatch, tmp_path):
    """``nox -s demo`` builds the environment without Horovod (the headline does not need it): a collective strategy
    on MPI ranks then stops before any rank starts, naming what is missing and the command that builds it."""
    import importlib.util

    from orchestrator.errors import ConfigError
    from orchestrator.sync import mpi

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "horovod" else real(name, *a))
    monkeypatch.setattr(mpi, "launch", lambda *a, **k: pytest.fail("launched ranks"))
    cfg = {"hardware": {"workers": 2}, "sync": {"name": "allreduce", "runtime": "mpi"}, "train": {}}
    with pytest.raises(ConfigError, match=r"Horovod, which this environment lacks.*nox -s setup"):
        mpi.train_mpi(strategy(cfg["sync"]), sync_options(cfg["sync"], cfg), object())


def test_no_mpiexec_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    import sys

    from orchestrator.errors import ConfigError
    from orchestrator.sync.mpi import mpiexec_path

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="an MPI runtime needs mpiexec, and none is beside"):
        mpiexec_path()
