"""Where a trial's training settings come from when the command line is silent: the dataset's
evaluation cadence and budget (train.eval_every: null, train.budget_updates: auto), and each built-in
sync option's measured best settings (conf/sync/*.yaml, issue 20 item 8); a value given wins."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from orchestrator.execution.training import TrainSettings
from orchestrator.trial import Trial

FASHION = Path("/usr/share/datasets/fashion-mnist")


def _trial(tmp_path, *overrides):
    with initialize_config_module(config_module="orchestrator_conf", version_base=None):
        cfg = compose("config", overrides=list(overrides))
    return Trial(cfg, tmp_path)


def test_mnist_gives_its_cadence_and_budget(tmp_path):
    s = _trial(tmp_path).settings
    assert (s.eval_every, s.budget_updates, s.target_accuracy) == (16, 3000, 0.97)


@pytest.mark.skipif(not FASHION.is_dir(), reason="Fashion-MNIST absent (apt-get install dataset-fashion-mnist)")
def test_fashion_mnist_gives_its_own_and_a_given_value_wins(tmp_path):
    s = _trial(tmp_path, "dataset=fashion_mnist").settings
    assert (s.eval_every, s.budget_updates, s.target_accuracy) == (128, 30000, 0.9)
    s = _trial(tmp_path, "dataset=fashion_mnist", "train.eval_every=5", "train.budget_updates=70",
               "train.target_accuracy=0.5").settings
    assert (s.eval_every, s.budget_updates, s.target_accuracy) == (5, 70, 0.5)
    s = _trial(tmp_path, "dataset=fashion_mnist", "train.budget_updates=null", "train.budget_s=3").settings
    assert s.budget_updates is None and s.budget_s == 3


def test_outside_a_trial_auto_is_mnists():
    s = TrainSettings.from_cfg({"budget_updates": "auto", "eval_every": None})
    assert (s.eval_every, s.budget_updates) == (16, 3000)


def _measured_defaults() -> dict[str, tuple[str, float]]:
    """The table "The `+sync` defaults" of docs/benchmarks/sync_tuned.md, with its rule applied: the fastest
    MNIST cell; cells within 1% of it tie, and the tie goes to the cell that reached Fashion-MNIST's target,
    then the faster there."""
    import re

    text = (Path(__file__).parents[1] / "docs" / "benchmarks" / "sync_tuned.md").read_text()
    section = text.split("## The `+sync` defaults", 1)[1].split("\n## ", 1)[0]
    cell = re.compile(r"(sgd|momentum|nesterov|adam) ([0-9.]+): ([0-9.]+|stopped)")

    def cells(column: str) -> dict[tuple[str, float], float]:
        return {(o, float(lr)): (float("inf") if t == "stopped" else float(t)) for o, lr, t in cell.findall(column)}

    out = {}
    for row in re.findall(r"^\| `(\w+)` \|(.*)\|$", section, flags=re.M):
        name, rest = row
        stated, mnist, fashion = (c.strip() for c in rest.split("|"))
        mnist, fashion = cells(mnist), cells(fashion)
        assert mnist, f"{name}: no MNIST cells"
        best = min(mnist.values())
        tied = [c for c, t in mnist.items() if t <= best * 1.01]
        pick = min(tied, key=lambda c: (fashion.get(c, float("inf")) if fashion else 0, mnist[c]))
        o, lr = stated.split()
        assert (o, float(lr)) == pick, f"{name}: the table states {stated}, its cells give {pick}"
        out[name] = pick
    return out


def test_the_rule_of_the_defaults_table_picks_what_a_user_would():
    d = _measured_defaults()
    assert set(d) == {"allreduce", "delay", "async"}
    assert d["delay"] == ("adam", 0.004)       # the MNIST tie (1.473 vs 1.476) decided by Fashion-MNIST


@pytest.mark.parametrize("sync", ["allreduce", "delay", "async"])
def test_each_sync_option_defaults_to_its_best_measured_cell(tmp_path, sync):
    optimizer, lr = _measured_defaults()[sync]
    trial = _trial(tmp_path, f"+sync={sync}")
    assert (trial.settings.optimizer, trial.settings.lr) == (optimizer, lr)
    assert (trial.cfg.train.batch_policy, trial.cfg.train.global_batch_max) == ("hybrid", 256)


@pytest.mark.parametrize("sync", ["allreduce", "delay", "async"])
def test_each_sync_option_brings_its_measured_training_defaults_and_the_command_line_wins(tmp_path, sync):
    """Every train.* key of conf/sync/NAME.yaml reaches the trial (that they are the measured best cells is
    test_each_sync_option_defaults_to_its_best_measured_cell's)."""
    import yaml

    preset = yaml.safe_load((Path(__file__).parents[1] / "conf" / "sync" / f"{sync}.yaml").read_text())["train"]
    assert preset, "no training defaults"
    trial = _trial(tmp_path, f"+sync={sync}")
    s = trial.settings
    for key, value in preset.items():
        assert trial.cfg.train[key] == value, key
    assert s.optimizer == preset.get("optimizer", "sgd") and s.lr == preset["lr"]
    s = _trial(tmp_path, f"+sync={sync}", "train.lr=0.07", "train.optimizer=adam", "train.batch_policy=per_worker").settings
    assert (s.lr, s.optimizer) == (0.07, "adam")
    assert _trial(tmp_path, f"+sync={sync}", "train.batch_policy=per_worker").cfg.train.batch_policy == "per_worker"


def test_settings_built_in_code_evaluate_at_the_cadence_a_config_gives():
    """A ``TrainSettings()`` built by hand (benchmarks, plugins) evaluates as often as a trial on MNIST does."""
    from orchestrator.config.model import MNISTDatasetConfig

    assert TrainSettings().eval_every == TrainSettings.from_cfg({}).eval_every == MNISTDatasetConfig().eval_every == 16
