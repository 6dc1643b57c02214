"""train.batch_policy=adaptive (issue 29 item 6): the noise-scale estimator, the goodput choice, an adaptive run on
the virtual runtime, and the one-line errors of the combinations it does not support."""

import math

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.execution.training import NullSink, TrainSettings
from orchestrator.sync.adaptive import AdaptiveBatch, NoiseScale, candidates, efficiency, two_batch_estimates
from orchestrator.sync.costmodel import ComputeModel
from orchestrator.sync.virtual import VirtualRun

from conftest import run_inprocess, store_runs
from tests.fakes import FakeRuntime, fake_data, strategy, sync_options


# -- the estimator ---------------------------------------------------------------------------------
def _rounds(rng, true_g, sigma_diag, batches, n):
    """n rounds of per-worker gradients: worker i's is the mean of batches[i] samples G + N(0, Sigma)."""
    for _ in range(n):
        yield [true_g + rng.normal(0.0, np.sqrt(sigma_diag / b)) for b in batches], batches


@pytest.mark.parametrize("batches", [[8, 8, 8, 8], [1, 4, 16, 64, 2, 2]])
def test_noise_scale_recovers_a_known_b_noise(batches):
    rng = np.random.default_rng(0)
    d = 400
    true_g = rng.normal(0.0, 1.0, d) * 0.05                 # |G|^2 ~ 1
    sigma_diag = rng.uniform(0.5, 1.5, d) * 0.25             # tr(Sigma) ~ 100: B_noise ~ 100
    want = sigma_diag.sum() / float(true_g @ true_g)
    est = NoiseScale(decay=0.99)
    for grads, b in _rounds(rng, true_g, sigma_diag, batches, 2000):
        est.observe(grads, b)
    assert est.value == pytest.approx(want, rel=0.1), (est.value, want)


def test_unequal_batches_need_the_harmonic_mean():
    """With unequal worker batches, the small batch of the two-batch formula is their harmonic mean: the
    arithmetic mean (here 14.8 instead of 2.6) would make both estimates wrong by several times."""
    g2, s, batches = 1.0, 100.0, [1, 4, 16, 64, 2, 2]
    big = sum(batches)
    sq_small = g2 + s * np.mean([1.0 / b for b in batches])   # E mean |g_i|^2
    sq_big = g2 + s / big                                      # E |g_B|^2
    harmonic = len(batches) / sum(1.0 / b for b in batches)
    assert two_batch_estimates(sq_small, harmonic, sq_big, big) == pytest.approx((g2, s))
    wrong = two_batch_estimates(sq_small, float(np.mean(batches)), sq_big, big)
    assert abs(wrong[0] - g2) > 5 * g2 and abs(wrong[1] - s) > 5 * s, wrong     # |G|^2 < 0: no noise scale at all


def test_noise_scale_is_inf_when_the_signal_vanishes_and_needs_two_batches():
    est = NoiseScale(decay=0.5)
    assert est.value is None
    est.add(sq_small=1.0, b_small=4, sq_big=0.05, b_big=64)    # |G|^2 estimate < 0: pure noise
    assert est.value == math.inf
    with pytest.raises(ValueError):
        two_batch_estimates(1.0, 8, 1.0, 8)


# -- the goodput choice ----------------------------------------------------------------------------
def _chooser(workers=8, t0=0.0009, t1=0.000195, comm=0.002, low=64, high=2048):
    cm = ComputeModel(t0, t1)
    return AdaptiveBatch(low, high, 64, every=10, step_time=lambda m: cm.time(m / workers) + comm)


