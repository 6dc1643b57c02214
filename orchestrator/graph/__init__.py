"""The op-graph model every layer shares: the computational graph of a training step (``opgraph``:
``OpGraph``, ``Node``, ``Edge``), the ``Placement`` of its nodes on a worker's devices (``placement``)
and the numpy array type names (``arrays``). A low package: it imports nothing of the orchestrator
but ``errors``, so ``hardware``, ``execution``, ``models``, ``placement`` and the rest all import it.

Extracting a graph from Keras, reading profiled workloads and generating synthetic graphs stay in
placement's graph layer (``orchestrator.placement.graph``)."""

from orchestrator.graph.opgraph import Edge, Node, OpGraph
from orchestrator.graph.placement import Placement, PlacementContext

__all__ = ["Edge", "Node", "OpGraph", "Placement", "PlacementContext"]
