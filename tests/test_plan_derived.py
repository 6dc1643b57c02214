"""``orchestrator.plan.derived``: a layered profile from an op graph (no TensorFlow: hand-built graphs shaped
like ``extract_layer_graph``'s, and a synthetic workload file for the coarsening)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.graph.opgraph import Edge, Node, OpGraph
from orchestrator.hardware.cluster import Device
from orchestrator.placement.graph.synthetic import write_layered_workload
from orchestrator.placement.graph.workload import load_msr_workload
from orchestrator.plan.derived import MAX_LAYERS, layered_profile

BATCH = 8
GPU = Device("gpu", "gpu", peak_flops=10e12, mem_bandwidth=1e12, profile="test gpu")
FAST = replace(GPU, name="fast", peak_flops=20e12, mem_bandwidth=2e12, profile="test gpu x2")


def chain(n: int = 6, skip: bool = False) -> OpGraph:
    """Like ``extract_layer_graph``: per layer a forward node, ``.grad`` and ``.update`` in its group; a loss."""
    nodes, edges = [], []
    for i in range(n):
        a = f"l{i}"
        out = 1000.0 * (i + 1) * BATCH
        nodes += [Node(a, role="forward", flops=1e9 * (i + 1), bytes_accessed=1e3, param_bytes=400.0 * (i + 1),
                       activation_bytes=out, output_bytes=out, group=a, layer=a),
                  Node(a + ".grad", role="backward", flops=2e9 * (i + 1), group=a, layer=a),
                  Node(a + ".update", role="update", flops=1e6, group=a, layer=a)]
        edges += [Edge(a, a + ".grad", out), Edge(a + ".grad", a + ".update", 400.0 * (i + 1))]
        if i:
            edges += [Edge(f"l{i - 1}", a, 1000.0 * i * BATCH), Edge(a + ".grad", f"l{i - 1}.grad")]
    if skip:
        edges.append(Edge("l0", "l2", 1000.0 * BATCH))
    nodes.append(Node("loss", role="loss", flops=1e6))
    edges += [Edge(f"l{n - 1}", "loss", 1000.0 * n * BATCH), Edge("loss", f"l{n - 1}.grad")]
    return OpGraph("chain", nodes, edges, meta={"batch": BATCH}).validate()


def test_one_layer_per_forward_node_with_its_twins():
    g = chain()
    p = layered_profile(g, "chain", {"g": GPU}, batch=64)
    assert p.num_layers == 6 and p.global_batch == 64 and p.optimizer == "sgd"
    assert p.extra["layer_spans"][3] == ("l3", "l3")
    t = p.layer_times("g", BATCH, 1)                      # at the graph's own batch: the simulator's seconds
    for i in range(6):
        fwd, bwd, upd = t[i]
        assert fwd == pytest.approx(g.node_cost_s(g.node(f"l{i}"), GPU) + (1e6 / GPU.peak_flops if i == 5 else 0))
        assert bwd == pytest.approx(2 * g.node_cost_s(g.node(f"l{i}"), GPU))
        # every layer carries the whole update, as Sailor's files and the layer profiler write it: the simulators
        # charge a stage its first layer's entry (probe F: inception_v3's plan charged 1.5e-08 s, one layer's update)
        assert upd == pytest.approx(6 * 1e6 / GPU.peak_flops)


def test_fwd_time_grows_linearly_with_micro_batch():
    p = layered_profile(chain(), "chain", {"g": GPU}, micro_batches=(1, 2, 4, 8), batch=64)
    fwd = {m: sum(f for f, _, _ in p.layer_times("g", m, 1)) for m in (1, 2, 4, 8)}
    assert fwd[1] < fwd[2] < fwd[4] < fwd[8]
    assert fwd[8] == pytest.approx(8 * fwd[1])
    upd = {m: sum(u for _, _, u in p.layer_times("g", m, 1)) for m in (1, 8)}
    assert upd[1] == pytest.approx(upd[8])                # the update does not scale with the batch


def test_tp2_halves_compute_params_and_activations():
    p = layered_profile(chain(), "chain", {"g": GPU}, tp_degrees=(1, 2), batch=64)
    for m in (1, 4):
        for one, two in zip(p.layer_times("g", m, 1), p.layer_times("g", m, 2)):
            assert two == pytest.approx(tuple(x / 2 for x in one))
    s1, s2 = p.layer_sizes(1), p.layer_sizes(2)
    for a, b in ((s1.params, s2.params), (s1.act_output, s2.act_output), (s1.act_mem, s2.act_mem)):
        assert b == pytest.approx(tuple(x / 2 for x in a))


def test_sizes_params_sum_and_per_sample_activations():
    g = chain()
    s = layered_profile(g, "chain", {"g": GPU}, batch=64).layer_sizes(1)
    assert sum(s.params) == pytest.approx(sum(n.param_bytes for n in g.nodes) / 4)
    assert s.act_output == pytest.approx(tuple(1000.0 * (i + 1) / 4 for i in range(6)))   # per sample, floats
    assert s.act_mem == pytest.approx(tuple(1000.0 * (i + 1) / 4 for i in range(6)))


def test_act_output_counts_every_tensor_crossing_the_boundary():
    plain = layered_profile(chain(), "c", {"g": GPU}, batch=64).layer_sizes(1).act_output
    skip = layered_profile(chain(skip=True), "c", {"g": GPU}, batch=64).layer_sizes(1).act_output
    assert skip[0] == plain[0]                            # l0 -> l1 and l0 -> l2: one tensor, sent once
    assert skip[1] == pytest.approx(plain[1] + plain[0])  # after l1: l1's output and l0's, which l2 reads
    assert skip[2:] == plain[2:]


def test_twice_as_fast_gpu_gives_half_the_time():
    p = layered_profile(chain(), "chain", {"slow": GPU, "fast": FAST}, batch=64)
    assert p.gpu_types == ["fast", "slow"]
    for m in (1, 8):
        for slow, fast in zip(p.layer_times("slow", m, 4), p.layer_times("fast", m, 4)):
            assert fast == pytest.approx(tuple(x / 2 for x in slow))


def test_device_profile_names():
    p = layered_profile(chain(), "chain", {"V100-16": "V100 (datasheet)", "A100-40": "A100 (datasheet)"}, batch=64)
    assert p.extra["devices"] == {"A100-40": "A100 (datasheet)", "V100-16": "V100 (datasheet)"}
    v, a = (sum(f for f, _, _ in p.layer_times(t, 1, 1)) for t in ("V100-16", "A100-40"))
    assert v == pytest.approx(a * 19.5 / 15.7)            # fp32 compute-bound: the datasheet ratio
    with pytest.raises(ConfigError, match="not a GPU"):
        layered_profile(chain(), "chain", {"x": "Xeon Platinum 8380 (datasheet)"}, batch=64)


def test_large_graph_coarsened_to_equal_cost_runs(tmp_path):
    g = load_msr_workload(write_layered_workload(tmp_path / "w.json", 1000, seed=3)).graph
    for n in g.nodes:
        n.cpu_only = False
    acc = Device("acc", "accelerator", profile="msr accelerator")   # the file's explicit accelerator costs
    p = layered_profile(g, "w", {"acc": acc}, micro_batches=(1,), tp_degrees=(1,), batch=32, graph_batch=1)
    assert p.num_layers == MAX_LAYERS
    fwd = [f for f, _, _ in p.layer_times("acc", 1, 1)]
    assert sum(fwd) == pytest.approx(sum(g.node_cost_s(n, acc) for n in g.nodes))
    assert max(fwd) < 2 * sum(fwd) / len(fwd) and min(fwd) > 0
    assert sum(p.layer_sizes(1).params) == pytest.approx(sum(n.param_bytes for n in g.nodes) / 4)
    spans = p.extra["layer_spans"]
    assert len(spans) == MAX_LAYERS and len({a for a, _ in spans}) == MAX_LAYERS


def test_errors_name_the_problem(tmp_path):
    g = chain()
    g.node("l2").cpu_only = True
    with pytest.raises(WorkloadError, match="'l2' cannot run on GPU type g"):
        layered_profile(g, "chain", {"g": GPU}, batch=64)
    g = chain()
    g.meta.pop("batch")
    with pytest.raises(WorkloadError, match="graph_batch"):
        layered_profile(g, "chain", {"g": GPU}, batch=64)
    with pytest.raises(ConfigError, match="tp_degrees"):
        layered_profile(chain(), "chain", {"g": GPU}, tp_degrees=(0,), batch=64)


def test_no_tensorflow_import():
    code = "import sys, orchestrator.plan.derived; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
