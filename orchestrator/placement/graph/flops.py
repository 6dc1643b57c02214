"""Analytic forward FLOP counts of Keras layers from their config and concrete shapes (batch
included). A multiply-add counts 2; bias adds and activations 1 per output element; unknown
layers count 1 per output element (``KNOWN`` lists the layers counted exactly)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

KNOWN = ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "SeparableConv2D", "Dense", "EinsumDense",
         "LSTM", "GRU", "SimpleRNN", "MultiHeadAttention", "Attention", "BatchNormalization",
         "LayerNormalization", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D",
         "GlobalAveragePooling1D", "GlobalMaxPooling2D", "Add", "Subtract", "Multiply", "Average",
         "Activation", "ReLU", "Softmax", "Embedding", "Flatten", "Reshape", "Dropout", "Concatenate",
         "ZeroPadding2D", "InputLayer", "Rescaling")
NO_FLOPS = {"Embedding", "Flatten", "Reshape", "Dropout", "Concatenate", "ZeroPadding2D", "InputLayer"}
ACT_FLOPS = {"linear": 0, None: 0, "relu": 1, "tanh": 4, "sigmoid": 4, "softmax": 5, "gelu": 8, "swish": 5}


def numel(shape: Iterable[Any]) -> int:
    return int(math.prod(int(d) for d in shape))


def _act(cfg: dict[str, Any], out: int) -> float:
    act = cfg.get("activation")
    act = act if isinstance(act, str) or act is None else str(act)
    return ACT_FLOPS.get(act, 4) * out


def layer_flops(layer: Any, in_shapes: list[tuple[int, ...]], out_shapes: list[tuple[int, ...]]) -> tuple[float, bool]:
    """(forward FLOPs, counted exactly) of one call of ``layer``."""
    kind, cfg = type(layer).__name__, layer.get_config()
    out = sum(numel(s) for s in out_shapes)
    x = in_shapes[0] if in_shapes else ()
    bias = out if cfg.get("use_bias", False) else 0
    if kind in NO_FLOPS:
        return 0.0, True
    if kind in ("Conv1D", "Conv2D", "Conv3D"):
        cin = x[-1] // int(cfg.get("groups", 1))
        return 2.0 * numel(cfg["kernel_size"]) * cin * out + bias + _act(cfg, out), True
    if kind == "DepthwiseConv2D":
        return 2.0 * numel(cfg["kernel_size"]) * out + bias + _act(cfg, out), True
    if kind == "SeparableConv2D":
        mid = numel(x[:-1]) * int(cfg.get("depth_multiplier", 1)) * x[-1]  # depthwise output size (same padding bound)
        return 2.0 * numel(cfg["kernel_size"]) * mid + 2.0 * x[-1] * int(cfg.get("depth_multiplier", 1)) * out + bias + _act(cfg, out), True
    if kind == "Dense":
        return 2.0 * x[-1] * out + bias + _act(cfg, out), True
    if kind == "EinsumDense":  # approximate: the kernel's first axis is the contracted one
        return 2.0 * numel(x) / max(1, x[-1]) * numel(layer.kernel.shape), False
    if kind in ("LSTM", "GRU", "SimpleRNN"):
        b, t, d = x[0], x[1], x[-1]
        h = int(cfg["units"])
        gates = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}[kind]
        return float(b * t * (2 * gates * h * (d + h) + gates * h + {"LSTM": 12, "GRU": 10, "SimpleRNN": 4}[kind] * h)), True
    if kind == "MultiHeadAttention":
        q, v = in_shapes[0], in_shapes[1] if len(in_shapes) > 1 else in_shapes[0]
        b, tq, tk = q[0], numel(q[1:-1]), numel(v[1:-1])
        heads, kd = int(cfg["num_heads"]), int(cfg["key_dim"])
        vd = int(cfg.get("value_dim") or kd)
        dout = out_shapes[0][-1]
        proj = 2 * tq * q[-1] * heads * kd + 2 * tk * v[-1] * heads * kd + 2 * tk * v[-1] * heads * vd
        attn = heads * tq * tk * (2 * kd + 5 + 2 * vd)
        return float(b * (proj + attn + 2 * tq * heads * vd * dout)), True
    if kind == "Attention":
        q, v = in_shapes[0], in_shapes[1]
        b, tq, tk = q[0], q[1], v[1]
        return float(b * tq * tk * (2 * q[-1] + 5 + 2 * v[-1])), True
    if kind in ("BatchNormalization", "LayerNormalization"):
        return 8.0 * out, True  # mean, variance, normalise, scale, shift
    if kind in ("MaxPooling2D", "AveragePooling2D"):
        return float(numel(cfg["pool_size"]) * out), True
    if kind.startswith("Global"):
        return float(numel(x)), True
    if kind in ("Add", "Subtract", "Multiply", "Average"):
        return float((len(in_shapes) - 1) * out + (out if kind == "Average" else 0)), True
    if kind in ("Activation", "ReLU", "Softmax"):
        return float(ACT_FLOPS.get(cfg.get("activation", "relu" if kind == "ReLU" else "softmax"), 4) * out), True
    if kind == "Rescaling":
        return 2.0 * out, True
    return float(out), False
