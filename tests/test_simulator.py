"""Simulator on hand-made graphs with hand-worked times, memory verdicts, and the lower bound."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.graph import Edge, Node, OpGraph, Placement
from orchestrator.hardware.cluster import Device, Worker
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.simulate.gantt import gantt
from orchestrator.placement.simulate.simulator import Simulator, lower_bound, simulate


def graph(costs, edges, **node_kw):
    nodes = [Node(n, cost={"gpu": c, "cpu": 2 * c}, **node_kw.get(n, {})) for n, c in costs.items()]
    return OpGraph("t", nodes, [Edge(a, b, nbytes) for a, b, nbytes in edges]).validate()


def worker(n_gpus=2, bw=1e9, latency=0.5, shared=None, memory=math.inf):
    devs = [Device(f"gpu:{i}", "gpu", memory_bytes=memory) for i in range(n_gpus)]
    ends = [(a.name, b.name) for a in devs for b in devs if a is not b]
    return Worker("w", devs, Topology(dict.fromkeys(ends, ConstantLink(bw, latency)),
                                      channels=dict.fromkeys(ends, shared) if shared else {}))


def run(g, w, where, **kw):
    return simulate(g, w, Placement(w.device_names, where), **kw)


def test_chain_on_one_device():
    g = graph({"a": 1, "b": 2, "c": 3}, [("a", "b", 8), ("b", "c", 8)])
    assert run(g, worker(), dict.fromkeys("abc", "gpu:0")).step_time_s == 6


def test_fork_join_uses_both_devices():
    g = graph({"a": 1, "b": 2, "c": 3, "d": 1}, [("a", "b", 0), ("a", "c", 0), ("b", "d", 0), ("c", "d", 0)])
    w = worker(latency=0.0)
    assert run(g, w, dict.fromkeys("abcd", "gpu:0")).step_time_s == 7
    r = run(g, w, {"a": "gpu:0", "b": "gpu:0", "c": "gpu:1", "d": "gpu:0"})
    assert r.step_time_s == 5 and r.busy_s == {"gpu:0": 4, "gpu:1": 3}


def test_transfer_between_two_devices():
    g = graph({"a": 1, "b": 1}, [("a", "b", 1e9)])
    r = run(g, worker(), {"a": "gpu:0", "b": "gpu:1"}, schedule=True)
    assert r.step_time_s == pytest.approx(1 + 0.5 + 1 + 1)
    tx = [e for e in r.schedule if e["kind"] == "transfer"]
    assert [(e["start"], e["end"]) for e in tx] == [(1.0, 2.5)]


def test_shared_link_serialises_transfers():
    g = graph({"x": 1, "y": 1, "z": 1}, [("x", "z", 1e9), ("y", "z", 1e9)])
    where = {"x": "gpu:0", "y": "gpu:2", "z": "gpu:1"}
    assert run(g, worker(3, latency=0.0), where).step_time_s == 3          # parallel links
    assert run(g, worker(3, latency=0.0, shared="switch"), where).step_time_s == 4   # one channel


def test_ready_list_prefers_the_longer_path():
    # on one device both b and c are ready at 1; c heads the longer path (c -> e on the other device)
    g = graph({"a": 1, "b": 1, "c": 1, "e": 5}, [("a", "b", 0), ("a", "c", 0), ("c", "e", 0)])
    r = run(g, worker(latency=0.0), {"a": "gpu:0", "b": "gpu:0", "c": "gpu:0", "e": "gpu:1"})
    assert r.step_time_s == 1 + 1 + 5


def test_out_of_memory_is_infeasible_with_bytes_over():
    g = graph({"a": 1, "b": 1}, [("a", "b", 0)], a={"param_bytes": 6, "temp_bytes": 3}, b={"activation_bytes": 2})
    r = run(g, worker(memory=10), {"a": "gpu:0", "b": "gpu:0"})
    assert not r.feasible and r.oom == [("gpu:0", 1.0)] and math.isinf(r.step_time_s)
    assert r.peak_memory_bytes["gpu:0"] == 11 and r.makespan_s == 2
    assert run(g, worker(memory=10), {"a": "gpu:0", "b": "gpu:1"}).feasible


def test_cpu_only_and_colocation_are_enforced():
    g = graph({"a": 1, "b": 1}, [("a", "b", 0)], a={"cpu_only": True, "group": "g"}, b={"group": "g"})
    r = run(g, worker(), {"a": "gpu:0", "b": "gpu:1"})
    assert not r.feasible and len(r.violations) == 2


def test_fast_path_matches_full_result_and_gantt(tmp_path):
    g = graph({"a": 1, "b": 2, "c": 3, "d": 1}, [("a", "b", 1e8), ("a", "c", 1e8), ("b", "d", 1e8), ("c", "d", 1e8)])
    w = worker()
    sim = Simulator(g, w)
    for assign in ([0, 0, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]):
        full = sim.evaluate(assign, schedule=True)
        assert sim.step_time(np.array(assign)) == full.step_time_s
    png = gantt(full, tmp_path / "g.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


@st.composite
def random_case(draw):
    n = draw(st.integers(1, 12))
    costs = {f"n{i}": draw(st.floats(0, 10)) for i in range(n)}
    edges = [(f"n{i}", f"n{j}", draw(st.floats(0, 5e9))) for j in range(n) for i in range(j)
             if draw(st.booleans())]
    cpu_only = {f"n{i}": {"cpu_only": True} for i in range(n) if draw(st.integers(0, 4)) == 0}
    where = [draw(st.integers(0, 2)) for _ in range(n)]
    return costs, edges, cpu_only, where


@settings(max_examples=min(150, settings.default.max_examples), deadline=None)
@given(random_case())
def test_lower_bound_never_exceeds_a_simulated_step(case):
    costs, edges, cpu_only, where = case
    g = graph(costs, edges, **cpu_only)
    cpu = Device("cpu:0", "cpu", host="h")
    gpus = [Device(f"gpu:{i}", "gpu", host="h") for i in range(2)]
    links = Topology({k: ConstantLink(1e9, 1e-3) for k in [(d.name, "h:mem") for d in gpus] + [("h:mem", d.name) for d in gpus]})
    w = Worker("w", [cpu, *gpus], links, host="h")
    names = w.device_names
    place = {n.name: "cpu:0" if n.cpu_only else names[where[i]] for i, n in enumerate(g.nodes)}
    r = simulate(g, w, Placement(names, place))
    assert r.feasible
    assert lower_bound(g, w) <= r.step_time_s * (1 + 1e-12) + 1e-12
