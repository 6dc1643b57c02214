"""A user's own Keras model: ``model.factory=package.module:function``; ``function(cfg)`` (or
``function()``) returns ``(keras_model, input_spec)`` where input_spec is a shape tuple, or a dict
with ``shape`` or ``inputs`` ([(shape, dtype)...]), optional ``dtype``, ``num_classes``,
``label_shape``, ``vocab``, ``sample_batch`` (fn(batch, seed) -> (x, y))."""

from __future__ import annotations

import importlib
import inspect

from orchestrator.errors import ConfigError
from orchestrator.models import ModelSpec


def _factory(ref: str):
    module, _, attr = str(ref).partition(":")
    if not module or not attr:
        raise ConfigError(f"model.factory={ref!r} must be 'package.module:function'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model.factory={ref!r} cannot be loaded: {exc}") from exc


def spec(cfg) -> ModelSpec:
    ref = cfg.get("factory")
    if not ref:
        raise ConfigError("model=keras needs model.factory=package.module:function")
    fn = _factory(ref)
    call = (lambda: fn(cfg)) if inspect.signature(fn).parameters else fn
    model, ispec = call()
    ispec = ispec if isinstance(ispec, dict) else {"shape": tuple(ispec)}
    inputs = [(tuple(s), str(d)) for s, d in ispec["inputs"]] if "inputs" in ispec else None
    shape = tuple(ispec.get("shape", inputs[0][0] if inputs else ()))
    classes = int(ispec.get("num_classes", model.outputs[0].shape[-1]))
    # build() calls the factory again so that a caller's seed decides the initial weights
    return ModelSpec(name=str(ispec.get("name", model.name)), build=lambda: call()[0], input_shape=shape, num_classes=classes,
                     trainable_on_mnist=bool(ispec.get("trainable_on_mnist", False)),
                     input_dtype=str(ispec.get("dtype", "float32")), inputs=inputs,
                     label_shape=tuple(ispec.get("label_shape", ())), sample_batch=ispec.get("sample_batch"),
                     extra={"factory": str(ref), **({"vocab": int(ispec["vocab"])} if "vocab" in ispec else {})})
