"""``+sync=auto`` (issue 44 item 7): the packaged regime map equals what benchmarks/sync_regimes.py derives
from the committed runs; in every measured cell auto picks the map's winner; between cells within the
threshold the nearest cell's; far from every cell balanced allreduce, saying so; a short trial runs the
chosen strategy and logs the sync.auto.* tags."""

from __future__ import annotations

import json

import pytest

from orchestrator.sync import regimes
from orchestrator.sync.regimes import NEAR, choose, regime_of

BUILTIN = frozenset({"allreduce", "async", "async_cutoff", "backup", "delay"})


def cells():
    return [(ds, c) for ds, m in regimes.load_map()["maps"].items() for c in m["cells"]]


def test_packaged_map_is_the_committed_runs():
    from benchmarks.sync_regimes import export_map

    assert json.loads(json.dumps(export_map())) == regimes.load_map()


@pytest.mark.parametrize("dataset,cell", cells(), ids=lambda x: x if isinstance(x, str) else x["regime"])
def test_every_measured_cell_picks_its_winner(dataset, cell):
    regime = regime_of(cell["hardware"])
    every = BUILTIN | {"local_sgd"}
    choice = choose(regime, every, dataset)
    assert (choice.cell["regime"], choice.distance, choice.near) == (cell["regime"], 0.0, True)
    assert choice.label == cell["winner"] and choice.note == ""
    assert choice.margin == pytest.approx(cell["margin"])
    builtin = choose(regime, BUILTIN, dataset)            # the example's local SGD not installed
    if cell["strategies"][cell["winner"]]["sync"] in BUILTIN:
        assert builtin.label == cell["winner"]
    else:
        best = min((k for k, v in cell["strategies"].items() if v["sync"] in BUILTIN and v["median_s"]),
                   key=lambda k: cell["strategies"][k]["median_s"])
        assert builtin.label == best and "is not installed" in builtin.note


def test_between_cells_picks_the_nearest():
    hw = {"workers": 8, "stragglers": {"probability": 0.12, "slowdown": 5}}
    choice = choose(regime_of(hw), BUILTIN)
    assert choice.cell["regime"] == "stragglers p=0.1 x5" and choice.distance == pytest.approx(0.2 * 2 ** 0.5)
    assert choice.near and choice.label == "backup b=2" and choice.config == {"name": "backup", "backup_workers": 2}
    hw = {"workers": 8, "worker_speeds": [1.0, 0.6] * 4, "network": {"bandwidth_Gbps": 12}}
    choice = choose(regime_of(hw), BUILTIN)               # spread 1.67x: nearest the 2x cell, whose b=1 won by 1.10x
    assert choice.cell["regime"] == "spread 2x (1, 1/2)" and choice.distance < NEAR
    # ... but interpolated with the cells around (base: allreduce wins) b=1's margin is within the seeds' noise
    assert choice.label == "allreduce" and "backup b=1's interpolated 1.068x is within the cells' seed noise" in choice.note


def test_between_cells_a_margin_within_the_seeds_noise_keeps_the_baseline():
    """The lower bound (interpolated log margin less its interpolated standard error) decides: on speeds 1 and 1/3
    (between 'mixed speeds', where backup b=2 won by 1.085x, and the 2x and 8x spreads) backup b=2's 1.023x is
    below its noise and balanced allreduce runs; a clear margin (stragglers) still leaves the baseline."""
    import math

    from orchestrator.sync.regimes import _margin_se

    e = {"median_s": 1.0, "min_s": 0.9, "max_s": 1.1, "seeds": 4}
    b = {"median_s": 1.2, "min_s": 1.2, "max_s": 1.2, "seeds": 4}
    assert _margin_se(e, b) == pytest.approx(0.5 * math.log(1.1 / 0.9) / 2) and _margin_se(b, b) == 0.0
    choice = choose(regime_of({"workers": 8, "worker_speeds": [1.0, 1 / 3] * 4}), BUILTIN)
    assert choice.label == "allreduce" and "backup b=2's interpolated 1.023x" in choice.note
    strag = choose(regime_of({"workers": 8, "stragglers": {"probability": 0.15, "slowdown": 5}}), BUILTIN)
    assert strag.label == "backup b=2" and strag.note == ""


