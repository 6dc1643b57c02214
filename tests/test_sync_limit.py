"""The statistical limit bounds what it limits (issue 44, item 6): S(G) is tried with the optimizer and lr of
every configuration it is set beside, its spread is the best cell's fastest and slowest seed, and a figure
that beats the limit's fastest seed is called out in the summary, by how much."""

import dataclasses
from types import SimpleNamespace

import pytest

from orchestrator.summary import context_lines
from orchestrator.sync.figures import Figure
from orchestrator.sync.limit import Candidate, candidates, limit_metrics


def _ctx(optimizer="adam", lr=0.004):
    settings = SimpleNamespace(optimizer=optimizer, lr=lr)
    return SimpleNamespace(settings=settings, cfg=None)


def test_candidates_are_the_tuned_worker_the_trial_and_the_comparison_each_once():
    ref = SimpleNamespace(optimizer="adam", lr=0.008)
    got = candidates(ref, _ctx("adam", 0.004), "delay", ("allreduce", SimpleNamespace(optimizer="adam", lr=0.008)))
    assert got == [Candidate("adam", 0.008, "the tuned worker"), Candidate("adam", 0.004, "delay")]
    got = candidates(ref, _ctx("adam", 0.008), "allreduce", ("allreduce", SimpleNamespace(optimizer="nesterov", lr=0.05)))
    assert [(c.optimizer, c.lr, c.who) for c in got] == [("adam", 0.008, "the tuned worker"), ("nesterov", 0.05, "allreduce")]
    assert [c.who for c in candidates(ref, _ctx(), "delay", None)] == ["the tuned worker", "delay"]


def test_the_real_comparison_defaults_join_the_grid():
    """conf/sync/allreduce.yaml's optimizer and lr, read through the comparison's own set-up."""
    from orchestrator.execution.training import TrainSettings
    from orchestrator.sync.compare import comparison_setup, strategy_defaults

    d = strategy_defaults("allreduce")["train"]
    ctx = SimpleNamespace(settings=dataclasses.replace(TrainSettings(), optimizer="sgd", lr=0.1), cfg=None)
    got = candidates(SimpleNamespace(optimizer="sgd", lr=0.1), ctx, "delay", ("allreduce", comparison_setup(ctx, "allreduce")[1]))
    assert (d["optimizer"], float(d["lr"])) in [(c.optimizer, c.lr) for c in got]
    assert got[-1].who == "allreduce"


@pytest.mark.parametrize(("compare_t", "beaten"), [(1.0, True), (1.2, False)])
def test_a_time_below_the_limits_fastest_seed_is_flagged_with_the_margin(compare_t, beaten):
    lim = Figure(1.25, "synchronous, G=128 ...", spread=(1.15, 1.40))
    m = limit_metrics(lim, tt=3.0, ref_t=2.0, compare_t=compare_t)
    assert m["limit.speedup"] == pytest.approx(2.0 / 1.25)
    assert m["limit.fastest_seed_s"] == 1.15 and m["limit.slowest_seed_s"] == 1.40
    assert "limit.beaten_by_trial" not in m
    assert ("limit.beaten_by_compare" in m) is beaten
    if beaten:
        assert m["limit.beaten_by_compare"] == pytest.approx(1.15 / 1.0 - 1)


def test_without_a_spread_any_figure_below_the_limit_beats_it():
    m = limit_metrics(Figure(2.0, "x"), tt=1.9, ref_t=4.0, compare_t=None)
    assert m["limit.beaten_by_trial"] == pytest.approx(2.0 / 1.9 - 1)


def test_the_summary_says_the_limit_was_wrong_and_by_how_much():
    m = {"compare.time_to_target_s": 1.0, "compare.speedup": 1.668, "compare.speedup_over_it": 2.87,
         "hardware.capacity": 2.75, "limit.speedup": 1.5, "limit.time_to_target_s": 1.2, "train.fraction_of_limit": 0.39,
         "limit.fastest_seed_s": 1.10, "limit.slowest_seed_s": 1.30, "limit.beaten_by_compare": 0.10}
    t = {"sync": "delay", "compare.label": "allreduce, sync.balance=static", "compare.source": "computed",
         "limit.label": "synchronous, G=128 ..."}
    lines = context_lines(m, t)
    limits = next(ln for ln in lines if ln.startswith("  limits:"))
    assert "its seeds 1.385x to 1.636x" in limits          # 1.8 s (the tuned worker) / 1.3 s and / 1.1 s
    warn = [ln for ln in lines if "beat the statistical limit" in ln]
    assert len(warn) == 1 and warn[0].startswith("  WARNING:  allreduce beat the statistical limit by 10.0%")
    assert "was wrong here" in warn[0]
    quiet = context_lines({k: v for k, v in m.items() if k != "limit.beaten_by_compare"}, t)
    assert not any("WARNING" in ln for ln in quiet)


def test_the_limit_says_what_of_the_hardware_its_step_time_leaves_out():
    from orchestrator.config.hardware import DataParallelHardware
    from orchestrator.sync.limit import nominal_note

    assert nominal_note(DataParallelHardware.from_node(None, 4)) == ""
    hw = DataParallelHardware.from_node({"stragglers": {"probability": 0.2, "slowdown": 4}, "jitter": {"sigma": 0.3}}, 4)
    assert nominal_note(hw) == ("; T_k(G) at the nominal speeds, without the stragglers and jitter: an upper bound, "
                                "loose here")


def test_a_verdict_against_the_same_strategy_names_the_comparisons_settings():
    """allreduce with equal batches against balanced allreduce: not "allreduce ... faster than allreduce"."""
    t = {"sync": "allreduce", "compare.label": "allreduce, sync.balance=static, fixed batch 64", "compare.source": "computed"}
    lines = context_lines({"compare.speedup_over_it": 0.5, "compare.time_to_target_s": 1.0}, t)
    assert lines[-1] == ("  verdict:  allreduce (sync.balance=static) wins on these workers: 2.00x faster to the target "
                         "than this trial (allreduce)")
    t["sync"] = "delay"
    assert context_lines({"compare.speedup_over_it": 2.0}, t)[-1] == (
        "  verdict:  delay beat allreduce on these workers: 2.00x as fast to the target")
