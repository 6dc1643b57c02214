"""The data-parallel cost model against hand-worked values (ring allreduce, parameter-server queueing,
the balanced split, the compute fit), the learning-rate rules, online rebalancing after a speed change,
and the one-line errors of the new keys."""

import dataclasses

import pytest

from orchestrator.config.root import TrainConfig
from orchestrator.errors import ConfigError
from orchestrator.execution.training import TrainSettings
from orchestrator.hardware.topology import Topology
from orchestrator.sync.balance import Balancer
from orchestrator.sync.core import SyncOptions, lr_multiplier, push_weights, scaled_lr
from orchestrator.sync.costmodel import (
    ComputeModel,
    FifoLink,
    ServerLinks,
    allreduce_s,
    balanced_batches,
    ring_allreduce_s,
)
from orchestrator.sync.virtual import VirtualRun

from tests.fakes import FakeRuntime, fake_data, strategy, sync_options


def test_ring_allreduce_by_hand():
    # W=4, 1 MB, 1 GB/s, 10 us: 2*3/4 * 1e6/1e9 = 1.5 ms, plus 2*3 latencies = 60 us
    assert ring_allreduce_s(1e6, 4, 1e9, 1e-5) == pytest.approx(1.56e-3)
    assert ring_allreduce_s(1e6, 1, 1e9, 1e-5) == 0.0
    # the slowest link sets the pace: worker 2 on 1 Gbit/s, worker 1 with 200 us
    net = Topology.from_cfg({"bandwidth_Gbps": 10, "latency_us": 50,
                            "workers": {2: {"bandwidth_Gbps": 1}, 1: {"latency_us": 200}}}, 4)
    assert net.workers[2].bandwidth == pytest.approx(1.25e8) and net.workers[1].latency_s == pytest.approx(2e-4)
    assert allreduce_s(1e6, net) == pytest.approx(1.5 * 1e6 / 1.25e8 + 6 * 2e-4)



def test_one_topology_for_the_virtual_clock_and_the_plans(tmp_path):
    """The virtual clock's links and a GPU cluster's are one Topology of ConstantLink / FittedLink."""
    from orchestrator.errors import WorkloadError
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.hardware.links import ConstantLink
    from orchestrator.hardware.topology import NETWORK, SERVER, Topology, worker

    net = Topology.from_cfg({"server": {"bandwidth_Gbps": 1}}, 3)
    assert isinstance(net, Topology) and net.links[SERVER, NETWORK] is net.server and len(net.workers) == 3
    assert net.links[worker(2), NETWORK] == ConstantLink(1.25e9, 50 * 1e-6) and net.server.bandwidth == 1.25e8
    f = tmp_path / "c.yaml"
    f.write_text("node_types: {A: {gpus_per_node: 4, memory_GB: 8}}\nlinks: {inter: {bandwidth_GBps: 2, latency_us: 3}}\n")
    plan = GpuCluster.from_yaml(f).topology
    assert isinstance(plan, Topology) and plan.inter_link("z", "A", 1, "z", "A", 1) == ConstantLink(2e9, 3e-6)
    with pytest.raises(WorkloadError, match="no link fit from A x1 in z to A x2 in y"):
        Topology().inter_link("z", "A", 1, "y", "A", 2)

def test_server_link_is_a_fifo_queue():
    link = FifoLink(bandwidth=1e9, latency_s=1e-4)
    # three 1 MB messages arriving together: served one after another (1 ms each), plus the latency
    assert [link.send(0.0, 1e6) for _ in range(3)] == pytest.approx([1.1e-3, 2.1e-3, 3.1e-3])
    assert link.send(10.0, 1e6) == pytest.approx(10.0011)  # an idle link serves at once
    assert link.busy_s == pytest.approx(4e-3)


