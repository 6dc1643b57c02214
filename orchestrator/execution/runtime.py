"""Real TensorFlow execution of a model's training step, optionally placed layer by layer on
devices (``tf.device``), with parameters exchangeable as flat numpy vectors (what sync strategies
send between workers). This module imports TensorFlow; import it only where TF work happens."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from orchestrator.models import ModelSpec  # noqa: E402


def configure_threads(intra: int | None, inter: int | None = None) -> None:
    """Limit TensorFlow's thread pools (must run before the first op)."""
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(int(intra))
        if inter or intra:
            tf.config.threading.set_inter_op_parallelism_threads(int(inter or intra))
    except RuntimeError:
        pass  # already initialised: keep what is there


def split_cpu(n: int) -> list[str]:
    """Split the physical CPU into ``n`` logical devices (before TF initialises); returns their names."""
    cpus = tf.config.list_physical_devices("CPU")
    if n > 1:
        try:
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
        except RuntimeError:
            pass  # TF already initialised: keep the existing split
    return [d.name for d in tf.config.list_logical_devices("CPU")]


class ModelRuntime:
    """One replica of a model: a jit-compiled SGD step, a gradient function, evaluation, and
    flat-vector access to its parameters. ``device_of(layer_name)`` places each layer (and its
    variables); by default everything stays on ``default_device``."""

    def __init__(self, spec: ModelSpec, *, seed: int = 0, lr: float = 0.05,
                 device_of: Callable[[str], str] | Mapping[str, str] | None = None,
                 default_device: str = "/device:CPU:0"):
        keras.utils.set_random_seed(seed)
        template = spec.new_model()
        if isinstance(device_of, Mapping):
            mapping = dict(device_of)
            device_of = lambda name: mapping.get(name, default_device)  # noqa: E731
        self.device_of = device_of or (lambda name: default_device)
        self.layers = []
        self.devices = []
        self.model = None  # the placed clone of a functional (non-chain) model
        shape = (None, *spec.input_shape)
        if not isinstance(template, keras.Sequential):
            from orchestrator.execution.functional import clone_placed

            self.model = clone_placed(template, self.device_of)
            self.layers = [layer for layer in self.model.layers if not isinstance(layer, keras.layers.InputLayer)]
            self.devices = [self.device_of(layer.name) for layer in self.layers]
        for layer in template.layers if self.model is None else []:
            dev = self.device_of(layer.name)
            clone = layer.__class__.from_config(layer.get_config())
            with tf.device(dev):
                clone.build(shape)
                for dst, src in zip(clone.weights, layer.weights):
                    dst.assign(src)
            shape = layer.compute_output_shape(shape)
            self.layers.append(clone)
            self.devices.append(dev)
        self.variables = [v for layer in self.layers for v in layer.trainable_weights]
        self._variable_devices = [d for layer, d in zip(self.layers, self.devices) for _ in layer.trainable_weights]
        self._shapes = [tuple(v.shape) for v in self.variables]
        self._sizes = [int(np.prod(s)) for s in self._shapes]
        self.num_parameters = int(sum(self._sizes))
        self.lr = tf.Variable(float(lr), trainable=False, dtype=tf.float32)
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self._train_step = tf.function(self._train_step_impl, reduce_retracing=True)
        self._grad = tf.function(self._grad_impl, reduce_retracing=True)
        self._eval = tf.function(self._eval_impl, reduce_retracing=True)

    # -- the step ---------------------------------------------------------------------------
    def _forward(self, x, training: bool, tapes=None):
        if self.model is not None:
            from orchestrator.execution.functional import run_placed

            return run_placed(self.model, x, self.device_of, training, tapes=tapes)
        for layer, dev in zip(self.layers, self.devices):
            with tf.device(dev):
                x = tapes.call(layer, dev, (x,), {"training": training}) if tapes else layer(x, training=training)
        return x

    def _grad_impl(self, x, y):
        if len(set(self.devices)) <= 1:
            with tf.GradientTape() as tape:
                loss = self._loss(y, self._forward(x, True))
            grads = tape.gradient(loss, self.variables)
        else:  # placed on several devices: each layer's backward pass on its own device
            from orchestrator.execution.functional import LayerTapes

            tapes = LayerTapes()
            logits = self._forward(x, True, tapes)
            with tf.GradientTape() as tape:
                tape.watch(logits)
                loss = self._loss(y, logits)
            grads = tapes.backward(logits, tape.gradient(loss, logits), self.variables)
            grads = [tf.zeros_like(v) if g is None else g for v, g in zip(self.variables, grads)]
        # dense gradients (an Embedding's are IndexedSlices) for flat vectors and plain SGD
        return loss, [tf.convert_to_tensor(g) for g in grads]

    def _train_step_impl(self, x, y):
        loss, grads = self._grad_impl(x, y)
        for v, g, dev in zip(self.variables, grads, self._variable_devices):
            with tf.device(dev):  # the update where the variable lives, not on the default device
                v.assign_sub(self.lr * g)
        return loss

    def _eval_impl(self, x, y):
        logits = self._forward(x, False)
        loss = self._loss(y, logits)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32))
        return loss, correct

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self._train_step(x, y))

    def gradient(self, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and the flat float32 gradient at the current parameters."""
        loss, grads = self._grad(x, y)
        return float(loss), np.concatenate([g.numpy().ravel() for g in grads])

    def evaluate(self, x: np.ndarray, y: np.ndarray, batch: int = 1000) -> tuple[float, float]:
        total_loss, correct = 0.0, 0.0
        for i in range(0, len(x), batch):
            loss, c = self._eval(x[i : i + batch], y[i : i + batch])
            total_loss += float(loss) * len(x[i : i + batch])
            correct += float(c)
        return total_loss / len(x), correct / len(x)

    # -- parameters as flat vectors -----------------------------------------------------------
    def get_flat(self) -> np.ndarray:
        return np.concatenate([v.numpy().ravel() for v in self.variables]).astype(np.float32)

    def set_flat(self, flat: np.ndarray) -> None:
        offset = 0
        for v, shape, size in zip(self.variables, self._shapes, self._sizes):
            v.assign(flat[offset : offset + size].reshape(shape))
            offset += size

    def set_lr(self, lr: float) -> None:
        self.lr.assign(float(lr))

    def warm_up(self, x: np.ndarray, y: np.ndarray) -> None:
        """Trace and run the training step once, then restore the parameters, so that a timed run
        does not count TensorFlow's one-off compilation."""
        saved = self.get_flat()
        self._train_step(x, y).numpy()
        self.set_flat(saved)

    # -- timing -------------------------------------------------------------------------------
    def time_steps(self, x, y, *, warmup: int = 3, repeats: int = 10) -> tuple[list[float], float]:
        """Wall times of ``repeats`` training steps after ``warmup`` untimed ones, and the last loss
        (parameters restored afterwards)."""
        saved = self.get_flat()
        loss = 0.0
        for _ in range(warmup):
            loss = float(self._train_step(x, y))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            loss = float(self._train_step(x, y))
            times.append(time.perf_counter() - t0)
        self.set_flat(saved)
        return times, loss

    def measure_step_time(self, x: np.ndarray, y: np.ndarray, *, warmup: int = 3, repeats: int = 10) -> float:
        """Median wall time of one training step after warm-up (parameters restored afterwards)."""
        return float(np.median(self.time_steps(x, y, warmup=warmup, repeats=repeats)[0]))
