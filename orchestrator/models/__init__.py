"""Model specs: what a trial trains and places. Built-in models are registered through the plugin
hooks like third-party ones; builders import TensorFlow only when called."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.hookspecs import hookimpl


@dataclass
class ModelSpec:
    """A model: ``build()`` returns a fresh Keras model whose input is ``input_shape`` (without
    batch) and whose output is ``num_classes`` logits. Functional models (several inputs, branches)
    list every input in ``inputs`` as ``(shape, dtype)``; ``sample_batch(batch, seed)`` returns an
    ``(x, y)`` numpy batch (x a tuple for several inputs); labels are class ids of ``label_shape``."""

    name: str
    build: Callable[[], Any] | None
    input_shape: tuple[int, ...]
    num_classes: int
    trainable_on_mnist: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    input_dtype: str = "float32"
    inputs: list[tuple[tuple[int, ...], str]] | None = None
    label_shape: tuple[int, ...] = ()
    sample_batch: Callable[[int, int], tuple[Any, Any]] | None = None
    loss: str = "sparse_categorical_crossentropy_from_logits"
    graph: Any = None          # a ready OpGraph (cost-graph workloads); else extracted from ``build``
    hardware: Any = None       # the Cluster a workload file describes (``hardware=auto``)
    expert_split: Any = None   # a human-expert Placement that comes with the workload

    def new_model(self) -> Any:
        """``build()`` with Keras' automatic layer names counted from zero, so every build of the model
        names its layers alike (``conv2d``, ``conv2d_1``, ...): a placement, keyed by the layer names of
        the build its graph was extracted from, then means the same layers in every later build
        (Keras otherwise numbers automatic names per process: ``conv2d_94`` in the second build)."""
        reset_layer_names()
        return self.build()

    @property
    def input_specs(self) -> list[tuple[tuple[int, ...], str]]:
        return list(self.inputs) if self.inputs else [(tuple(self.input_shape), self.input_dtype)]

    def sample(self, batch: int, seed: int = 0) -> tuple[Any, Any]:
        """A random batch of the model's input/label shapes (``sample_batch`` when given)."""
        if self.sample_batch is not None:
            return self.sample_batch(batch, seed)
        import numpy as np

        rng = np.random.default_rng(seed)
        xs = []
        for shape, dtype in self.input_specs:
            if dtype.startswith("int"):
                xs.append(rng.integers(0, int(self.extra.get("vocab", self.num_classes)), (batch, *shape)).astype(dtype))
            else:
                xs.append(rng.standard_normal((batch, *shape)).astype(dtype))
        y = rng.integers(0, self.num_classes, (batch, *self.label_shape)).astype("int32")
        return (xs[0] if len(xs) == 1 else tuple(xs)), y


def reset_layer_names() -> None:
    """Restart Keras' per-process counters of automatic object names."""
    import collections

    try:
        from keras.src.backend.common import global_state
    except ImportError:  # a Keras without the 3.x layout: the public, broader reset
        import keras

        keras.backend.clear_session()
        return
    global_state.set_global_attribute("object_name_uids", collections.defaultdict(int))


BUILTIN = {
    "cnn": "orchestrator.models.cnn:spec",
    "inception_v3": "orchestrator.models.applications:inception_v3",
    "resnet50": "orchestrator.models.applications:resnet50",
    "nmt": "orchestrator.models.nmt:spec",
    "transformer": "orchestrator.models.transformer:spec",
    "keras": "orchestrator.models.user:spec",
    "workload": "orchestrator.placement.graph.workload:model_spec",   # the msr-dnn-partitioning format
    "llm": "orchestrator.models.llm:spec",
}


def builtin(name: str, cfg: Any = None) -> ModelSpec:
    """The built-in model ``name`` built from ``cfg`` (a mapping), without the plugin manager."""
    module, _, attr = BUILTIN[name].partition(":")
    return getattr(importlib.import_module(module), attr)(cfg or {})


@hookimpl
def orchestrator_models():
    return dict(BUILTIN)


@hookimpl
def orchestrator_config_schemas():
    return {f"model/{name}": f"orchestrator.config.model:{cls}" for name, cls in (
        ("cnn", "CNNModelConfig"), ("inception_v3", "InceptionV3ModelConfig"), ("resnet50", "ResNet50ModelConfig"),
        ("nmt", "NMTModelConfig"), ("transformer", "TransformerModelConfig"), ("keras", "KerasModelConfig"),
        ("workload", "WorkloadModelConfig"))} | {"model/llm": "orchestrator.config.planning:LLMModelConfig"}
