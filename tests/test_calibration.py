from orchestrator.calibration import Calibration, critical_path_estimate, fit_scale, median_abs_rel_error
from orchestrator.cluster import Device
from orchestrator.graph import Edge, Node, OpGraph


def _graph():
    # a -> b, a -> c, (b, c) -> d ; 1 s each on "p", 1e6 bytes per edge
    nodes = [Node(n, cost={"p": 1.0}) for n in "abcd"]
    edges = [Edge("a", "b", 1e6), Edge("a", "c", 1e6), Edge("b", "d", 1e6), Edge("c", "d", 1e6)]
    return OpGraph("g", nodes, edges)


def test_critical_path_estimate_serial_parallel_and_knobs():
    g = _graph()
    devs = {"x": Device("x", "cpu", profile="p"), "y": Device("y", "cpu", profile="p")}
    assert critical_path_estimate(g, dict.fromkeys("abcd", "x"), devs) == 4.0
    split = {"a": "x", "b": "x", "c": "y", "d": "x"}
    calib = Calibration(link_bandwidth=1e6, transfer_latency_s=0.5)
    # c starts after a (1) + transfer (0.5 + 1), ends 3.5, back to d: 3.5 + 1.5 = 5, d ends 6
    assert critical_path_estimate(g, split, devs, calib) == 6.0
    assert critical_path_estimate(g, split, devs, Calibration(link_bandwidth=1e12)) < 3.01
    assert critical_path_estimate(g, dict.fromkeys("abcd", "x"), devs, Calibration(scale={"p": 2.0})) == 8.0


def test_error_and_scale_fit():
    assert median_abs_rel_error([1.0, 2.0, 3.0], [1.0, 1.0, 3.0]) == 0.0
    assert median_abs_rel_error([2.0, 2.0, 2.0], [1.0, 1.0, 1.0]) == 1.0
    assert fit_scale([1.0, 2.0, 4.0], [2.0, 4.0, 8.0]) == 2.0