def test_between_cells_the_margins_are_interpolated():
    """Shepard's interpolation of log margins over the cells within RADIUS: halfway between two cells whose
    winners agree, that winner runs, with the inverse-square-distance weighted geometric mean of the margins."""
    import json
    import math

    from orchestrator.sync.regimes import MAP_PATH, RADIUS

    cells = {c["regime"]: c for c in json.loads(MAP_PATH.read_text())["maps"]["mnist"]["cells"]}
    hw = {"workers": 8, "stragglers": {"probability": 0.15, "slowdown": 5}}     # halfway between p=0.1 and p=0.2 at 5x
    choice = choose(regime_of(hw), BUILTIN)
    assert choice.near and NEAR < choice.distance < RADIUS
    assert [c for c, _ in choice.neighbours][:2] == ["stragglers p=0.1 x5", "stragglers p=0.2 x5"]
    assert all(d <= RADIUS for _, d in choice.neighbours)
    w = [(1 / d ** 2, math.log(cells[c]["strategies"]["allreduce"]["median_s"] / cells[c]["strategies"]["backup b=2"]["median_s"]))
         for c, d in choice.neighbours]
    assert choice.label == "backup b=2" and choice.margin == pytest.approx(math.exp(sum(a * b for a, b in w) / sum(a for a, _ in w)))
    assert "between map cells 'stragglers p=0.1 x5' (0.71), 'stragglers p=0.2 x5' (0.71)" in choice.why(regime_of(hw))


def test_far_regime_runs_allreduce_and_says_so():
    hw = {"workers": 64, "worker_speeds": [1.0, 1 / 32] * 32}
    regime = regime_of(hw)
    choice = choose(regime, BUILTIN)
    assert not choice.near and choice.distance > NEAR and choice.entry is None and choice.margin is None
    assert (choice.sync, choice.config) == ("allreduce", {"name": "allreduce", "balance": "static"})
    assert "no measured regime is near" in choice.why(regime) and "balanced allreduce" in choice.why(regime)


def test_a_trial_runs_the_chosen_strategy_and_logs_why(workdir):
    import mlflow

    from conftest import NO_CONTEXT, QUICK, run_inprocess

    # the choice and its line are under test here; the trial's context (reference, comparison, limit) has its own
    out = run_inprocess(workdir, "+sync=auto", "hardware.workers=8", "hardware.stragglers={probability: 0.12, slowdown: 5}",
                        "train.budget_updates=60", *QUICK[:2], *QUICK[3:], *NO_CONTEXT)
    assert out.returncode == 0, out.stderr
    assert "sync=auto: W=8" in out.stdout and "-> backup b=2" in out.stdout and "(train.lr set to it)" in out.stdout
    assert "backup W=8 (virtual" in out.stdout
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
    run = mlflow.search_runs(experiment_names=["orchestrator"], output_format="list")[0]
    tags, params = run.data.tags, run.data.params
    assert tags["sync.auto.choice"] == "backup b=2" and tags["sync.auto.cell"] == "mnist: stragglers p=0.1 x5"
    # between cells: the margin is interpolated (p=0.1 x5 at 0.28 measured 2.344x; p=0.05 x10 at 0.70, p=0.2 x5 at 1.13)
    assert float(tags["sync.auto.distance"]) == pytest.approx(0.2828, abs=1e-4) and tags["sync.auto.margin"] == "2.403"
    assert tags["sync.auto.between"].startswith("stragglers p=0.1 x5 (0.283); stragglers p=0.05 x10")
    assert (params["sync.name"], params["sync.backup_workers"], params["train.lr"]) == ("backup", "2", "0.006")