def test_goodput_grows_the_batch_with_the_noise_scale():
    ada = _chooser()
    chosen = [ada.choose(noise=phi) for phi in (1, 10, 100, 1000, 10000, 1e6)]
    assert chosen == sorted(chosen) and chosen[0] == 64 and chosen[-1] == 2048, chosen
    assert len(set(chosen)) >= 4, chosen
    assert ada.choose(noise=math.inf) == 2048                   # all efficient: the largest throughput
    # the optimum of M / ((a + b M)(phi + M)) is M* = sqrt(phi a / b): the choice is within a factor 2 of it
    a, b = 0.0009 + 0.002, 0.000195 / 8
    for phi in (100, 1000):
        assert abs(math.log2(ada.choose(noise=phi) / math.sqrt(phi * a / b))) <= 1.0


def test_efficiency_and_candidates():
    assert efficiency(100.0, 64, 64) == 1.0 and efficiency(100.0, 228, 64) == pytest.approx(0.5)
    assert candidates(64, 1024) == [64, 128, 256, 512, 1024] and candidates(48, 100) == [48, 96, 100]


def test_after_round_decides_every_k_rounds():
    ada = _chooser()
    ada.noise.add(sq_small=1.0 + 1000 / 8, b_small=8, sq_big=1.0 + 1000 / 64, b_big=64)   # B_noise = 1000
    assert [ada.after_round(i, float(i)) for i in range(9)] == [None] * 9 and ada.current == 64
    assert ada.after_round(9, 9.0) == ada.choose() > 64 and ada.history[-1][0] == 10


# -- on the virtual runtime ------------------------------------------------------------------------
def _adaptive_opts(name="allreduce", workers=4, speeds=None, **train):
    cfg = {"hardware": {"workers": workers, "worker_speeds": speeds},
           "train": {"warmup_updates": 0, "batch_policy": "adaptive", **train}}
    return sync_options({"name": name, "balance": "static"}, cfg)


@pytest.mark.parametrize("name", ["allreduce", "backup"])
def test_the_batch_grows_as_the_quadratic_converges(name):
    """The stand-in quadratic's |G|^2 shrinks as theta reaches the data mean while the per-sample noise stays:
    the noise scale grows, so the chosen batch does; the split follows the speeds; samples are counted."""
    opts = _adaptive_opts(name, 4, [1.0, 1.0, 0.5, 0.5], adaptive_min_batch=8, adaptive_max_batch=256,
                          adaptive_every=5)
    s = TrainSettings(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=20, budget_updates=3000)
    data = fake_data(n=2000, d=8)
    sink = NullSink()
    v = VirtualRun(strategy(name), opts, s, FakeRuntime(), data, ComputeModel(0.001, 0.0001), sink)
    result, stats = v.run()
    sizes = [h[2] for h in stats.batch_history]
    half = len(sizes) // 2
    assert sizes[0] == 8 and np.mean(sizes[half:]) > 4 * np.mean(sizes[:4]), sizes
    assert [h[0] for h in stats.batch_history] == list(range(0, 5 * len(sizes), 5))
    logged = [(step, val) for key, val, step in sink.metrics if key == "train.global_batch"]
    assert [int(val) for _, val in logged] == sizes
    assert any(key == "sync.noise_scale" for key, _, _ in sink.metrics)
    assert result.samples >= 3000 * 4 and stats.batches[0] > stats.batches[2]      # split by speed
    # evaluations at multiples of eval_every x batch_size samples, not every eval_every rounds
    assert len(result.history) <= 3000 // 20 + 2