def test_shards_split_the_server_load():
    net = Topology.from_cfg({"bandwidth_Gbps": 1000, "latency_us": 0, "server": {"bandwidth_Gbps": 8}}, 3)  # server 1 GB/s
    one, two = ServerLinks(net, 1, 1e6), ServerLinks(net, 2, 1e6)
    assert [one.push(i, 0.0) for i in range(3)] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert [two.push(i, 0.0) for i in range(3)] == pytest.approx([0.5e-3, 1e-3, 1.5e-3])
    assert one.utilisation(3e-3) == pytest.approx(1.0) and two.utilisation(3e-3) == pytest.approx(0.5)
    # a worker's own link still carries all its bytes: 1 MB on a 1 Gbit/s worker link = 8 ms
    slow = Topology.from_cfg({"bandwidth_Gbps": 1, "latency_us": 0, "server": {"bandwidth_Gbps": 1000}}, 1)
    assert ServerLinks(slow, 4, 1e6).pull(0, 0.0) == pytest.approx(8e-3)


def test_colocated_shards_put_the_server_on_the_workers_links():
    """BytePS-style: 4 workers on 1 GB/s links each host a shard; a 1 MB push leaves 3/4 MB out of the pusher's
    link and 1/4 MB into each other worker's link, so four simultaneous pushes all end at 0.75 ms, where one
    dedicated 1 GB/s server link serves them one after another (1, 2, 3, 4 ms)."""
    from orchestrator.sync.costmodel import ColocatedServerLinks, server_links

    net = Topology.from_cfg({"bandwidth_Gbps": 8, "latency_us": 0, "server": {"bandwidth_Gbps": 8}}, 4)
    co = server_links(net, 4, 1e6, colocated=True)
    assert isinstance(co, ColocatedServerLinks)
    assert [co.push(i, 0.0) for i in range(4)] == pytest.approx([0.75e-3] * 4)
    assert co.utilisation(0.75e-3) == pytest.approx(1.0)
    one = ServerLinks(net, 1, 1e6)
    assert [one.push(i, 0.0) for i in range(4)] == pytest.approx([1e-3, 2e-3, 3e-3, 4e-3])
    # a pull into a worker whose link is busy receiving pushes waits for it (FIFO, full duplex: its out link is free)
    assert co.pull(0, 0.0) == pytest.approx(0.75e-3 + 0.75e-3)
    assert co.queued_s[0] == pytest.approx(0.75e-3)
    # one worker: its shard holds the whole model, nothing crosses a link
    assert server_links(Topology.from_cfg({}, 1), 1, 1e6, colocated=True).push(0, 2.0) == 2.0


def test_colocated_shards_lift_a_saturated_server_and_stay_on_the_virtual_runtime():
    def run(shards):
        cfg = {"hardware": {"workers": 8,
                            "network": {"bandwidth_Gbps": 128 * 8 / 1e9 * 8, "latency_us": 0,
                                        "server": {"bandwidth_Gbps": 128 * 8 / 1e9}}}}
        o = sync_options({"name": "async", "shards": shards}, cfg)
        s = TrainSettings(batch_size=4, lr=0.01, target_accuracy=2.0, stop="budget", eval_every=1000,
                          budget_updates=None, budget_s=100.0)
        return VirtualRun(strategy(o.name), o, s, FakeRuntime(), fake_data(), 1.0).run()

    (r1, s1), (rc, sc), (ra, sa) = run(1), run("colocated"), run("auto")
    assert sum(sc.iterations) / rc.elapsed_s > 1.5 * sum(s1.iterations) / r1.elapsed_s
    assert sum(sa.iterations) == sum(sc.iterations) and ra.elapsed_s == rc.elapsed_s   # auto: colocated here
    assert sync_options({"name": "async", "runtime": "mpi"}, {"hardware": {"workers": 4}}).colocated is False
    with pytest.raises(ConfigError, match="modelled on sync.runtime=virtual only"):
        sync_options({"name": "async", "shards": "colocated", "runtime": "mpi"}, {"hardware": {"workers": 4}})
    with pytest.raises(ConfigError, match="must be an integer >= 1"):
        sync_options({"name": "async", "shards": 1.5}, {"hardware": {"workers": 4}})


