"""Micro-batched pipeline schedules (GPipe, 1F1B) worked out by hand: mini-batch time, steady
state, bubble, micro-batches in flight and their memory; m = 1 is the one-step simulation."""

import math

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.graph import Edge, Node, OpGraph
from orchestrator.hardware.cluster import Device, Worker
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.simulate.inflight import MicrobatchSpec, in_flight
from orchestrator.placement.simulate.microbatch import MicrobatchSchedule, settings, task_order
from orchestrator.placement.simulate.simulator import Simulator


def _chain(f, b, u=None, hop=None, loss=0.0, act=100.0, param=10.0):
    """A layer chain as the extractor builds it: L<i> (forward), loss, L<i>.grad, L<i>.update;
    costs on kind 'cpu'; ``hop``: fixed time of every tensor between layers (None: free)."""
    k = len(f)
    u = u or [0.0] * k
    nodes, edges = [], []
    for i in range(k):
        nodes.append(Node(f"L{i}", role="forward", cost={"cpu": f[i]}, group=f"L{i}", activation_bytes=act,
                          param_bytes=param))
    nodes.append(Node("loss", role="loss", cost={"cpu": loss}))
    for i in range(k):
        nodes.append(Node(f"L{i}.grad", role="backward", cost={"cpu": b[i]}, group=f"L{i}"))
        nodes.append(Node(f"L{i}.update", role="update", cost={"cpu": u[i]}, group=f"L{i}"))
    for i in range(k - 1):
        edges.append(Edge(f"L{i}", f"L{i + 1}", 1.0, hop))
        edges.append(Edge(f"L{i + 1}.grad", f"L{i}.grad", 1.0, hop))
    edges += [Edge(f"L{k - 1}", "loss", 1.0), Edge("loss", f"L{k - 1}.grad", 1.0)]
    for i in range(k):
        edges += [Edge(f"L{i}", f"L{i}.grad", 1.0), Edge(f"L{i}.grad", f"L{i}.update", 1.0)]
    return OpGraph("chain", nodes, edges).validate()


def _worker(n, mem=math.inf):
    devs = [Device(f"cpu:{i}", "cpu", memory_bytes=mem, memory_pool=None) for i in range(n)]
    return Worker("w", devs, Topology({(f"cpu:{i}", f"cpu:{j}"): ConstantLink(1e9) for i in range(n) for j in range(n) if i != j}))


def _assign(g, stage_of_layer):
    out = []
    for n in g.nodes:
        layer = n.name.split(".")[0]
        out.append(stage_of_layer[int(layer[1:])] if layer != "loss" else stage_of_layer[-1])
    return np.array(out, dtype=np.int64)


def _result(g, w, assign, m, kind):
    return MicrobatchSchedule(g, w, m, kind).evaluate(assign, record=True)


def test_orders_are_gpipe_fill_drain_and_1f1b():
    assert task_order("gpipe", 2, 2, 0) == [(0, 0), (0, 1), (1, 1), (1, 0)]
    assert task_order("1f1b", 2, 2, 0) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert task_order("1f1b", 3, 2, 1) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [in_flight("1f1b", 8, 4, s) for s in range(4)] == [4, 3, 2, 1]
    assert in_flight("gpipe", 8, 4, 3) == 8 and in_flight("1f1b", 2, 4, 0) == 2


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_two_stages_by_hand(kind):
    # f = 1, b = 2 per stage, free transfers: both schedules take (m + S - 1)(f + b) = 3 * 3 = 9
    g, w = _chain([1.0, 1.0], [2.0, 2.0]), _worker(2)
    r = _result(g, w, _assign(g, [0, 1]), 2, kind)
    assert r.stages == ["cpu:0", "cpu:1"]
    assert r.minibatch_time_s == pytest.approx(9.0)
    assert r.time_per_microbatch_s == pytest.approx(3.0)
    assert r.bubble_fraction == pytest.approx(1 / 3)           # GPipe's (S - 1) / (m + S - 1)
    # stage 1: GPipe runs F1 F2 before B2 (2 in flight); 1F1B runs F1 B1 F2 B2 (1 in flight)
    assert r.in_flight == {"cpu:0": 2, "cpu:1": 2 if kind == "gpipe" else 1}
    assert r.activation_memory_bytes["cpu:1"] == pytest.approx(100.0 * r.in_flight["cpu:1"])
    ends = {e["label"]: e["end"] for e in r.schedule_events if e["row"] == "cpu:0"}
    assert ends["B1"] == pytest.approx(9.0 if kind == "gpipe" else 6.0) and ends["F2"] == pytest.approx(2.0)


