"""Shared-core contention: devices that are the same physical cores (the logical CPU devices of
``runtime.split_cpu``, which share this machine's cores and TensorFlow's thread pools).

The model (``cluster.CorePool``): while k tasks run at once on devices of one pool, each progresses
at eff(k) / k of its speed alone -- processor sharing (Kleinrock 1967, "Time-shared systems: a
theoretical analysis", JACM 14(2); generalised processor sharing, Parekh & Gallager 1993, IEEE/ACM
ToN 1(3)) with a capacity that is not k but the *measured* parallel efficiency eff(k) of k
concurrent streams (eff(1) = 1, eff(k) <= k). ``MicrobatchSchedule`` applies it event by event.

``measure_efficiency`` calibrates eff(k) on this machine: a fixed TensorFlow workload (a chain of
convolutions from large feature maps to 1 x 1, and a matrix product, batch 8: a CNN's layers,
large and small, since small ops leave cores idle that a second stream can use) timed on
one logical device alone, then as k independent copies, one per logical device, in one
``tf.function`` (as ``orchestrator.execution.pipelined`` runs the stages); eff(k) = k * t(1) / t(k)
with t the median over alternating repeats, clipped to (0, k]. About a second; cached per process.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence

from orchestrator.hardware.cluster import CorePool

POOL = "cores"   # Device.core_pool of a host's logical CPUs: "<host>:cores"
MEASURED = "measured"                              # CorePool.source of hardware.core_sharing=auto
WANTS_MODEL = "measured on the fixed probe (core_sharing=model: no TF model to measure)"   # ... of model
ON_MODEL = "measured on the model's training step"  # ... of model in a trial with a TF model (on_model)


def pool_name(host: str) -> str:
    return f"{host}:{POOL}"


def _workload(tf, seed: int = 0):
    """Tensors of one stream: (input, filters, matrices) of Inception-like sizes (batch 8)."""
    g = tf.random.Generator.from_seed(seed)
    shapes = [((8, 35, 35, 64), (3, 3, 64, 64)), ((8, 17, 17, 128), (3, 3, 128, 128)),
              ((8, 7, 7, 192), (3, 3, 192, 192)), ((8, 3, 3, 384), (3, 3, 384, 384)),
              ((8, 1, 1, 2048), (1, 1, 2048, 256))]
    convs = [(g.normal(x), g.normal(w) * 0.05) for x, w in shapes]
    mats = (g.normal((8, 2048)), g.normal((2048, 1000)) * 0.02)
    return convs, mats


def _stream(tf, convs, mats, reps: int):
    """One stream's chain: every op depends on the previous one (a stage runs its layers in order)."""
    acc = tf.constant(0.0)
    for _ in range(reps):
        for x, w in convs:
            y = tf.nn.relu(tf.nn.conv2d(x + acc, w, 1, "SAME"))
            acc = 1e-6 * tf.reduce_mean(y)
        a, b = mats
        acc = acc + 1e-6 * tf.reduce_mean(tf.nn.relu(tf.matmul(a + acc, b)))
    return acc


def _timer(tf, devices: Sequence[str], reps: int):
    """A compiled function running one stream per device of ``devices`` concurrently; returns a
    callable that times one call (seconds)."""
    data = []
    for i, d in enumerate(devices):
        with tf.device(d):
            data.append(_workload(tf, i))

    @tf.function
    def run():
        outs = []
        for d, (convs, mats) in zip(devices, data):
            with tf.device(d):
                outs.append(_stream(tf, convs, mats, reps))
        return tf.add_n(outs)

    return _timed(run)


def _timed(run):
    """Trace and warm up ``run`` (a ``tf.function``); return a callable timing one call (seconds)."""
    run().numpy()

    def once() -> float:
        t0 = time.perf_counter()
        run().numpy()
        return time.perf_counter() - t0
    return once


@functools.cache
def _measure(devices: tuple[str, ...], repeats: int, reps: int) -> tuple[float, ...]:
    import statistics

    import tensorflow as tf

    alone = _timer(tf, devices[:1], reps)
    timers = {k: _timer(tf, devices[:k], reps) for k in range(2, len(devices) + 1)}
    t1 = {k: [] for k in timers}
    tk = {k: [] for k in timers}
    for _ in range(repeats):          # alternate, so that a change of load hits both sides
        for k, run in timers.items():
            t1[k].append(alone())
            tk[k].append(run())
    out = []
    for k in timers:
        e = k * statistics.median(t1[k]) / statistics.median(tk[k])
        out.append(min(float(k), max(e, 1e-3)))
    return tuple(out)


def measure_efficiency(devices: Sequence[str], *, repeats: int = 7, reps: int = 4,
                       fresh: bool = False) -> tuple[float, ...]:
    """(eff(2), ..., eff(n)) of the TF devices ``devices`` (n = len(devices) >= 2; () for fewer),
    measured here once per process (see the module docstring); ``fresh``: measure again."""
    devices = tuple(devices)
    if len(devices) < 2:
        return ()
    if fresh:
        _measure.cache_clear()
    return _measure(devices, int(repeats), int(reps))