def test_compute_model_fit_and_balanced_split():
    cm = ComputeModel.fit([16, 32, 64, 128], [0.002 + b * 1e-4 for b in (16, 32, 64, 128)])
    assert cm.t0 == pytest.approx(0.002) and cm.t1 == pytest.approx(1e-4)
    assert cm.time(64, 0.5) == pytest.approx(2 * (0.002 + 0.0064))
    assert balanced_batches([1.0, 0.5, 0.25], 192, ComputeModel(0.0, 1.0)) == [110, 55, 27]
    # with a fixed overhead t0=10: T = (192 + 30) / 1.75, b_i = T v_i - 10 = 116.9, 53.4, 21.7
    assert balanced_batches([1.0, 0.5, 0.25], 192, ComputeModel(10.0, 1.0)) == [117, 53, 22]
    assert balanced_batches([1.0, 0.01], 10, ComputeModel(5.0, 1.0)) == [9, 1]  # never below one sample


def test_lr_rules():
    assert lr_multiplier("linear", 4) == 4 and lr_multiplier("sqrt", 4) == 2 and lr_multiplier("none", 4) == 1
    o = SyncOptions(train=TrainConfig(lr_scaling="linear", batch_size=1, warmup_updates=1000))   # 1000 samples
    assert scaled_lr(o, 0.1, 256, 64, 0) == pytest.approx(0.1)        # warm-up starts at lr
    assert scaled_lr(o, 0.1, 256, 64, 500) == pytest.approx(0.25)     # half-way to 4 x lr
    assert scaled_lr(o, 0.1, 256, 64, 5000) == pytest.approx(0.4)
    assert push_weights(0.1, [64, 64], "lr", batch_size=64, rule="linear") == pytest.approx([0.1, 0.1])
    assert push_weights(0.1, [96, 32], "lr", batch_size=64, rule="linear") == pytest.approx([0.15, 0.05])


def test_allreduce_global_batch_uses_the_scaled_lr():
    """With lr_scaling=linear a W-worker allreduce step equals W pushes at lr on one snapshot (s=0)."""
    import numpy as np

    cfg = {"hardware": {"workers": 3}, "train": {"lr_scaling": "linear", "warmup_updates": 0}}
    s = TrainSettings(batch_size=4, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=5, budget_updates=30)
    runs = []
    for name, extra in (("allreduce", {}), ("delay", {"staleness": 0, "balance": "none"})):
        o = sync_options({"name": name, **extra}, cfg)
        v = VirtualRun(strategy(o.name), o, s, FakeRuntime(), fake_data(), 1.0)
        v.run()
        runs.append(v)
    np.testing.assert_allclose(runs[0].final_params, runs[1].final_params, rtol=1e-5, atol=1e-6)
    cfg["train"]["lr_scaling"] = "none"
    o = sync_options({"name": "allreduce"}, cfg)
    v = VirtualRun(strategy(o.name), o, s, FakeRuntime(), fake_data(), 1.0)
    v.run()
    assert not np.allclose(v.final_params, runs[0].final_params)


def _delay(speed_changes, balance, budget_s=60.0):
    cfg = {"hardware": {"workers": 4, "speed_changes": speed_changes}}
    o = sync_options({"name": "delay", "staleness": 1, "balance": balance, "balance_every": 2}, cfg)
    s = TrainSettings(batch_size=8, lr=0.1, target_accuracy=2.0, stop="budget", eval_every=1000,
                      budget_updates=None, budget_s=budget_s)
    v = VirtualRun(strategy(o.name), o, s, FakeRuntime(), fake_data(), ComputeModel(0.1, 0.1))
    result, stats = v.run()
    return v, result, stats


def test_online_balancing_rebalances_after_a_speed_change():
    change = [{"worker": 2, "at_s": 5.0, "speed": 0.25}]
    v_on, r_on, s_on = _delay(change, "online")
    v_st, r_st, s_st = _delay(change, "static")
    assert s_st.rebalances == 0 and s_st.batches == [8, 8, 8, 8]
    assert s_on.rebalances >= 1
    b = s_on.batches
    assert b[2] < min(b[0], b[1], b[3]) and sum(b) == 32
    # balanced: (0.1 + 0.1 b)/v equal for all -> worker 2's share about a quarter of the others'
    assert b[2] <= 4
    # the moved work pays off: more samples processed in the same virtual minute
    assert r_on.samples > 1.3 * r_st.samples
    t = r_on.elapsed_s
    assert s_on.capacity == pytest.approx((5 * 4 + (t - 5) * 3.25) / t)  # time-averaged sum of speeds
    _, _, s_none = _delay([], "online")
    assert s_none.rebalances == 0 and s_none.batches == [8, 8, 8, 8]  # nothing to correct


