"""Keras functional graphs, placed layer by layer: walk a model's layer calls in execution order,
clone it with each layer's variables created on its device, and run its forward pass with each
layer call under ``tf.device``. Works for Sequential and functional models (branches, several
inputs); nested sub-models are treated as one layer. Imports TensorFlow."""

from __future__ import annotations

from typing import Callable

import tensorflow as tf
import keras


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


def _call_with(op, training, device: str | None, record=None):
    def call(*args, **kwargs):
        if training is not None and "training" in getattr(op, "_call_context_args", {}):
            kwargs["training"] = training
        if record is not None:
            record.append((op, args, kwargs))
        if device is None:
            return op(*args, **kwargs)
        with tf.device(device):
            return op(*args, **kwargs)
    return call


def run_placed(model, inputs, device_of: Callable[[str], str | None], training: bool | None = None, record=None):
    """``model(inputs)`` with every layer call under ``tf.device(device_of(layer.name))``
    (no scope where it returns None); ``record`` (a list) receives (layer, args, kwargs) per call."""
    fn = graph_of(model)
    inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    out = fn._run_through_graph(list(inputs), operation_fn=lambda op: _call_with(op, training, device_of(op.name), record))
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
