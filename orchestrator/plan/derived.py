"""A ``LayeredProfile`` derived from one of the project's op graphs (``OpGraph``: an extracted Keras model,
a workload file) and device profiles, so that the project's own models can be planned on a GPU cluster.

Derived:
- layers: the graph's forward nodes in topological order; above ``max_layers`` of them, cut into
  ``max_layers`` contiguous runs of that order of roughly equal forward seconds (on the first GPU type);
- a backward, update or other node joins the layer of the last forward node of its ``group`` (else of its
  ``layer``); a node with neither joins the latest layer among its forward inputs, else the earliest among
  its other inputs, else the last layer; ``loss`` nodes join the last layer and count as forward time;
- seconds: ``OpGraph.node_cost_s`` on each GPU type's ``Device`` (the placement simulator's cost: explicit
  profiled costs first, else the roofline), summed per layer: forward (+ loss, other), backward, update;
- per TP degree: ``params`` = the layer's ``param_bytes`` / 4; ``act_mem`` = its forward nodes'
  ``activation_bytes`` per sample / 4; ``act_output`` = per sample / 4, the output bytes of every forward
  node of layers <= l that a forward or loss node after layer l reads (the tensors a stage boundary after l
  sends; for a chain, the last forward node's output); the last layer without a loss: its last node's output.

Assumed (not measured):
- time is linear in the batch: seconds at micro-batch ``mbs`` = seconds at the graph's own batch
  (``graph.meta["batch"]`` or ``graph_batch``) x mbs / that batch; the update does not depend on it, and every
  layer's entry is the whole graph's update / tp (the format's convention: Sailor's files and the layer profiler
  write the device's whole update on each layer, and the simulators charge a stage its first layer's entry);
  small micro-batches are therefore optimistic (no fixed per-kernel cost, full GPU occupancy);
- ideal tensor parallelism: at degree tp, every time, the parameters and both activations are / tp
  (no TP communication, no replicated parts);
- fp32 (``float_bytes`` 4); ``optimizer`` "sgd" by default, as the extracted graphs' update nodes are SGD.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.graph.opgraph import OpGraph
from orchestrator.hardware.cluster import Device
from orchestrator.hardware.presets import make_device
from orchestrator.hardware.profiles import profile as device_profile
from orchestrator.plan.profile import LayeredProfile, LayerSizes

MAX_LAYERS = 64
FLOAT_BYTES = 4
_FWD_TIME = ("forward", "loss", "other")


def gpu_device(spec: Device | str, precision: str = "fp32") -> Device:
    """``spec`` if a ``Device``, else one built from the device profile of that name (``orchestrator.hardware
    .profiles.PROFILES``, e.g. "A100 (datasheet)") at ``precision``."""
    if isinstance(spec, Device):
        return spec
    p = device_profile(spec)
    if p.kind != "gpu":
        raise ConfigError(f"device profile {spec!r} is a {p.kind}, not a GPU")
    return make_device(p, p.name, "host0", precision)


def layered_profile(graph: OpGraph, name: str, gpus: Mapping[str, Device | str],
                    micro_batches: Sequence[int] = (1, 2, 4, 8), tp_degrees: Sequence[int] = (1, 2, 4), *,
                    batch: int, graph_batch: int | None = None, max_layers: int = MAX_LAYERS,
                    optimizer: str = "sgd", precision: str = "fp32") -> LayeredProfile:
    """The layered profile of ``graph`` as model ``name`` on GPU types ``gpus`` (type name, as the cluster
    names it, -> a ``Device`` or a device profile name), at each micro-batch size and TP degree given;
    ``batch``: the global batch (``LayeredProfile.global_batch``); ``graph_batch``: the batch the graph's
    costs and bytes are for (default ``graph.meta["batch"]``). What is derived and assumed: the module doc."""
    gb = graph_batch if graph_batch is not None else graph.meta.get("batch")
    if gb is None:
        raise WorkloadError(f"{graph.name}: the graph records no batch size (meta['batch']); pass graph_batch=")
    for what, values in (("micro_batches", micro_batches), ("tp_degrees", tp_degrees),
                         ("batch", [batch]), ("graph_batch", [gb]), ("max_layers", [max_layers])):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ConfigError(f"{what} must be whole numbers >= 1, got {values!r}")
    if not gpus:
        raise ConfigError("layered_profile needs at least one GPU type")
    devices = {g: gpu_device(s, precision) for g, s in sorted(gpus.items())}
    nodes = graph.nodes
    order = graph.topological_order(graph.name)
    fwd = [i for i in order if nodes[i].role == "forward"]
    if not fwd:
        raise WorkloadError(f"{graph.name}: no forward node to make layers of")
    cost = {g: _costs(graph, g, d) for g, d in devices.items()}
    layer = np.full(len(nodes), -1, dtype=np.int64)
    layer[fwd] = _segments(cost[next(iter(cost))][fwd], max_layers)
    n_layers = int(layer.max()) + 1
    _attach(graph, order, layer, n_layers)

    role = np.array([n.role for n in nodes])
    is_fwd = role == "forward"
    masks = (np.isin(role, _FWD_TIME), role == "backward", role == "update")
    times: dict[str, dict[int, dict[int, tuple[tuple[float, float, float], ...]]]] = {}
    for g, c in cost.items():
        f, b, u = (np.bincount(layer, weights=c * m, minlength=n_layers) for m in masks)
        whole = float(u.sum())      # every layer carries the device's whole update, as the profiles' format does
        times[g] = {mbs: {tp: tuple((float(f[i] * mbs / gb / tp), float(b[i] * mbs / gb / tp), whole / tp)
                                    for i in range(n_layers)) for tp in tp_degrees} for mbs in micro_batches}

    params = np.bincount(layer, weights=[n.param_bytes for n in nodes], minlength=n_layers) / FLOAT_BYTES
    act_mem = np.bincount(layer, weights=[n.activation_bytes if n.role == "forward" else 0.0 for n in nodes],
                          minlength=n_layers) / gb / FLOAT_BYTES
    act_out = _boundary_bytes(graph, layer, is_fwd, role == "loss", n_layers)
    if act_out[-1] == 0:
        act_out[-1] = _output_bytes(graph, fwd[-1])
    act_out = act_out / gb / FLOAT_BYTES
    sizes = {tp: LayerSizes(tuple(float(x) for x in params / tp), tuple(float(x) for x in act_out / tp),
                            tuple(float(x) for x in act_mem / tp)) for tp in tp_degrees}
    starts = np.searchsorted(layer[fwd], np.arange(n_layers + 1))      # layers are contiguous runs of fwd
    spans = [(nodes[fwd[a]].name, nodes[fwd[b - 1]].name) for a, b in zip(starts[:-1], starts[1:])]
    return LayeredProfile(model=name, num_layers=n_layers, times=times, sizes=sizes, global_batch=batch,
                          optimizer=optimizer, float_bytes=FLOAT_BYTES, source=f"derived from op graph {graph.name}",
                          extra={"graph_batch": gb, "layer_spans": spans,
                                 "devices": {g: d.profile for g, d in devices.items()}})


def _costs(graph: OpGraph, gpu: str, device: Device) -> npt.NDArray[np.float64]:
    """Seconds of every node on ``device`` at the graph's batch (the simulator's ``node_cost_s``)."""
    c = np.array([graph.node_cost_s(n, device) for n in graph.nodes], dtype=float)
    bad = np.flatnonzero(~np.isfinite(c))
    if len(bad):
        raise WorkloadError(f"{graph.name}: node {graph.nodes[int(bad[0])].name!r} cannot run on GPU type {gpu} "
                            f"({device.profile}){f' ({len(bad)} such nodes)' if len(bad) > 1 else ''}")
    return c


def _segments(cost: npt.NDArray[np.float64], max_layers: int) -> npt.NDArray[np.int64]:
    """Layer of each position of ``cost``: itself up to ``max_layers`` positions, else ``max_layers``
    non-empty contiguous runs of roughly equal cost (equal counts when every cost is 0)."""
    n = len(cost)
    if n <= max_layers:
        return np.arange(n, dtype=np.int64)
    cum = np.cumsum(cost) if cost.sum() > 0 else np.arange(1, n + 1, dtype=float)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, max_layers) / max_layers, side="left") + 1
    for j in range(max_layers - 1):               # run j + 1 starts at cuts[j]; none may be empty
        cuts[j] = min(max(int(cuts[j]), (int(cuts[j - 1]) if j else 0) + 1), n - (max_layers - 1 - j))
    return np.searchsorted(cuts, np.arange(n), side="right").astype(np.int64)


def _attach(graph: OpGraph, order: list[int], layer: npt.NDArray[np.int64], n_layers: int) -> None:
    """Give every non-forward node a layer (in place; the rules are in the module doc)."""
    nodes = graph.nodes
    by_key: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for i in order:
        if nodes[i].role == "forward":
            for table, key in zip(by_key, (nodes[i].group, nodes[i].layer)):
                if key is not None:
                    table[key] = int(layer[i])
    preds = graph.predecessors()
    for i in order:
        n = nodes[i]
        if layer[i] >= 0:
            continue
        if n.role == "loss":
            layer[i] = n_layers - 1
        elif n.group in by_key[0] or n.layer in by_key[1]:
            layer[i] = by_key[0][n.group] if n.group in by_key[0] else by_key[1][str(n.layer)]
        else:
            fwd_in = [int(layer[p]) for p in preds[i] if nodes[p].role == "forward"]
            other_in = [int(layer[p]) for p in preds[i] if layer[p] >= 0]
            layer[i] = max(fwd_in) if fwd_in else min(other_in) if other_in else n_layers - 1


def _output_bytes(graph: OpGraph, i: int) -> float:
    n = graph.nodes[i]
    return n.output_bytes or max((e.bytes for e in graph.edges if e.src == n.name), default=0.0)


def _boundary_bytes(graph: OpGraph, layer: npt.NDArray[np.int64], is_fwd: npt.NDArray[np.bool_],
                    is_loss: npt.NDArray[np.bool_], n_layers: int) -> npt.NDArray[np.float64]:
    """Per layer l: bytes of the forward outputs produced in layers <= l and read by a forward node after l
    or by a loss node (each output once, however many readers)."""
    last: dict[int, int] = {}                     # forward source -> the last boundary it crosses, + 1
    edge_bytes: dict[int, float] = {}
    for e in graph.edges:
        s, d = graph.index(e.src), graph.index(e.dst)
        if is_fwd[s] and (is_fwd[d] or is_loss[d]):
            end = n_layers if is_loss[d] else int(layer[d])
            if end > layer[s]:
                last[s] = max(last.get(s, 0), end)
                edge_bytes[s] = max(edge_bytes.get(s, 0.0), e.bytes)
    diff = np.zeros(n_layers + 1)
    for s, end in last.items():
        out = graph.nodes[s].output_bytes or edge_bytes[s]
        diff[layer[s]] += out
        diff[end] -= out
    return np.cumsum(diff)[:n_layers]
