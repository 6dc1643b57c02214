"""Extract the ``OpGraph`` of one training step at TensorFlow-op granularity: trace the step
(forward, loss, ``tape.gradient``, SGD update) as a ``tf.function`` and make a node per op of
its graph, edges from each op input to its producer (bytes of that tensor).

Roles come from name scopes (``gradient_tape/`` backward, ``loss/``, ``update/``), the layer from
the scope that names a layer; ops that touch a variable are grouped with their layer. FLOPs are
estimated for MatMul/BatchMatMul/Conv2D (and their gradients) from shapes, 1 per output element
for other math ops, 0 for data movement; no per-op profiling (costs use the roofline).
Limits: control flow (an LSTM's ``While``) is one node whose body is not expanded nor counted
(its FLOPs are 0); unknown dimensions count as 1; Grappler's rewrites at run time are not seen.
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestrator.graph.opgraph import Edge, Node, OpGraph

_MOVE = {"Identity", "Reshape", "Const", "Placeholder", "NoOp", "Shape", "StridedSlice", "Pack", "ConcatV2",
         "Transpose", "ExpandDims", "Squeeze", "GatherV2", "ResourceGather", "ReadVariableOp", "Fill",
         "BroadcastTo", "Cast", "ZerosLike", "OnesLike", "Tile", "Slice", "Split", "SplitV", "Unpack"}
_VAR_OPS = {"ReadVariableOp", "AssignSubVariableOp", "AssignVariableOp", "AssignAddVariableOp",
            "ResourceGather", "ResourceScatterAdd"}


def _numel(shape: Any) -> int:  # a tf.TensorShape (TensorFlow has no type information)
    try:
        dims = shape.as_list()
    except ValueError:  # unknown rank
        return 1
    return int(math.prod(1 if d is None else d for d in dims))


def _bytes(t: Any) -> float:  # a tf.Tensor
    try:
        size = t.dtype.size
    except Exception:  # resource / variant handles
        size = 0
    return float(_numel(t.shape) * size)


def _op_flops(op: Any) -> float:  # a tf.Operation
    t = op.type
    out = sum(_numel(o.shape) for o in op.outputs)
    if t in ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"):
        a = op.inputs[0].shape.as_list() if op.inputs[0].shape.rank else [1]
        k = a[-2] if (t == "MatMul" and op.get_attr("transpose_a")) else a[-1]
        return float(2.0 * out * (k or 1))
    if t == "Conv2D":
        kh, kw, cin, _ = op.inputs[1].shape.as_list()
        return float(2.0 * out * kh * kw * cin)
    if t == "Conv2DBackpropFilter":  # output = filter shape; work ~ output-gradient size x kh*kw*cin
        kh, kw, cin, _ = op.outputs[0].shape.as_list()
        return float(2.0 * _numel(op.inputs[2].shape) * kh * kw * cin)
    if t == "Conv2DBackpropInput":
        kh, kw, _, cout = op.inputs[1].shape.as_list()
        return float(2.0 * out * kh * kw * cout)
    if t == "DepthwiseConv2dNative":
        kh, kw = op.inputs[1].shape.as_list()[:2]
        return float(2.0 * out * kh * kw)
    if t in _MOVE or t.endswith("VariableOp"):
        return 0.0
    return float(out)


def _layer_of(name: str, layers: set[str]) -> str | None:
    for part in name.split("/"):
        base = re.sub(r"_\d+$", "", part)
        if part in layers:
            return part
        if base in layers:
            return base
    return None


def _role(name: str, op_type: str) -> str:
    if "gradient_tape/" in name or name.startswith("gradients"):
        return "backward"
    if name.startswith("update/") or op_type.startswith("Assign"):
        return "update"
    if name.startswith("loss/"):
        return "loss"
    if op_type in ("Placeholder", "NoOp"):
        return "other"
    return "forward"


def extract_op_graph(model: Any, batch: int, input_specs: list[tuple[tuple[int, ...], Any]],
                     label_shape: tuple[int, ...] = (), name: str | None = None) -> OpGraph:
    """The op-level graph of one SGD training step of ``model`` for ``batch``-sized inputs
    (``input_specs``: [(shape, dtype)] without batch)."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = list(model.trainable_variables)
    owner = {id(v): layer.name for layer in model.layers for v in layer.trainable_variables}

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            with tf.name_scope("loss"):
                loss = loss_fn(y, logits)
        grads = tape.gradient(loss, variables)
        with tf.name_scope("update"):
            for v, g in zip(variables, grads):
                with tf.name_scope(owner.get(id(v), "var")):
                    v.assign_sub(0.01 * tf.convert_to_tensor(g))
        return loss

    xs = [tf.TensorSpec((batch, *s), d) for s, d in input_specs]
    x_spec = xs[0] if len(xs) == 1 else tuple(xs)
    graph = tf.function(step).get_concrete_function(x_spec, tf.TensorSpec((batch, *label_shape), tf.int32)).graph
    layers = {layer.name for layer in model.layers}
    nodes, edges = [], []
    for op in graph.get_operations():
        layer = _layer_of(op.name, layers)
        out_b = sum(_bytes(o) for o in op.outputs)
        in_b = sum(_bytes(i) for i in op.inputs)
        touches_var = op.type in _VAR_OPS or any(i.dtype == tf.resource for i in op.inputs)
        nodes.append(Node(op.name, op=op.type, role=_role(op.name, op.type), flops=_op_flops(op),
                          bytes_accessed=in_b + out_b, output_bytes=out_b,
                          activation_bytes=out_b if _role(op.name, op.type) == "forward" else 0.0,
                          temp_bytes=0.0 if _role(op.name, op.type) == "forward" else out_b,
                          group=layer if (touches_var and layer) else None, layer=layer))
        for i in op.inputs:
            edges.append(Edge(i.op.name, op.name, _bytes(i)))
        for c in op.control_inputs:
            edges.append(Edge(c.name, op.name, 0.0))
    meta = {"batch": batch, "model": model.name, "ops": len(nodes)}
    return OpGraph(name or model.name, nodes, edges, "op", 1.0, meta).validate(model.name)
