"""Experiment recipes: each composes, and the sweeps run end to end (tiny budgets here)."""

from importlib import resources
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from conftest import NO_CONTEXT, QUICK, run_inprocess, store_runs

RECIPES = sorted(p.stem for p in Path(str(resources.files("orchestrator_conf") / "experiment")).glob("*.yaml"))


def test_the_documented_recipes_exist():
    assert {"placement_rl_vs_expert", "delay_sync_heterogeneous", "hybrid", "tune_delay"} <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_composes_as_a_sweep(recipe):
    with initialize_config_module("orchestrator_conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={recipe}"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params, f"{recipe} sweeps nothing"
    assert cfg.tracking.experiment == recipe


@pytest.mark.slow
def test_staleness_recipe_runs_and_ends_with_a_comparison(workdir):
    # the sweep and its comparison are under test; each trial's own context (reference, limit) has its tests
    out = run_inprocess(workdir, "-m", "+experiment=delay_sync_staleness", "sync.staleness=0,4", *QUICK, *NO_CONTEXT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sweep " in out.stdout and "time to target" in out.stdout  # the comparison table
    assert "verdict:  none/delay/local/cnn" in out.stdout or "verdict:  no trial reported" in out.stdout, out.stdout
    children = [r for r in store_runs(workdir) if r.data.tags.get("mlflow.parentRunId")]
    assert sorted(r.data.params["sync.staleness"] for r in children) == ["0", "4"]
    assert all("sync.staleness=" in r.info.run_name for r in children)
    report = run_inprocess(workdir, "--experiment", "delay_sync_staleness", module="orchestrator.tracking.report")
    table, _, verdict = report.stdout.partition("\nverdict")      # one sweep's runs end with its verdict
    assert report.returncode == 0 and table.count("none/delay/local/cnn") == 2 and verdict, report.stdout


@pytest.mark.slow
def test_tune_delay_resumes_its_study(workdir):
    args = ["-m", "+experiment=tune_delay", "hydra.sweeper.n_trials=1", *QUICK, *NO_CONTEXT]
    for _ in range(2):
        out = run_inprocess(workdir, *args)
        assert out.returncode == 0, out.stderr[-3000:]
    import optuna

    study = optuna.load_study(study_name="tune_delay", storage=f"sqlite:///{workdir / 'tune_delay.db'}")
    assert len(study.trials) == 2  # the second command went on with the stored study
    params = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(set(params)) == 2, params  # with a new point (the seeded sampler repeated it before)