def _model_timer(tf, spec, x, y, devices: Sequence[str]):
    """One training step of the model (forward, loss, gradients) per device of ``devices``, the
    copies concurrent in one ``tf.function``; returns a callable that times one call (seconds)."""
    from tensorflow import keras

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    models = []
    for d in devices:
        with tf.device(d):
            model = spec.new_model()
            model(x, training=False)                # variables created on d
            models.append(model)

    @tf.function
    def run():
        outs = []
        for d, model in zip(devices, models):
            with tf.device(d):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                outs.append(loss + tf.add_n([tf.reduce_sum(g) for g in grads if g is not None]) * 0.0)
        return tf.add_n(outs)

    return _timed(run)


def measure_model_step(spec, x, y, device: str, *, repeats: int = 5) -> float:
    """Median wall time (seconds) of the model's training step (forward, loss, gradients of the
    batch ``x``, ``y``) on one TF device, traced and warmed up first: the whole step that a
    profile of layers timed one by one should add up to."""
    import statistics

    import tensorflow as tf

    once = _model_timer(tf, spec, x, y, (device,))
    return float(statistics.median(once() for _ in range(repeats)))


def measure_model_efficiency(spec, x, y, devices: Sequence[str], *, repeats: int = 5) -> tuple[float, ...]:
    """(eff(2), ..., eff(n)) measured on the model's *own* training step instead of the fixed
    workload: one copy (forward, loss, gradients of one micro-batch ``x``, ``y``) on one logical
    device, then k copies, one per device, in one ``tf.function``; eff(k) = k * median t(1) / median
    t(k), clipped to (0, k], alternating repeats. The op mix, and so the cores a second stream
    finds idle, is the model's (small layers overlap better than large ones)."""
    import statistics

    import tensorflow as tf

    devices = tuple(devices)
    if len(devices) < 2:
        return ()
    alone = _model_timer(tf, spec, x, y, devices[:1])
    timers = {k: _model_timer(tf, spec, x, y, devices[:k]) for k in range(2, len(devices) + 1)}
    t1 = {k: [] for k in timers}
    tk = {k: [] for k in timers}
    for _ in range(repeats):
        for k, run in timers.items():
            t1[k].append(alone())
            tk[k].append(run())
    return tuple(min(float(k), max(k * statistics.median(t1[k]) / statistics.median(tk[k]), 1e-3)) for k in timers)


def core_pool(setting, devices: Sequence[str]) -> CorePool | None:
    """The pool of ``devices`` for ``hardware.core_sharing`` (already checked): None or "none"
    (independent devices), "auto" (``measure_efficiency``, the fixed probe), "model" (the same, but a
    trial with a TensorFlow model re-calibrates on the model's own step: ``on_model``) or a number c
    (eff(k) = min(k, c))."""
    n = len(devices)
    if setting is None or setting == "none" or n < 2:
        return None
    if setting in ("auto", "model"):   # measured at the first schedule that runs two of them at once
        return CorePool(functools.partial(measure_efficiency, tuple(devices)), MEASURED if setting == "auto" else WANTS_MODEL)
    c = float(setting)
    return CorePool(tuple(min(float(k), c) for k in range(2, n + 1)), "set by hand")


def on_model(worker, spec, x, y):
    """``worker`` with each ``hardware.core_sharing=model`` pool re-calibrated on the model's own
    training step (``measure_model_efficiency`` on the batch ``x``, ``y``, lazily: only where a
    schedule runs two of its devices at once); the worker itself if it has no such pool."""
    pools = dict(worker.core_pools)
    changed = False
    for name, pool in worker.core_pools.items():
        if pool.source == WANTS_MODEL:
            devs = tuple(d.tf_device for d in worker.devices if d.core_pool == name)
            pools[name] = CorePool(functools.partial(measure_model_efficiency, spec, x, y, devs), ON_MODEL)
            changed = True
    return dataclasses.replace(worker, core_pools=pools) if changed else worker


class SharedCores:
    """Processor sharing, event by event: tasks run on groups of devices (a core pool, or one
    device alone: ``pool`` None); a group's k running tasks each progress at ``pool.rate(k)`` of
    their speed alone. ``start`` and ``finish`` advance the group's tasks to ``now``, recompute its
    rate and return the new (finish time, task, version) of every task of the group; an older
    version of a task's finish time is stale (``current``)."""

    def __init__(self):
        self.left: dict = {}        # task -> work left (seconds alone)
        self.version: dict = {}
        self.group_of: dict = {}
        self.groups: dict = {}      # group -> [pool, running tasks, rate, time of the last update]

    def _advance(self, g, now: float) -> list:
        pool, running, rate, last = self.groups[g]
        for task in running:
            self.left[task] = max(0.0, self.left[task] - rate * (now - last))
        rate = 1.0 if pool is None else pool.rate(len(running))
        self.groups[g][2:] = [rate, now]
        out = []
        for task in running:
            self.version[task] = self.version.get(task, 0) + 1
            out.append((now + self.left[task] / rate, task, self.version[task]))
        return out

    def start(self, task, group, pool, work: float, now: float) -> list:
        entry = self.groups.setdefault(group, [pool, [], 1.0, now])
        self._advance(group, now)            # the running tasks' work up to now, at the old rate
        entry[1].append(task)
        self.left[task], self.group_of[task] = float(work), group
        return self._advance(group, now)

    def finish(self, task, now: float) -> list:
        g = self.group_of.pop(task)
        self._advance(g, now)
        self.groups[g][1].remove(task)
        del self.left[task]
        return self._advance(g, now)

    def current(self, task, version: int) -> bool:
        return self.version.get(task) == version
