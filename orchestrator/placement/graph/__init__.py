"""The graph layer: the op graph of a training step (``opgraph``), its extraction from Keras
(``extract``, ``extract_ops``, ``flops``), profiled public workloads (``workload``) and the
``Placement`` of its nodes on a worker's devices (``placement``). Imports nothing else of placement.

``OpGraph``, ``Node`` and ``Edge`` (what a placer places) are importable from here."""

from orchestrator.placement.graph.opgraph import Edge, Node, OpGraph

__all__ = ["Edge", "Node", "OpGraph"]