def test_an_adaptive_trial_logs_the_batch_and_the_plot(tmp_path):
    from orchestrator.data import load_mnist
    from orchestrator.sync.run import train
    from orchestrator.sync.virtual import make_context
    from orchestrator_plugins.sync.strategies import AllReduce

    cfg = {"hardware": {"workers": 4}, "sync": {"name": "allreduce", "base_time_s": 0.01},
           "train": {"budget_updates": 48, "eval_every": 8, "eval_samples": 100, "target_accuracy": 0.99,
                     "batch_size": 16, "batch_policy": "adaptive", "adaptive_every": 2, "reference": "same"}}
    ctx = make_context(cfg, tmp_path, dataset=load_mnist(limit=2000))
    result = train(AllReduce(cfg["sync"]), ctx)
    series = [(step, val) for key, val, step in ctx.sink.metrics if key == "train.global_batch"]
    assert series[0] == (0, 16.0) and len(series) >= 3 and all(s % 2 == 0 for s, _ in series)
    assert any(key == "sync.noise_scale" for key, _, _ in ctx.sink.metrics)
    m = result.extra_metrics
    assert m["train.global_batch_first"] == 16 and "train.global_batch_final" in m
    names = sorted(p.rsplit("/", 1)[-1] for p in ctx.sink.artifacts)
    assert "batch_over_time.png" in names and (tmp_path / "batch_over_time.png").stat().st_size > 1000


# -- what it refuses -------------------------------------------------------------------------------
@pytest.mark.parametrize("sync_node, hardware, train, expected", [
    ({"name": "delay"}, {"workers": 4}, {}, "train.batch_policy=adaptive needs a collective strategy"),
    ({"name": "async"}, {"workers": 4}, {}, "sync=async is a parameter server"),
    ({"name": "delay", "runtime": "mpi"}, {"workers": 4}, {}, "sync=delay is a parameter server"),
    ({"name": "allreduce"}, {"workers": 1}, {}, "needs hardware.workers >= 2"),
    ({"name": "allreduce"}, {"workers": 4}, {"batch_policy": "hybrid", "lr_scaling": "adascale"},
     "train.lr_scaling=adascale needs train.batch_policy=adaptive"),
    ({"name": "allreduce"}, {"workers": 4}, {"adaptive_min_batch": 2}, "train.adaptive_min_batch=2 < 4 workers"),
    ({"name": "allreduce"}, {"workers": 4}, {"adaptive_max_batch": 32}, "train.adaptive_max_batch=32 < the smallest"),
])
def test_bad_combinations_are_one_line_config_errors(sync_node, hardware, train, expected):
    with pytest.raises(ConfigError, match=None) as err:
        sync_options(sync_node, {"hardware": hardware, "train": {"batch_policy": "adaptive", **train}})
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_adaptive_with_a_server_under_mpi_in_one_line(workdir):
    out = run_inprocess(workdir, "+sync=async", "sync.runtime=mpi", "train.batch_policy=adaptive")
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: train.batch_policy=adaptive needs a collective strategy"), \
        out.stderr
    assert not (workdir / "mlflow.db").exists() or all(r.info.status != "RUNNING" for r in store_runs(workdir))


def test_the_summary_names_the_fixed_batch_limit_and_the_fixed_comparison():
    from orchestrator.summary import context_lines

    m = {"compare.time_to_target_s": 8.0, "compare.speedup": 4.0, "compare.speedup_over_it": 1.25,
         "hardware.capacity": 9.75, "limit.speedup": 4.1, "train.fraction_of_limit": 1.2, "workers": 16.0}
    t = {"sync": "allreduce", "compare.label": "allreduce, sync.balance=static, fixed batch hybrid G <= 256, its tuned "
         "defaults adam lr=0.008", "compare.source": "computed", "limit.label": "synchronous, G=256 on ..."}
    plain = "\n".join(context_lines(m, t))
    assert "statistical limit 4.1x" in plain and "fixed-batch" not in plain
    lines = context_lines(m, {**t, "train.batch_policy": "adaptive"})
    limits = next(ln for ln in lines if ln.startswith("  limits:"))
    assert "fixed-batch limit 4.1x the tuned worker" in limits and "this trial reached 1.2 of it" in limits
    verdict = next(ln for ln in lines if ln.startswith("  verdict:"))
    assert "allreduce with the adaptive batch beat allreduce at its fixed batch" in verdict
    assert not any(ln.startswith("  batch:") for ln in lines)       # no batch series logged: no line
    chosen = {"train.global_batch_first": 64.0, "train.global_batch_final": 256.0, "train.global_batch_max_chosen": 512.0,
              "train.global_batch_changes": 3.0, "sync.noise_scale_final": 180.4}
    batch = next(ln for ln in context_lines({**m, **chosen}, t) if ln.startswith("  batch:"))
    assert "64 at first, 256 at the end, largest 512, 3 changes; noise scale 180 at the end" in batch


