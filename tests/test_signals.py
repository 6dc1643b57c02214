"""Ctrl-C or SIGTERM ends the trial's run as KILLED, with no process left behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import store_runs


# Each signal once end to end, in a different phase: SIGTERM (a scheduler's) during training, SIGINT (Ctrl-C) during a
# placement search and during a sweep; the handler is one for both (orchestrator.errors.Interrupt), and its exit code
# 128 + signal is checked for each.
@pytest.mark.slow
def test_signal_marks_run_killed(workdir):
    sig = signal.SIGTERM
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "train.stop=budget", "train.budget_updates=100000"],
                            cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            runs = [r for r in store_runs(workdir) if r.info.status == "RUNNING"]
            if runs and "train.test_accuracy" in runs[0].data.metrics:
                break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(1)
        else:
            pytest.fail("the trial never started training")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err[-2000:]  # 130 for Ctrl-C, 143 for SIGTERM
    (run,) = store_runs(workdir)
    assert run.info.status == "KILLED"
    # nothing of the trial's process group is left
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


WORKLOAD = Path(__file__).parent / "data" / "msr-dnn-partitioning" / "throughput-inputs" / "LayerGraphs" / "bert24_training.json"


def _wait_for(workdir, proc, predicate, what, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate(store_runs(workdir) if (workdir / "mlflow.db").exists() else []):
            return
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.5)
    pytest.fail(f"never saw {what}")


@pytest.mark.slow
def test_signal_during_a_placement_search_ends_killed_and_partial(workdir):
    """The rl placer keeps its best placement when interrupted; the trial must not pass that off as
    a finished trial (it exited 0 with FINISHED before)."""
    sig = signal.SIGINT
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "+placer=rl", "model=workload", "hardware=auto",
                             f"model.path={WORKLOAD}", "placer.budget_evaluations=100000000", "progress=false"],
                            cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(workdir, proc, lambda runs: runs and "rl.best_step_time_s" in runs[0].data.metrics, "the rl search")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err[-2000:]
    (run,) = store_runs(workdir)
    assert run.info.status == "KILLED"
    assert run.data.tags["orchestrator.partial"] == "true" and run.data.tags["orchestrator.interrupted_in"] == "placement"
    kept = [ln for ln in err.splitlines() if ln.startswith("interrupted during the placement: the best placement so far")]
    assert len(kept) == 1 and "placement.json in " in kept[0], err[-2000:]          # the docs' promise, on screen


OPTUNA = ["-m", "hydra/sweeper=optuna", "hydra.sweeper.storage=sqlite:///optuna.db", "hydra.sweeper.study_name=s",
          "hydra.sweeper.sampler.seed=0", "train.lr=interval(0.05,0.2)", "train.stop=budget", "train.eval_every=10",
          "train.eval_samples=200", "objective.metric=train.final_test_accuracy", "progress=false"]


@pytest.mark.slow
def test_an_interrupted_optuna_sweep_ends_killed_and_resumes_with_new_points(workdir):
    import optuna

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *OPTUNA, "hydra.sweeper.n_trials=3",
                             "train.budget_updates=150"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        _wait_for(workdir, proc, lambda runs: any(r.info.status == "FINISHED" and "mlflow.parentRunId" in r.data.tags
                                                  for r in runs), "a finished trial", timeout=400)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    parent = next(r for r in store_runs(workdir) if r.data.tags.get("orchestrator.kind") == "sweep")
    assert parent.info.status == "KILLED"
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{workdir / 'optuna.db'}")
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states and states.count("COMPLETE") >= 1, states
    first = [t.params["train.lr"] for t in study.trials]

    out = subprocess.run([sys.executable, "-m", "orchestrator", *OPTUNA, "hydra.sweeper.n_trials=2",
                          "train.budget_updates=20"], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{workdir / 'optuna.db'}")
    assert len(study.trials) == len(first) + 2
    lrs = [t.params["train.lr"] for t in study.trials]
    assert len(set(lrs)) == len(lrs), lrs              # no parameter set proposed twice
    assert [t.state.name for t in study.trials][-2:] == ["COMPLETE", "COMPLETE"]


def test_a_signal_inside_a_database_call_is_raised_when_the_call_returns(monkeypatch):
    """A KeyboardInterrupt cut into a SQLite statement left the process's own connection holding the
    store's lock, and the run's KILLED status then waited on "database is locked" for ever (a CI run saw
    an interrupted Optuna sweep hang so). The handler defers it to the end of the call."""
    from orchestrator.errors import Interrupt

    monkeypatch.setattr(Interrupt, "signal", None)
    monkeypatch.setattr(Interrupt, "pending", None)
    old = signal.signal(signal.SIGINT, Interrupt.handle)
    code = compile("def call(handle):\n    handle(15, sys._getframe())\n    return 'done'\n", "<fake store>", "exec")
    store = {"__name__": "sqlalchemy.engine.fake", "sys": sys}
    exec(code, store)
    got = []
    try:
        assert store["call"](Interrupt.handle) == "done"      # the call finishes undisturbed ...
        assert Interrupt.pending == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):                # ... and the interrupt comes right after it
            for _ in range(500):
                got.append(1)
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(got) < 500 and Interrupt.signal == signal.SIGTERM and Interrupt.pending is None
    with pytest.raises(KeyboardInterrupt):                    # outside a store call it raises at once
        Interrupt.handle(signal.SIGINT, sys._getframe())
    assert Interrupt.signal == signal.SIGINT


def test_an_error_a_signal_caused_ends_the_run_as_interrupted(workdir, monkeypatch):
    """A signal that cuts into OmegaConf while Hydra composes a sweep's next trial surfaced as another error
    ("'NoneType' object has no attribute '_invalidate_flags_cache'"), which Hydra reports and exits 1 with: the
    interrupted sweep ended as failed. With a signal received, any such ending is the interrupt's exit code."""
    from orchestrator import app
    from orchestrator.errors import Interrupt

    from conftest import run_inprocess

    def cut(cfg):
        Interrupt.signal = signal.SIGINT
        raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")

    monkeypatch.setattr(Interrupt, "signal", None)
    monkeypatch.setattr(app, "_task", cut)
    assert run_inprocess(workdir, "-m", "seed=1,2").returncode == 130
    monkeypatch.setattr(app, "_task", lambda cfg: (_ for _ in ()).throw(AttributeError("a plain bug")))
    monkeypatch.setattr(Interrupt, "signal", None)
    assert run_inprocess(workdir, "-m", "seed=1,2").returncode == 1       # no signal: the error's own exit


