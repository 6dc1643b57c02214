"""Plugin strategies' own metrics on both runtimes (issue 29 item 1): what a strategy's ``metrics()`` and its
``ParameterServer`` subclass's ``metrics()`` add reaches the trial's metrics (MLflow) on the virtual clock and,
gathered from the ranks that computed them, under MPI. The strategies are written against orchestrator.api only."""

import os
from pathlib import Path

import numpy as np
import pytest

from orchestrator.api import CollectiveStrategy, ParameterServer, ServerStrategy, SyncConfig

HERE = Path(__file__).resolve().parent


class CountingAllReduce(CollectiveStrategy):
    """Gradient averaging that counts the gradients its instance computed, per worker it served."""

    name = "counting"
    Config = SyncConfig

    def __init__(self, cfg_sync=None):
        super().__init__(cfg_sync)
        self.grads: dict[int, int] = {}

    def local(self, worker, theta, grad, rnd):
        self.grads[worker] = self.grads.get(worker, 0) + 1
        return grad(theta)

    def metrics(self, result, stats):
        own = {"sync.plugin_grads_per_worker": float(np.mean(list(self.grads.values()))),
               "sync.plugin_constant": 7.0} if self.grads else {}
        return {**super().metrics(result, stats), **own}


class GapServer(ParameterServer):
    """Records the staleness of every push it admits (through the admit hook) and reports its median."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.taus: list[int] = []

    def admit(self, worker, tau):
        self.taus.append(tau)
        return super().admit(worker, tau)

    def metrics(self):
        return {**super().metrics(), "sync.plugin_gap_median": float(np.median(self.taus)),
                "sync.plugin_pushes_seen": float(len(self.taus))}


class GapAsync(ServerStrategy):
    name = "gap_async"

    def staleness_bound(self):
        return float("inf")

    def make_server(self, theta0, weights, opts, optimizer=None):
        return GapServer(theta0, weights, False, optimizer)


def _train(tmp_path, strat, runtime, workers=2, budget=12):
    from orchestrator.data import load_mnist
    from orchestrator.sync.run import train
    from orchestrator.sync.virtual import make_context

    cfg = {"hardware": {"workers": workers, "worker_speeds": [1.0, 0.5][:workers]},
           "sync": {"name": strat.name, "runtime": runtime, "base_time_s": 0.01, "timeout_s": 240},
           "train": {"budget_updates": budget, "eval_every": 4, "eval_samples": 100, "stop": "budget",
                     "target_accuracy": 1.0, "batch_size": 16}}
    strat.cfg_sync = cfg["sync"]
    strat.config = type(strat).Config.from_node(cfg["sync"], "sync")
    ctx = make_context(cfg, tmp_path, dataset=load_mnist(limit=2000))
    return train(strat, ctx).extra_metrics


def test_gathered_metrics_are_the_ranks_means_and_the_engines_keys_come_from_the_gathered_stats():
    from orchestrator.execution.training import TrainResult
    from orchestrator.sync.run import run_metrics
    from orchestrator.sync.virtual import SyncStats

    stats = SyncStats([4, 4], [0.0, 1.0], batches=[8, 8], compute_s=[1.0, 2.0], comm_s=[0.0, 0.0],
                      server_metrics={"sync.plugin_gap_median": 1.0})
    stats.rank_metrics = [{"sync.plugin_grads_per_worker": 4.0, "sync.x": 1.0}, {"sync.plugin_grads_per_worker": 6.0}]
    result = TrainResult(4, 1.0, 64, 0.5, None, None, "wall")
    m = run_metrics(CountingAllReduce(), result, stats)     # a fresh instance: its own state is not asked
    assert m["sync.plugin_grads_per_worker"] == 5.0 and m["sync.x"] == 1.0
    assert m["sync.plugin_gap_median"] == 1.0 and m["sync.worker1.wait_s"] == 1.0
    stats.rank_metrics = None                                 # the virtual runtime: the instance that ran
    assert "sync.plugin_grads_per_worker" not in run_metrics(CountingAllReduce(), result, stats)


def test_own_metrics_are_the_keys_a_strategy_adds():
    from orchestrator.execution.training import TrainResult
    from orchestrator.sync.virtual import SyncStats

    s = CountingAllReduce()
    s.grads = {0: 3}
    own = s.own_metrics(TrainResult(0, 0.0, 0, 0.0, None, None, "wall"), SyncStats([3], [0.0]))
    assert own == {"sync.plugin_grads_per_worker": 3.0, "sync.plugin_constant": 7.0}


@pytest.mark.parametrize("runtime", ["virtual", pytest.param("mpi", marks=[pytest.mark.slow, pytest.mark.mpi])])
def test_a_plugin_strategys_metric_arrives_on_both_runtimes(tmp_path, monkeypatch, runtime):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))  # ranks import this file
    m = _train(tmp_path, CountingAllReduce(), runtime)
    rounds = m["sync.pushes_applied"] / 2
    assert rounds == 6
    assert m["sync.plugin_grads_per_worker"] == rounds and m["sync.plugin_constant"] == 7.0


@pytest.mark.parametrize("runtime", ["virtual", pytest.param("mpi", marks=[pytest.mark.slow, pytest.mark.mpi])])
def test_a_plugin_servers_metric_arrives_on_both_runtimes(tmp_path, monkeypatch, runtime):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    m = _train(tmp_path, GapAsync(), runtime)
    assert m["sync.plugin_pushes_seen"] >= m["sync.pushes_applied"] >= 12
    assert 0 <= m["sync.plugin_gap_median"] <= 2
