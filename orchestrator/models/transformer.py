"""Transformer encoder classifier: token + position embeddings, ``blocks`` x (multi-head
self-attention, add & norm, feed-forward, add & norm), mean pooling, a class projection."""

from __future__ import annotations

from orchestrator.models import ModelSpec


def _position_embedding_cls():
    import keras

    @keras.saving.register_keras_serializable("orchestrator")
    class PositionEmbedding(keras.layers.Layer):
        """Adds a learned embedding of each position to its input."""

        def __init__(self, seq_len: int, dim: int, **kw):
            super().__init__(**kw)
            self.seq_len, self.dim = seq_len, dim

        def build(self, input_shape):
            self.pos = self.add_weight(shape=(self.seq_len, self.dim), initializer="glorot_uniform", name="pos")

        def call(self, x):
            return x + self.pos[None, : keras.ops.shape(x)[1]]

        def get_config(self):
            return {**super().get_config(), "seq_len": self.seq_len, "dim": self.dim}

    return PositionEmbedding


def build(vocab=4000, seq_len=32, d_model=64, heads=4, ff=128, blocks=2, classes=10):
    import keras
    from keras import layers as L

    tok = keras.Input((seq_len,), dtype="int32", name="tokens")
    x = L.Embedding(vocab, d_model, name="embed")(tok)
    x = _position_embedding_cls()(seq_len, d_model, name="pos_embed")(x)
    for i in range(blocks):
        a = L.MultiHeadAttention(heads, d_model // heads, name=f"mha{i}")(x, x)
        x = L.LayerNormalization(name=f"ln{i}a")(L.Add(name=f"add{i}a")([x, a]))
        f = L.Dense(ff, activation="relu", name=f"ff{i}a")(x)
        f = L.Dense(d_model, name=f"ff{i}b")(f)
        x = L.LayerNormalization(name=f"ln{i}b")(L.Add(name=f"add{i}b")([x, f]))
    x = L.GlobalAveragePooling1D(name="pool")(x)
    return keras.Model(tok, L.Dense(classes, name="logits")(x), name="transformer")


def spec(cfg) -> ModelSpec:
    from orchestrator.config import from_node
    from orchestrator.config.model import TransformerModelConfig

    c = from_node(TransformerModelConfig, cfg, "model")
    o = {k: getattr(c, k) for k in ("vocab", "seq_len", "d_model", "heads", "ff", "blocks", "classes")}
    return ModelSpec(name="transformer", build=lambda: build(**o), input_shape=(o["seq_len"],),
                     num_classes=o["classes"], trainable_on_mnist=False, input_dtype="int32", extra=dict(o))
