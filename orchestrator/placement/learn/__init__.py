"""The learned placer's core: the graph policy (``graph_policy``), its decoding (``policy_decode``),
the shipped checkpoint (``checkpoints/``) and pre-training (``pretrain``; the command is
``python -m orchestrator.pretrain``). Imports every layer below it; TensorFlow only when used."""
