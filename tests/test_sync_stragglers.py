"""Straggler-tolerant schemes on the sync engine (issue 29 item 3) and where the time goes (item 4), on the
virtual clock with the numpy stand-in model (fast): backup workers (Chen et al. 2016), async with a staleness
cut-off (Ringmaster ASGD), lognormal step-time jitter, the per-worker time breakdown."""

import dataclasses
import math

import numpy as np
import pytest

from orchestrator.config.hardware import parse_jitter
from orchestrator.errors import ConfigError
from orchestrator.execution.training import TrainSettings
from orchestrator.sync.core import jitter_factor
from orchestrator.sync.report import sync_metrics, time_breakdown
from orchestrator.sync.virtual import VirtualRun

from tests.fakes import FakeRuntime, fake_data, strategy

FREE_NETWORK = {"bandwidth_Gbps": 1e12, "latency_us": 0.0}


def settings(**kw) -> TrainSettings:
    return TrainSettings(**{**dict(batch_size=4, lr=0.1, target_accuracy=1.0, stop="budget", eval_every=8,
                                   budget_updates=80), **kw})


def run(cfg_sync, workers=4, speeds=None, s=None, hw=None, net=None, train=None):
    strat = strategy(cfg_sync)
    cfg = {"hardware": {"workers": workers, "worker_speeds": speeds, **(hw or {})},
           "train": {"warmup_updates": 0, **(train or {})}}
    opts = dataclasses.replace(strat.options(cfg), network=net or FREE_NETWORK)
    v = VirtualRun(strat, opts, s or settings(), FakeRuntime(), fake_data(), 1.0)
    return v, *v.run()


# -- backup workers ------------------------------------------------------------------------------
def test_backup_workers_with_b0_is_allreduce():
    speeds = [1.0, 0.5, 1.0, 0.25]
    a, ra, sa = run({"name": "allreduce", "balance": "none"}, speeds=speeds, hw={"stragglers": {"probability": 0.2,
                                                                                                  "slowdown": 4}})
    b, rb, sb = run({"name": "backup", "backup_workers": 0, "balance": "none"}, speeds=speeds,
                    hw={"stragglers": {"probability": 0.2, "slowdown": 4}})
    np.testing.assert_array_equal(a.final_params, b.final_params)
    assert ra.elapsed_s == rb.elapsed_s and sa.wait_s == sb.wait_s and sb.dropped == [0] * 4


def test_backup_workers_drop_the_straggler_and_finish_sooner():
    """One worker at speed 0.25: allreduce waits 4 s a round for it, one backup worker closes each round
    at 1 s and drops the straggler's gradient every round."""
    speeds = [1.0, 1.0, 1.0, 0.25]
    _, ra, _ = run({"name": "allreduce", "balance": "none"}, speeds=speeds)
    _, rb, sb = run({"name": "backup", "backup_workers": 1, "balance": "none"}, speeds=speeds)
    assert ra.updates == rb.updates == 20                   # 80 sample-equivalent updates of W = 4 batches
    assert ra.elapsed_s == pytest.approx(20 * 4.0) and rb.elapsed_s == pytest.approx(20 * 1.0)
    assert sb.dropped == [0, 0, 0, 20] and sb.iterations == [20, 20, 20, 0]
    assert sb.pushes_applied == 60 and sb.pushes_made == 80
    m = sync_metrics(sb)
    assert m["sync.gradients_dropped"] == 20 and m["sync.worker3.dropped"] == 20


def test_backup_workers_under_transient_stragglers_and_jitter_are_faster_per_round():
    hw = {"stragglers": {"probability": 0.1, "slowdown": 5}, "jitter": {"distribution": "lognormal", "sigma": 0.5}}
    _, ra, _ = run({"name": "allreduce", "balance": "none"}, workers=8, hw=hw)
    _, rb, sb = run({"name": "backup", "backup_workers": 2, "balance": "none"}, workers=8, hw=hw)
    assert ra.updates == rb.updates
    assert rb.elapsed_s < 0.7 * ra.elapsed_s
    assert sum(sb.dropped) == 2 * rb.updates


