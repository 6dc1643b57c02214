"""The models the layer profiler measures, as chains of layers in TensorFlow.

A ``Layer`` is one entry of the profile: its variables (those one device of a tensor-parallel group holds),
a forward ``__call__(x) -> y`` and how many TP all-reduces of its output it does each way. Two families:

- ``gpt``: a GPT-style decoder: layer 0 the token and position embeddings, layers 1..N pre-LayerNorm blocks
  (causal self-attention, then a 4x MLP, each with a residual), layer N+1 the final LayerNorm, the vocabulary
  projection and the cross-entropy loss. Under tensor parallelism of degree ``tp`` (Megatron-LM, Shoeybi et al.
  2019) one device holds a shard: the embedding's vocabulary rows split (then an all-reduce of the output), in
  each block the QKV projection column-parallel (``heads / tp`` heads), the attention output projection
  row-parallel, the MLP's first linear layer column-parallel and its second row-parallel (an all-reduce after
  each row-parallel layer in the forward, one before each column-parallel layer in the backward), the head's
  vocabulary columns split. LayerNorms and the biases added after an all-reduce are replicated.
- ``cnn``: the project's MNIST CNN (``orchestrator.models.cnn``), its Keras layers one by one, the loss in the
  last; no tensor-parallel form (TP 1 only).

Shapes are static (one ``tf.function`` per layer and micro-batch size), float32 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import ConfigError

MODELS = ("gpt", "cnn")


@dataclass(frozen=True)
class GptSize:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    sequence: int = 128
    vocab: int = 2048

    def check(self, tps: list[int]) -> None:
        for key in ("layers", "hidden", "heads", "sequence", "vocab"):
            if getattr(self, key) < 1:
                raise ConfigError(f"--{key}={getattr(self, key)}: must be >= 1")
        if self.hidden % self.heads:
            raise ConfigError(f"--hidden={self.hidden} must be a multiple of --heads={self.heads}")
        for tp in tps:
            if self.heads % tp or self.vocab % tp:
                raise ConfigError(f"--tp {tp}: the TP degree must divide --heads={self.heads} and --vocab={self.vocab}")


class Layer:
    """One profiled layer: ``variables`` (one device's shard), ``__call__``, ``input_spec`` per sample, and
    ``allreduces`` = (forward, backward) all-reduces of ``allreduce_floats`` per sample each."""

    name = "layer"
    kind = "layer"
    loss = False                     # the last layer: its output is the (scalar) loss
    allreduces: tuple[int, int] = (0, 0)
    allreduce_floats = 0

    def __init__(self) -> None:
        self.variables: list[Any] = []

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        raise NotImplementedError

    def output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def output_floats(self) -> int:
        return math.prod(self.output_shape())

    def __call__(self, x: Any, labels: Any = None) -> Any:
        raise NotImplementedError

    @property
    def param_floats(self) -> int:
        return int(sum(math.prod(v.shape) for v in self.variables))


def _var(tf: Any, shape: tuple[int, ...], seed: int, scale: float | None = None) -> Any:
    std = scale if scale is not None else 1.0 / math.sqrt(max(shape[0], 1))
    return tf.Variable(tf.random.stateless_normal(shape, seed=(seed, 0), stddev=std), trainable=True)


def _ones(tf: Any, n: int) -> Any:
    return tf.Variable(tf.ones((n,)), trainable=True)


def _zeros(tf: Any, n: int) -> Any:
    return tf.Variable(tf.zeros((n,)), trainable=True)


def _layernorm(tf: Any, x: Any, g: Any, b: Any) -> Any:
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b


class Embedding(Layer):
    name, kind = "embedding", "embedding"

    def __init__(self, tf: Any, size: GptSize, tp: int, seed: int):
        super().__init__()
        self.tf, self.size, self.tp = tf, size, tp
        self.rows = size.vocab // tp
        self.tok = _var(tf, (self.rows, size.hidden), seed, 0.02)
        self.pos = _var(tf, (size.sequence, size.hidden), seed + 1, 0.02)
        self.variables = [self.tok, self.pos]
        self.allreduces = (1, 1) if tp > 1 else (0, 0)
        self.allreduce_floats = size.sequence * size.hidden

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        return (self.size.sequence,), "int32"

    def output_shape(self) -> tuple[int, ...]:
        return (self.size.sequence, self.size.hidden)

    def __call__(self, x: Any, labels: Any = None) -> Any:
        tf = self.tf
        if self.tp == 1:
            return tf.gather(self.tok, x) + self.pos
        local = x % self.rows                          # this shard's rows (vocabulary-parallel: rows [r*V/tp, ...))
        mine = tf.cast(x < self.rows, tf.float32)[..., None]
        return tf.gather(self.tok, local) * mine + self.pos


class Block(Layer):
    name, kind = "block", "block"

    def __init__(self, tf: Any, size: GptSize, tp: int, seed: int):
        super().__init__()
        h, self.tf, self.size, self.tp = size.hidden, tf, size, tp
        self.heads = size.heads // tp
        self.dh = h // size.heads
        w = self.heads * self.dh                       # this shard's attention width
        f = 4 * h // tp                                # this shard's MLP width
        self.ln1 = (_ones(tf, h), _zeros(tf, h))
        self.qkv, self.qkv_b = _var(tf, (h, 3 * w), seed), _zeros(tf, 3 * w)
        self.proj, self.proj_b = _var(tf, (w, h), seed + 1), _zeros(tf, h)
        self.ln2 = (_ones(tf, h), _zeros(tf, h))
        self.fc1, self.fc1_b = _var(tf, (h, f), seed + 2), _zeros(tf, f)
        self.fc2, self.fc2_b = _var(tf, (f, h), seed + 3), _zeros(tf, h)
        self.variables = [*self.ln1, self.qkv, self.qkv_b, self.proj, self.proj_b, *self.ln2, self.fc1, self.fc1_b,
                          self.fc2, self.fc2_b]
        self.allreduces = (2, 2) if tp > 1 else (0, 0)
        self.allreduce_floats = size.sequence * h

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        return (self.size.sequence, self.size.hidden), "float32"

    def output_shape(self) -> tuple[int, ...]:
        return (self.size.sequence, self.size.hidden)

    def attention(self, x: Any) -> Any:
        tf = self.tf
        s, nh, dh = self.size.sequence, self.heads, self.dh
        qkv = tf.einsum("bsh,hk->bsk", x, self.qkv) + self.qkv_b
        q, k, v = tf.split(tf.reshape(qkv, (-1, s, 3, nh, dh)), 3, axis=2)
        q, k, v = (tf.transpose(tf.squeeze(t, 2), (0, 2, 1, 3)) for t in (q, k, v))      # b, heads, s, dh
        scores = tf.einsum("bnqd,bnkd->bnqk", q, k) / math.sqrt(dh)
        mask = tf.linalg.band_part(tf.ones((s, s)), -1, 0)
        scores = scores * mask - 1e9 * (1.0 - mask)
        ctx = tf.einsum("bnqk,bnkd->bnqd", tf.nn.softmax(scores, axis=-1), v)
        ctx = tf.reshape(tf.transpose(ctx, (0, 2, 1, 3)), (-1, s, nh * dh))
        return tf.einsum("bsw,wh->bsh", ctx, self.proj) + self.proj_b          # then all-reduce (row-parallel)

    def __call__(self, x: Any, labels: Any = None) -> Any:
        tf = self.tf
        x = x + self.attention(_layernorm(tf, x, *self.ln1))
        y = tf.nn.gelu(tf.einsum("bsh,hf->bsf", _layernorm(tf, x, *self.ln2), self.fc1) + self.fc1_b)
        return x + tf.einsum("bsf,fh->bsh", y, self.fc2) + self.fc2_b            # then all-reduce (row-parallel)


class Head(Layer):
    name, kind, loss = "head", "head", True

    def __init__(self, tf: Any, size: GptSize, tp: int, seed: int):
        super().__init__()
        self.tf, self.size, self.tp = tf, size, tp
        self.cols = size.vocab // tp
        self.ln = (_ones(tf, size.hidden), _zeros(tf, size.hidden))
        self.out = _var(tf, (size.hidden, self.cols), seed)
        self.variables = [*self.ln, self.out]

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        return (self.size.sequence, self.size.hidden), "float32"

    def output_shape(self) -> tuple[int, ...]:
        return ()                                      # the loss

    def output_floats(self) -> int:
        return self.size.sequence * self.cols          # the logits one device computes (Sailor counts them)

    def __call__(self, x: Any, labels: Any = None) -> Any:
        tf = self.tf
        logits = tf.einsum("bsh,hv->bsv", _layernorm(tf, x, *self.ln), self.out)
        # the shard's cross-entropy (Megatron's vocabulary-parallel loss adds two all-reduces of b x s floats)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels % self.cols, logits))


def gpt(size: GptSize, tp: int, seed: int = 0) -> list[Layer]:
    import tensorflow as tf

    return ([Embedding(tf, size, tp, seed)] + [Block(tf, size, tp, seed + 10 * (i + 1)) for i in range(size.layers)]
            + [Head(tf, size, tp, seed + 7)])


class KerasLayer(Layer):
    """One layer of a Keras model; ``loss``: sparse cross-entropy of its logits."""

    def __init__(self, tf: Any, layer: Any, in_shape: tuple[int, ...], out_shape: tuple[int, ...], loss: bool):
        super().__init__()
        self.tf, self.layer, self.loss = tf, layer, loss
        self.name, self.kind = layer.name, type(layer).__name__.lower()
        self.in_shape, self.out_shape = in_shape, out_shape
        self.variables = [v.value for v in layer.trainable_weights]

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        return self.in_shape, "float32"

    def output_shape(self) -> tuple[int, ...]:
        return () if self.loss else self.out_shape

    def output_floats(self) -> int:
        return math.prod(self.out_shape)

    def __call__(self, x: Any, labels: Any = None) -> Any:
        y = self.layer(x)
        if not self.loss:
            return y
        return self.tf.reduce_mean(self.tf.nn.sparse_softmax_cross_entropy_with_logits(labels, y))


def cnn(tp: int, seed: int = 0) -> list[Layer]:
    if tp != 1:
        raise ConfigError(f"--tp {tp}: the CNN has no tensor-parallel form (use --tp 1)")
    import keras
    import tensorflow as tf

    from orchestrator.models import cnn as cnn_model

    keras.utils.set_random_seed(seed)
    model = cnn_model.build()
    out: list[Layer] = []
    shape: tuple[int, ...] = (28, 28, 1)
    for i, layer in enumerate(model.layers):
        nxt = tuple(int(d) for d in layer.compute_output_shape((1, *shape))[1:])
        out.append(KerasLayer(tf, layer, shape, nxt, loss=i == len(model.layers) - 1))
        shape = nxt
    return out


def label_spec(layers: list[Layer]) -> tuple[int, ...]:
    """Per sample: the labels the last layer's loss reads (next tokens, or one class)."""
    return layers[0].input_spec()[0] if isinstance(layers[0], Embedding) else ()