def test_three_stages_with_transfers_by_hand():
    # f = (1, 2, 1), b = (2, 4, 2), every tensor between stages 0.5 on its own link
    g, w = _chain([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], hop=0.5), _worker(3)
    a = _assign(g, [0, 1, 2])
    gp, fb = _result(g, w, a, 2, "gpipe"), _result(g, w, a, 2, "1f1b")
    # GPipe: s2 F1 [4,5] F2 [6,7] B2 [7,9] B1 [9,11]; s1 B2 [9.5,13.5] B1 [13.5,17.5]; s0 B2 [14,16] B1 [18,20]
    assert gp.minibatch_time_s == pytest.approx(20.0)
    # 1F1B: s2 F1 [4,5] B1 [5,7] F2 [7,8] B2 [8,10]; s1 B1 [7.5,11.5] B2 [11.5,15.5]; s0 B1 [12,14] B2 [16,18]
    assert fb.minibatch_time_s == pytest.approx(18.0)
    s1 = {e["label"]: (e["start"], e["end"]) for e in fb.schedule_events if e["row"] == "cpu:1" and e["kind"] == "node"}
    assert s1["B1"] == pytest.approx((7.5, 11.5)) and s1["B2"] == pytest.approx((11.5, 15.5))
    assert gp.in_flight == {"cpu:0": 2, "cpu:1": 2, "cpu:2": 2}
    assert fb.in_flight == {"cpu:0": 2, "cpu:1": 2, "cpu:2": 1}       # min(m, S - s)
    assert any(e["kind"] == "transfer" and e["label"] == "B2" for e in fb.schedule_events)
    # steady state: the slowest stage (f + b = 6) sets the pace
    for r in (gp, fb):
        assert r.time_per_microbatch_s == pytest.approx(6.0)
        assert r.stage_time_s == {"cpu:0": 3.0, "cpu:1": 6.0, "cpu:2": 3.0}


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_one_micro_batch_is_the_one_step_simulation(kind):
    g, w = _chain([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], u=[0.5, 0.25, 0.75], hop=0.5, loss=0.25), _worker(3)
    a = _assign(g, [0, 1, 2])
    r = _result(g, w, a, 1, kind)
    assert r.minibatch_time_s == pytest.approx(Simulator(g, w).step_time(a))
    assert set(r.in_flight.values()) == {1}


@pytest.mark.parametrize("stages", [[0, 1], [0, 1, 2], [0, 0, 1, 2, 2], [1, 0, 2, 2]])
@pytest.mark.parametrize("m", [1, 2, 3, 8])
def test_1f1b_holds_no_more_than_gpipe(stages, m):
    g = _chain([1.0, 0.5, 2.0, 1.0, 0.3][:len(stages)], [2.0, 1.0, 4.0, 2.0, 0.6][:len(stages)], hop=0.1)
    w = _worker(3)
    a = _assign(g, stages)
    gp, fb = _result(g, w, a, m, "gpipe"), _result(g, w, a, m, "1f1b")
    for d in gp.in_flight:
        assert fb.activation_memory_bytes[d] <= gp.activation_memory_bytes[d]
        assert fb.in_flight[d] <= gp.in_flight[d] == m
    # the simulated peaks are the counts the memory check charges
    order = fb.stages
    assert [fb.in_flight[d] for d in order] == [in_flight("1f1b", m, len(order), s) for s in range(len(order))]
    # a mini-batch is never faster than m micro-batches at the steady-state pace
    assert gp.minibatch_time_s >= m * gp.time_per_microbatch_s - 1e-9