def test_adams_preconditioner_for_the_preconditioned_noise_scale():
    from orchestrator.execution.optim import Optimizer, OptimizerSettings

    adam = Optimizer(OptimizerSettings("adam"))
    assert adam.preconditioner() is None                     # no second moment yet
    adam.step(np.zeros(3, np.float32), np.array([1.0, 2.0, 0.0], np.float32), 0.1)
    # v_hat = g^2 after one step (bias-corrected): 1 / (|g| + eps)
    np.testing.assert_allclose(adam.preconditioner(), [1.0, 0.5, 1e8], rtol=1e-5)
    assert Optimizer(OptimizerSettings("sgd")).preconditioner() is None


# -- under MPI: what each rank appends to its all-reduce (sync.adaptive.RankRounds) ----------------------
def _ranks_round(grads, batches, vecs=None, weights=None, compute=None):
    """The tails W ranks append and their sum, as the all-reduce gives them to every rank."""
    from orchestrator.sync.adaptive import RankRounds

    w = len(grads)
    ranks = [RankRounds(w, r) for r in range(w)]
    for r, rr in enumerate(ranks):
        rr.begin()
        rr.capture(grads[r])
    vecs = grads if vecs is None else vecs
    weights = [b / sum(batches) for b in batches] if weights is None else weights
    reduced = sum(np.float32(wt) * v for wt, v in zip(weights, vecs))
    tails = sum(rr.tail(v, (compute or [0.1] * w)[r]) for r, (rr, v) in enumerate(zip(ranks, vecs)))
    return ranks, reduced, tails, weights


def test_rank_tails_give_rank_0_the_virtual_runtimes_noise_estimate():
    """Allreduce's reduced vector is the big batch's gradient, so rank 0's estimate from the tails equals the
    virtual runtime's from every worker's gradient, with no second all-reduce."""
    rng = np.random.default_rng(3)
    batches = (8, 16, 32, 8)
    grads = [rng.normal(1.0, 2.0, 500).astype(np.float32) for _ in batches]
    ranks, reduced, tails, weights = _ranks_round(grads, batches)
    r0 = ranks[0]
    assert not r0.needs_second_reduce(tails, weights, batches, (0, 1, 2, 3))
    mine, ref = NoiseScale(decay=0.0), NoiseScale(decay=0.0)
    assert r0.observe(mine, tails, batches, (0, 1, 2, 3), r0.big_gradient(reduced, weights, (0, 1, 2, 3)))
    ref.observe(grads, list(batches))
    assert mine.value == pytest.approx(ref.value, rel=1e-4)


def test_a_vector_that_is_not_the_gradient_needs_the_second_all_reduce():
    """Local SGD contributes parameters, and weights not proportional to the batches break g_B = M / sum w:
    both ask for the second all-reduce of b_i g_i, whose estimate is again the virtual runtime's."""
    rng = np.random.default_rng(4)
    batches = (8, 24)
    grads = [rng.normal(0.5, 1.0, 300).astype(np.float32) for _ in batches]
    params = [g + 1.0 for g in grads]
    ranks, _, tails, weights = _ranks_round(grads, batches, vecs=params)
    assert ranks[0].needs_second_reduce(tails, weights, batches, (0, 1))
    ranks, _, tails, weights = _ranks_round(grads, batches, weights=[0.5, 0.5])
    assert ranks[0].needs_second_reduce(tails, weights, batches, (0, 1))
    acc = sum(rr.mine_for_second_reduce(b) for rr, b in zip(ranks, batches))
    mine, ref = NoiseScale(decay=0.0), NoiseScale(decay=0.0)
    ranks[0].observe(mine, tails, batches, (0, 1), acc.astype(np.float64) / sum(batches))
    ref.observe(grads, list(batches))
    assert mine.value == pytest.approx(ref.value, rel=1e-4)


