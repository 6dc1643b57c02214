"""``OpGraph``: the computational graph of one training step (forward, loss, backward, update),
at layer or op granularity, with costs, memory and tensor sizes; saved as JSON (schema below).

JSON format (``"schema": "orchestrator.opgraph/1"``)::

    {"schema": "orchestrator.opgraph/1", "name": str, "granularity": "layer"|"op",
     "time_unit_s": float,                      # seconds per unit of every "cost" value (1.0 = seconds)
     "nodes": [{"name": str, "op": str, "role": "forward"|"loss"|"backward"|"update"|"other",
                "flops": float, "bytes_accessed": float,   # for the roofline model
                "cost": {device kind or device profile: time},  # explicit (profiled) costs, optional
                "param_bytes": float, "activation_bytes": float, "temp_bytes": float,
                "output_bytes": float, "group": str|null,    # colocation group
                "cpu_only": bool, "layer": str|null}],
     "edges": [{"src": str, "dst": str, "bytes": float, "cost": float|null}]}  # cost: fixed transfer time

Explicit costs win over the roofline estimate: ``cost`` keys are matched first against a device's
``profile``, then its ``kind``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.errors import WorkloadError

SCHEMA = "orchestrator.opgraph/1"
ROLES = ("forward", "loss", "backward", "update", "other")


class DeviceLike(Protocol):
    """What the cost model reads of a device (``orchestrator.hardware.cluster.Device`` has it): typed
    structurally, so this low package does not import ``hardware``."""

    @property
    def kind(self) -> str: ...
    @property
    def profile(self) -> str: ...
    def roofline_s(self, flops: float, bytes_accessed: float) -> float:
        """Seconds of a node with no measured cost (the roofline, computed by ``hardware.cost``)."""
        ...


@dataclass
class Node:
    name: str
    op: str = "op"
    role: str = "forward"
    flops: float = 0.0
    bytes_accessed: float = 0.0
    cost: dict[str, float] = field(default_factory=dict)
    param_bytes: float = 0.0
    activation_bytes: float = 0.0
    temp_bytes: float = 0.0
    output_bytes: float = 0.0
    group: str | None = None
    cpu_only: bool = False
    layer: str | None = None

    @property
    def memory_bytes(self) -> float:
        return self.param_bytes + self.activation_bytes + self.temp_bytes


@dataclass
class Edge:
    src: str
    dst: str
    bytes: float = 0.0
    cost: float | None = None   # a fixed transfer time (in the graph's unit) overriding bytes/bandwidth


@dataclass
class OpGraph:
    name: str
    nodes: list[Node]
    edges: list[Edge]
    granularity: str = "layer"
    time_unit_s: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {n.name: i for i, n in enumerate(self.nodes)}

    # -- structure ----------------------------------------------------------------------------
    def index(self, name: str) -> int:
        return self._index[name]

    def node(self, name: str) -> Node:
        return self.nodes[self._index[name]]

    def __len__(self) -> int:
        return len(self.nodes)

    def validate(self, source: str = "graph") -> OpGraph:
        if len(self._index) != len(self.nodes):
            seen: set[str] = set()
            for n in self.nodes:
                if n.name in seen:
                    raise WorkloadError(f"{source}: duplicate node {n.name!r}")
                seen.add(n.name)
        for e in self.edges:
            for end in (e.src, e.dst):
                if end not in self._index:
                    raise WorkloadError(f"{source}: edge {e.src!r} -> {e.dst!r} names unknown node {end!r}")
        for n in self.nodes:
            if n.role not in ROLES:
                raise WorkloadError(f"{source}: node {n.name!r} has role {n.role!r} (expected one of {', '.join(ROLES)})")
        self.topological_order(source)
        return self

    def successors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for e in self.edges:
            out[self._index[e.src]].append(self._index[e.dst])
        return out

    def predecessors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for e in self.edges:
            out[self._index[e.dst]].append(self._index[e.src])
        return out

    def topological_order(self, source: str = "graph") -> list[int]:
        indeg = [0] * len(self.nodes)
        succ = self.successors()
        for s in succ:
            for j in s:
                indeg[j] += 1
        ready = [i for i, d in enumerate(indeg) if d == 0]
        order: list[int] = []
        while ready:
            i = ready.pop()
            order.append(i)
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) != len(self.nodes):
            stuck = next(self.nodes[i].name for i, d in enumerate(indeg) if d > 0)
            raise WorkloadError(f"{source}: the graph has a cycle (through node {stuck!r})")
        return order

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            if n.group is not None:
                out.setdefault(n.group, []).append(n.name)
        return out

    @property
    def total_flops(self) -> float:
        return sum(n.flops for n in self.nodes)

    def uncosted(self, devices: list[DeviceLike]) -> list[DeviceLike]:
        """The ``devices`` some node has no cost on: it was profiled on other kinds of device (``Node.cost``) and
        carries no FLOPs or bytes for a roofline, so ``node_cost_s`` could only call it free there."""
        blind = [n for n in self.nodes if any(c > 0 for c in n.cost.values()) and not (n.flops or n.bytes_accessed)]
        return [d for d in devices if any(d.profile not in n.cost and d.kind not in n.cost for n in blind)]

    # -- costs --------------------------------------------------------------------------------
    def node_cost_s(self, node: Node, device: DeviceLike) -> float:
        """Seconds for ``node`` on ``device`` (an ``orchestrator.hardware.cluster.Device``)."""
        if node.cpu_only and device.kind != "cpu":
            return math.inf
        for key in (device.profile, device.kind):
            if key in node.cost:
                return float(node.cost[key] * self.time_unit_s)
        if node.flops == 0 and node.bytes_accessed == 0:
            return 0.0
        return device.roofline_s(node.flops, node.bytes_accessed)

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "name": self.name, "granularity": self.granularity,
            "time_unit_s": self.time_unit_s, "meta": self.meta,
            "nodes": [asdict(n) for n in self.nodes], "edges": [asdict(e) for e in self.edges],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "graph") -> OpGraph:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise WorkloadError(f"{source}: not an op graph (schema {data.get('schema') if isinstance(data, dict) else None!r}, expected {SCHEMA!r})")
        try:
            nodes = [Node(**n) for n in data["nodes"]]
            edges = [Edge(**e) for e in data["edges"]]
        except KeyError as exc:
            raise WorkloadError(f"{source}: missing field {exc.args[0]!r}") from exc
        except TypeError as exc:
            raise WorkloadError(f"{source}: bad node or edge ({exc})") from exc
        g = cls(data.get("name", Path(source).stem), nodes, edges, data.get("granularity", "layer"),
                float(data.get("time_unit_s", 1.0)), data.get("meta", {}))
        return g.validate(source)

    @classmethod
    def load(cls, path: str | Path) -> OpGraph:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise WorkloadError(f"{path}: no such file") from exc
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        return cls.from_dict(data, str(path))


def original_edges(graph: OpGraph) -> list[Edge]:
    """The graph's edges without the ones the workload loader added to join the two passes
    (``graph.meta["added_training_edges"]``, the last edges): the load model and the micro-batch
    schedules count only a file's own tensors."""
    added = int(graph.meta.get("added_training_edges", 0) or 0)
    return graph.edges[:len(graph.edges) - added] if added else list(graph.edges)
