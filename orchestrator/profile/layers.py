"""The layer profiler: per layer, micro-batch size and TP degree, forward, backward and update seconds on one
TensorFlow device, and per layer and TP degree its parameter and activation floats.

How each figure is measured (docs/profiling.md):

- forward: a ``tf.function`` of the layer on a fixed input (the previous layer's real output), timed, less
  the dispatch (a ``tf.function`` of the same arguments that computes nothing, timed in the same rounds: the
  per-call cost of the runtime, which a whole training step pays once, not once per layer);
- backward: a ``tf.function`` of the forward and its gradients (inputs and variables, the upstream gradient
  given; the last layer from its loss) timed in alternation with the forward, minus it, round by round;
- the layers are timed round-robin (``timing.rounds``): each round times every layer once, so that a change
  of load on the machine falls on all of them alike;
- update: one Adam step (``ResourceApplyAdam``, TensorFlow's fused kernel) of every variable one device holds,
  once per TP degree (it does not depend on the micro-batch); as in Sailor's files, every layer of a
  ``(mbs, tp)`` carries the whole device's update;
- under TP: one shard's compute (the shards of a group run on separate devices at once), plus the layer's
  Megatron all-reduces of its output, each timed as the reduction of ``tp`` buffers in this process (the
  devices of one machine exchange through its memory);
- sizes: parameter floats of the shard; output floats per sample (what a stage boundary sends); activation
  memory per sample = the floats that the ops of the forward graph produce (views excluded), counted from
  the traced graph.

Every timed entry is the median of ``repeats`` calls after ``warmup`` (``timing.Sample``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.profile.models import Layer, label_spec
from orchestrator.profile.timing import Sample, less_dispatch, rounds

VIEWS = {"Placeholder", "ReadVariableOp", "Const", "VarHandleOp", "Identity", "IdentityN", "NoOp", "Shape",
         "Reshape", "Squeeze", "ExpandDims", "StopGradient"}
TINY_S = 1e-6                    # a backward within the timer's noise of its forward is recorded as 1 us


@dataclass
class LayerResult:
    fwd: Sample
    bwd: Sample
    allreduce: Sample | None = None      # one TP all-reduce of the layer's output (included in fwd / bwd)
    clamped: bool = False
    dispatch: Sample | None = None       # a call of a tf.function that computes nothing (taken off fwd)


@dataclass
class Profile:
    """What one run measured: ``times[mbs][tp]`` per layer, ``update[tp]``, ``sizes[tp]`` per layer."""

    names: list[str]
    times: dict[int, dict[int, list[LayerResult]]] = field(default_factory=dict)
    update: dict[int, Sample] = field(default_factory=dict)
    sizes: dict[int, list[dict[str, float]]] = field(default_factory=dict)


class Adam:
    """Adam (Kingma & Ba 2015; lr 1e-3, 0.9, 0.999, 1e-7) on a list of ``tf.Variable``, one fused kernel each."""

    def __init__(self, tf: Any, variables: list[Any], lr: float = 1e-3):
        self.tf, self.variables, self.lr = tf, variables, lr
        self.m = [tf.Variable(tf.zeros_like(v)) for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v)) for v in variables]
        self.t = tf.Variable(0.0)

    def apply(self, grads: list[Any]) -> Any:
        tf = self.tf
        t = self.t.assign_add(1.0)
        b1p, b2p = tf.pow(0.9, t), tf.pow(0.999, t)
        for var, m, v, g in zip(self.variables, self.m, self.v, grads, strict=True):
            tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=b1p, beta2_power=b2p,
                                         lr=self.lr, beta1=0.9, beta2=0.999, epsilon=1e-7, grad=g)
        return t


def sample_input(tf: Any, layer: Layer, mbs: int, seed: int) -> Any:
    shape, dtype = layer.input_spec()
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):         # token ids: below the vocabulary (a GPT's size, a Keras model's spec)
        vocab = getattr(layer, "vocab", None) or getattr(getattr(layer, "size", None), "vocab", 2)
        return tf.constant(rng.integers(0, vocab, (mbs, *shape)).astype(dtype))
    return tf.constant(rng.standard_normal((mbs, *shape)).astype(dtype))


def sample_labels(tf: Any, layers: list[Layer], mbs: int, seed: int, classes: int) -> Any:
    rng = np.random.default_rng(seed + 1)
    return tf.constant(rng.integers(0, classes, (mbs, *label_spec(layers))).astype(np.int32))


def layer_functions(tf: Any, layer: Layer, label_shape: tuple[int, ...], first: bool) -> tuple[Any, Any]:
    """(forward(x, labels), forward_and_backward(x, labels, dy)) as ``tf.function``s traced once for every
    micro-batch size (the batch dimension left open). The backward computes the gradient of the layer's input
    too, except for the ``first`` layer of the model (whose input is the data: a training step never does)."""
    shape, dtype = layer.input_spec()
    floating = dtype == "float32" and not first
    x_spec = tf.TensorSpec((None, *shape), dtype)
    labels_spec = tf.TensorSpec((None, *label_shape), tf.int32)
    dy_spec = tf.TensorSpec(() if layer.loss else (None, *layer.output_shape()), tf.float32)

    @tf.function(input_signature=[x_spec, labels_spec])  # type: ignore[untyped-decorator]
    def fwd(x: Any, labels: Any) -> Any:
        return layer(x, labels)

    @tf.function(input_signature=[x_spec, labels_spec, dy_spec])  # type: ignore[untyped-decorator]
    def fwd_bwd(x: Any, labels: Any, dy: Any) -> Any:
        with tf.GradientTape() as tape:
            if floating:
                tape.watch(x)
            y = layer(x, labels)
        sources = ([x] if floating else []) + list(layer.variables)
        return tape.gradient(y, sources, output_gradients=None if layer.loss else dy)

    return fwd, fwd_bwd


def activation_floats(tf: Any, fwd: Any) -> float:
    """Floats per sample that the forward graph's ops produce (views and variable reads excluded): of a tensor
    with the open batch dimension, the rest of its shape; of one without it (a mask), all of it."""
    total = 0
    for op in fwd.get_concrete_function().graph.get_operations():
        if op.type in VIEWS:
            continue
        for t in op.outputs:
            if t.dtype != tf.float32 or t.shape.rank is None:
                continue
            dims = t.shape.as_list()
            rest = dims[1:] if dims and dims[0] is None else dims
            if all(d is not None for d in rest):
                total += math.prod(rest)
    return float(total)


def allreduce_sample(tf: Any, floats: int, tp: int, warmup: int, repeats: int) -> Sample:
    """One all-reduce of ``floats`` among ``tp`` devices of this machine: the reduction of ``tp`` buffers."""
    bufs = [tf.random.normal((floats,)) for _ in range(tp)]
    add = tf.function(lambda *xs: tf.add_n(list(xs)))
    empty = tf.function(lambda *xs: xs[0])
    return floor(less_dispatch(bind(empty, *bufs), bind(add, *bufs), warmup, repeats))


def update_sample(tf: Any, layers: list[Layer], warmup: int, repeats: int) -> Sample:
    """One Adam step of every variable, less the dispatch of a call with the same arguments."""
    variables = [v for layer in layers for v in layer.variables]
    opt = Adam(tf, variables)
    grads = [tf.random.normal(v.shape, stddev=1e-3) for v in variables]
    step = tf.function(lambda *g: opt.apply(list(g)))
    empty = tf.function(lambda *g: g[0])
    return floor(less_dispatch(bind(empty, *grads), bind(step, *grads), warmup, repeats))


def floor(s: Sample) -> Sample:
    """An entry within the timer's noise of zero is recorded as ``TINY_S`` (the profile holds no zero)."""
    t = TINY_S
    return Sample(max(s.median, t), max(s.q1, t), max(s.q3, t), max(s.low, t), max(s.high, t), s.n)


