"""Keras functional graphs, placed layer by layer: walk a model's layer calls in execution order,
clone it with each layer's variables created on its device, and run its forward pass with each
layer call under ``tf.device``. Works for Sequential and functional models (branches, several
inputs); nested sub-models are treated as one layer. Imports TensorFlow."""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf


def graph_of(model):
    """The functional graph behind ``model`` (a Sequential's internal functional model)."""
    fn = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
    if fn is None or not hasattr(fn, "_nodes_by_depth"):
        raise TypeError(f"model {model.name!r} has no functional graph (subclassed models are not supported)")
    return fn


def layer_calls(model) -> list:
    """Every (layer, keras Node) call of the graph in execution order, input layers left out."""
    fn = graph_of(model)
    out = []
    for depth in sorted(fn._nodes_by_depth, reverse=True):
        for node in fn._nodes_by_depth[depth]:
            if node.operation is not None and not node.is_input:
                out.append((node.operation, node))
    return out


def _call_with(op, training, device: str | None, record=None, tapes=None):
    def call(*args, **kwargs):
        if training is not None and "training" in getattr(op, "_call_context_args", {}):
            kwargs["training"] = training
        if record is not None:
            record.append((op, args, kwargs))
        with tf.device(device) if device is not None else _null():
            if tapes is None:
                return op(*args, **kwargs)
            return tapes.call(op, device, args, kwargs)
    return call


class LayerTapes:
    """Records every layer call of a forward pass on a tape of its own, so that the backward pass can
    run each layer's gradient on that layer's device (``backward``). One tape around the whole step
    would build every gradient op under the caller's device scope: on a placed model the backward pass
    would then run on the default device, and each layer's activations would travel there."""

    def __init__(self):
        self.calls = []   # (layer, device, flat float inputs, outputs, tape)

    def call(self, op, device, args, kwargs):
        inputs = list({x.ref(): x for x in tf.nest.flatten((args, kwargs))       # each tensor once:
                       if tf.is_tensor(x) and x.dtype.is_floating}.values())      # mha(x, x) reads x twice
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = op(*args, **kwargs)
        self.calls.append((op, device, inputs, out, tape))
        return out

    def backward(self, outputs, output_gradients, variables):
        """Gradients of ``variables`` given d(loss)/d(outputs), layer by layer in reverse order, each
        under its layer's device; a variable used by several calls gets the sum."""
        grad_of = {}
        for o, g in zip(tf.nest.flatten(outputs), tf.nest.flatten(output_gradients)):
            grad_of[o.ref()] = g
        var_grads = {}
        for op, device, inputs, out, tape in reversed(self.calls):
            outs = tf.nest.flatten(out)
            gouts = [grad_of.get(o.ref()) for o in outs]
            if all(g is None for g in gouts):
                continue
            weights = list(op.trainable_weights)
            with tf.device(device) if device is not None else _null():
                gouts = [tf.zeros_like(o) if g is None else g for o, g in zip(outs, gouts)]
                grads = tape.gradient(outs, inputs + weights, output_gradients=gouts)
                for x, g in zip(inputs, grads[:len(inputs)]):
                    if g is not None:
                        grad_of[x.ref()] = g + grad_of[x.ref()] if x.ref() in grad_of else g
            for w, g in zip(weights, grads[len(inputs):]):
                if g is not None:
                    key = id(w)
                    var_grads[key] = g + var_grads[key] if key in var_grads else g
        return [var_grads.get(id(v)) for v in variables]


def run_placed(model, inputs, device_of: Callable[[str], str | None], training: bool | None = None, record=None,
               tapes: LayerTapes | None = None):
    """``model(inputs)`` with every layer call under ``tf.device(device_of(layer.name))``
    (no scope where it returns None); ``record`` (a list) receives (layer, args, kwargs) per call;
    ``tapes`` records each call for a backward pass layer by layer (``LayerTapes.backward``)."""
    fn = graph_of(model)
    inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    out = fn._run_through_graph(list(inputs),
                                operation_fn=lambda op: _call_with(op, training, device_of(op.name), record, tapes))
    return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out


def clone_placed(model, device_of: Callable[[str], str | None]):
    """A copy of ``model`` (same weights) whose layers' variables live on ``device_of(layer.name)``."""
    def clone_layer(layer):
        new = layer.__class__.from_config(layer.get_config())
        dev = device_of(layer.name)
        with tf.device(dev) if dev else _null():
            cfg = layer.get_build_config()
            if cfg:
                new.build_from_config(cfg)
            if layer.weights:
                new.set_weights(layer.get_weights())
        return new

    return keras.models.clone_model(model, clone_function=clone_layer)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
