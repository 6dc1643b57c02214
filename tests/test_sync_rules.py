"""Update rules of the sync engine, by hand: the optimizers (orchestrator.execution.optim) and the
delay-compensated parameter server (DC-ASGD), and their one-line config errors."""

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.execution.optim import Optimizer, OptimizerSettings
from orchestrator.sync.server import DelayCompensatedServer, ParameterServer

from tests.fakes import fake_data, strategy, sync_options

G1, G2 = np.array([1.0, -2.0], np.float32), np.array([0.5, 0.5], np.float32)


def steps(name, **kw):
    opt, theta = Optimizer(OptimizerSettings(name, **kw)), np.array([1.0, 1.0], np.float32)
    out = [opt.step(theta, G1, 0.1).copy(), opt.step(theta, G2, 0.1).copy()]
    return out


def test_sgd_and_weight_decay():
    a, b = steps("sgd")
    np.testing.assert_allclose(a, [0.9, 1.2])
    np.testing.assert_allclose(b, [0.85, 1.15])
    a, _ = steps("sgd", weight_decay=0.5)                    # g + 0.5 * theta = [1.5, -1.5]
    np.testing.assert_allclose(a, [0.85, 1.15])


def test_momentum_and_nesterov():
    a, b = steps("momentum", momentum=0.5)                   # v1 = g1; v2 = 0.5 g1 + g2 = [1.0, -0.5]
    np.testing.assert_allclose(a, [0.9, 1.2])
    np.testing.assert_allclose(b, [0.8, 1.25])
    a, b = steps("nesterov", momentum=0.5)                   # step 1: g1 + 0.5 v1 = 1.5 g1
    np.testing.assert_allclose(a, [0.85, 1.3])
    np.testing.assert_allclose(b, a - 0.1 * (G2 + 0.5 * np.array([1.0, -0.5])), rtol=1e-6)


def test_adam_first_step_is_lr_times_the_sign():
    a, _ = steps("adam")                                     # m_hat = g, v_hat = g^2 -> g / |g|
    np.testing.assert_allclose(a, [0.9, 1.1], rtol=1e-5)


@pytest.mark.parametrize("kw,key", [({"name": "lion"}, "train.optimizer='lion'"), ({"momentum": 1.0}, "train.momentum=1.0"),
                                    ({"beta2": -0.1}, "train.beta2=-0.1"), ({"weight_decay": -1.0}, "train.weight_decay=-1.0")])
def test_optimizer_settings_are_checked(kw, key):
    with pytest.raises(ConfigError, match="^" + key.replace(".", r"\.").replace("(", r"\(")):
        OptimizerSettings(**kw)


def test_delay_compensation_corrects_a_stale_gradient_by_hand():
    server = DelayCompensatedServer(np.array([1.0, 2.0], np.float32), [0.1, 0.1], lam=0.5)
    _, v0 = server.pull(0)                                   # worker 0 pulls w = [1, 2]
    _, v1 = server.pull(1)
    server.push(1, G2, v1, 4)                                # w = [0.95, 1.95]; worker 1's pull was fresh
    server.push(0, G1, v0, 4)                                # g + 0.5 g*g*(w - w_pulled) = g + 0.5 g^2 (-0.05)
    corrected = G1 + 0.5 * G1 * G1 * np.float32(-0.05)
    np.testing.assert_allclose(server.params, np.array([0.95, 1.95]) - 0.1 * corrected, rtol=1e-6)
    assert server.update_staleness == {0: 1, 1: 1}
    # the reported size of the correction: worker 1's fresh push was corrected by 0, worker 0's by this
    ratio = np.linalg.norm(corrected - G1) / np.linalg.norm(G1)
    assert server.metrics()["sync.dc_correction_ratio"] == pytest.approx(np.median([0.0, ratio]), rel=1e-5)
    assert ParameterServer(np.zeros(2, np.float32), [0.1]).metrics() == {}


def test_adaptive_delay_compensation_scales_lambda_by_the_mean_square():
    server = DelayCompensatedServer(np.array([1.0, 2.0], np.float32), [0.1, 0.1], lam=0.5, adaptive=True, decay=0.5)
    server.pull(0)
    server.params[:] = [1.2, 1.6]                            # as if others had pushed
    g = G1
    lam = 0.5 / np.sqrt(g * g + 1e-7)                        # first push: the mean square is g^2
    expected = np.array([1.2, 1.6]) - 0.1 * (g + lam * g * g * np.array([0.2, -0.4]))
    server.push(0, g, 0, 4)
    np.testing.assert_allclose(server.params, expected, rtol=1e-5)


