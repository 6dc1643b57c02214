"""Keras applications as workloads: Inception-V3 and ResNet-50 (random weights, logits output).
Options: ``input_size`` (square side; Inception needs >= 75, ResNet >= 32) and ``classes``."""

from __future__ import annotations

from orchestrator.config import from_node
from orchestrator.config.model import InceptionV3ModelConfig, ResNet50ModelConfig
from orchestrator.models import ModelSpec


def _app(name: str, ctor: str, cfg, schema) -> ModelSpec:
    c = from_node(schema, cfg, "model")       # input_size and classes: defaults and minimums in the schema
    size, classes = c.input_size, c.classes

    def build():
        import keras

        return getattr(keras.applications, ctor)(weights=None, input_shape=(size, size, 3), classes=classes,
                                                 classifier_activation=None)

    return ModelSpec(name=name, build=build, input_shape=(size, size, 3), num_classes=classes,
                     trainable_on_mnist=False, extra={"input_size": size})


def inception_v3(cfg) -> ModelSpec:
    return _app("inception_v3", "InceptionV3", cfg, InceptionV3ModelConfig)


def resnet50(cfg) -> ModelSpec:
    return _app("resnet50", "ResNet50", cfg, ResNet50ModelConfig)
