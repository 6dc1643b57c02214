"""Real pipelined training of a placed model: each mini-batch is cut into ``m`` micro-batches that
flow through the stages (the devices of the placement) as TensorFlow ops under ``tf.device``, in
the order of a named schedule (``gpipe`` or ``1f1b``, ``orchestrator.placement.simulate.microbatch``);
gradients are accumulated over the micro-batches and the optimizer (plain SGD) steps once per
mini-batch. Imports TensorFlow.

One ``tf.function`` holds the whole mini-batch: per stage and micro-batch a forward task (the
stage's layer calls, each on a tape of its own) and a backward task (their gradients, layer by
layer, on the stage's device), then the updates where the variables live. Each task's inputs from
outside it pass through ``tf.identity`` under a control dependency on the previous task of the
same device, so every device runs its tasks in the schedule's order while different devices run
at the same time (TensorFlow's executor runs ready ops in parallel). The loss (and its gradient)
is part of the forward task of the stage that produces the model's output.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

F, B = 0, 1   # the phases of a task (as in orchestrator.placement.simulate.microbatch)


class PipelineOrderError(ValueError):
    """The placement cannot run as a pipeline: some stage needs a later stage's forward output."""


class PipelinedRuntime:
    """``device_of``: layer name -> TF device; ``stages``: TF devices in flow order (the schedule's);
    ``orders[s]``: stage s's tasks in the order it runs them, (phase F or B, micro-batch), e.g.
    ``orchestrator.placement.simulate.microbatch.task_order``. ``reference_names``: the layer names
    ``device_of`` uses, in call order, when they come from another build of the model (Keras
    numbers automatic names per build: ``conv2d_94``); layers are then matched by position."""

    def __init__(self, spec, device_of: Mapping[str, str], stages: Sequence[str],
                 orders: Sequence[Sequence[tuple[int, int]]], *, seed: int = 0, lr: float = 0.05,
                 default_device: str = "/device:CPU:0", reference_names: Sequence[str] | None = None):
        import dataclasses

        from orchestrator.execution.functional import layer_calls
        from orchestrator.execution.runtime import ModelRuntime

        keras.utils.set_random_seed(seed)
        template = spec.new_model()
        names = list(dict.fromkeys(layer.name for layer, _ in layer_calls(template)))
        mapping = dict(device_of)
        if reference_names is not None and list(reference_names) != names:
            if len(reference_names) != len(names):
                raise ValueError(f"model {spec.name!r}: {len(names)} layers, the placement names {len(reference_names)}")
            mapping = {new: mapping.get(old, default_device) for new, old in zip(names, reference_names)}
        self.device_of = mapping
        self.rt = ModelRuntime(dataclasses.replace(spec, build=lambda: template), seed=seed, lr=lr,
                               device_of=mapping, default_device=default_device)
        self.calls = self._calls()
        used = set(c[1] for c in self.calls)
        if not used <= set(stages):
            raise ValueError(f"layers placed on {sorted(used - set(stages))}, not among the stages {list(stages)}")
        self.stages, self.orders = list(stages), [list(o) for o in orders]
        self.m = 1 + max(j for o in self.orders for _, j in o)
        produced_on = {k: c[1] for c in self.calls for k in c[4]}
        self.consumers: dict[str, set] = {d: set() for d in self.stages}   # stages reading a stage's outputs
        self.needs: dict[str, set] = {d: set() for d in self.stages}       # outside keys a stage's forward reads
        for _, dev, _, ins, _ in self.calls:
            for k in ins:
                src = produced_on.get(k)
                if src != dev:
                    self.needs[dev].add(k)
                if src is not None and src != dev:
                    self.consumers[src].add(dev)
        self.own = {d: {k for c in self.calls if c[1] == d for k in c[4]} for d in self.stages}
        self.out_stage = produced_on[self.output_key]
        self.plan = self._plan()
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self._step = tf.function(self._step_impl, reduce_retracing=True)

    def _calls(self) -> list:
        """(layer, device, keras node or None, input keys, output keys) in execution order."""
        rt = self.rt
        if rt.model is None:                      # a Sequential: a chain of layers
            self.input_keys, self.output_key = [("t", 0)], ("t", len(rt.layers))
            return [(layer, dev, None, [("t", i)], [("t", i + 1)])
                    for i, (layer, dev) in enumerate(zip(rt.layers, rt.devices))]
        from orchestrator.execution.functional import graph_of, layer_calls

        fn = graph_of(rt.model)
        self.input_keys = [id(x) for x in fn.inputs]
        (out,) = fn.outputs
        self.output_key = id(out)
        return [(layer, rt.device_of(layer.name), node, [id(x) for x in node.input_tensors], [id(x) for x in node.outputs])
                for layer, node in layer_calls(rt.model)]

    def _plan(self) -> list[tuple[str, int, int]]:
        """The order in which the tasks are built into the graph: each device's tasks in its
        schedule order, a task once the tensors it needs exist."""
        ptr = {d: 0 for d in self.stages}
        order = dict(zip(self.stages, self.orders))
        have_fwd = [set(self.input_keys) for _ in range(self.m)]
        built, plan = set(), []
        while any(ptr[d] < len(order[d]) for d in self.stages):
            progressed = False
            for d in self.stages:
                if ptr[d] >= len(order[d]):
                    continue
                phase, j = order[d][ptr[d]]
                if phase == F and not self.needs[d] <= have_fwd[j]:
                    continue
                if phase == B and ((F, d, j) not in built or any((B, e, j) not in built for e in self.consumers[d])):
                    continue
                if phase == F:
                    have_fwd[j] |= self.own[d]
                built.add((phase, d, j))
                plan.append((d, phase, j))
                ptr[d] += 1
                progressed = True
            if not progressed:
                raise PipelineOrderError("the placement is not a pipeline: a stage needs the forward output of a "
                                         "later one (real pipelined execution needs a split contiguous in the flow)")
        return plan

    # -- one mini-batch ----------------------------------------------------------------------------
    def _step_impl(self, xs, ys):
        m = self.m
        act = [dict() for _ in range(m)]          # key -> tensor, per micro-batch
        grad = [dict() for _ in range(m)]         # key -> d(loss)/d(tensor)
        tapes = [dict() for _ in range(m)]        # call index -> (inputs, outputs, tape)
        acc: dict[int, tf.Tensor] = {}
        losses = []
        for j in range(m):
            for k, x in zip(self.input_keys, xs):
                act[j][k] = x[j]
        last: dict[str, list] = {d: [] for d in self.stages}
        for d, phase, j in self.plan:
            with tf.device(d):
                if phase == F:
                    last[d] = self._forward(d, j, act[j], tapes[j], grad[j], ys, losses, last[d])
                else:
                    last[d] = self._backward(d, j, grad[j], tapes[j], acc, last[d])
        rt = self.rt
        for v, dev in zip(rt.variables, rt._variable_devices):
            g = acc.get(id(v))
            if g is not None:
                with tf.device(dev), tf.control_dependencies(last.get(dev, [])):
                    v.assign_sub(rt.lr * g)
        return tf.add_n(losses)

    def _forward(self, d, j, act, tapes, grad, ys, losses, after):
        with tf.control_dependencies(after):
            outside = {k: tf.identity(act[k]) for k in self.needs[d] if k in act}
        view = {**act, **outside}
        outs = []
        for i, (layer, dev, node, ins, out_keys) in enumerate(self.calls):
            if dev != d:
                continue
            if node is None:
                args, kwargs = (view[ins[0]],), {"training": True}
            else:
                args, kwargs = node.arguments.fill_in(view)
                if "training" in getattr(layer, "_call_context_args", {}):
                    kwargs["training"] = True
            keys = [k for k in dict.fromkeys(ins) if k in view and view[k].dtype.is_floating]
            inputs = [view[k] for k in keys]
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                out = layer(*args, **kwargs)
            flat = tf.nest.flatten(out)
            tapes[i] = (keys, inputs, flat, tape)
            for k, y in zip(out_keys, flat):
                act[k] = view[k] = y
            outs += flat
        if d == self.out_stage:
            logits = act[self.output_key]
            with tf.GradientTape() as tape:
                tape.watch(logits)
                loss = self._loss(ys[j], logits) / float(self.m)
            grad[self.output_key] = tape.gradient(loss, logits)
            losses.append(loss)
            outs += [loss, grad[self.output_key]]
        return outs

    def _backward(self, d, j, grad, tapes, acc, after):
        """Gradients of stage ``d``'s calls in reverse; an input produced on another stage (or
        the model's input) gets its gradient added to ``grad`` for that stage's backward task."""
        own = self.own[d]
        with tf.control_dependencies(after):   # what this task receives from outside it
            local = {k: tf.identity(g) for k, g in grad.items() if k in own}
        outs = []
        for i in reversed(range(len(self.calls))):
            layer, dev, _, _, out_keys = self.calls[i]
            if dev != d or i not in tapes:
                continue
            keys, inputs, flat, tape = tapes[i]
            gouts = [local.get(k) for k in out_keys]
            if all(g is None for g in gouts):
                continue
            gouts = [tf.zeros_like(o) if g is None else g for o, g in zip(flat, gouts)]
            weights = list(layer.trainable_weights)
            grads = tape.gradient(flat, inputs + weights, output_gradients=gouts)
            for k, g in zip(keys, grads[:len(inputs)]):
                if g is None or k in self.input_keys:
                    continue
                into = local if k in own else grad
                into[k] = g + into[k] if k in into else g
                outs.append(into[k])
            for w, g in zip(weights, grads[len(inputs):]):
                if g is not None:
                    g = tf.convert_to_tensor(g)
                    acc[id(w)] = g + acc[id(w)] if id(w) in acc else g
                    outs.append(acc[id(w)])
        return outs

    # -- running -----------------------------------------------------------------------------------
    def split(self, x, y):
        """A mini-batch as (m, b, ...) arrays (the first m * b samples)."""
        xs = x if isinstance(x, (list, tuple)) else [x]
        b = len(y) // self.m
        return ([np.asarray(a[: b * self.m]).reshape(self.m, b, *np.asarray(a).shape[1:]) for a in xs],
                np.asarray(y[: b * self.m]).reshape(self.m, b))

    def train_step(self, xs, ys) -> float:
        return float(self._step(xs, ys))

    def time_steps(self, x, y, *, warmup: int = 2, repeats: int = 5) -> tuple[list[float], list[float]]:
        """Wall times of ``repeats`` mini-batch steps after ``warmup`` untimed ones (the first
        traces), and the loss of every step (the model trains: these are real updates)."""
        xs, ys = self.split(x, y)
        losses, times = [], []
        for _ in range(warmup):
            losses.append(self.train_step(xs, ys))
        for _ in range(repeats):
            t0 = time.perf_counter()
            losses.append(self.train_step(xs, ys))
            times.append(time.perf_counter() - t0)
        return times, losses