def test_in_flight_activations_count_against_memory():
    # params 10 per layer, activations 100 per micro-batch: stage 0 (2 layers) holds 20 + k * 200
    g = _chain([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    a = _assign(g, [0, 0, 1])
    for kind, k0, fits in (("gpipe", 4, False), ("1f1b", 2, True)):
        w = _worker(2, mem=500.0)
        sim = Simulator(g, w, MicrobatchSpec(4, kind))
        peak, oom = sim.memory(a)
        assert peak[0] == pytest.approx(20 + k0 * 200)
        assert (not oom) == fits
        r = MicrobatchSchedule(g, w, 4, kind, sim).evaluate(a)
        assert r.feasible == fits and r.memory_bytes["cpu:0"] == pytest.approx(20 + k0 * 200)
        assert math.isfinite(MicrobatchSchedule(g, w, 4, kind, sim).minibatch_time(a)) == fits


def test_non_contiguous_split_still_schedules():
    # layers 0 and 2 on cpu:0, layer 1 on cpu:1: the tensor from L1 back to cpu:0 is charged, not waited for
    g, w = _chain([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], hop=0.5), _worker(2)
    r = _result(g, w, _assign(g, [0, 1, 0]), 2, "1f1b")
    assert r.against_order > 0 and math.isfinite(r.minibatch_time_s)
    assert r.stage_time_s["cpu:0"] >= 6.0


def test_settings_are_checked():
    assert settings({"micro_batches": 4, "schedule": "GPipe"}) == (4, "gpipe")
    assert settings({}) == (1, "1f1b")
    for bad in ({"micro_batches": 0}, {"micro_batches": "4"}, {"schedule": "zb"}):
        with pytest.raises(ConfigError, match="placement"):
            settings(bad)


def test_schedules_are_one_registry_of_classes_resolved_once():
    """``SCHEDULES`` maps each name to its class; a plan file's name becomes the schedule object at reading
    (written back by name), an unknown one is one line naming the registered ones."""
    from orchestrator.plan import Pipeline, Plan, Replica, Stage
    from orchestrator.schedules import SCHEDULES, GPipe, OneFOneB, PipelineSchedule, schedule

    assert SCHEDULES == {"gpipe": GPipe, "1f1b": OneFOneB}
    assert all(issubclass(cls, PipelineSchedule) and cls.name == name for name, cls in SCHEDULES.items())
    assert schedule("gpipe") == GPipe() and schedule("gpipe") != OneFOneB() and isinstance(schedule("1f1b"), OneFOneB)
    with pytest.raises(ConfigError, match=r"unknown pipeline schedule 'zb' \(known: gpipe, 1f1b\)"):
        schedule("zb")
    plan = Plan([Pipeline((Stage((0, 1), (Replica("A100-40"),)),))], 1, schedule=GPipe())
    doc = plan.to_dict()
    assert doc["schedule"] == "gpipe" and Plan.from_dict(doc) == plan and Plan.from_dict(doc).schedule.in_flight(8, 4, 3) == 8
    assert Plan([Pipeline((Stage((0,), (Replica("A100-40"),)),))], 1).schedule == OneFOneB()
    with pytest.raises(ConfigError) as err:
        Plan.from_dict({**doc, "schedule": "zb"})
    assert str(err.value) == "plan: unknown schedule 'zb' (known: gpipe, 1f1b)"


def test_gantt_shows_every_micro_batch(tmp_path):
    from orchestrator.placement.simulate.gantt import gantt_events

    g, w = _chain([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], u=[0.5, 0.5, 0.5], hop=0.5), _worker(3)
    r = _result(g, w, _assign(g, [0, 1, 2]), 3, "1f1b")
    for d in r.stages:
        labels = sorted(e["label"] for e in r.schedule_events if e["row"] == d and e["kind"] == "node")
        assert labels == ["B1", "B2", "B3", "F1", "F2", "F3", "U"]
    png = gantt_events(r.schedule_events, tmp_path / "p.png", "1f1b")
    assert png.stat().st_size > 1000


def test_stage_order_is_the_flow_order_of_the_devices_used():
    """Stages are the devices an assignment uses, ordered by the mean flow position of their nodes (not by
    device index, not by the first node), ties by device index; unused devices are no stage, and the stage
    index sets each device's in-flight micro-batches (1F1B: the first stage holds the most)."""
    from orchestrator.placement.simulate.inflight import stage_order

    pos = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    # device 3 holds the start, device 0 the middle, device 1 the end; device 2 is unused
    assert stage_order(pos, np.array([3, 3, 0, 0, 1, 1]), 4) == [3, 0, 1]
    # the mean decides, not the first node: device 1 starts earlier (0) but sits later on average (3.33)
    assert stage_order(pos, np.array([1, 0, 0, 0, 1, 1]), 2) == [0, 1]
    # equal means: the lower device index first
    assert stage_order(np.array([0.0, 2.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), 2) == [0, 1]
    assert stage_order(pos, np.zeros(6, dtype=np.int64), 3) == [0]
    counts = [in_flight("1f1b", 8, 3, s) for s in range(3)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
