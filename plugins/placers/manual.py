"""``placer=manual``: the human expert's placement, from name-pattern rules in the config or from a
split file (``placer.split``, the msr-dnn-partitioning human-experts format)."""

from __future__ import annotations

import fnmatch
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.placement import Placement


class ManualPlacer:
    def __init__(self, cfg: Any):
        self.cfg = cfg
        rules = cfg.get("rules") or {}
        try:
            self.rules = [(str(pattern), str(device)) for pattern, device in dict(rules).items()]
        except (TypeError, ValueError):
            raise ConfigError(f"placer.rules must map name patterns to devices, got {rules!r}") from None
        self.split = cfg.get("split")

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        if self.split:
            from orchestrator.workload import load_split

            return load_split(self.split, graph, worker)
        if not self.rules:
            raise ConfigError("placer=manual needs placer.rules (pattern: device) or placer.split (a split file)")
        devices = worker.device_names
        for _, dev in self.rules:
            if dev not in devices:
                raise ConfigError(f"placer.rules names device {dev!r}; this worker has {', '.join(devices)}")
        assignment: dict[str, str] = {}
        for node in graph.nodes:
            key = node.layer or node.name
            for pattern, dev in self.rules:
                if fnmatch.fnmatchcase(key, pattern) or fnmatch.fnmatchcase(node.name, pattern):
                    assignment[node.name] = dev
                    break
            else:
                raise ConfigError(f"placer.rules place no device for node {node.name!r} (add a rule, e.g. '*': {devices[0]})")
        return Placement(devices, assignment, {"placer": "manual"})
