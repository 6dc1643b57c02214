import json
import time

import pytest

from orchestrator.graph import OpGraph
from orchestrator.hardware.cluster import Device
from orchestrator.models import builtin
from orchestrator.placement.graph.extract import extract, extract_layer_graph
from orchestrator.placement.graph.extract_ops import extract_op_graph


def _cnn_forward_flops_per_sample() -> int:
    # conv1: 3x3x1 kernel, 32 filters, 26x26 output; multiply-add = 2 FLOPs, + bias + relu per output
    conv1 = 2 * 3 * 3 * 1 * 26 * 26 * 32 + 2 * 26 * 26 * 32
    pool1 = 2 * 2 * 13 * 13 * 32                  # 2x2 window per output element
    conv2 = 2 * 3 * 3 * 32 * 11 * 11 * 64 + 2 * 11 * 11 * 64
    pool2 = 2 * 2 * 5 * 5 * 64
    fc1 = 2 * 1600 * 128 + 2 * 128                # flatten: 5*5*64 = 1600, free
    logits = 2 * 128 * 10 + 10                    # bias, no activation
    return conv1 + pool1 + conv2 + pool2 + fc1 + logits


def test_cnn_layer_graph_counts_and_flops():
    spec = builtin("cnn")
    g = extract_layer_graph(spec.build(), batch=2)
    roles = [n.role for n in g.nodes]
    assert (roles.count("forward"), roles.count("loss"), roles.count("backward"), roles.count("update")) == (7, 1, 7, 4)
    # 6 activations + logits->loss + loss->grad + 7 saved inputs + 6 gradients + 4 weight gradients
    assert len(g.edges) == 6 + 2 + 7 + 6 + 4
    assert _cnn_forward_flops_per_sample() == 5_349_130
    assert sum(n.flops for n in g.nodes if n.role == "forward") == 2 * 5_349_130
    assert g.node("conv2.grad").flops == 2 * g.node("conv2").flops
    assert g.node("conv2").group == g.node("conv2.grad").group == g.node("conv2.update").group == "conv2"
    assert g.node("fc1").param_bytes == (1600 * 128 + 128) * 4
    edge = {(e.src, e.dst): e.bytes for e in g.edges}
    assert edge[("pool2", "flatten")] == 2 * 1600 * 4
    assert edge[("flatten.grad", "pool2.grad")] == 2 * 1600 * 4
    assert edge[("fc1.grad", "fc1.update")] == (1600 * 128 + 128) * 4


def test_json_round_trip_with_profiled_costs(tmp_path):
    g = extract(builtin("cnn"), batch=4, profile="local-cpu", warmup=1, repeats=3)
    fwd = [n for n in g.nodes if n.role == "forward"]
    assert all("local-cpu" in n.cost for n in fwd) and sum(n.cost["local-cpu"] for n in fwd) > 0
    path = tmp_path / "cnn.json"
    g.save(path)
    g2 = OpGraph.load(path)
    assert json.dumps(g2.to_dict(), sort_keys=True) == json.dumps(g.to_dict(), sort_keys=True)
    conv2 = g2.node("conv2")
    local = Device("cpu:0", "cpu", profile="local-cpu")
    other = Device("gpu:0", "gpu", peak_flops=1e12, mem_bandwidth=1e11, profile="V100")
    assert g2.node_cost_s(conv2, local) == conv2.cost["local-cpu"]
    assert g2.node_cost_s(conv2, other) == max(conv2.flops / 1e12, conv2.bytes_accessed / 1e11)


def test_lstm_and_attention_flops():
    spec = builtin("nmt", {"layers": 2, "vocab": 20, "hidden": 4, "seq_len": 3})
    g = extract_layer_graph(spec.build(), batch=2)
    h = d = 4
    assert g.node("enc_lstm0").flops == 2 * 3 * (2 * 4 * h * (d + h) + 4 * h + 12 * h)
    assert g.node("attention").flops == 2 * 3 * 3 * (2 * 4 + 5 + 2 * 4)
    assert g.node("enc_embed").flops == 0 and g.node("enc_embed.update").role == "update"
    t = builtin("transformer", {"seq_len": 4, "d_model": 8, "heads": 2, "ff": 16, "blocks": 1, "vocab": 30})
    tg = extract_layer_graph(t.build(), batch=1)
    proj = 3 * 2 * 4 * 8 * 8 + 2 * 4 * 8 * 8     # q, k, v and output projections (heads*key_dim = 8)
    assert tg.node("mha0").flops == proj + 2 * 4 * 4 * (2 * 4 + 5 + 2 * 4)


def test_inception_small_extraction():
    spec = builtin("inception_v3", {"input_size": 75, "classes": 10})
    t0 = time.perf_counter()
    g = extract(spec, batch=1, profile=None)
    assert time.perf_counter() - t0 < 60
    fwd = [n for n in g.nodes if n.role == "forward"]
    assert len(fwd) == 312 and not g.meta["inexact_flops_layers"]
    assert any(len(g.predecessors()[g.index(n.name)]) > 1 for n in fwd)   # concatenations: not a chain


@pytest.mark.slow
def test_every_op_of_a_branching_model_is_profiled():
    """Beside the CNN's chain (test_json_round_trip_with_profiled_costs): a transformer block's residual branches,
    attention, softmax and normalisation ops each get a measured cost (inception_v3 did the same in 20 s)."""
    t = builtin("transformer", {"seq_len": 4, "d_model": 8, "heads": 2, "ff": 16, "blocks": 1, "vocab": 30})
    g = extract(t, batch=1, warmup=1, repeats=1)
    timed = [n for n in g.nodes if n.role in ("forward", "backward", "loss", "update")]
    assert timed and all("local-cpu" in n.cost for n in timed)
    assert any(len(g.predecessors()[g.index(n.name)]) > 1 for n in timed if n.role == "forward")   # not a chain


def test_op_graph_of_cnn():
    spec = builtin("cnn")
    model = spec.build()
    g = extract_op_graph(model, 2, spec.input_specs)
    convs = [n for n in g.nodes if n.op == "Conv2D"]
    assert [n.layer for n in convs] == ["conv1", "conv2"]
    assert convs[1].flops == 2 * 3 * 3 * 32 * 11 * 11 * 64 * 2
    roles = {n.role for n in g.nodes}
    assert {"forward", "backward", "loss", "update"} <= roles
    assert any(n.op == "Conv2DBackpropFilter" and n.role == "backward" and n.layer == "conv2" for n in g.nodes)
    assert g.granularity == "op" and OpGraph.from_dict(json.loads(json.dumps(g.to_dict()))).total_flops == g.total_flops
