"""A placement: which device of a worker runs each node of an op graph. Saved as ``placement.json``:
``{"schema": 1, "devices": [...], "assignment": {node: device}}``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.graph.opgraph import OpGraph


@dataclass
class Placement:
    devices: list[str]
    assignment: dict[str, str]
    meta: dict[str, Any] = field(default_factory=dict)

    def check(self, graph: OpGraph) -> Placement:
        """Reject unknown devices and unplaced nodes, naming the node."""
        known = set(self.devices)
        for name, dev in self.assignment.items():
            if dev not in known:
                raise ConfigError(f"placement puts node {name!r} on unknown device {dev!r} (devices: {', '.join(self.devices)})")
        for n in graph.nodes:
            if n.name not in self.assignment:
                raise ConfigError(f"placement leaves node {n.name!r} unplaced")
        if len(self.assignment) > len(graph.nodes):
            names = {n.name for n in graph.nodes}
            extra = next(name for name in self.assignment if name not in names)
            raise ConfigError(f"placement places node {extra!r}, which the graph does not have")
        return self

    @staticmethod
    def of(result: Any, graph: OpGraph, placer: str) -> Placement:
        """A placer's answer (a plugin's too), checked: not a ``Placement`` is one line naming the placer."""
        if not isinstance(result, Placement):
            from orchestrator.errors import PluginError

            raise PluginError(f"placer={placer}: place() returned {type(result).__name__}, not an orchestrator.api.Placement")
        return result.check(graph)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "devices": list(self.devices), "assignment": dict(self.assignment), **({"meta": self.meta} if self.meta else {})}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Placement:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read placement ({exc})") from exc
        if data.get("schema") != 1 or "assignment" not in data:
            raise ConfigError(f"{path}: not a placement.json (schema 1 with 'devices' and 'assignment')")
        return cls(list(data.get("devices", sorted(set(data["assignment"].values())))), dict(data["assignment"]), data.get("meta", {}))


@dataclass
class PlacementContext:
    """What a placer gets from the trial besides the graph, the worker and the evaluator."""

    seed: int = 0
    sink: Any = None                 # a MetricsSink (log_metrics/set_tags/log_artifact), e.g. the RL learning curve
    output_dir: Path | None = None   # where to write artifacts (policy checkpoints, curves)
    show_progress: bool = False
    cfg: Any = None                  # the trial's whole config