def test_without_delay_compensation_the_server_is_plain():
    opts = sync_options({"name": "delay"}, {"hardware": {"workers": 2}})
    assert type(strategy("delay").make_server(np.zeros(2, np.float32), [0.1, 0.1], opts)) is ParameterServer
    opts = sync_options({"name": "delay", "delay_compensation": 0.3, "delay_compensation_mode": "adaptive"},
                        {"hardware": {"workers": 2}})
    server = strategy("delay").make_server(np.zeros(2, np.float32), [0.1, 0.1], opts)
    assert isinstance(server, DelayCompensatedServer) and server.adaptive and server.lam == pytest.approx(0.3)


@pytest.mark.parametrize("sync,message", [
    ({"name": "allreduce", "delay_compensation": 0.1}, r"^unknown key sync\.delay_compensation \(sync accepts: "),
    ({"name": "async", "delay_compensation": -1}, r"^sync\.delay_compensation=-1"),
    ({"name": "async", "delay_compensation": 0.1, "delay_compensation_mode": "taylor"},
     r"^sync\.delay_compensation_mode='taylor' \(accepted: constant, adaptive\)$"),
])
def test_delay_compensation_config_errors(sync, message):
    with pytest.raises(ConfigError, match=message):
        sync_options(sync, {"hardware": {"workers": 2}})


def test_the_virtual_runtime_runs_a_delay_compensated_server():
    import dataclasses

    from orchestrator.execution.training import TrainSettings
    from orchestrator.sync.virtual import VirtualRun

    from tests.fakes import FakeRuntime, fake_data

    s = TrainSettings(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=5, budget_updates=40)
    finals = {}
    for lam in (0.0, 0.5):
        cfg_sync = {"name": "async", "delay_compensation": lam}
        opts = sync_options(cfg_sync, {"hardware": {"workers": 4, "worker_speeds": [1, 0.5, 0.25, 1]}})
        v = VirtualRun(strategy(cfg_sync), dataclasses.replace(opts, sync=dataclasses.replace(opts.sync, balance="none")), s, FakeRuntime(), fake_data(), 1.0)
        result, stats = v.run()
        assert stats.pushes_applied == 40 and max(stats.update_staleness) > 0    # stale pushes happened
        finals[lam] = v.final_params
    assert sorted(v.server.backup) == [0, 1, 2, 3]            # one pulled copy per worker
    assert not np.allclose(finals[0.0], finals[0.5])          # the correction changed the stale pushes


# -- train.optimizer in the runtimes ---------------------------------------------------------------
def _fake_run(strat_cfg, workers, speeds, **train):
    import dataclasses

    from orchestrator.execution.training import TrainSettings
    from orchestrator.sync.strategy import SingleWorker
    from orchestrator.sync.virtual import VirtualRun

    from tests.fakes import FakeRuntime, fake_data

    s = TrainSettings(**{**dict(batch_size=4, lr=0.05, target_accuracy=2.0, stop="budget", eval_every=5,
                                budget_updates=30), **train})
    strat = SingleWorker() if strat_cfg is None else strategy(strat_cfg)
    opts = strat.options({"hardware": {"workers": workers, "worker_speeds": speeds}, "train": {"warmup_updates": 0}})
    rt = FakeRuntime()
    v = VirtualRun(strat, dataclasses.replace(opts, sync=dataclasses.replace(opts.sync, balance="none")), s, rt, fake_data(), 1.0)
    v.run()
    return v, rt, s


@pytest.mark.parametrize("name", ["momentum", "nesterov", "adam"])
def test_a_collective_applies_the_optimizer_to_the_averaged_gradient(name):
    """One worker: every round's gradient goes through the rule once, in order (a replay agrees)."""
    v, rt, s = _fake_run(None, 1, None, optimizer=name, momentum=0.8)
    theta, rule = v.theta0.copy(), s.new_optimizer()
    for g in rt.handed_out:
        rule.step(theta, g, 0.05)
    assert len(rt.handed_out) == 30
    np.testing.assert_allclose(v.final_params, theta, rtol=1e-6, atol=1e-7)


def test_a_parameter_server_keeps_the_optimizer_state_and_applies_every_push_through_it():
    v, rt, s = _fake_run({"name": "async"}, 3, [1.0, 0.5, 0.25], optimizer="momentum", momentum=0.9)
    w = v.server.weights[0]
    assert len(set(v.server.weights)) == 1                   # equal batches: one push weight
    theta, rule = v.theta0.copy(), s.new_optimizer()
    for g in rt.handed_out:                                  # pushes are applied in the order computed
        rule.step(theta, g, w)
    np.testing.assert_allclose(v.server.params, theta, rtol=1e-6, atol=1e-7)
    assert v.server.optimizer.s.name == "momentum" and v.server.optimizer.t == len(rt.handed_out)


