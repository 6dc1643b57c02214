"""Model specs: what a trial trains and places. Built-in models are registered through the plugin
hooks like third-party ones; builders import TensorFlow only when called."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.hookspecs import hookimpl


@dataclass
class ModelSpec:
    """A model: ``build()`` returns a fresh Keras model (its layers in execution order) whose
    input is ``input_shape`` (without batch) and whose output is ``num_classes`` logits."""

    name: str
    build: Callable[[], Any]
    input_shape: tuple[int, ...]
    num_classes: int
    trainable_on_mnist: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@hookimpl
def orchestrator_models():
    return {"cnn": "orchestrator.models.cnn:spec"}
