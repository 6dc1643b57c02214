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
- any model of the ``model`` group that builds a Keras model (``cnn``, ``resnet50``, a plugin's, ``keras`` with a
  ``package.module:function`` factory): a ``Sequential`` model's layers one by one, a functional model's segments
  between its cut tensors (``keras_chain``), the loss in the last; no tensor-parallel form (TP 1 only).

Shapes are static (one ``tf.function`` per layer and micro-batch size), float32 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import ConfigError


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
    """One layer of a Keras model, or a segment of one (a sub-model between two cut tensors); ``loss``: sparse
    cross-entropy of its logits against labels of ``label_shape``."""

    def __init__(self, tf: Any, layer: Any, in_shape: tuple[int, ...], out_shape: tuple[int, ...], loss: bool,
                 dtype: str = "float32", kind: str | None = None, vocab: int = 2, label_shape: tuple[int, ...] = ()):
        super().__init__()
        self.tf, self.layer, self.loss = tf, layer, loss
        self.name, self.kind = layer.name, kind or type(layer).__name__.lower()
        self.in_shape, self.out_shape, self.dtype = in_shape, out_shape, dtype
        self.vocab, self.label_shape = vocab, label_shape           # an integer input's range; the loss's labels
        self.variables = [v.value for v in layer.trainable_weights]

    def input_spec(self) -> tuple[tuple[int, ...], str]:
        return self.in_shape, self.dtype

    def output_shape(self) -> tuple[int, ...]:
        return () if self.loss else self.out_shape

    def output_floats(self) -> int:
        return math.prod(self.out_shape)

    def __call__(self, x: Any, labels: Any = None) -> Any:
        y = self.layer(x)
        if not self.loss:
            return y
        return self.tf.reduce_mean(self.tf.nn.sparse_softmax_cross_entropy_with_logits(labels, y))


def keras_spec(name: str, factory: str | None = None, options: dict[str, Any] | None = None) -> Any:
    """The ``ModelSpec`` of a model of the ``model`` group that builds a Keras model (``cnn``, ``resnet50``, ...,
    a plugin's, ``keras`` with ``factory`` = ``package.module:function``, as ``model.factory``)."""
    from orchestrator import plugins
    from orchestrator.errors import PluginError

    if name in ("llm", "workload"):
        raise ConfigError(f"--model={name}: reads a profile or a cost graph, it has no layers to time (profile gpt or "
                          "a Keras model)")
    if factory is not None and name != "keras":
        raise ConfigError(f"--factory is for --model keras (got --model {name})")
    known = [n for n in plugins.names("model") if n not in ("llm", "workload")]
    if name not in known:
        raise ConfigError(f"--model={name!r}: unknown model (gpt, or one that builds a Keras model: {', '.join(known)})")
    if name == "keras" and not factory:
        raise ConfigError("--model keras needs --factory package.module:function (returning (keras_model, input_spec), "
                          "as model.factory)")
    try:
        spec = plugins.load("model", name)({**(options or {}), **({"factory": factory} if factory else {})})
    except PluginError as exc:
        raise ConfigError(f"--model={name}: {exc}") from None
    except ConfigError as exc:         # the model's own checks, in the profiler's options
        raise ConfigError(str(exc).replace("model.factory=", "--factory=").replace("model.", "--set ")) from None
    if spec.build is None:
        raise ConfigError(f"--model={name}: builds no Keras model to time")
    if len(spec.input_specs) != 1:
        raise ConfigError(f"--model={name} has {len(spec.input_specs)} inputs: the layer profiler times a chain fed by one")
    return spec


