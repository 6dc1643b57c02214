"""Extract the ``OpGraph`` of one training step of a Keras model at layer granularity.

Nodes: a forward node per layer (named as the layer), ``loss``, a backward node per layer
(``<layer>.grad``) and an update node per layer with trainable weights (``<layer>.update``); all
three share ``group = layer`` (gradients and updates stay where the weights are). Edges carry
tensor bytes: activations forward, gradients backward, each layer's saved inputs to its backward
twin, weight gradients to the update. FLOPs are analytic (``orchestrator.placement.graph.flops``; backward = 2x
forward, SGD update = 2 per weight). ``profile_layers`` adds measured seconds per node under a
device profile name, which ``OpGraph.node_cost_s`` prefers for a device with that profile.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from orchestrator.graph.opgraph import Edge, Node, OpGraph
from orchestrator.placement.graph.flops import layer_flops, numel

if TYPE_CHECKING:
    from orchestrator.models import ModelSpec

LOSS = "loss"


def _dsize(dtype: Any) -> int:  # a TF/Keras dtype or its name
    return int(np.dtype(str(getattr(dtype, "name", dtype)).replace("string", "object")).itemsize)


def _shape(kt: Any, batch: int) -> tuple[int, ...]:
    return tuple(batch if i == 0 else (1 if d is None else int(d)) for i, d in enumerate(kt.shape))


def _nbytes(kt: Any, batch: int) -> float:
    return float(numel(_shape(kt, batch)) * _dsize(kt.dtype))


def extract_layer_graph(model: Any, batch: int, name: str | None = None) -> OpGraph:
    """The layer-level training-step graph of a built Keras (Sequential or functional) model."""
    import keras

    from orchestrator.execution.functional import layer_calls

    fwd: dict[str, Node] = {}
    edges: dict[tuple[str, str], float] = defaultdict(float)
    saved: dict[str, float] = defaultdict(float)
    inexact: list[str] = []
    for layer, call in layer_calls(model):
        ins, outs = list(call.arguments.keras_tensors), list(call.outputs)
        flops, exact = layer_flops(layer, [_shape(t, batch) for t in ins], [_shape(t, batch) for t in outs])
        if not exact:
            inexact.append(layer.name)
        in_b, out_b = sum(_nbytes(t, batch) for t in ins), sum(_nbytes(t, batch) for t in outs)
        pbytes = float(sum(numel(w.shape) * _dsize(w.dtype) for w in layer.weights))
        n = fwd.get(layer.name) or Node(layer.name, op=type(layer).__name__, role="forward", group=layer.name,
                                        layer=layer.name, param_bytes=pbytes)
        n.flops += flops
        n.bytes_accessed += in_b + out_b + pbytes
        n.activation_bytes += out_b
        n.output_bytes += out_b
        fwd[layer.name] = n
        saved[layer.name] += in_b
        for t in ins:
            src = t._keras_history.operation
            if not isinstance(src, keras.layers.InputLayer):
                edges[(src.name, layer.name)] += _nbytes(t, batch)
    fn_outputs = model.outputs
    logits_b = sum(_nbytes(t, batch) for t in fn_outputs)
    logits_n = sum(numel(_shape(t, batch)) for t in fn_outputs)
    nodes = list(fwd.values())
    nodes.append(Node(LOSS, op="SparseCategoricalCrossentropy", role="loss", flops=8.0 * logits_n,
                      bytes_accessed=3 * logits_b, output_bytes=logits_b, temp_bytes=logits_b))
    out_edges = [Edge(src, dst, b) for (src, dst), b in edges.items()]
    for t in fn_outputs:
        src = t._keras_history.operation.name
        out_edges += [Edge(src, LOSS, _nbytes(t, batch)), Edge(LOSS, src + ".grad", _nbytes(t, batch))]
    weighted = {l.name: l for l, _ in layer_calls(model) if l.trainable_weights}
    for n in list(fwd.values()):
        nodes.append(Node(n.name + ".grad", op=n.op + "Grad", role="backward", flops=2 * n.flops,
                          bytes_accessed=2 * n.bytes_accessed, temp_bytes=n.param_bytes,
                          output_bytes=saved[n.name], group=n.name, layer=n.name))
        out_edges.append(Edge(n.name, n.name + ".grad", saved[n.name]))
        if n.name in weighted:
            tb = float(sum(numel(w.shape) * _dsize(w.dtype) for w in weighted[n.name].trainable_weights))
            nodes.append(Node(n.name + ".update", op="SGDUpdate", role="update", flops=2 * tb / 4,
                              bytes_accessed=3 * tb, group=n.name, layer=n.name))
            out_edges.append(Edge(n.name + ".grad", n.name + ".update", tb))
    out_edges += [Edge(dst + ".grad", src + ".grad", b) for (src, dst), b in edges.items()]
    meta = {"batch": batch, "model": model.name, "inexact_flops_layers": inexact}
    return OpGraph(name or model.name, nodes, out_edges, "layer", 1.0, meta).validate(model.name)


def _sync() -> None:
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        tf.test.experimental.sync_devices()


def _median_s(fn: Callable[..., object], args: Sequence[Any], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn(*args)
    _sync()
    times: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        _sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def profile_layers(graph: OpGraph, model: Any, x: Any, y: Any, *, profile: str = "local-cpu", warmup: int = 2,
                   repeats: int = 5, device: str | None = None) -> OpGraph:
    """Time each layer's forward, backward (forward+backward minus forward), update and the loss on
    this machine (``device``: a TF device, default TF's choice) and store the medians (seconds),
    less the dispatch overhead of one tf.function call, in ``Node.cost[profile]``. Returns ``graph``."""
    import tensorflow as tf

    from orchestrator.execution.functional import run_placed

    calls: list[tuple[Any, Any, dict[str, Any]]] = []
    with tf.device(device) if device else _Null():
        logits = run_placed(model, x, lambda _n: None, training=True, record=calls)
        over = _dispatch_overhead(logits, warmup, repeats)
        graph.meta.setdefault("dispatch_overhead_s", {})[profile] = over
        per_layer: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for layer, args, kwargs in calls:
            f_t, b_t = _time_layer(layer, args, kwargs, warmup, repeats)
            f_t = max(f_t - over, 0.0)
            per_layer[layer.name][0] += f_t
            per_layer[layer.name][1] += b_t
        for lname, (f_t, b_t) in per_layer.items():
            graph.node(lname).cost[profile] = f_t
            graph.node(lname + ".grad").cost[profile] = b_t
            if lname + ".update" in graph._index:
                t = _time_update(model.get_layer(lname), warmup, repeats)
                graph.node(lname + ".update").cost[profile] = max(t - over, 0.0)
        graph.node(LOSS).cost[profile] = max(_time_loss(logits, y, warmup, repeats) - over, 0.0)
    graph.meta.setdefault("profiles", []).append(profile)
    return graph


def _dispatch_overhead(t: Any, warmup: int, repeats: int) -> float:
    """Seconds to call a tf.function that returns its input (subtracted from every measurement)."""
    import tensorflow as tf

    ident = tf.function(lambda a: tf.identity(a))
    return _median_s(ident, (t,), warmup + 2, max(repeats, 10))


def _time_layer(layer: Any, args: Any, kwargs: dict[str, Any], warmup: int, repeats: int) -> tuple[float, float]:
    import tensorflow as tf

    flat = tf.nest.flatten(args)
    is_t = [tf.is_tensor(a) for a in flat]
    tensors = [a for a, t in zip(flat, is_t) if t]

    def call(ts: Sequence[Any]) -> Any:
        it = iter(ts)
        return layer(*tf.nest.pack_sequence_as(args, [next(it) if t else a for a, t in zip(flat, is_t)]), **kwargs)

    out = call(tensors)
    upstream = [tf.ones_like(o) for o in tf.nest.flatten(out)]
    diff = [t for t in tensors if t.dtype.is_floating]

    @tf.function
    def fwd(*ts: Any) -> Any:
        return call(ts)

    @tf.function
    def fwd_bwd(*ts: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch([t for t in ts if t.dtype.is_floating])
            o = tf.nest.flatten(call(ts))
        return tape.gradient(o, [t for t in ts if t.dtype.is_floating] + list(layer.trainable_variables),
                             output_gradients=upstream, unconnected_gradients="zero")

    f_t = _median_s(fwd, tensors, warmup, repeats)
    fb_t = _median_s(fwd_bwd, tensors, warmup, repeats) if (diff or layer.trainable_variables) else f_t
    return f_t, max(fb_t - f_t, 0.0)


def _time_update(layer: Any, warmup: int, repeats: int) -> float:
    import tensorflow as tf

    grads = [tf.zeros(v.shape, v.dtype) for v in layer.trainable_variables]

    @tf.function
    def update(*gs: Any) -> Any:
        for v, g in zip(layer.trainable_variables, gs):
            v.assign_sub(0.0 * g)
        return tf.constant(0)

    return _median_s(update, grads, warmup, repeats)


def _time_loss(logits: Any, y: Any, warmup: int, repeats: int) -> float:
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def loss_grad(z: Any, yy: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = loss_fn(yy, z)
        return loss, tape.gradient(loss, z)

    return _median_s(loss_grad, (logits, tf.convert_to_tensor(y)), warmup, repeats)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        return False


def extract(spec: ModelSpec, batch: int = 32, *, profile: str | None = "local-cpu", seed: int = 0,
            warmup: int = 2, repeats: int = 5) -> OpGraph:
    """Build ``spec``'s model, extract its layer graph for ``batch`` and (unless ``profile`` is
    None) profile it here; ``meta`` records ``extract_s`` and ``profile_s``."""
    import keras

    keras.utils.set_random_seed(seed)
    t0 = time.perf_counter()
    model = spec.new_model()
    graph = extract_layer_graph(model, batch, spec.name)
    graph.meta["extract_s"] = time.perf_counter() - t0
    if profile:
        x, y = spec.sample(batch, seed)
        t1 = time.perf_counter()
        profile_layers(graph, model, x, y, profile=profile, warmup=warmup, repeats=repeats)
        graph.meta["profile_s"] = time.perf_counter() - t1
    return graph