def test_an_error_a_signal_caused_inside_a_run_ends_it_killed(tmp_path, monkeypatch):
    """The same inside a run (``trial_run``, the profilers' and the trials'): SIGTERM cut into TensorFlow's
    ``nest.flatten`` during a layer profile, which raised "'dict' object has no attribute '_type_spec'", and the
    profile ended as a failure (exit 1, its run FAILED, a traceback) in a CI run. With a signal received, the run
    ends KILLED and the profiler exits 143; without one, the error is the run's (FAILED) and propagates."""
    from omegaconf import OmegaConf

    from orchestrator.errors import Interrupt
    from orchestrator.profile import cli, run
    from orchestrator.tracking.store import trial_run

    from conftest import store_runs

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)      # MLflow's set_tracking_uri sets it: put back at the end
    cfg = OmegaConf.create({"tracking": {"uri": uri}})

    def cut():
        Interrupt.signal = signal.SIGTERM
        raise AttributeError("'dict' object has no attribute '_type_spec'")

    monkeypatch.setattr(Interrupt, "signal", None)
    with pytest.raises(KeyboardInterrupt), trial_run(cfg, run_name="cut", tags={}, config_yaml="", output_dir=tmp_path / "a"):
        cut()
    monkeypatch.setattr(Interrupt, "signal", None)
    with pytest.raises(AttributeError), trial_run(cfg, run_name="bug", tags={}, config_yaml="", output_dir=tmp_path / "b"):
        raise AttributeError("a plain bug")
    assert {r.info.run_name: r.info.status for r in store_runs(tmp_path)} == {"cut": "KILLED", "bug": "FAILED"}

    monkeypatch.setattr(run, "profile_layers", lambda args: cut())
    assert cli.main(["layers", "--out", str(tmp_path / "prof")]) == 143
    monkeypatch.setattr(Interrupt, "signal", None)
    monkeypatch.setattr(run, "profile_layers", lambda args: (_ for _ in ()).throw(AttributeError("a plain bug")))
    with pytest.raises(AttributeError, match="a plain bug"):
        cli.main(["layers", "--out", str(tmp_path / "prof")])
