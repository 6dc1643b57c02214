"""Keras models for the layer profiler's tests (``--factory profile_models:NAME``, as ``model.factory``)."""

from __future__ import annotations


def tiny_resnet():
    """A stem, two residual blocks, a pooling and the logits: five cuts, two of them after a block's add."""
    import keras
    from keras import layers

    inp = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same", name="stem")(inp)
    for i in range(2):
        y = layers.Conv2D(8, 3, padding="same", activation="relu", name=f"b{i}_c1")(x)
        y = layers.Conv2D(8, 3, padding="same", name=f"b{i}_c2")(y)
        x = layers.Add(name=f"b{i}_add")([x, y])
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inp, layers.Dense(10, name="logits")(x), name="tinyres"), (16, 16, 3)


def shared_layer():
    """One Dense layer called twice: not a chain of layers called once each."""
    import keras

    inp = keras.Input((4,))
    dense = keras.layers.Dense(4, name="twice")
    return keras.Model(inp, keras.layers.Dense(3, name="out")(dense(dense(inp))), name="shared"), (4,)