def test_parameter_server_saturates_and_shards_lift_it():
    """8 workers, 1 s compute, a server link needing 0.25 s per message: one shard caps pushes at ~4/s."""
    # FakeRuntime has 8 float32 parameters = 32 bytes; 32 B / 128 B/s = 0.25 s per message
    def run(shards):
        cfg = {"hardware": {"workers": 8,
                            "network": {"bandwidth_Gbps": 1000, "latency_us": 0, "server": {"bandwidth_Gbps": 128 * 8 / 1e9}}}}
        o = sync_options({"name": "async", "shards": shards}, cfg)
        s = TrainSettings(batch_size=4, lr=0.01, target_accuracy=2.0, stop="budget", eval_every=1000,
                          budget_updates=None, budget_s=100.0)
        return VirtualRun(strategy(o.name), o, s, FakeRuntime(), fake_data(), 1.0).run()

    (r1, s1), (r4, s4) = run(1), run(4)
    assert s1.server_utilisation > 0.97
    assert sum(s1.iterations) / r1.elapsed_s == pytest.approx(4.0, rel=0.03)   # 1 / 0.25 s
    assert s4.server_utilisation < 0.6
    assert sum(s4.iterations) / r4.elapsed_s > 1.5 * sum(s1.iterations) / r1.elapsed_s


@pytest.mark.parametrize("cfg, sync, expected", [
    ({"network": {"bandwidth_Gbps": -1}}, {}, "hardware.network.bandwidth_Gbps=-1 must be > 0"),
    ({"network": {"latency_us": -5}}, {}, "hardware.network.latency_us=-5 must be >= 0"),
    ({"network": {"workers": {7: {"bandwidth_Gbps": 1}}}}, {}, "hardware.network.workers.7: no such worker"),
    ({"speed_changes": [{"worker": 9, "at_s": 1, "speed": 0.5}]}, {}, "hardware.speed_changes[0].worker=9: no such worker"),
    ({"speed_changes": [{"worker": 1, "at_s": 1, "speed": 0}]}, {}, "hardware.speed_changes[0].speed=0 must be > 0"),
    ({"emulated_step_s": 0}, {}, "hardware.emulated_step_s=0 must be > 0"),
    ({}, {"push_lr": "lr*2"}, "sync.push_lr='lr*2'"),
    ({}, {"balance": "magic"}, "sync.balance='magic'"),
    ({}, {"shards": 0}, "sync.shards=0 must be an integer >= 1"),
])
def test_bad_values_name_their_key(cfg, sync, expected):
    with pytest.raises(ConfigError) as err:
        sync_options({"name": "delay", **sync}, {"hardware": {"workers": 4, **cfg}})
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_unknown_scaling_rule_names_its_key():
    with pytest.raises(ConfigError, match=r"train.lr_scaling='cubic' \(accepted: linear, sqrt, none, adascale\)"):
        sync_options({"name": "allreduce"}, {"hardware": {"workers": 2}, "train": {"lr_scaling": "cubic"}})
    with pytest.raises(ConfigError, match="train.batch_policy='huge'"):
        sync_options({"name": "allreduce"}, {"hardware": {"workers": 2}, "train": {"batch_policy": "huge"}})


def test_global_batch_policy_splits_batch_size():
    o = sync_options({"name": "allreduce", "balance": "static"},
                             {"hardware": {"workers": 4, "worker_speeds": [1, 1, 1, 0.5]}, "train": {"batch_policy": "global"}})
    assert o.total_batch(64) == 64
    assert Balancer(o.sync.balance, o.speeds, 64, 64, ComputeModel(0, 1)).batches == [19, 18, 18, 9]  # 18.3 x 3, 9.1: largest remainder
    assert dataclasses.replace(o, train=dataclasses.replace(o.train, batch_policy="per_worker")).total_batch(64) == 256