def bind(fn: Any, *args: Any) -> Callable[[], Any]:
    """``fn`` with its arguments fixed (a call of it is one timed entry)."""
    return lambda: fn(*args)


def profile_chain(tf: Any, layers: list[Layer], mbs: int, tp: int, warmup: int, repeats: int, classes: int,
                  after_round: Callable[[int], None], sizes: list[dict[str, float]] | None,
                  fns: dict[int, tuple[Any, Any]]) -> list[LayerResult]:
    """Every layer of one chain at one micro-batch size, timed round-robin (``timing.rounds``); fills ``sizes``
    (per layer) when given; ``fns``: each layer's traced functions by ``id`` (kept for the next micro-batch)."""
    x = sample_input(tf, layers[0], mbs, seed=mbs)
    labels = sample_labels(tf, layers, mbs, mbs, classes)
    empty = tf.function(lambda x, labels: x, reduce_retracing=True)
    calls = []
    for layer in layers:
        if id(layer) not in fns:
            fns[id(layer)] = layer_functions(tf, layer, label_spec(layers), layer is layers[0])
        fwd, fwd_bwd = fns[id(layer)]
        y = fwd(x, labels)
        dy = tf.random.normal(tf.shape(y), stddev=1e-3) if not layer.loss else tf.zeros(())
        calls.append((bind(empty, x, labels), bind(fwd, x, labels), bind(fwd_bwd, x, labels, dy)))
        if sizes is not None:
            shape, _ = layer.input_spec()
            sizes.append({"params_floats": float(layer.param_floats), "act_output_floats": float(layer.output_floats()),
                          "act_input_floats": float(math.prod(shape)), "act_mem_floats": activation_floats(tf, fwd)})
        x = y
    ar: dict[int, Sample] = {}
    out = []
    for layer, (f, b, d) in zip(layers, rounds(calls, warmup, repeats, after_round), strict=True):
        clamped = min(f.median, b.median, f.low, b.low) <= TINY_S
        f, b = floor(f), floor(b)
        res = LayerResult(f, b, clamped=clamped, dispatch=d)
        if tp > 1 and layer.allreduces != (0, 0):
            floats = layer.allreduce_floats * mbs
            if floats not in ar:
                ar[floats] = allreduce_sample(tf, floats, tp, warmup, repeats)
            nf, nb = layer.allreduces
            res = LayerResult(f.plus(ar[floats].scaled(nf)), b.plus(ar[floats].scaled(nb)), ar[floats], clamped, d)
        out.append(res)
    return out