def keras_chain(spec: Any, tp: int, seed: int = 0) -> list[Layer]:
    """A Keras model as the profile's chain of layers: a ``Sequential`` model's layers one by one; a functional
    model cut at each tensor every path from its input to its output passes through (``cut_points``), one
    profile layer per segment between two cuts (a residual or inception block is one layer). The loss is in the
    last."""
    if tp != 1:
        raise ConfigError(f"--tp {tp}: {spec.name} has no tensor-parallel form here (use --tp 1)")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    model = spec.new_model()
    (shape, dtype), vocab = spec.input_specs[0], int(spec.extra.get("vocab", spec.num_classes))
    common: dict[str, Any] = {"vocab": vocab, "label_shape": tuple(spec.label_shape)}
    out: list[Layer] = []
    if isinstance(model, keras.Sequential):
        shape = tuple(shape)
        for i, layer in enumerate(model.layers):
            nxt = tuple(int(d) for d in layer.compute_output_shape((1, *shape))[1:])
            out.append(KerasLayer(tf, layer, shape, nxt, i == len(model.layers) - 1, dtype if i == 0 else "float32",
                                  **common))
            shape = nxt
        return out
    ops, cuts = cut_points(model)
    start, x = 0, model.inputs[0]
    for end in cuts:
        y = ops[end]._inbound_nodes[0].output_tensors[0]
        part = ops[start:end + 1]
        alone = len(part) == 1 and len(part[0]._inbound_nodes[0].input_tensors) == 1     # else a sub-model calls it
        layer = part[0] if alone else keras.Model(x, y, name=f"{part[0].name}..{part[-1].name}")
        out.append(KerasLayer(tf, layer, _static(x, spec.name), _static(y, spec.name), end == len(ops) - 1,
                              str(x.dtype), kind=None if alone else "segment", **common))
        start, x = end + 1, y
    return out


def cut_points(model: Any) -> tuple[list[Any], list[int]]:
    """The layers of a functional model in its order, and the positions after which to cut: a layer with one
    output where no tensor made before it (the model's input included) is read after it. Keras lists layers in
    a topological order, so a cut found there is one of the model's articulation tensors. A layer called twice
    (shared weights), several outputs, or an output that is not the last layer's: a one-line error."""
    import keras

    ops = [op for op in model.operations if not isinstance(op, keras.layers.InputLayer)]
    if len(model.outputs) != 1 or len(model.inputs) != 1:
        raise ConfigError(f"model {model.name}: {len(model.inputs)} inputs, {len(model.outputs)} outputs; the layer "
                          "profiler times a chain with one of each")
    last_read: dict[int, int] = {}
    for i, op in enumerate(ops):
        if len(op._inbound_nodes) != 1:       # Keras' own record of each call of a layer (keras 3)
            raise ConfigError(f"layer {op.name} of {model.name} is called {len(op._inbound_nodes)} times (shared "
                              "weights): the layer profiler cuts a chain of layers called once each")
        node = op._inbound_nodes[0]
        for t in node.input_tensors:
            last_read[id(t)] = i
    if ops[-1]._inbound_nodes[0].output_tensors[0] is not model.outputs[0]:
        raise ConfigError(f"model {model.name}: its output is not its last layer's (the profiler cuts a chain)")
    cuts, open_ = [], {id(model.inputs[0])}       # tensors made so far that a later layer reads
    for i, op in enumerate(ops):
        outs = op._inbound_nodes[0].output_tensors
        open_ = {t for t in open_ if last_read.get(t, -1) > i} | {id(t) for t in outs if last_read.get(id(t), -1) > i}
        if i == len(ops) - 1 or (len(outs) == 1 and open_ <= {id(outs[0])}):
            cuts.append(i)
    return ops, cuts


def _static(t: Any, model: str) -> tuple[int, ...]:
    dims = tuple(t.shape[1:])
    if any(d is None for d in dims):
        raise ConfigError(f"model {model}: tensor {t.name} has shape {tuple(t.shape)}: the profiler needs every "
                          "dimension but the batch fixed")
    return tuple(int(d) for d in dims)


def label_spec(layers: list[Layer]) -> tuple[int, ...]:
    """Per sample: the labels the last layer's loss reads (next tokens, or one class)."""
    return layers[0].input_spec()[0] if isinstance(layers[0], Embedding) else getattr(layers[-1], "label_shape", ())
