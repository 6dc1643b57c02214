"""Calibration knobs act on what the simulator consumes, by hand-worked amounts."""

import math

import pytest

from orchestrator.errors import ConfigError
from orchestrator.graph import Edge, Node, OpGraph, Placement
from orchestrator.hardware.calibration import (
    Calibration,
    calibrate_graph,
    calibrate_worker,
    fit_scale,
    median_abs_rel_error,
)
from orchestrator.hardware.cluster import Device, Worker
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
from plugins.hardware.local import calibration_of


def _graph():
    # a -> b, a -> c, (b, c) -> d: profiled 1 s each on "local-cpu"; d has only a roofline cost (1 s)
    nodes = [Node(n, cost={"local-cpu": 1.0}) for n in "abc"] + [Node("d", flops=1e12)]
    edges = [Edge("a", "b", 1e6), Edge("a", "c", 1e6), Edge("b", "d", 1e6), Edge("c", "d", 1e6)]
    return OpGraph("g", nodes, edges).validate()


def _worker():
    return Worker("w", [Device(f"cpu:{i}", "cpu", peak_flops=1e12, profile="local-cpu") for i in range(2)])


def _step(graph, worker, where) -> float:
    return SimulatedEvaluator(graph, worker).evaluate(Placement(worker.device_names, where)).step_time_s


ALL0 = dict.fromkeys("abcd", "cpu:0")
SPLIT = {"a": "cpu:0", "b": "cpu:0", "c": "cpu:1", "d": "cpu:0"}


def test_null_knobs_change_nothing_and_logical_cpus_talk_for_free():
    g, w = _graph(), _worker()
    assert calibrate_graph(g, Calibration()) == g and calibrate_worker(w, Calibration()) == w
    assert _step(g, w, ALL0) == 4.0
    assert _step(g, w, SPLIT) == 3.0       # b and c overlap; cpu:0 -> cpu:1 costs nothing


def test_cost_scale_multiplies_profiled_costs_only():
    g = _graph()
    g2 = calibrate_graph(g, Calibration(scale={"local-cpu": 1.5, "other": 9.0}))
    assert _step(g2, _worker(), ALL0) == pytest.approx(3 * 1.5 + 1.0)   # d's roofline cost untouched
    assert g.nodes[0].cost == {"local-cpu": 1.0} and _step(g, _worker(), ALL0) == 4.0   # a copy
    assert calibrate_graph(g2, Calibration(scale={"local-cpu": 2.0})).meta["cost_scale"] == {"local-cpu": 3.0, "other": 9.0}


def test_link_latency_and_bandwidth_between_logical_cpus():
    g, w = _graph(), _worker()
    wl = calibrate_worker(w, Calibration(link_latency_s=0.25))
    assert [(a, b, l.latency_s, l.bandwidth) for (a, b), l in wl.links.items()] == [
        ("cpu:0", "cpu:1", 0.25, math.inf), ("cpu:1", "cpu:0", 0.25, math.inf)]
    assert w.links == {} and wl.route(w.devices[0], w.devices[1]) == [("cpu:0", "cpu:1")]
    # a (1) -> c on cpu:1 after 0.25, c ends 2.25, back by 2.5; b ended 2 on cpu:0; d 2.5 -> 3.5
    assert _step(g, wl, SPLIT) == pytest.approx(3.5)
    assert _step(g, wl, ALL0) == 4.0       # one device: no transfer
    wb = calibrate_worker(w, Calibration(link_latency_s=0.25, link_bandwidth=1e6))   # +1 s per 1e6 bytes
    assert _step(g, wb, SPLIT) == pytest.approx(1 + 1.25 + 1 + 1.25 + 1)
    wbw = calibrate_worker(w, Calibration(link_bandwidth=2e6))                        # latency 0
    assert _step(g, wbw, SPLIT) == pytest.approx(1 + 0.5 + 1 + 0.5 + 1)


def test_calibrated_links_keep_existing_links():
    devs = [Device("cpu:0", "cpu"), Device("cpu:1", "cpu"), Device("cpu:2", "cpu", host="h2")]
    own = ConstantLink(5.0, 7.0)
    before = Topology({("cpu:0", "cpu:1"): own})
    w = calibrate_worker(Worker("w", devs, before), Calibration(link_latency_s=1e-3))
    assert list(w.links.items())[0] == (("cpu:0", "cpu:1"), own) and list(w.links)[1:] == [("cpu:1", "cpu:0")]  # cpu:2: other host
    assert list(before.links) == [("cpu:0", "cpu:1")]                                         # a copy


def test_local_hardware_knobs():
    assert calibration_of({}) == Calibration()
    assert calibration_of({"cost_scale": None, "link_latency_us": None, "link_bandwidth_GBps": None}) == Calibration()
    c = calibration_of({"cost_scale": 1.25, "link_latency_us": 40, "link_bandwidth_GBps": 2})
    assert c == Calibration({"local-cpu": 1.25}, pytest.approx(40e-6), 2e9)
    for bad in ({"cost_scale": 0}, {"cost_scale": "x"}, {"link_latency_us": -1}, {"link_bandwidth_GBps": 0}):
        with pytest.raises(ConfigError, match="hardware."):
            calibration_of(bad)


def test_error_and_scale_fit():
    assert median_abs_rel_error([1.0, 2.0, 3.0], [1.0, 1.0, 3.0]) == 0.0
    assert median_abs_rel_error([2.0, 2.0, 2.0], [1.0, 1.0, 1.0]) == 1.0
    assert fit_scale([1.0, 2.0, 4.0], [2.0, 4.0, 8.0]) == 2.0