def test_the_round_averages_the_gradients_it_kept():
    """The update of a backup round is the batch-weighted mean of the first N gradients only: with equal
    batches and one hopeless straggler, it is allreduce over the other three (same data order)."""
    v, _, _ = run({"name": "backup", "backup_workers": 1, "balance": "none"}, speeds=[1, 1, 1, 0.01],
                  s=settings(budget_updates=4), train={"lr_scaling": "none"})
    rt, data = FakeRuntime(), fake_data()
    from orchestrator.execution.training import BatchSampler

    samplers = [BatchSampler(len(data.y_train), 0, i) for i in range(3)]
    theta = rt.get_flat()
    g = np.mean([theta - data.x_train[s.next(4)].mean(axis=0) for s in samplers], axis=0)
    np.testing.assert_allclose(v.final_params, theta - 0.1 * g, rtol=1e-6)


def test_backup_workers_are_checked():
    with pytest.raises(ConfigError, match=r"^sync.backup_workers=4 must be < hardware.workers=4$"):
        strategy({"name": "backup", "backup_workers": 4}).options({"hardware": {"workers": 4}})
    with pytest.raises(ConfigError, match=r"^sync.backup_workers=-1 must be an integer >= 0"):
        strategy({"name": "backup", "backup_workers": -1})


# -- async with a staleness cut-off ----------------------------------------------------------------
def test_cutoff_inf_is_async_and_no_applied_push_is_older_than_r():
    speeds = [1.0, 0.5, 0.25, 1.0]
    a, ra, sa = run("async", speeds=speeds)
    c, rc, sc = run({"name": "async_cutoff", "max_delay": 10**6}, speeds=speeds)
    np.testing.assert_array_equal(a.final_params, c.final_params)
    assert ra.elapsed_s == rc.elapsed_s and sum(sc.dropped) == 0
    _, r1, s1 = run({"name": "async_cutoff", "max_delay": 1}, speeds=speeds)
    assert max(s1.update_staleness) <= 1 and sum(s1.dropped) > 0
    m = sync_metrics(s1)
    assert m["sync.pushes_rejected"] == sum(s1.dropped) == m["sync.gradients_dropped"]
    assert s1.pushes_made == s1.pushes_applied + sum(s1.dropped) and r1.updates == s1.pushes_applied


# -- jitter ---------------------------------------------------------------------------------------
def test_jitter_is_lognormal_with_mean_one():
    rng = np.random.default_rng(0)
    draws = np.array([jitter_factor(rng, 0.5) for _ in range(20000)])
    assert draws.mean() == pytest.approx(1.0, abs=0.02)
    assert np.median(draws) == pytest.approx(math.exp(-0.125), abs=0.02)
    assert np.std(np.log(draws)) == pytest.approx(0.5, abs=0.01)
    assert jitter_factor(rng, 0.0) == 1.0


def test_jitter_config():
    assert parse_jitter(None) == 0.0 and parse_jitter({"sigma": 0.3}) == 0.3
    for bad, msg in (({"sigma": -1}, r"^hardware.jitter.sigma=-1 must be in \[0, 5\]$"),
                     ({"distribution": "pareto", "sigma": 1}, r"^hardware.jitter.distribution='pareto' is not one "),
                     ({"sigma": 1, "mu": 0}, r"^unknown key hardware.jitter.mu "), (3, r"^hardware.jitter=3 must be")):
        with pytest.raises(ConfigError, match=msg):
            parse_jitter(bad)
    s = strategy("allreduce")
    assert s.options({"hardware": {"workers": 2, "jitter": {"sigma": 0.2}}}).hardware.jitter_sigma == 0.2


def test_a_misspelt_straggler_or_speed_change_key_is_refused():
    from orchestrator.config.hardware import Stragglers, parse_speed_changes

    with pytest.raises(ConfigError, match=r"^unknown key hardware.stragglers.probabilty \(hardware.stragglers accepts"):
        Stragglers.from_node({"probabilty": 0.1, "slowdown": 4})       # ran a trial without stragglers
    with pytest.raises(ConfigError, match=r"^unknown key hardware.speed_changes\[0\].speeed "):
        parse_speed_changes([{"worker": 0, "at_s": 1, "speed": 0.5, "speeed": 0.2}], 2)
    assert Stragglers.from_node({"probability": 0.1, "slowdown": 4}) == Stragglers(0.1, 4.0)


def test_jitter_keeps_the_straggler_draws_and_sigma0_changes_nothing():
    hw = {"stragglers": {"probability": 0.2, "slowdown": 3}}
    a = run("allreduce", hw=hw)[1]
    b = run("allreduce", hw={**hw, "jitter": {"sigma": 0.0}})[1]
    c = run("allreduce", hw={**hw, "jitter": {"sigma": 0.3}})[1]
    assert a.elapsed_s == b.elapsed_s != c.elapsed_s


