"""Real execution of a placement: the training step with each layer (its forward, backward and
update, which TF colocates with the layer's variables) under ``tf.device`` on real TF devices
(logical CPUs from ``runtime.split_cpu``, GPUs, or remote tasks from ``tf_cluster``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from orchestrator.graph import OpGraph, Placement


def layer_devices(graph: OpGraph, placement: Placement, worker=None) -> dict[str, str]:
    """``{layer: TF device}`` from the devices of ``graph``'s forward nodes; a device name maps
    through ``worker.device(name).tf_device`` when a worker is given, else is used as is."""
    out = {}
    for n in graph.nodes:
        if n.role == "forward" and n.layer:
            dev = placement.assignment[n.name]
            out[n.layer] = worker.device(dev).tf_device if worker is not None else dev
    return out


@dataclass
class StepResult:
    step_time_s: float       # median of the timed steps
    times_s: list[float]
    loss: float


def _runtime(spec, device_of, seed: int, default_device: str):
    from orchestrator.execution.runtime import ModelRuntime

    return ModelRuntime(spec, seed=seed, device_of=device_of, default_device=default_device)


def measure_step(spec, device_of: Mapping[str, str] | Callable[[str], str] | None, batch: int = 32, *,
                 warmup: int = 3, repeats: int = 10, seed: int = 0, default_device: str = "/device:CPU:0") -> StepResult:
    """Median wall time of the placed training step (parameters restored afterwards)."""
    rt = _runtime(spec, device_of, seed, default_device)
    times, loss = rt.time_steps(*spec.sample(batch, seed), warmup=warmup, repeats=repeats)
    return StepResult(float(np.median(times)), times, loss)


def compare_with_unplaced(spec, device_of, batch: int = 8, *, seed: int = 0,
                          default_device: str = "/device:CPU:0") -> dict[str, float]:
    """Loss and gradients of the placed step against the unplaced one (same weights and batch)."""
    x, y = spec.sample(batch, seed)
    ref = _runtime(spec, None, seed, default_device)
    placed = _runtime(spec, device_of, seed, default_device)
    l0, g0 = ref.gradient(x, y)
    l1, g1 = placed.gradient(x, y)
    return {"loss": l0, "loss_placed": l1, "loss_abs_diff": abs(l0 - l1),
            "grad_max_abs_diff": float(np.max(np.abs(g0 - g1))), "grad_max_abs": float(np.max(np.abs(g0))),
            "variable_devices": sorted({v.value.device for v in placed.variables})}


def _check_cluster(n: int, model: str, batch: int) -> int:
    """``python -m orchestrator.execution.execute N MODEL BATCH``: place MODEL's layers round-robin on N local
    tf_cluster processes, compare with the unplaced step, time it; prints one JSON line."""
    from orchestrator.hardware.tf_cluster import LocalTFCluster
    from orchestrator.models import builtin

    spec = builtin(model)
    with LocalTFCluster(n) as cluster:
        names = [layer.name for layer in spec.new_model().layers]
        mapping = {name: cluster.devices[i * n // len(names)] for i, name in enumerate(names)}
        out = compare_with_unplaced(spec, mapping, batch)
        out["step_time_s"] = measure_step(spec, mapping, batch, warmup=2, repeats=3).step_time_s
        out["pids"] = [p.pid for p in cluster.procs]
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_check_cluster(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))


def tf_device_name(device: str, device_map: Mapping[str, str] | None = None) -> str:
    """A placement's device name as a TensorFlow device: ``cpu:0`` -> ``/device:CPU:0``,
    ``host0/gpu:1`` -> ``/device:GPU:1``; TF strings pass through; ``device_map`` wins."""
    if device_map and device in device_map:
        return device_map[device]
    if device.startswith("/"):
        return device
    kind, _, index = device.rsplit("/", 1)[-1].partition(":")
    return f"/device:{kind.upper()}:{index or 0}"


def _check_devices(named: dict[str, str], devices: dict[str, str], device_map: Mapping[str, str] | None) -> None:
    """Every device the placement names exists in this process (TensorFlow would otherwise put the layer on the
    CPU without a word), and devices of several hosts are mapped (``h0/gpu:0`` and ``h1/gpu:0`` are one GPU here)."""
    import tensorflow as tf

    from orchestrator.errors import ConfigError

    hosts = sorted({d.split("/")[0] for d in named.values() if "/" in d and not d.startswith("/")
                    and d not in (device_map or {})})
    if len(hosts) > 1:
        raise ConfigError(f"the placement spans hosts {', '.join(hosts)}, whose devices would all map onto this "
                          "process's: give device_map={placement device: TensorFlow device}")
    have = {"/device:" + d.name.split("/device:")[-1] for d in tf.config.list_logical_devices()}
    for layer, dev in devices.items():
        if dev.startswith("/job:"):        # a remote device (a tf_cluster server): TensorFlow checks it there
            continue
        if "/device:" + dev.split("/device:")[-1] not in have:
            raise ConfigError(f"layer {layer!r} is placed on {named[layer]!r} ({dev}), which this process does not have "
                              f"(it has {', '.join(sorted(have))}): give device_map={{{named[layer]!r}: ...}}")


def apply_placement(model, placement: Placement | str, device_map: Mapping[str, str] | None = None):
    """The one call to use a trial's ``placement.json`` in your own code: a copy of ``model`` (same
    weights) whose layers' variables live on the devices the placement gave those layers. Layers
    the placement does not name stay where TensorFlow puts them.

        placed = apply_placement(my_model, "outputs/.../placement.json", {"cpu:1": "/device:GPU:0"})
    """
    p = placement if isinstance(placement, Placement) else Placement.load(placement)
    devices = {layer.name: tf_device_name(p.assignment[layer.name], device_map)
               for layer in model.layers if layer.name in p.assignment}
    _check_devices({name: p.assignment[name] for name in devices}, devices, device_map)
    from orchestrator.execution.functional import clone_placed

    return clone_placed(model, devices.get)
