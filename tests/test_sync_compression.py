"""Message sizes on the virtual clock (issue 29 item 2): a strategy says how many bytes its collective round,
push and pull carry; the documented top-k example (docs/plugins.md) is charged for what it sends."""

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.execution.training import TrainSettings
from orchestrator.hardware.cost import GBIT
from orchestrator.hardware.topology import Topology
from orchestrator.sync.costmodel import allgather_s, allreduce_s, collective_s
from orchestrator.sync.virtual import VirtualRun

from tests.fakes import FakeRuntime, fake_data, strategy

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(r"```\w*\n# file: (?P<path>\S+)\n(?P<body>.*?)```", re.S)
SLOW_NET = {"bandwidth_Gbps": 1e-6, "latency_us": 0.0}      # 125 bytes/s: communication dominates


@pytest.fixture(scope="module")
def topk_module(tmp_path_factory):
    """orch_topk.py exactly as docs/plugins.md shows it."""
    section = DOC.read_text().split("## A compressing strategy", 1)[1].split("\n## ", 1)[0]
    (body,) = [m["body"] for m in BLOCK.finditer(section) if m["path"] == "orch_topk.py"]
    d = tmp_path_factory.mktemp("topk")
    (d / "orch_topk.py").write_text(body)
    sys.path.insert(0, str(d))
    try:
        import orch_topk

        yield orch_topk
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("orch_topk", None)


def settings(**kw) -> TrainSettings:
    return TrainSettings(**{**dict(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=40,
                                   budget_updates=80), **kw})


def run(strat, workers=4, net=None, s=None, d=64, speeds=None):
    opts = strat.options({"hardware": {"workers": workers, "worker_speeds": speeds},
                          "train": {"warmup_updates": 0}})
    opts = dataclasses.replace(opts, network=net or SLOW_NET)
    v = VirtualRun(strat, opts, s or settings(), FakeRuntime(d), fake_data(d=d), 1.0)
    return v, *v.run()


def test_allgather_formula():
    net = Topology.uniform(4, bandwidth=1000.0, latency_s=0.01)
    assert allgather_s(100.0, net) == pytest.approx(3 * (0.1 + 0.01))
    assert collective_s("ring_allreduce", 100.0, net) == allreduce_s(100.0, net)
    assert collective_s("ring_allgather", 100.0, net) == allgather_s(100.0, net)
    assert allgather_s(100.0, Topology.uniform(1)) == 0.0


def test_fp16_is_the_default_hooks_half_size():
    """sync.fp16 is the default message size's, not the core's: half the bytes, half the all-reduce."""
    dense, half = strategy("allreduce"), strategy({"name": "allreduce", "fp16": True})
    assert dense.dense_bytes(1000) == 4000 and half.dense_bytes(1000) == 2000
    assert strategy({"name": "delay", "fp16": True}).push_bytes(0, 3, 1000) == 2000
    (_, r32, _), (_, r16, _) = run(dense), run(half)
    assert r16.elapsed_s < r32.elapsed_s
    comm = lambda r, st: r.elapsed_s - 20 * 1.0 / 1  # noqa: E731  (20 rounds of 1 s compute at speed 1)
    assert comm(r16, None) == pytest.approx(comm(r32, None) / 2, rel=1e-6)


def test_a_server_strategy_is_charged_its_push_and_pull_bytes():
    class Light(type(strategy("async"))):
        def push_bytes(self, worker, iteration, parameters):
            return 8.0

        def pull_bytes(self, worker, iteration, parameters):
            return 8.0

    one_link = {"name": "async", "shards": 1}   # every message through the server's one link
    full = run(type(strategy("async"))(one_link), s=settings(budget_updates=20))[1]
    light = run(Light(one_link), s=settings(budget_updates=20))[1]
    assert light.elapsed_s < full.elapsed_s / 5
    # on colocated shards (the default here) the light messages are charged as well
    co_full = run(strategy("async"), s=settings(budget_updates=20))[1]
    co_light = run(Light({"name": "async"}), s=settings(budget_updates=20))[1]
    assert co_light.elapsed_s < co_full.elapsed_s / 3


def test_topk_virtual_time_falls_with_density(topk_module):
    """A fixed number of rounds: the less a worker sends, the less the round's all-gather costs."""
    times, sent = [], []
    for density in (1.0, 0.25, 0.05):
        v, result, stats = run(topk_module.TopK({"name": "topk", "density": density}), d=256)
        assert result.updates == 20
        times.append(result.elapsed_s)
        sent.append(v.strategy.metrics(result, stats)["sync.topk_density_sent"])
    assert times[0] > times[1] > times[2]
    assert sent == pytest.approx([1.0, 0.25, 13 / 256])
    k = [256, 64, 13]   # ceil(density x 256): 8 bytes each, all-gathered over W = 4
    compute = 20 * 1.0
    for t, kk in zip(times, k):
        assert t - compute == pytest.approx(20 * 3 * 8 * kk / 125.0, rel=1e-6)


def test_topk_with_error_feedback_still_converges(topk_module):
    """On the stand-in quadratic, density 5% reaches the noise floor dense averaging reaches (about 1.8 here:
    the per-batch means differ from the test mean), from 7.9 at the start."""
    s = settings(budget_updates=400, eval_every=100)
    dense = run(strategy("allreduce"), s=s, d=64, net={"bandwidth_Gbps": 10})[1]
    sparse = run(topk_module.TopK({"name": "topk", "density": 0.05}), s=s, d=64, net={"bandwidth_Gbps": 10})[1]
    start = sparse.history[0].loss
    assert sparse.history[-1].loss < 0.3 * start and dense.history[-1].loss < 0.3 * start
    assert sparse.history[-1].loss < 1.2 * dense.history[-1].loss


def test_topk_trains_the_cnn(topk_module, mnist):
    """The real CNN, density 1%, 30 rounds of W = 2: it learns (well above chance), and its clock is
    charged 1% of the entries."""
    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.models import cnn

    s = TrainSettings(batch_size=32, lr=0.1, stop="budget", budget_updates=60, eval_every=60, eval_samples=300)
    strat = topk_module.TopK({"name": "topk", "density": 0.01})
    opts = strat.options({"hardware": {"workers": 2}, "train": {"warmup_updates": 0}})
    rt = ModelRuntime(cnn.spec({}), seed=s.seed, lr=s.lr)
    v = VirtualRun(strat, opts, s, rt, mnist, 0.01)
    result, stats = v.run()
    assert result.updates == 30 and result.final_test_accuracy > 0.5
    assert strat.metrics(result, stats)["sync.topk_density_sent"] == pytest.approx(0.01, rel=0.01)


@pytest.fixture(scope="module")
def mnist():
    from orchestrator.data import load_mnist

    return load_mnist()


def test_gbit_constant():
    assert GBIT == 1.25e8 and np.isclose(SLOW_NET["bandwidth_Gbps"] * GBIT, 125.0)
