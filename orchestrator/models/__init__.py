"""Model specs: what a trial trains and places. Built-in models are registered through the plugin
hooks like third-party ones; builders import TensorFlow only when called."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.hookspecs import hookimpl


@dataclass
class ModelSpec:
    """A model: ``build()`` returns a fresh Keras model (its layers in execution order) whose
    input is ``input_shape`` (without batch) and whose output is ``num_classes`` logits."""

    name: str
    build: Callable[[], Any] | None
    input_shape: tuple[int, ...]
    num_classes: int
    trainable_on_mnist: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    graph: Any = None        # a ready OpGraph (cost-graph workloads); else extracted from ``build``
    hardware: Any = None     # the Cluster a workload file describes (``hardware=auto``)
    expert_split: Any = None # a human-expert Placement that comes with the workload


@hookimpl
def orchestrator_models():
    return {"cnn": "orchestrator.models.cnn:spec", "workload": "orchestrator.models.workload:spec"}


def layer_graph(spec: ModelSpec):
    """The model's layers as a chain ``OpGraph`` (one forward node per layer, no costs): enough for
    rule-based placement and measured evaluation."""
    from orchestrator.graph import Edge, Node, OpGraph

    names = [layer.name for layer in spec.build().layers]
    nodes = [Node(name=n, op="layer", layer=n) for n in names]
    edges = [Edge(a, b) for a, b in zip(names, names[1:])]
    return OpGraph(spec.name, nodes, edges, granularity="layer")
