"""The honest time to target: the crossing interpolated between evaluations, the tuned single-worker
reference (orchestrator.sync.reference) and its cache in the tracking store, seeds, batch policies."""

import dataclasses

import pytest

from orchestrator.config.root import TrainConfig
from orchestrator.errors import ConfigError
from orchestrator.execution.training import EvalPoint, crossing
from orchestrator.sync.core import SyncOptions

from conftest import QUICK, run_inprocess, store_runs

SMALL = {"train": {"budget_updates": 60, "eval_every": 4, "eval_samples": 200, "target_accuracy": 0.5,
                   "warmup_updates": 0, "reference_grid": {"sgd": [0.02, 0.1], "nesterov": [0.05], "adam": []}},
         "hardware": {"workers": 2, "worker_speeds": [1.0, 0.5]},
         "sync": {"name": "allreduce", "base_time_s": 0.01}}


def test_the_crossing_is_interpolated_between_evaluations():
    h = [EvalPoint(0, 0.0, 2.0, 0.5), EvalPoint(10, 1.0, 1.0, 0.7), EvalPoint(20, 2.0, 0.5, 0.9)]
    assert crossing(h, 0.8) == pytest.approx((1.5, 15.0))
    assert crossing(h, 0.7) == (1.0, 10.0)          # reached exactly at an evaluation: that evaluation
    assert crossing(h, 0.4) == (0.0, 0.0)           # already there at the start
    assert crossing(h, 0.95) == (None, None)
    # a dip below the target after a first crossing does not move it
    assert crossing(h + [EvalPoint(30, 3.0, 0.5, 0.6), EvalPoint(40, 4.0, 0.5, 0.95)], 0.8)[0] == pytest.approx(1.5)


def test_hybrid_batch_policy_caps_the_global_batch():
    o = SyncOptions(speeds=[1.0] * 16, train=TrainConfig(batch_policy="hybrid", global_batch_max=512))

    def train(**kw):
        return dataclasses.replace(o, train=dataclasses.replace(o.train, **kw))

    assert o.total_batch(64) == 512                              # 16 x 64 = 1024, capped
    assert dataclasses.replace(o, speeds=[1.0] * 4).total_batch(64) == 256   # under the cap: weak scaling
    assert train(batch_policy="per_worker").total_batch(64) == 1024
    assert train(batch_policy="global").total_batch(64) == 64
    with pytest.raises(ConfigError, match="global_batch_max"):
        train(global_batch_max=8).total_batch(64)


def _train(tmp_path, cfg, mnist):
    from orchestrator.sync.run import train
    from orchestrator.sync.virtual import make_context
    from orchestrator_plugins.sync.strategies import AllReduce

    ctx = make_context(cfg, tmp_path, dataset=mnist)
    return train(AllReduce(cfg["sync"]), ctx), ctx


@pytest.fixture(scope="module")
def mnist():
    from orchestrator.data import load_mnist

    return load_mnist()


def test_the_tuned_reference_is_the_best_cell_of_the_grid(tmp_path, mnist):
    from orchestrator.sync import reference

    reference._CACHE.clear()
    grid_only = {**SMALL, "train": {**SMALL["train"], "reference_extend": 0}}
    result, ctx = _train(tmp_path, grid_only, mnist)
    ref = result.reference
    assert ref.method == "tuned" and set(ref.grid) == {"sgd lr=0.1", "sgd lr=0.02", "nesterov lr=0.05"}
    finite = {k: v for k, v in ref.grid.items() if v is not None}
    assert finite and ref.time_to_target_s == min(finite.values())
    assert f"{ref.optimizer} lr={ref.lr:g}" == min(finite, key=finite.get)
    assert result.reference_time_to_target_s == ref.time_to_target_s
    m = result.extra_metrics
    # the untuned comparison: the trial's own optimizer and lr (sgd 0.1) at W=1
    assert m["train.same_settings_reference_time_to_target_s"] == ref.grid["sgd lr=0.1"]
    assert ctx.sink.tags["train.reference_optimizer"] == ref.optimizer and "train.reference_key" in ctx.sink.tags
    assert m["sync.speedup"] == pytest.approx(ref.time_to_target_s / result.time_to_target_s)
    # same: only the trial's own cell; a second call in the process is a cache hit
    same = {**grid_only, "train": {**grid_only["train"], "reference": "same"}}
    r2, _ = _train(tmp_path, same, mnist)
    assert set(r2.reference.grid) == {"sgd lr=0.1"} and r2.reference.lr == 0.1
    r3, _ = _train(tmp_path, same, mnist)
    assert r3.reference.source == "process cache" and r3.reference.time_to_target_s == r2.reference.time_to_target_s


