"""The entry point as a user runs it: one-line errors, no TensorFlow for --help, runs in the store."""

import re
import subprocess
import sys

import pytest

from conftest import QUICK, run_inprocess, store_runs


@pytest.mark.parametrize("args, expected", [
    (["+placer=nope"], "unknown placer 'nope' (available: "),
    (["model=resnet9000"], "unknown model 'resnet9000'"),
    (["train.lr=abc"], "train.lr='abc' is not a number"),
    (["+sync=delay", "sync.staleness=abc"], "sync.staleness='abc' (accepted: inf or a number)"),
    (["+placer=rl", "placer.lr=abc"], "placer.lr='abc' is not a number"),
    (["+placer=rl", "placer.budget_evaluations=-5"], "placer.budget_evaluations=-5 must be an integer >= 1"),
    (["+placer=rl", "+placer.typo=1"], "unknown key placer.typo (placer accepts: "),
    (["+placer=rl", "placer.mode=fast"], "placer.mode='fast' (accepted: zero_shot, finetune, scratch)"),
    (["-m", "+placer=rl", "placer.budget_evaluations=100,-5"], "placer.budget_evaluations=-5 must be an integer >= 1"),
    (["dataset.test_fraction=abc"], "dataset.test_fraction='abc' is not a number"),
    (["seed=1.5"], "seed=1.5 is not an integer"),
    (["+sync=delay", "hardware.stragglers=abc"], "hardware.stragglers='abc' must be a mapping"),
    (["train.stop=never"], "train.stop='never' (accepted: target, budget)"),
    (["foo.bar=1"], "Could not override 'foo.bar'"),
    (["planner=joint"], "planner is an optional group, not in the defaults: add it with a '+' (+planner=joint)"),
    (["sync=delay"], "sync is an optional group, not in the defaults: add it with a '+' (+sync=delay)"),
    (["train.lr=["], "malformed override"),
    (["hardware.logical_cpus=0"], "hardware.logical_cpus=0 must be an integer >= 1"),
    (["train.budget_updates=null", "train.budget_s=0"], "train.budget_s=0 must be a number > 0"),
    (["+sync=delay", "hardware.speed_pattern=[]"], "hardware.speed_pattern=[] must be a non-empty list of numbers"),
    (["+sync=delay", "model=nmt"], "+sync=delay trains the model on data, and model=nmt is placed only"),
    (["+sync=delay", "hardware.network.bandwidth_Gbps=-1"], "hardware.network.bandwidth_Gbps=-1 must be > 0"),
    (["+sync=allreduce", "train.lr_scaling=cubic"], "train.lr_scaling='cubic' (accepted: linear, sqrt, none, adascale)"),
    (["+sync=delay", "hardware.speed_changes=[{worker:7,at_s:1,speed:0.5}]"], "hardware.speed_changes[0].worker=7"),
    (["+sync=delay", "hardware=sim_hetero_cluster", "hardware.workers=5"],
     "hardware.workers=5 but sim_hetero_cluster has 3 workers (one per host)"),
    # the sweeper's own options (probe G: Hydra's multi-line errors and exit 1)
    (["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trial=3"], "Could not override 'hydra.sweeper.n_trial': no such key"),
    (["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=abc"], "hydra.sweeper.n_trials='abc' is not an integer"),
    (["-m", "hydra/sweeper=nosuch"], "Could not find 'hydra/sweeper/nosuch' Available options in 'hydra/sweeper': basic optuna"),
    (["-m", "hydra/sweeper=optuna", "train.nokey=interval(0,1)"], "train.nokey: no such key to sweep"),
])
def test_user_errors_are_one_line_and_leave_no_run(workdir, args, expected):
    out = run_inprocess(workdir, *args)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not (workdir / "mlflow.db").exists() or all(r.info.status != "RUNNING" for r in store_runs(workdir))


