"""Hydra multirun and Optuna sweeps: one parent MLflow run, one child per trial; failures don't stop a sweep."""

import pytest

from conftest import QUICK, run_inprocess, store_runs


def _parent_and_children(workdir):
    runs = store_runs(workdir)
    parents = [r for r in runs if r.data.tags.get("orchestrator.kind") == "sweep"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], children


@pytest.mark.slow
def test_optuna_sweep_makes_one_parent_and_three_children(workdir):
    out = run_inprocess(workdir, "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",
                        "hydra.sweeper.storage=sqlite:///optuna.db", "hydra.sweeper.study_name=t",
                        "train.lr=interval(0.05,0.2)", "train.stop=budget", "train.budget_updates=30",
                        "train.eval_every=10", "train.eval_samples=300", "objective.metric=train.final_test_accuracy")
    assert out.returncode == 0, out.stderr[-3000:]
    parent, children = _parent_and_children(workdir)
    assert len(children) == 3 and parent.info.status == "FINISHED"
    assert all(c.info.status == "FINISHED" for c in children)
    assert len({c.data.params["train.lr"] for c in children}) == 3
    assert (workdir / "optuna.db").exists()


@pytest.mark.slow
def test_a_failing_trial_does_not_stop_the_sweep(workdir):
    # a failure only the trial can see (its data directory), not the config check before the sweep
    out = run_inprocess(workdir, "-m", "dataset.path=null,/nonexistent/mnist", *QUICK)
    assert out.returncode == 1, out.stderr[-3000:]  # the sweep went on, then says a trial failed
    assert ("sweep: 2 trials, 1 finished, 1 failed; first error: ConfigError: dataset.path '/nonexistent/mnist' "
            "is not a directory") in out.stderr, out.stderr[-3000:]
    parent, children = _parent_and_children(workdir)
    assert sorted(c.info.status for c in children) == ["FAILED", "FINISHED"]
    failed = next(c for c in children if c.info.status == "FAILED")
    assert "dataset.path" in failed.data.tags["orchestrator.error"]
    assert parent.data.metrics["sweep.failed_trials"] == 1


@pytest.mark.slow
def test_an_optuna_sweep_without_any_value_ends_with_one_line_not_a_traceback(workdir):
    """No trial reaches its target, so Optuna's study has no best trial: one line, exit 1, runs closed."""
    out = run_inprocess(workdir, "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1",
                        "hydra.sweeper.storage=sqlite:///optuna.db", "hydra.sweeper.study_name=none",
                        "train.lr=interval(0.05,0.2)", "train.target_accuracy=0.99", "train.budget_updates=4",
                        "train.eval_every=2", "train.eval_samples=200")
    assert out.returncode == 1, out.stderr[-3000:]
    assert ("error: no trial of the Optuna sweep reported speedup (each failed or missed its "
            "target), so the study has no best trial") in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    parent, children = _parent_and_children(workdir)
    assert parent.info.status == "FINISHED" and [c.info.status for c in children] == ["FINISHED"]


@pytest.mark.parametrize("sweep", [["train.lr=range(0)"], ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=0",
                                                           "train.lr=interval(0.05,0.2)"]])
def test_a_sweep_without_a_trial_is_an_error(workdir, sweep):
    """Probe G: 'Launching 0 jobs', an empty table and exit 0, or 'each failed or missed its target' for n_trials=0."""
    out = run_inprocess(workdir, "-m", *sweep, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == ("error: the sweep launched no trial (a swept list without a value, "
                                                   "or hydra.sweeper.n_trials=0)"), out.stderr[-3000:]
    assert "missed its target" not in out.stderr
    parent, children = _parent_and_children(workdir)
    assert parent.info.status == "FAILED" and not children


def test_a_verdict_without_a_figure_counts_what_became_of_the_trials():
    from orchestrator.tracking.report import verdict
    from orchestrator.tracking.runs import RunRecord

    recs = [RunRecord(n, n, s, "e", {}, {}, {}) for n, s in (("a", "KILLED"), ("b", "KILLED"), ("c", "FINISHED"))]
    assert verdict(recs, "speedup") == ("verdict:  no trial reported speedup (2 killed, 0 failed, 1 finished without "
                                        "it: missed the target, or no baseline)")


def test_a_verdict_on_single_wall_clock_runs_says_the_margin_may_be_load():
    """Probe G: lr 0.106 and 0.117 took 96 updates each, 4.83 s and 5.96 s on a loaded machine: '1.28x the runner-up'."""
    from orchestrator.tracking.report import verdict
    from orchestrator.tracking.runs import RunRecord

    def rec(name, t, seeds="1", clock="wall"):
        return RunRecord(name, name, "FINISHED", "e", {"train.clock": clock}, {"train.seeds": seeds}, {"t": t})

    assert "a margin within the machine's load is no difference" in verdict([rec("a", 4.83), rec("b", 5.96)], "t", "minimize")
    assert "load" not in verdict([rec("a", 4.83, "3"), rec("b", 5.96, "3")], "t", "minimize")
    assert "load" not in verdict([rec("a", 4.83, clock="virtual"), rec("b", 5.96, clock="virtual")], "t", "minimize")


def test_a_key_given_once_for_a_sweep_across_placers_applies_where_it_exists(workdir):
    """Probe G: `-m +placer=manual,rl placer.budget_evaluations=...` was refused (manual has no budget), and so was
    any RL budget on the placement_rl_vs_expert recipe. It now applies to the options that have it; a key no option
    has, or one outside a sweep, is still one line and exit 2."""
    place = ("model=nmt", "hardware=sim_1cpu_4gpu", "placement.bound_time_limit_s=0")
    out = run_inprocess(workdir, "-m", "+placer=manual,rl", "placer.budget_evaluations=40", *place)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "note: placer.budget_evaluations does not apply to placer=manual" in out.stdout
    params = {r.data.tags["placer"]: r.data.params for r in store_runs(workdir) if "placer" in r.data.tags}
    assert params["rl"]["placer.budget_evaluations"] == "40" and "placer.budget_evaluations" not in params["manual"]
    recipe = run_inprocess(workdir, "-m", "+experiment=placement_rl_vs_expert", "placer.budget_evaluations=40",
                           "hydra.sweeper.params.model=nmt", "placement.bound_time_limit_s=0")   # the recipe sweeps placers
    assert recipe.returncode == 0 and recipe.stdout.count("does not apply to placer=") == 2, recipe.stderr[-2000:]
    for args in (("-m", "+placer=manual,rl", "placer.budget_evaluatons=40"), ("+placer=manual", "placer.budget_evaluations=40"),
                 ("-m", "seed=1,2", "+placer=manual", "placer.budget_evaluations=40")):    # a sweep that keeps manual
        bad = run_inprocess(workdir, *args, *place)
        assert bad.returncode == 2 and "budget_evaluat" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
