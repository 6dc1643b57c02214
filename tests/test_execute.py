import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.execution.execute import compare_with_unplaced, layer_devices, measure_step
from orchestrator.graph import Placement
from orchestrator.models import builtin
from orchestrator.placement.graph.extract import extract_layer_graph

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name,cfg", [("cnn", {}), ("transformer", {"seq_len": 6, "d_model": 8, "heads": 2,
                                                                     "ff": 8, "blocks": 1, "vocab": 30})])
def test_placed_step_matches_unplaced_on_two_logical_cpus(name, cfg):
    import tensorflow as tf

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(cpus) == 2
    spec = builtin(name, cfg)
    layers = [layer.name for layer in spec.new_model().layers]
    mapping = {n: cpus[i % 2] for i, n in enumerate(layers)}
    out = compare_with_unplaced(spec, mapping, batch=4)
    assert out["loss_abs_diff"] < 1e-5
    assert out["grad_max_abs_diff"] <= 1e-5 * max(1.0, out["grad_max_abs"])
    assert {d.split("/")[-1] for d in out["variable_devices"]} == {"device:CPU:0", "device:CPU:1"}


def test_layer_devices_and_step_time():
    spec = builtin("cnn")
    g = extract_layer_graph(spec.build(), batch=4)
    assignment = {n.name: ("cpu1" if n.group in ("fc1", "logits") else "cpu0") for n in g.nodes}
    p = Placement(["cpu0", "cpu1"], assignment).check(g)

    class W:  # a worker-like mapping of device names to TF devices
        def device(self, name):
            return type("D", (), {"tf_device": "/device:CPU:" + name[-1]})

    devs = layer_devices(g, p, W())
    assert devs["conv1"] == "/device:CPU:0" and devs["logits"] == "/device:CPU:1"
    r = measure_step(spec, devs, batch=4, warmup=1, repeats=3)
    assert len(r.times_s) == 3 and r.step_time_s > 0 and r.loss > 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.slow
def test_placed_step_on_two_tf_server_processes():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-m", "orchestrator.execution.execute", "2", "cnn", "8"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loss_abs_diff"] < 1e-5 and out["grad_max_abs_diff"] <= 1e-5 * max(1.0, out["grad_max_abs"])
    assert out["variable_devices"] == ["/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"]
    assert out["step_time_s"] > 0
    assert not any(_alive(pid) for pid in out["pids"])


def test_apply_placement_puts_each_layers_variables_where_the_file_says(tmp_path):
    from orchestrator.execution.execute import apply_placement, tf_device_name
    from orchestrator.graph import Placement
    from orchestrator.models import builtin

    assert tf_device_name("host0/gpu:1") == "/device:GPU:1" and tf_device_name("cpu:0") == "/device:CPU:0"
    model = builtin("cnn").build()
    names = [layer.name for layer in model.layers]
    Placement(["cpu:0", "cpu:1"], {n: ("cpu:0" if n.startswith(("conv", "pool")) else "cpu:1") for n in names}).save(
        tmp_path / "placement.json")
    placed = apply_placement(model, tmp_path / "placement.json")
    for layer in placed.layers:
        for v in layer.weights:
            want = "CPU:0" if layer.name.startswith("conv") else "CPU:1"
            assert v.value.device.endswith(want), (layer.name, v.value.device)
    import numpy as np

    x = np.zeros((2, 28, 28, 1), np.float32)
    np.testing.assert_allclose(placed(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    # a device this process lacks, or devices of several hosts, are one line, not the CPU without a word
    from orchestrator.errors import ConfigError

    for bad, words in (({names[0]: "host9/gpu:7"}, "which this process does not have"),
                       ({names[0]: "banana"}, "which this process does not have"),
                       ({names[0]: "h0/cpu:0", names[1]: "h1/cpu:0"}, "spans hosts h0, h1")):
        with pytest.raises(ConfigError, match=words):
            apply_placement(model, Placement(sorted(set(bad.values())), bad))
    remapped = apply_placement(model, Placement(["h0/cpu:0", "h1/cpu:0"], {names[0]: "h0/cpu:0", names[1]: "h1/cpu:0"}),
                               {"h0/cpu:0": "/device:CPU:0", "h1/cpu:0": "/device:CPU:1"})
    assert remapped.layers[0].weights[0].value.device.endswith("CPU:0")


def test_the_backward_pass_of_a_placed_model_runs_on_each_layers_device():
    """Gradient ops carry their layer's device (one tape around the step would leave them on the
    default device, and every activation would travel there: across hosts, 10x the traffic)."""
    import numpy as np
    import tensorflow as tf

    from orchestrator.execution.runtime import ModelRuntime

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    spec = builtin("cnn")
    layers = [layer.name for layer in spec.new_model().layers]
    mapping = {n: cpus[0] if i < 3 else cpus[1] for i, n in enumerate(layers)}
    rt = ModelRuntime(spec, device_of=mapping, default_device=cpus[0])
    x, y = np.zeros((4, 28, 28, 1), np.float32), np.zeros(4, np.int32)
    graph = rt._grad.get_concrete_function(tf.constant(x), tf.constant(y)).graph
    grad_devices = {op.device.split("/")[-1] for op in graph.get_operations() if "gradient" in op.name.lower()}
    assert {"device:CPU:0", "device:CPU:1"} <= grad_devices, grad_devices


def test_a_placement_means_the_same_layers_in_every_build_of_the_model():
    """Keras numbers automatic layer names per process (``dense_7`` in a later build); a placement keyed
    by the extracted graph's names must still reach every layer of the runtime's own build."""
    import keras

    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.models import ModelSpec
    from orchestrator.placement.graph.extract import extract

    def build():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(3)])

    spec = ModelSpec("auto-named", build, (6,), 3)
    graph = extract(spec, batch=4, profile=None)
    build(), build()  # other builds in between move Keras' name counters on
    mapping = {n.layer: "/device:CPU:1" for n in graph.nodes if n.layer}
    rt = ModelRuntime(spec, device_of=mapping)
    assert len(rt.layers) == 2 and rt.devices == ["/device:CPU:1"] * 2, (sorted(mapping), [l.name for l in rt.layers])