def test_a_trials_own_lr_off_the_grid_is_never_the_reference(tmp_path, mnist):
    """The trials of an lr sweep share one reference: the own cell, off the grid, is timed for the untuned
    comparison only, even where it is faster at W=1 than every cell of the grid (it used to win, so each trial of a
    sweep had its own denominator)."""
    from orchestrator.sync import reference

    reference._CACHE.clear()
    cfg = {**SMALL, "train": {**SMALL["train"], "optimizer": "sgd", "lr": 0.1, "reference_extend": 0,
                              "reference_grid": {"sgd": [0.02], "nesterov": [], "adam": []}}}
    result, _ = _train(tmp_path, cfg, mnist)
    ref = result.reference
    assert None not in ref.grid.values() and ref.grid["sgd lr=0.1"] < ref.grid["sgd lr=0.02"], ref.grid
    assert ref.lr == 0.02 and ref.method == "tuned" and ref.time_to_target_s == ref.grid["sgd lr=0.02"]
    assert result.extra_metrics["train.same_settings_reference_time_to_target_s"] == ref.grid["sgd lr=0.1"]
    # no cell of the grid reaches the target: the own cell is the reference, and says it is the trial's own
    cfg["train"]["reference_grid"] = {"sgd": [0.0005], "nesterov": [], "adam": []}
    ref = _train(tmp_path, cfg, mnist)[0].reference
    assert ref.grid["sgd lr=0.0005"] is None and ref.method == "same" and ref.lr == 0.1
    assert ref.time_to_target_s == ref.grid["sgd lr=0.1"] and "own optimizer" in ref.describe()
    # train.reference=same: the own cell is the reference, on the grid or off it
    cfg["train"]["reference"] = "same"
    ref = _train(tmp_path, cfg, mnist)[0].reference
    assert ref.method == "same" and ref.lr == 0.1 and ref.time_to_target_s is not None


def test_the_next_lr_past_an_edge_of_the_grid():
    from orchestrator.sync.reference import edge_step

    assert edge_step({0.1: 5.0, 0.2: 4.0}) == 0.4          # best at the top: x2
    assert edge_step({0.1: 3.0, 0.2: 4.0}) == 0.05         # best at the bottom: /2
    assert edge_step({0.1: 5.0, 0.2: 3.0, 0.4: None}) is None   # interior optimum
    assert edge_step({0.1: None, 0.2: None}) is None        # nothing reached: no direction
    assert edge_step({0.1: 3.0}) is None                         # one lr: no edge to read


def test_a_best_lr_at_the_edge_of_the_grid_is_searched_past_it(tmp_path, mnist):
    """An easy target and two small lrs: the larger is best, so the reference goes on x2 (at most
    train.reference_extend steps) and keeps the best of every cell it ran."""
    from orchestrator.sync import reference

    reference._CACHE.clear()
    cfg = {**SMALL, "train": {**SMALL["train"], "optimizer": "sgd", "lr": 0.1, "reference_extend": 2,
                              "reference_grid": {"sgd": [0.05, 0.1], "nesterov": [], "adam": []}}}
    result, _ = _train(tmp_path, cfg, mnist)
    ref = result.reference
    sgd = {float(k.split("=")[1]): v for k, v in ref.grid.items() if k.startswith("sgd")}
    assert {0.05, 0.1, 0.2} <= set(sgd) <= {0.05, 0.1, 0.2, 0.4}, ref.grid
    assert sgd[0.1] is not None and (sgd[0.05] is None or sgd[0.1] < sgd[0.05])    # so the top edge was best
    assert (0.4 in sgd) == (sgd[0.2] is not None and sgd[0.2] < sgd[0.1])          # on only while it improves
    finite = {k: v for k, v in ref.grid.items() if v is not None}
    assert ref.time_to_target_s == min(finite.values())


