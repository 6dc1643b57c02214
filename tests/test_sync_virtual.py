"""Sync rules in the virtual runtime, on a numpy stand-in model (fast) and on the real CNN."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.execution.training import TrainSettings
from orchestrator.sync.core import SyncOptions, push_weights
from orchestrator.sync.server import ParameterServer, StalenessGate
from orchestrator.sync.virtual import VirtualRun

from tests.fakes import FakeRuntime, fake_data, strategy, sync_options

FREE_NETWORK = {"bandwidth_Gbps": 1e12, "latency_us": 0.0}  # communication ~0 s: compute-only clocks


def options(name, workers, speeds=None, stragglers=None, network=None, **sync) -> SyncOptions:
    """The options of strategy ``name`` with the ``sync`` keys given (staleness, balance, push_lr...) on ``workers``
    of ``speeds``; ``stragglers``: (probability, slowdown); ``network``: ``hardware.network``."""
    # no warm-up: it ramps the allreduce's lr (pushes get none), which the equivalence tests compare
    hardware = {"workers": workers, "worker_speeds": speeds}
    if stragglers is not None:
        hardware["stragglers"] = {"probability": stragglers[0], "slowdown": stragglers[1]}
    if network is not None:
        hardware["network"] = network
    return sync_options({"name": name, **sync}, {"hardware": hardware, "train": {"warmup_updates": 0}})


def train_settings(**kw) -> TrainSettings:
    base = dict(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=5, budget_updates=20)
    base.update(kw)
    return TrainSettings(**base)


def run(opts, s=None, base=1.0, strat=None):
    data, rt = fake_data(), FakeRuntime()
    v = VirtualRun(strat or strategy(opts.name), opts, s or train_settings(), rt, data, base)
    result, stats = v.run()
    return v, result, stats, rt


class CheckingGate(StalenessGate):
    """Also checks the invariant between grants: no worker is ever more than s+1 ahead."""

    def completed_push(self, worker, iteration_time=None):
        super().completed_push(worker, iteration_time)
        assert max(self.completed) - min(self.completed) <= self.staleness + 1


@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
@given(workers=st.integers(1, 6), s=st.integers(0, 4), p=st.floats(0.0, 0.9), k=st.floats(1.0, 20.0),
       speeds_seed=st.integers(0, 1000), proportional=st.booleans())
def test_staleness_bound_holds_under_random_delays(workers, s, p, k, speeds_seed, proportional):
    from orchestrator_plugins.sync.strategies import DelaySync

    class CheckedDelaySync(DelaySync):  # the gate is the strategy's: a subclass swaps it in
        def make_gate(self, opts):
            return CheckingGate(opts.workers, opts.staleness)

    speeds = list(np.random.default_rng(speeds_seed).uniform(0.1, 1.0, workers))
    opts = options("delay", workers, speeds, staleness=float(s), stragglers=(p, k),
                   balance="static" if proportional else "none")
    v, result, stats, _ = run(opts, strat=CheckedDelaySync({"name": "delay"}))
    assert isinstance(v.gate, CheckingGate)
    assert max(stats.gap_histogram) <= s
    assert v.gate.grants == sum(stats.gap_histogram.values())
    assert stats.pushes_applied == stats.pushes_made == sum(stats.iterations) == result.updates
    assert result.updates >= 20  # ran its whole budget (20 sample-equivalent updates = 20 pushes): no deadlock


def test_no_update_lost():
    opts = options("delay", 3, [1.0, 0.5, 0.3], staleness=2.0, stragglers=(0.3, 5.0),
                   balance="none", push_lr=0.5)
    v, result, stats, rt = run(opts)
    weights = push_weights(0.1, v.batches, 0.5)
    # replay: every gradient handed out was applied once, with its worker's weight
    assert len(rt.handed_out) == stats.pushes_applied
    assert v.server.pushes_by_worker == stats.iterations
    applied = v.theta0.astype(np.float64)
    per_worker = {w: weights[w] for w in range(3)}
    assert len(set(per_worker.values())) == 1  # a multiplier: every push weighs lr x 0.5
    for g in rt.handed_out:
        applied -= weights[0] * g
    np.testing.assert_allclose(v.server.params, applied, rtol=1e-5, atol=1e-6)


def test_delay_s0_equals_allreduce_on_the_stand_in():
    for speeds in ([1.0, 1.0, 1.0], [1.0, 0.5, 0.2]):
        a = run(options("allreduce", 3, speeds), train_settings(budget_updates=21))[0]  # 7 steps = 21 pushes
        d = run(options("delay", 3, speeds, staleness=0.0, balance="none"), train_settings(budget_updates=21))[0]
        np.testing.assert_allclose(d.final_params, a.final_params, rtol=1e-6, atol=1e-6)


def test_fast_worker_blocks_exactly_when_the_bound_says():
    # speeds 1 and 1/4 (durations 1 and 4), s=1: worker 0 runs 2 ahead -> blocked from t=2 to t=4,
    # then each 4-cycle it finishes at 4n+1 (gap 2 > 1: blocked) until 4n+4: waits 3 per cycle.
    opts = options("delay", 2, [1.0, 0.25], staleness=1.0, balance="none", network=FREE_NETWORK)
    v, result, stats, _ = run(opts, train_settings(budget_updates=10))  # 10 pushes
    assert max(stats.gap_histogram) == 1
    c0, c1 = stats.iterations
    assert c0 - c1 == 2  # the fast one is exactly s+1 ahead when it stops, having pushed
    t = result.elapsed_s
    assert stats.wait_s[1] == 0.0
    # blocked intervals of worker 0: [2,4], then [5,8], [9,12], ... up to the stop time
    expected = 2.0 + sum(min(4 * n, t) - (4 * n - 3) for n in range(2, 100) if 4 * n - 3 < t)
    assert stats.wait_s[0] == pytest.approx(expected)


def test_async_never_waits_and_is_deterministic():
    opts = options("async", 4, [1.0, 0.5, 0.25, 1.0], stragglers=(0.2, 4.0))
    _, r1, s1, _ = run(opts)
    _, r2, s2, _ = run(opts)
    assert s1.wait_s == [0.0] * 4
    assert [(p.step, p.elapsed_s, p.loss) for p in r1.history] == [(p.step, p.elapsed_s, p.loss) for p in r2.history]
    assert s1.iterations[0] > s1.iterations[2]  # the fast worker pushed more


def test_allreduce_step_lasts_as_long_as_the_slowest():
    # 30 sample-equivalent updates = 10 steps over 3 batches
    _, result, stats, _ = run(options("allreduce", 3, [1.0, 0.5, 0.25]), train_settings(budget_updates=30))
    # 8 float32 parameters = 32 bytes on the default 10 Gbit/s, 50 us ring: 4/3 * 32 / 1.25e9 + 4 * 50e-6
    ring = 4 / 3 * 32 / 1.25e9 + 4 * 50e-6
    assert result.updates == 10 and result.elapsed_s == pytest.approx(10 * (4.0 + ring), rel=1e-9)
    assert stats.wait_s == pytest.approx([30.0, 20.0, 0.0])


def test_dynamic_bound_follows_speed_spread():
    opts = options("delay", 2, [1.0, 0.2], staleness=1.0, dynamic_staleness=True, max_staleness=8.0,
                   balance="none")
    _, _, stats, _ = run(opts, train_settings(budget_updates=30))
    assert stats.bound_max == 4.0  # ceil(5) - 1
    assert max(stats.gap_histogram) == 4


# -- the real CNN ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mnist():
    from orchestrator.data import load_mnist

    return load_mnist()


def cnn_run(opts, s, data):
    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.models import cnn

    rt = ModelRuntime(cnn.spec({}), seed=s.seed, lr=s.lr)
    v = VirtualRun(strategy(opts.name), opts, s, rt, data, 0.01)
    return v, *v.run()


def test_delay_s0_equals_allreduce_on_the_cnn(mnist):
    s = TrainSettings(batch_size=32, stop="budget", budget_updates=3, eval_every=100, eval_samples=100)
    a = cnn_run(options("allreduce", 3, [1.0, 0.5, 1.0]), s, mnist)[0]
    d = cnn_run(options("delay", 3, [1.0, 0.5, 1.0], staleness=0.0, balance="none"), s, mnist)[0]
    assert not np.allclose(a.final_params, a.theta0)
    np.testing.assert_allclose(d.final_params, a.final_params, rtol=1e-4, atol=1e-6)


def test_64_virtual_workers_run(mnist):
    s = TrainSettings(batch_size=8, stop="budget", budget_updates=128, eval_every=64, eval_samples=100)
    speeds = list(np.linspace(0.25, 1.0, 64))
    v, result, stats = cnn_run(options("delay", 64, speeds, staleness=2.0), s, mnist)
    assert result.updates >= 128 and min(stats.iterations) >= 1 and max(stats.gap_histogram) <= 2


def test_plugin_writes_metrics_and_artifacts(mnist, tmp_path):
    from orchestrator.sync.virtual import make_context
    from orchestrator_plugins.sync.strategies import DelaySync

    cfg = {"hardware": {"workers": 2, "worker_speeds": [1.0, 0.5]},
           "sync": {"name": "delay", "staleness": 1, "base_time_s": 0.01},
           "train": {"budget_updates": 40, "eval_every": 2, "eval_samples": 100, "target_accuracy": 0.3,
                     "reference": "same"}}
    ctx = make_context(cfg, tmp_path, dataset=mnist)
    from orchestrator.sync.run import train

    result = train(DelaySync(cfg["sync"]), ctx)
    m = result.extra_metrics
    assert m["sync.staleness_max"] <= 1 and m["sync.pushes_applied"] == m["sync.pushes_made"]
    assert m["sync.worker0.iterations"] + m["sync.worker1.iterations"] == result.updates
    assert result.clock == "virtual" and result.time_to_target_s is not None
    assert result.reference_time_to_target_s is not None and ctx.sink.tags["train.reference_method"] == "same"
    assert sorted(p.rsplit("/", 1)[-1] for p in ctx.sink.artifacts) == ["sync_convergence.png", "sync_staleness.json",
                                                                     "sync_time_breakdown.png"]


def test_a_push_in_flight_when_training_stops_is_dropped():
    import threading

    server, closed = ParameterServer(np.zeros(3, np.float32), [0.5, 0.5]), threading.Event()
    assert server.push(0, np.ones(3, np.float32), 0, 8, closed=closed) == 1
    closed.set()  # the target was reached on version 1: the final parameters are version 1's
    assert server.push(1, np.ones(3, np.float32), 0, 8, closed=closed) is None
    assert server.version == 1 and server.pushes_by_worker == [1, 0] and np.allclose(server.params, -0.5)
