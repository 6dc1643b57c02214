"""A third-party sync strategy (examples/orchestrator-example-sync: local SGD) extends the sync engine
without any file under orchestrator/ knowing its name, on the virtual clock and on real MPI ranks."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.execution.training import TrainSettings
from orchestrator.sync.strategy import SingleWorker
from orchestrator.sync.virtual import VirtualRun

from tests.fakes import FakeRuntime, fake_data, strategy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "orchestrator-example-sync"


@pytest.fixture
def local_sgd(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    from orch_local_sgd.strategy import LocalSGD

    return LocalSGD


def settings(**kw) -> TrainSettings:
    return TrainSettings(**{**dict(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=5,
                                   budget_updates=40), **kw})


def run(strat, workers, speeds=None, s=None, **cfg_sync):
    opts = strat.options({"hardware": {"workers": workers, "worker_speeds": speeds},
                          "train": {"lr_scaling": cfg_sync.pop("lr_scaling", "sqrt"), "warmup_updates": 0}})
    opts = dataclasses.replace(opts, network={"bandwidth_Gbps": 1e12, "latency_us": 0.0})
    v = VirtualRun(strat, opts, s or settings(), FakeRuntime(), fake_data(), 1.0)
    return v, *v.run()


def test_one_local_step_is_minibatch_sgd_at_the_single_batch_lr(local_sgd):
    """H = 1: averaging the models after one step each = one step of the averaged gradient (allreduce
    with lr_scaling=none)."""
    loc = run(local_sgd({"name": "local_sgd", "local_steps": 1}), 3, [1.0, 0.5, 0.25], lr_scaling="none")[0]
    ar = run(strategy("allreduce"), 3, [1.0, 0.5, 0.25], lr_scaling="none")[0]
    np.testing.assert_allclose(loc.final_params, ar.final_params, rtol=1e-5, atol=1e-6)


def test_one_worker_with_h_local_steps_is_plain_sgd(local_sgd):
    """W = 1: H local steps per round for R rounds are H x R plain SGD steps on the same batches."""
    v, result, stats = run(local_sgd({"name": "local_sgd", "local_steps": 4}), 1)
    ref = run(SingleWorker(), 1)[0]
    assert result.updates == 10 and stats.iterations == [40]      # 40 sample-equivalent updates = 10 rounds of 4
    np.testing.assert_array_equal(v.final_params, ref.final_params)


def test_a_round_costs_h_computes_and_one_average(local_sgd):
    """On the virtual clock a round of H local steps lasts H compute times of the slowest worker (plus
    one all-reduce, free here), and the fast worker waits for the slow one at the barrier."""
    v, result, stats = run(local_sgd({"name": "local_sgd", "local_steps": 4}), 2, [1.0, 0.5],
                           s=settings(budget_updates=80))  # 80 / (4 x 2) = 10 rounds
    assert result.updates == 10
    assert result.elapsed_s == pytest.approx(10 * 4 * 2.0)         # speed 0.5: 2 s per local step
    assert stats.wait_s == pytest.approx([10 * 4 * 1.0, 0.0])
    assert stats.pushes_applied == 20 and stats.gap_histogram == {0: 20}


def test_local_steps_are_checked(local_sgd):
    """The plugin's own schema holds its key to its declaration: one line naming it."""
    for bad, why in ((0, "must be an integer >= 1"), (-2, "must be an integer >= 1"), ("abc", "is not an integer"),
                     (1.5, "is not an integer")):
        with pytest.raises(ConfigError, match=r"^sync\.local_steps=.* " + why):
            local_sgd({"name": "local_sgd", "local_steps": bad})
    with pytest.raises(ConfigError, match=r"^unknown key sync\.local_step \(sync accepts: .*local_steps"):
        local_sgd({"name": "local_sgd", "local_step": 2})


def test_no_strategy_name_is_compared_under_orchestrator():
    names = re.compile(r"""["'](allreduce|async|delay|local_sgd)["']""")
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted((ROOT / "orchestrator").rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if names.search(line)]
    assert not hits, "\n".join(hits)


# -- installed with pip, through the real CLI -----------------------------------------------------
@pytest.fixture
def example_installed():
    from conftest import pip_installed

    with pip_installed(EXAMPLE) as env:
        yield env


def _trial(workdir, env, *args, timeout=900):
    from conftest import NO_CONTEXT, run_cli, store_runs

    # the trial's context (the tuned reference, the comparison, the limit) is tested elsewhere: here the plugin's own path
    out = run_cli(workdir, "+sync=local_sgd", "train.target_accuracy=0.9", "train.eval_every=10",
                  "train.eval_samples=500", "train.budget_updates=600", *NO_CONTEXT, *args, timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = store_runs(workdir)
    return run


@pytest.mark.slow
def test_local_sgd_trains_to_target_on_the_virtual_clock(workdir, example_installed):
    run = _trial(workdir, example_installed, "sync.local_steps=4")
    assert run.info.status == "FINISHED" and run.data.tags["sync"] == "local_sgd"
    assert run.data.tags["runtime"] == "virtual" and run.data.tags["train.reached_target"] == "true"
    m = run.data.metrics
    rounds = m["sync.pushes_applied"] / 4                           # W = 4 workers (the default)
    assert m["sync.local_steps"] == 4 and m["sync.worker0.iterations"] == 4 * rounds
    assert "train.speedup" in m and "sync.scaling_efficiency" in m


@pytest.mark.slow
@pytest.mark.mpi
def test_local_sgd_trains_to_target_on_mpi_ranks(workdir, example_installed):
    run = _trial(workdir, example_installed, "sync.runtime=mpi", "hardware.workers=2", "sync.local_steps=2")
    assert run.info.status == "FINISHED" and run.data.tags["runtime"] == "mpi"
    assert run.data.tags["train.reached_target"] == "true"
    m = run.data.metrics
    assert m["sync.local_steps"] == 2 and m["sync.replica_max_diff"] == 0.0
    rounds = m["sync.pushes_applied"] / 2                           # W = 2 ranks
    assert m["sync.worker0.iterations"] == m["sync.worker1.iterations"] == 2 * rounds


@pytest.mark.parametrize("method, value, words", [
    ("message_bytes", float("nan"), "message_bytes() = nan, not a number of bytes >= 0"),      # was speedup = nan
    ("message_bytes", -5.0, "message_bytes() = -5.0, not a number of bytes >= 0"),             # was clamped to 0
    ("quorum", -1, "quorum(2) = -1, not a whole number in [1, 2]"),                           # was a traceback
    ("local", np.zeros(3), "local() returned shape (3,), not the parameters'"),               # was numpy's broadcast error
    ("weights", [float("nan"), 0.5], "weights() = [nan, 0.5], not 2 finite numbers"),        # was 'diverged: smaller lr'
])
def test_a_strategys_answer_that_makes_no_sense_is_one_line_naming_it(method, value, words):
    from orchestrator.errors import PluginError

    base = type(strategy("allreduce"))

    class Odd(base):
        pass

    setattr(Odd, method, lambda self, *args: value)
    with pytest.raises(PluginError, match=re.escape(f"sync strategy Odd: {words}")):
        run(Odd({"name": "allreduce"}), 2)
