"""Keras applications as workloads: Inception-V3 and ResNet-50 (random weights, logits output).
Options: ``input_size`` (square side; Inception needs >= 75, ResNet >= 32) and ``classes``."""

from __future__ import annotations

from orchestrator.models import ModelSpec


def _app(name: str, ctor: str, cfg, default_size: int) -> ModelSpec:
    size, classes = int(cfg.get("input_size", default_size)), int(cfg.get("classes", 1000))

    def build():
        import keras

        return getattr(keras.applications, ctor)(weights=None, input_shape=(size, size, 3), classes=classes,
                                                 classifier_activation=None)

    return ModelSpec(name=name, build=build, input_shape=(size, size, 3), num_classes=classes,
                     trainable_on_mnist=False, extra={"input_size": size})


def inception_v3(cfg) -> ModelSpec:
    return _app("inception_v3", "InceptionV3", cfg, 299)


def resnet50(cfg) -> ModelSpec:
    return _app("resnet50", "ResNet50", cfg, 224)
