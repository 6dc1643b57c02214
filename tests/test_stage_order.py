"""The pipeline's stage order when a device holds update nodes without a forward twin (issue 42 item 8;
the doubt of issue 30's closing note).

From first principles: a micro-batch's activations flow forward from the device that holds the first
layer to the device that holds the loss; its gradients flow back the other way. The stage order of a
micro-batched schedule (GPipe, 1F1B) must follow that flow: stage 0 is the first device of the forward
pass. An update node runs once per mini-batch (the ``U`` task), after every micro-batch's backward; it
moves no activation or gradient between stages, so it cannot make a device an earlier or later stage.
Update nodes without a forward twin (an optimizer's step counter, Adam's beta powers: ``group`` None or a
group no forward node has) are therefore irrelevant to the order, however many a device holds.

The graph: layers L0 -> L1 on cpu:0 and cpu:1 (the loss on cpu:1), their gradients and updates with
them, plus untwinned update nodes ``opt.*`` (cost 0) on cpu:0 after L0's update. By hand, as in
``test_pipeline_schedule.test_two_stages_by_hand`` (f = 1, b = 2 per stage, free transfers, m = 2): stages
[cpu:0, cpu:1], mini-batch (m + S - 1)(f + b) = 9 s under both schedules, 1F1B holding 2 micro-batches
on stage 0 and 1 on stage 1. The zero-cost untwinned updates must change none of it.

**The code on main got it wrong** (``flow_position`` in orchestrator/placement/simulate/inflight.py): an update
node whose group has no forward node is placed after every forward node (``len(fwd) + k``), so it drags its
device's mean flow position late. One such node on cpu:0 (position 7 against L0's 0) makes cpu:0's mean 1.75
against cpu:1's 1.25: the stages become [cpu:1, cpu:0], the forward tensor L0 -> L1 and the gradient
L1.grad -> L0.grad both run against the order (counted, not waited for), and the schedule reports 6 s per
mini-batch instead of 9 (-33%), a bubble of 0 instead of 1/3, and under 1F1B charges cpu:0 one micro-batch in
flight instead of two (its activation memory halved). ``flow_position`` now places such an update node at its
predecessors' latest position, and these cases pass."""

import numpy as np
import pytest

from orchestrator.graph import Edge, Node, OpGraph
from orchestrator.hardware.cluster import Device, Worker
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.simulate.inflight import F, U, flow_position, in_flight_counts, phase_of, stage_order
from orchestrator.placement.simulate.microbatch import MicrobatchSchedule

CASES = [0, 1, 3]
# the untwinned update nodes: no group, and a group no forward node carries (Adam's beta powers)
UNTWINNED = [("opt.step", None), ("opt.beta1_power", "adam"), ("opt.beta2_power", "adam")]


def _graph(untwinned: int) -> OpGraph:
    nodes = [Node("L0", role="forward", cost={"cpu": 1.0}, group="L0", activation_bytes=100.0, param_bytes=10.0),
             Node("L1", role="forward", cost={"cpu": 1.0}, group="L1", activation_bytes=100.0, param_bytes=10.0),
             Node("loss", role="loss", cost={"cpu": 0.0}),
             Node("L1.grad", role="backward", cost={"cpu": 2.0}, group="L1"),
             Node("L0.grad", role="backward", cost={"cpu": 2.0}, group="L0"),
             Node("L1.update", role="update", cost={"cpu": 0.0}, group="L1"),
             Node("L0.update", role="update", cost={"cpu": 0.0}, group="L0")]
    edges = [Edge("L0", "L1", 1.0), Edge("L1", "loss", 1.0), Edge("loss", "L1.grad", 1.0),
             Edge("L1.grad", "L0.grad", 1.0), Edge("L0", "L0.grad", 1.0), Edge("L1", "L1.grad", 1.0),
             Edge("L0.grad", "L0.update", 1.0), Edge("L1.grad", "L1.update", 1.0)]
    for name, group in UNTWINNED[:untwinned]:
        nodes.append(Node(name, role="update", cost={"cpu": 0.0}, group=group))
        edges.append(Edge("L0.update", name, 1.0))
    return OpGraph("untwinned", nodes, edges).validate()


def _worker() -> Worker:
    devs = [Device(f"cpu:{i}", "cpu", memory_bytes=float("inf"), memory_pool=None) for i in range(2)]
    return Worker("w", devs, Topology({(f"cpu:{i}", f"cpu:{1 - i}"): ConstantLink(1e9) for i in range(2)}))


def _assign(g: OpGraph) -> np.ndarray:
    """L0, its gradient, its update and the untwinned updates on cpu:0; L1, the loss and theirs on cpu:1."""
    return np.array([0 if n.name.startswith(("L0", "opt.")) else 1 for n in g.nodes], dtype=np.int64)


@pytest.mark.parametrize("untwinned", CASES)
def test_the_forward_flow_sets_the_stage_order(untwinned):
    g = _graph(untwinned)
    assert stage_order(flow_position(g), _assign(g), 2) == [0, 1]


@pytest.mark.parametrize("untwinned", CASES)
@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_untwinned_updates_change_no_schedule_figure(untwinned, kind):
    g = _graph(untwinned)
    r = MicrobatchSchedule(g, _worker(), 2, kind).evaluate(_assign(g), record=True)
    assert r.stages == ["cpu:0", "cpu:1"]
    assert r.minibatch_time_s == pytest.approx(9.0)
    assert r.in_flight == {"cpu:0": 2, "cpu:1": 2 if kind == "gpipe" else 1}
    assert list(in_flight_counts(g, _assign(g), 2, 2, kind)) == [2, 2 if kind == "gpipe" else 1]


def test_the_graph_is_what_the_test_says():
    g = _graph(3)
    phase = dict(zip((n.name for n in g.nodes), phase_of(g).tolist(), strict=True))
    forward_groups = {n.group for n in g.nodes if phase[n.name] == F and n.group is not None}
    assert all(phase[name] == U and group not in forward_groups for name, group in UNTWINNED)
