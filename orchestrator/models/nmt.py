"""GNMT-like translation model: embeddings, a stacked-LSTM encoder and decoder (``layers`` each:
2, 4 or 8), dot-product attention over the encoder states, a vocabulary projection per target
step. Inputs: source and shifted target token ids (``seq_len`` each); labels: target ids."""

from __future__ import annotations

from orchestrator.models import ModelSpec


def build(layers: int = 2, vocab: int = 4000, hidden: int = 128, seq_len: int = 16):
    import keras
    from keras import layers as L

    src = keras.Input((seq_len,), dtype="int32", name="source")
    tgt = keras.Input((seq_len,), dtype="int32", name="target_in")
    x = L.Embedding(vocab, hidden, name="enc_embed")(src)
    for i in range(layers):
        x = L.LSTM(hidden, return_sequences=True, name=f"enc_lstm{i}")(x)
    y = L.Embedding(vocab, hidden, name="dec_embed")(tgt)
    for i in range(layers):
        y = L.LSTM(hidden, return_sequences=True, name=f"dec_lstm{i}")(y)
    ctx = L.Attention(name="attention")([y, x])
    h = L.Concatenate(name="concat")([y, ctx])
    h = L.Dense(hidden, activation="tanh", name="attn_proj")(h)
    out = L.Dense(vocab, name="logits")(h)
    return keras.Model([src, tgt], out, name=f"nmt{layers}")


def spec(cfg) -> ModelSpec:
    from orchestrator.config import from_node
    from orchestrator.config.model import NMTModelConfig

    c = from_node(NMTModelConfig, cfg, "model")   # layers: 2, 4 or 8 (the schema's choices)
    layers, vocab, hidden, seq_len = c.layers, c.vocab, c.hidden, c.seq_len

    def sample(batch: int, seed: int = 0):
        import numpy as np

        rng = np.random.default_rng(seed)
        src = rng.integers(1, vocab, (batch, seq_len)).astype("int32")
        tgt = rng.integers(1, vocab, (batch, seq_len + 1)).astype("int32")
        return (src, tgt[:, :-1]), tgt[:, 1:]

    return ModelSpec(name="nmt", build=lambda: build(layers, vocab, hidden, seq_len), input_shape=(seq_len,),
                     num_classes=vocab, trainable_on_mnist=False, input_dtype="int32",
                     inputs=[((seq_len,), "int32"), ((seq_len,), "int32")], label_shape=(seq_len,),
                     sample_batch=sample, extra={"layers": layers, "vocab": vocab, "hidden": hidden, "seq_len": seq_len})