def test_plain_sgd_is_the_default_and_a_bad_rule_is_one_line():
    from orchestrator.execution.training import TrainSettings

    assert TrainSettings.from_cfg({}).optimizer_settings().is_plain_sgd
    with pytest.raises(ConfigError, match=r"^train\.optimizer='lion' \(accepted: sgd, momentum, nesterov, adam\)$"):
        TrainSettings.from_cfg({"optimizer": "lion"})
    with pytest.raises(ConfigError, match=r"^train\.momentum=1\.5 must be in \[0, 1\)$"):
        TrainSettings.from_cfg({"optimizer": "momentum", "momentum": 1.5})


def test_the_single_worker_loop_applies_the_optimizer(tmp_path):
    """No sync strategy: the training loop takes the same flat rule (a replay on a second runtime agrees)."""
    from orchestrator.data import load_mnist
    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.execution.single_worker import train_single_worker
    from orchestrator.execution.training import BatchSampler, NullSink, TrainContext, TrainSettings
    from orchestrator.models import cnn

    data = load_mnist(limit=400)
    s = TrainSettings(batch_size=16, lr=0.01, stop="budget", budget_updates=6, eval_every=100, eval_samples=50,
                      optimizer="adam")
    spec = cnn.spec({})
    rt = ModelRuntime(spec, seed=0, lr=s.lr)
    ctx = TrainContext(settings=s, dataset=data, model=spec, cluster=None, sink=NullSink(), output_dir=tmp_path, cfg={})
    train_single_worker(ctx, rt)
    ref = ModelRuntime(spec, seed=0, lr=s.lr)
    theta, rule, sampler = ref.get_flat(), s.new_optimizer(), BatchSampler(len(data.x_train), s.seed)
    for _ in range(6):
        idx = sampler.next(16)
        ref.set_flat(theta)
        theta = rule.step(theta, ref.gradient(data.x_train[idx], data.y_train[idx])[1], s.lr)
    np.testing.assert_allclose(rt.get_flat(), theta, rtol=1e-4, atol=1e-6)


# -- SyncOptions: the typed groups, their record and the MPI ranks' copy -----------------------------
_ALLREDUCE_NODE = {"name": "allreduce", "balance": "static", "overlap": True}
_ALLREDUCE_CFG = {"hardware": {"workers": 2, "stragglers": {"probability": 0.1, "slowdown": 3}, "jitter": {"sigma": 0.2},
                               "speed_changes": [{"worker": 1, "at_s": 2.0, "speed": 0.5}], "network": {"bandwidth_Gbps": 5}},
                  "train": {"lr_scaling": "linear", "batch_policy": "hybrid", "warmup_updates": 3, "batch_size": 32}}


def test_the_comparison_key_hashes_the_record_an_earlier_version_cached_under():
    """``compare.flat_record`` is the flat record SyncOptions was before it held the typed groups: the comparison's
    cache key hashes it, so that figures an earlier version stored still hit (the literal is that version's
    ``dataclasses.asdict(opts)``)."""
    import json

    from orchestrator.sync.compare import flat_record

    opts = sync_options(_ALLREDUCE_NODE, _ALLREDUCE_CFG)
    old = ('{"adaptive_ema": 0.9, "adaptive_every": 20, "adaptive_max_batch": 1024, "adaptive_min_batch": null, '
           '"adaptive_noise": "simple", "balance": "static", "balance_every": 10, "base_time_s": null, "batch_policy": '
           '"hybrid", "colocated": false, "delay_compensation": 0.0, "delay_compensation_mode": "constant", '
           '"dynamic_staleness": false, "emulated_step_s": null, "global_batch_max": 512, "hostfile": null, '
           '"jitter_sigma": 0.2, "lr_rule": "linear", "max_staleness": 8.0, "name": "allreduce", "network": '
           '{"bandwidth_Gbps": 5}, "overlap": true, "per_sample_s": null, "push_lr": "scaled", "runtime": "virtual", '
           '"shards": 1, "speed_changes": [[1, 2.0, 0.5]], "speeds": [1.0, 1.0], "staleness": 0.0, "step_overhead_s": '
           'null, "straggler_p": 0.1, "straggler_slowdown": 3.0, "timeout_s": 600.0, "warmup_samples": 96, "workers": 2}')
    assert json.dumps(flat_record(opts), sort_keys=True, default=str) == old