def run(build: Callable[[int], list[Layer]], mbs_list: list[int], tp_list: list[int], warmup: int, repeats: int,
        device: str, classes: int, tick: Callable[[str], None],
        after_round: Callable[[int, int, int], None] | None = None) -> Profile:
    """The whole profile: for each TP degree a fresh chain of shards, its update, then each micro-batch size
    (``repeats`` rounds over the layers; ``tick`` after the update and after each round, ``after_round(tp,
    mbs, r)`` too)."""
    import tensorflow as tf

    # one tf.function per layer is the design; TensorFlow's warning about "retracing" of functions made in a
    # loop is about that, not about a shape that changes: quiet for the run, restored after
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    tf_log.setLevel(logging.ERROR)
    try:
        return profile_all(tf, build, mbs_list, tp_list, warmup, repeats, device, classes, tick, after_round)
    finally:
        tf_log.setLevel(level)


def profile_all(tf: Any, build: Callable[[int], list[Layer]], mbs_list: list[int], tp_list: list[int], warmup: int,
                repeats: int, device: str, classes: int, tick: Callable[[str], None],
                after_round: Callable[[int, int, int], None] | None) -> Profile:
    prof: Profile | None = None
    with tf.device(device):
        for tp in tp_list:
            layers = build(tp)
            if prof is None:
                prof = Profile([f"{i}:{layer.name}" for i, layer in enumerate(layers)])
            prof.update[tp] = update_sample(tf, layers, warmup, repeats)
            tick("update")
            fns: dict[int, tuple[Any, Any]] = {}
            for i, mbs in enumerate(mbs_list):
                sizes: list[dict[str, float]] | None = [] if i == 0 else None

                def done(r: int, tp: int = tp, mbs: int = mbs) -> None:
                    tick(f"mbs {mbs} tp {tp}")
                    if after_round is not None:
                        after_round(tp, mbs, r)

                prof.times.setdefault(mbs, {})[tp] = profile_chain(tf, layers, mbs, tp, warmup, repeats, classes,
                                                                  done, sizes, fns)
                if sizes is not None:
                    prof.sizes[tp] = sizes
    assert prof is not None
    return prof
