"""The reference study's workload: a small CNN for MNIST (two conv blocks, two dense layers)."""

from __future__ import annotations

from orchestrator.models import ModelSpec


def build(conv1: int = 32, conv2: int = 64, dense: int = 128, num_classes: int = 10):
    import keras

    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(conv1, 3, activation="relu", name="conv1"),
            keras.layers.MaxPooling2D(2, name="pool1"),
            keras.layers.Conv2D(conv2, 3, activation="relu", name="conv2"),
            keras.layers.MaxPooling2D(2, name="pool2"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dense(dense, activation="relu", name="fc1"),
            keras.layers.Dense(num_classes, name="logits"),
        ],
        name="mnist_cnn",
    )


def spec(cfg) -> ModelSpec:
    from orchestrator.config import from_node
    from orchestrator.config.model import CNNModelConfig

    c = from_node(CNNModelConfig, cfg, "model")
    conv1, conv2, dense = c.conv1, c.conv2, c.dense
    return ModelSpec(
        name="cnn",
        build=lambda: build(conv1, conv2, dense),
        input_shape=(28, 28, 1),
        num_classes=10,
    )