def test_the_comparison_is_cached_per_clock():
    """A comparison timed on one compute model (the virtual clock one process measured) is never read by a trial
    on another: the same options on another clock are another key (a figure over another clock's reference was
    a speedup of two clocks)."""
    import types

    from orchestrator.execution.training import TrainSettings
    from orchestrator.sync.compare import comparison_key
    from orchestrator.sync.costmodel import ComputeModel

    opts = sync_options(_ALLREDUCE_NODE, _ALLREDUCE_CFG)
    ctx = types.SimpleNamespace(dataset=fake_data(), model=types.SimpleNamespace(name="cnn"), worker_step_time_s=None)
    key = lambda cm: comparison_key(opts, ctx, TrainSettings(), _ALLREDUCE_NODE, cm)  # noqa: E731
    assert key(ComputeModel(0.0004, 0.00028)) == key(ComputeModel(0.0004, 0.00028))
    assert key(ComputeModel(0.0004, 0.00028)) != key(ComputeModel(0.0035, 0.00024))


def test_the_comparison_runs_on_the_trials_clock(monkeypatch, tmp_path):
    """A delay trial with sync.step_overhead_s / per_sample_s set was compared with allreduce on a clock the
    comparison fitted itself (its sync node held only allreduce's defaults), and the figure was cached under
    the trial's clock (probe G: "delay beat allreduce 1.09x" in a sweep where allreduce's own trial won 1.64x)."""
    import types

    from omegaconf import OmegaConf

    import orchestrator.sync.run as run_mod
    from orchestrator.execution.training import NullSink, TrainContext, TrainSettings
    from orchestrator.sync import compare
    from orchestrator.sync.costmodel import ComputeModel

    cfg = OmegaConf.create({**_ALLREDUCE_CFG, "sync": {"name": "delay", "staleness": 2, "step_overhead_s": 0.001,
                                                       "per_sample_s": 0.0002}})
    ctx = TrainContext(settings=TrainSettings(), dataset=fake_data(), model=types.SimpleNamespace(name="cnn"),
                       cluster=None, sink=NullSink(), output_dir=tmp_path, cfg=cfg)
    node = compare.comparison_setup(ctx, "allreduce")[2]
    assert (node["step_overhead_s"], node["per_sample_s"]) == (0.001, 0.0002)
    seen = {}

    def fake_train(strat, cctx):
        seen["sync"] = strat.options(cctx.cfg).sync
        return types.SimpleNamespace(time_to_target_s=1.0)

    monkeypatch.setattr(run_mod, "train", fake_train)
    monkeypatch.setattr(compare, "lookup", lambda *a: None)
    monkeypatch.setattr(compare, "record", lambda *a: None)
    delay = strategy({"name": "delay", "staleness": 2})
    trial = types.SimpleNamespace(compute_model=ComputeModel(0.003, 0.0004), time_to_target_s=2.0)
    compare.comparison(delay, delay.options(_ALLREDUCE_CFG), ctx, trial, "allreduce")
    assert (seen["sync"].step_overhead_s, seen["sync"].per_sample_s) == (0.003, 0.0004)   # the trial's own model


@pytest.mark.parametrize("node,cfg", [
    (_ALLREDUCE_NODE, _ALLREDUCE_CFG),
    ({"name": "delay", "staleness": 3, "dynamic_staleness": True, "max_staleness": 5, "push_lr": 0.5}, {"hardware": {"workers": 4}}),
    ({"name": "async", "delay_compensation": 0.3, "shards": 2}, {"hardware": {"workers": 3, "emulated_step_s": 0.1}}),
])
def test_an_mpi_rank_rebuilds_the_options_it_was_sent(node, cfg):
    """What an MPI rank reads (``plain()`` through JSON, ``from_plain`` with its own strategy's sync config) is
    the trial's options."""
    import json

    from orchestrator.sync.core import SyncOptions

    strat = strategy(node)
    opts = strat.options(cfg)
    again = SyncOptions.from_plain(json.loads(json.dumps(opts.plain())), strategy(dict(node)).config)
    assert again == opts and again.sync is not opts.sync


def test_a_dynamic_staleness_range_that_is_empty_is_refused():
    """sync.staleness=4 sync.max_staleness=1 sync.dynamic_staleness=true started a trial whose bound never moved."""
    from orchestrator.errors import ConfigError

    bad = strategy({"name": "delay", "staleness": 4, "dynamic_staleness": True, "max_staleness": 1})
    with pytest.raises(ConfigError, match=r"sync.staleness=4 is above sync.max_staleness=1$"):
        bad.check_config({"hardware": {"workers": 4}})
    strategy({"name": "delay", "staleness": 4, "max_staleness": 1}).check_config({"hardware": {"workers": 4}})  # static: fine
