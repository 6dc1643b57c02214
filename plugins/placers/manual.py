"""``placer=manual``: the human expert's placement: a built-in expert rule (``placer.strategy``:
fastest, rnn, chain; see ``expert_rules``), a split file (``placer.split``, the msr-dnn-partitioning
human-experts format) or name-pattern rules in the config, in that order."""

from __future__ import annotations

import fnmatch
from typing import Any

from orchestrator.config.placer import ManualPlacerConfig
from orchestrator.errors import ConfigError
from orchestrator.graph import Placement

EXPERT = ("fastest", "rnn", "chain")


class ManualPlacer:
    searches = False    # the placement the user asked for: never replaced by the baseline (phases/placement.py)
    auto_evaluator = "measured"  # it evaluates only its answer: on real devices, run it for real
    def __init__(self, cfg: Any = None):
        self.cfg = ManualPlacerConfig.from_node(cfg)
        self.rules = _parse_rules(self.cfg.rules or [])
        self.split = self.cfg.split
        self.strategy = self.cfg.strategy

    def _strategy(self, graph: Any, worker: Any, context: Any) -> tuple[str, list[tuple[str, str]]]:
        """``auto``: the expert split if one is given (``placer.split`` or ``model.split``), else
        ``placer.rules``, else the model's own expert rules (``model.expert_rules``) if this worker
        has every device they name, else the literature's rule for the model (rnn for recurrent
        models, everything on the fastest device that fits otherwise)."""
        strategy = str(self.strategy or "auto")
        if strategy not in ("auto", "split", "rules", *EXPERT):
            raise ConfigError(f"placer.strategy={strategy!r} (accepted: auto, split, rules, {', '.join(EXPERT)})")
        if strategy != "auto":
            return strategy, self.rules
        if self.split or _model_split(context):
            return "split", []
        if self.rules:
            return "rules", self.rules
        model_rules = _parse_rules(_model_get(context, "expert_rules") or [])
        if model_rules and {d for _, d in model_rules} <= set(worker.device_names):
            return "rules", model_rules  # per call: another worker may lack these devices
        recurrent = any(n.op.lower().startswith(("lstm", "gru", "rnn")) for n in graph.nodes)
        return ("rnn" if recurrent else "fastest"), []

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        strategy, rules = self._strategy(graph, worker, context)
        if strategy in EXPERT:
            from orchestrator_plugins.placers.expert_rules import expert_placement

            return expert_placement(strategy, graph, worker, evaluator)
        if strategy == "split":
            from orchestrator.placement.graph.workload import load_split

            split = self.split or _model_split(context)
            if not split:
                raise ConfigError("placer.strategy=split needs placer.split=FILE (or model.split)")

            return load_split(split, graph, worker)
        if not rules:
            raise ConfigError("placer=manual needs placer.strategy, placer.rules (pattern: device) or placer.split (a split file)")
        devices = worker.device_names
        for _, dev in rules:
            if dev not in devices:
                raise ConfigError(f"placer.rules names device {dev!r}; this worker has {', '.join(devices)}")
        assignment: dict[str, str] = {}
        for node in graph.nodes:
            key = node.layer or node.name
            for pattern, dev in rules:
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


def _model_get(context: Any, key: str) -> Any:
    cfg = getattr(context, "cfg", None)
    model = cfg.get("model") if cfg is not None else None
    return model.get(key) if model is not None else None


def _model_split(context: Any) -> str | None:
    """A workload's own expert split (``model.split``) when the trial has one."""
    return _model_get(context, "split")