def test_the_tuned_reference_does_not_depend_on_the_trials_own_optimizer(tmp_path, mnist):
    """Each optimizer's lrs are searched as if unpruned: with SGD's own trial first, Adam's cells (slower than SGD's
    best) were all cut short, so Adam's best lr past the grid's edge was never tried, and the reference (and every
    speedup over it) depended on which optimizer the trial happened to use."""
    from orchestrator.sync import reference

    grid = {"sgd": [0.05, 0.1], "nesterov": [], "adam": [0.0005, 0.001]}
    refs = []
    for optimizer, lr in (("sgd", 0.1), ("adam", 0.001)):
        reference._CACHE.clear()
        cfg = {**SMALL, "train": {**SMALL["train"], "optimizer": optimizer, "lr": lr, "reference_extend": 2,
                                  "reference_grid": grid}}
        refs.append(_train(tmp_path / optimizer, cfg, mnist)[0].reference)
    assert (refs[0].optimizer, refs[0].lr, refs[0].time_to_target_s) == (refs[1].optimizer, refs[1].lr, refs[1].time_to_target_s)
    for ref in refs:       # every optimizer's edge was read: each ran a cell to its target
        assert any(v is not None for k, v in ref.grid.items() if k.startswith("adam"))
        assert any(v is not None for k, v in ref.grid.items() if k.startswith("sgd"))


def test_seeds_give_the_median_and_the_spread(tmp_path, mnist):
    cfg = {**SMALL, "train": {**SMALL["train"], "seeds": 3, "reference": "same"}}
    result, _ = _train(tmp_path, cfg, mnist)
    m = result.extra_metrics
    assert m["train.seeds"] == 3 and m["train.seeds_reached_target"] == 3
    assert m["train.time_to_target_s_min"] <= result.time_to_target_s <= m["train.time_to_target_s_max"]
    assert m["train.time_to_target_s_min"] < m["train.time_to_target_s_max"]    # the seeds do differ
    assert len(result.reference.seeds) == 3 and len(result.reference.times) == 3
    assert m["train.speedup_min"] <= m["sync.speedup"] <= m["train.speedup_max"]


@pytest.mark.parametrize("grid,match", [("{bogus:[0.1]}", "accepts: sgd, momentum, nesterov, adam"), ("{sgd:[0]}", "learning rates > 0"),
                                        ("{sgd:[x]}", "reference_grid"), ("{sgd:0.1}", "reference_grid")])
def test_a_bad_reference_grid_is_one_line_before_any_run(tmp_path, grid, match):
    out = run_inprocess(tmp_path, "+sync=allreduce", f"train.reference_grid={grid}", *QUICK)
    assert out.returncode != 0 and match in out.stderr and not store_runs(tmp_path)
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_reference_is_cached_in_the_tracking_store(tmp_path):
    """A second trial (a new process: the in-process cache cleared) reads the first trial's reference
    from its run instead of recomputing it; both runs say what the reference was."""
    from orchestrator.sync import reference

    args = ("+sync=allreduce", "train.optimizer=sgd", "train.lr=0.1", "hardware.workers=2", "sync.base_time_s=0.01",
            "train.reference_grid.sgd=[0.05,0.1]",
            "train.reference_grid.nesterov=[]", "train.reference_grid.adam=[]", "train.compare_with=null",
            "train.statistical_limit=false", "train.target_accuracy=0.5", "train.eval_every=4", "train.budget_updates=60",
            "train.eval_samples=200")     # SMALL's budget: the reference reaches its target, in a fraction of QUICK's
    reference._CACHE.clear()
    assert run_inprocess(tmp_path, *args).returncode == 0
    reference._CACHE.clear()
    assert run_inprocess(tmp_path, *args).returncode == 0
    second, first = store_runs(tmp_path)
    assert first.data.tags["train.reference_key"] == second.data.tags["train.reference_key"]
    assert "store (run " + first.info.run_id in second.data.tags["train.reference"]
    assert first.data.metrics["train.reference_time_to_target_s"] == second.data.metrics["train.reference_time_to_target_s"]
    assert second.data.tags["train.reference_optimizer"] == "sgd" and second.data.tags["train.reference_lr"] in ("0.05", "0.1", "0.2", "0.4")