def test_help_imports_no_tensorflow(workdir):
    code = ("import sys, atexit\n"
            "atexit.register(lambda: print('TF_LOADED' if 'tensorflow' in sys.modules else 'TF_ABSENT'))\n"
            "sys.argv = ['orchestrator', '--help']\n"
            "from orchestrator.app import main\nmain()\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=120)
    assert "Configuration groups" in out.stdout and "TF_ABSENT" in out.stdout, out.stdout + out.stderr


def test_failure_inside_a_trial_marks_its_run_failed(workdir):
    out = run_inprocess(workdir, "+placer=manual", "placer.rules=[{pattern:'*',device:'gpu:9'}]", *QUICK)
    assert out.returncode == 2 and "names device 'gpu:9'" in out.stderr, out.stderr
    runs = store_runs(workdir)
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert "gpu:9" in runs[0].data.tags["orchestrator.error"]


def test_a_sweep_over_an_optional_group_takes_its_keys_as_given():
    """``-m +placer=greedy,random placer.reward=simulated``: Hydra composes the sweep's own config without the
    group, so its plain keys are passed on as ``++placer.reward`` (each trial's config has the group)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from orchestrator.app import _swept_group_keys

    argv = ["-m", "+placer=greedy,random", "placer.reward=simulated", "train.lr=0.1", "+sync=delay", "sync.staleness=2"]
    parsed = OverridesParser.create().parse_overrides([a for a in argv if "=" in a])
    assert _swept_group_keys(argv, parsed) == ["-m", "+placer=greedy,random", "++placer.reward=simulated", "train.lr=0.1",
                                               "+sync=delay", "sync.staleness=2"]


def test_a_sweeps_run_names_carry_what_varies_not_where_it_is_recorded(monkeypatch):
    """Each trial's name had '[tracking.uri=sqlite\\:////tmp/...]' in it, in every table and verdict line."""
    from types import SimpleNamespace as NS

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from orchestrator.phases.setup import sweep_suffix

    task = ["+placer=greedy", "train.lr=0.1", "tracking.uri=sqlite:////tmp/x.db", "progress=false", "+planner=joint",
            "++placer.reward=simulated"]
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: NS(mode=RunMode.MULTIRUN, overrides=NS(task=task),
                                                                      job={"num": 3})))
    monkeypatch.setattr("sys.argv", ["orchestrator", "-m", "train.lr=0.1,0.2"])
    assert sweep_suffix() == " #3 [train.lr=0.1 ++placer.reward=simulated]"
    # what the command line gave every trial alike is left out; a path is named by its file
    task += ["model.path=/a/very/long/path/resnet50_training.json", "model.split=/x/split.json"]
    monkeypatch.setattr("sys.argv", ["orchestrator", "-m", "train.lr=0.1,0.2", "model.split=/x/split.json",
                                     "model.path=glob(/a/*/*.json)"])
    assert sweep_suffix() == " #3 [train.lr=0.1 ++placer.reward=simulated model.path=resnet50_training.json]"
    # a fixed list value holds commas and is not swept (probe G: 'hardware.speed_pattern=[1,0.5]' in every name)
    task += ["hardware.speed_pattern=[1,0.5]", "train.seed=1"]
    monkeypatch.setattr("sys.argv", ["orchestrator", "-m", "train.lr=0.1,0.2", "model.split=/x/split.json",
                                     "model.path=glob(/a/*/*.json)", "hardware.speed_pattern=[1,0.5]",
                                     "train.seed=range(2)"])
    assert sweep_suffix() == " #3 [train.lr=0.1 ++placer.reward=simulated model.path=resnet50_training.json train.seed=1]"


def test_a_sweeps_parent_run_is_named_by_its_sweeper_and_what_it_varies():
    from orchestrator.tracking.sweep import sweep_name

    task = ["+sync=delay,allreduce", "tracking.uri=sqlite:////tmp/x.db", "progress=false", "model.path=/a/b/bert.json"]
    assert sweep_name("BasicSweeper", task) == "sweep: +sync=delay,allreduce model.path=bert.json"
    assert sweep_name("OptunaSweeper", ["train.lr=interval(0.02,0.3)"]) == "optuna sweep: train.lr=interval(0.02,0.3)"


def test_the_config_a_trial_would_print_is_checked_like_the_trial():
    """``--cfg job train.lr=-1`` printed the config with exit 0, and a misspelt key gave Hydra's multi-line error."""
    from orchestrator.app import precheck
    from orchestrator.errors import UserError

    for argv, words in ((["--cfg", "job", "train.lr=-1"], "train.lr=-1 must be a number >= 0"),
                        (["--cfg=job", "train.lrr=1"], "Could not override 'train.lrr': no such key")):
        with pytest.raises(UserError, match=re.escape(words)):
            precheck(argv)
    assert precheck(["--cfg", "job", "train.lr=0.05"]) == ["--cfg", "job", "train.lr=0.05"]