def test_rank_0_measures_speeds_and_the_collective_for_the_goodput():
    """Speeds from each rank's compute seconds (cm.time(b, 1) / seconds), the collective from the round's
    seconds beyond the slowest compute; T(M) of the chooser uses both."""
    from orchestrator.sync.balance import Balancer

    cm = ComputeModel(0.0, 0.01)
    batches = (20, 10)
    grads = [np.ones(10, np.float32)] * 2
    ranks, _, tails, _ = _ranks_round(grads, batches, compute=[0.2, 0.2])   # rank 1: half the samples, same time
    r0 = ranks[0]
    r0.measured(tails, batches, 1, round_s=0.25, cm=cm)
    assert r0.speeds == pytest.approx([1.0, 0.5], rel=1e-5) and r0.comm_s == pytest.approx(0.05, rel=1e-4)
    bal = Balancer("static", [1.0, 0.5], 30, 10, cm)
    t = r0.step_time(bal.split, 1, cm, overlap=False)
    assert t(30) == pytest.approx(0.2 + 0.05, rel=1e-4) and t(60) == pytest.approx(0.4 + 0.05, rel=1e-4)


# -- AdaScale's gain (train.lr_scaling=adascale) -----------------------------------------------------
def test_adascale_gain_is_k_times_pollux_efficiency_between_1_and_k():
    from orchestrator.sync.core import lr_multiplier

    m0 = 32
    for noise in (0.0, 10.0, 100.0, 1000.0):
        for k in (1, 2, 8, 32):
            r = lr_multiplier("adascale", k, noise / m0)
            assert r == pytest.approx(k * efficiency(noise, k * m0, m0)) and 1.0 <= r <= k + 1e-12
    assert lr_multiplier("adascale", 8, math.inf) == 8           # pure noise: linear scaling
    assert lr_multiplier("adascale", 4, None) == 2.0            # nothing measured yet: sqrt


def test_a_round_scales_its_lr_by_the_measured_noise_scale():
    from orchestrator.execution.optim import Optimizer, OptimizerSettings
    from orchestrator.sync.strategy import Round

    opts = _adaptive_opts(lr_scaling="adascale", adaptive_min_batch=16, batch_size=16)
    opt = Optimizer(OptimizerSettings("sgd"))
    rnd = Round(opts, (32, 32), 0.1, 16, 1e9, opt, noise_scale=48.0)          # k = 4, B_noise = 3 M0
    assert rnd.lr(rnd.total) == pytest.approx(0.1 * 4 * (48 + 16) / (48 + 64))
    assert Round(opts, (32, 32), 0.1, 16, 1e9, opt).lr(64) == pytest.approx(0.2)   # before a measurement: sqrt


def test_adascale_trains_the_quadratic_with_the_adaptive_batch():
    opts = _adaptive_opts("allreduce", 4, [1.0, 1.0, 0.5, 0.5], adaptive_min_batch=8, adaptive_max_batch=256,
                          adaptive_every=5, lr_scaling="adascale")
    s = TrainSettings(batch_size=4, lr=0.05, target_accuracy=2.0, stop="budget", eval_every=20, budget_updates=1500,
                      optimizer="sgd")
    v = VirtualRun(strategy("allreduce"), opts, s, FakeRuntime(), fake_data(n=2000, d=8), ComputeModel(0.001, 0.0001),
                   NullSink())
    result, stats = v.run()
    assert result.history[-1].loss < 0.5 * result.history[0].loss and max(h[2] for h in stats.batch_history) > 8
