"""``placer=manual``: the human expert's placement: a built-in expert rule (``placer.strategy``:
fastest, rnn, chain; see ``expert_rules``), a split file (``placer.split``, the msr-dnn-partitioning
human-experts format) or name-pattern rules in the config, in that order."""

from __future__ import annotations

import fnmatch
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.placement import Placement


class ManualPlacer:
    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.rules = _parse_rules(cfg.get("rules") or [])
        self.split = cfg.get("split")
        self.strategy = cfg.get("strategy")

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        if self.strategy:
            from orchestrator_plugins.placers.expert_rules import expert_placement

            return expert_placement(str(self.strategy), graph, worker, evaluator)
        if self.split:
            from orchestrator.workload import load_split

            return load_split(self.split, graph, worker)
        if not self.rules:
            raise ConfigError("placer=manual needs placer.strategy, placer.rules (pattern: device) or placer.split (a split file)")
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


def _parse_rules(rules: Any) -> list[tuple[str, str]]:
    """Rules as a list of ``{pattern, device}`` (or a ``{pattern: device}`` mapping), in order."""
    try:
        if hasattr(rules, "items"):
            return [(str(p), str(d)) for p, d in rules.items()]
        return [(str(r["pattern"]), str(r["device"])) for r in rules]
    except (TypeError, KeyError, ValueError):
        raise ConfigError(f"placer.rules must be a list of {{pattern: GLOB, device: NAME}}, got {rules!r}") from None