# -- where the time goes ------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg_sync", ["allreduce", {"name": "backup", "backup_workers": 1}, "async",
                                      {"name": "delay", "staleness": 1}])
def test_each_workers_time_adds_up_to_the_run(cfg_sync):
    """compute + waiting + communication (of which server queueing) = the run's time, per worker (a server
    strategy's iteration is charged when it starts: the one under way when the run stops may overshoot it, by
    at most one iteration, 4 s of compute at speed 0.25 plus a pull and a push)."""
    net = {"bandwidth_Gbps": 1e-6, "latency_us": 10.0}      # slow links: communication and queueing matter
    v, result, stats = run(cfg_sync, speeds=[1.0, 0.5, 1.0, 0.25], net=net, s=settings(budget_updates=24))
    rows = time_breakdown(stats)
    for i, row in enumerate(rows):
        total = sum(row.values())
        if v.strategy.uses_server:
            assert result.elapsed_s - 1e-9 <= total <= result.elapsed_s + 5.0, (i, row)
        else:
            assert total == pytest.approx(result.elapsed_s), (i, row)
    if v.strategy.uses_server:
        assert sum(r["queue"] for r in rows) > 0            # 4 workers on one server link queue
        assert all(r["comm"] >= 0 for r in rows)


def test_the_breakdown_is_drawn_and_says_simulated(tmp_path):
    from orchestrator.sync.report import plot_breakdown

    _, result, stats = run("async", speeds=[1.0, 0.5], workers=2, net={"bandwidth_Gbps": 1e-6})
    path = plot_breakdown(stats, tmp_path / "b.png", "async W=2")
    assert path.exists() and path.stat().st_size > 1000
    from orchestrator.sync import report

    assert "simulated (virtual clock)" in report.plot_breakdown.__defaults__


@pytest.mark.parametrize("name,key,value", [("backup", "backup_workers", 1), ("async_cutoff", "max_delay", 16)])
def test_the_options_compose_with_their_schema(name, key, value):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="orchestrator_conf", version_base=None):
        cfg = compose("config", overrides=[f"+sync={name}", "hardware.jitter={sigma: 0.3}"])
    assert cfg.sync.name == name and cfg.sync[key] == value and cfg.hardware.jitter.sigma == 0.3
    strat = strategy(cfg.sync)
    assert strat.options(cfg).hardware.jitter_sigma == 0.3


@pytest.mark.slow
@pytest.mark.mpi
def test_backup_workers_on_mpi_ranks_drop_the_emulated_straggler(tmp_path):
    """Emulated speeds (a speed-1 iteration lasts 0.1 s, rank 2 runs at 0.2: 0.5 s): with one backup worker
    every round closes at the fast ranks' 0.1 s, the slow rank's vector weighs 0, and the replicas agree."""
    from orchestrator.data import load_mnist
    from orchestrator.sync.mpi import train_mpi
    from orchestrator.sync.virtual import make_context

    cfg = {"hardware": {"workers": 3, "worker_speeds": [1.0, 1.0, 0.2], "emulated_step_s": 0.1},
           "sync": {"name": "backup", "backup_workers": 1, "runtime": "mpi", "timeout_s": 180, "balance": "none"},
           "train": {"budget_updates": 24, "eval_every": 24, "eval_samples": 100, "stop": "budget",
                     "batch_size": 16}}
    strat = strategy(cfg["sync"])
    ctx = make_context(cfg, tmp_path, dataset=load_mnist(limit=2000))
    result, stats = train_mpi(strat, strat.options(cfg), ctx, inject={"verify_every": 1})
    assert result.updates == 8 and stats.dropped == [0, 0, 8]
    assert result.extra_metrics["sync.replica_max_diff"] == 0.0
    assert result.elapsed_s < 8 * 0.3                      # allreduce would wait 8 x 0.5 s for the slow rank
    # the time breakdown, emulated: the slow rank's compute ends at each round's close (about the fast ones')
    assert stats.breakdown_kind == "emulated (MPI ranks, wall clock)"
    assert 0.5 * 8 * 0.1 < stats.compute_s[0] and stats.compute_s[2] < 1.5 * stats.compute_s[0]
