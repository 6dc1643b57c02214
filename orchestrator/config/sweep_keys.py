"""A group's key given once for a sweep across that group's options (``-m +placer=manual,rl
placer.budget_evaluations=2000``, or a recipe that sweeps placers): it applies to the options whose schema
has it, and each trial of an option without it drops it with a note. A key that no registered option of the
group has stays an error (a typo), as does such a key outside a sweep or in one that does not vary the group.

The launching process names these keys in ``$ORCHESTRATOR_SWEEP_KEYS`` (the trials it runs in this process,
and those a launcher starts as jobs, inherit it) and hands Hydra each as ``++GROUP.KEY=VALUE``, which composes
into an option that lacks it too; ``drop_foreign`` then takes it out of such a trial's config before the
config is validated."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from omegaconf import DictConfig, open_dict

from orchestrator.config.fields import schema_of

SWEEP_KEYS_ENV = "ORCHESTRATOR_SWEEP_KEYS"


def _fields(group: str) -> list[set[str]]:
    """The top-level keys of each registered schema of ``group``."""
    from orchestrator.config.store import schemas

    return [{f.name for f in dataclasses.fields(cls)} for key, cls in schemas().items()
            if key.partition("/")[0] == group]


def sweep_wide(overrides: list[str], groups: tuple[str, ...], swept: set[str]) -> list[str]:
    """Of a sweep's fixed overrides, the ``GROUP.KEY=VALUE`` (no prefix) of a group the sweep varies (``swept``, the
    groups swept on the command line; those a recipe sweeps, ``hydra.sweeper.params``, are looked up here) whose KEY
    some registered option of GROUP has and another lacks. In a sweep that keeps the group's option fixed, such a
    key on an option without it stays an error."""
    def candidate(o: str) -> bool:
        group, _, rest = o.split("=", 1)[0].partition(".")
        if o[0] in "+~" or "=" not in o or group not in groups or not rest:
            return False
        has = [rest.split(".", 1)[0] in keys for keys in _fields(group)]
        return any(has) and not all(has)

    found = [o for o in overrides if candidate(o)]
    if found and {o.split(".", 1)[0] for o in found} - swept:
        swept = swept | _recipe_swept([o for o in overrides if o not in found], groups)
    return [o for o in found if o.split(".", 1)[0] in swept]


def _recipe_swept(overrides: list[str], groups: tuple[str, ...]) -> set[str]:
    """The groups the composed sweeper's own ``params`` sweep (a recipe's ``hydra.sweeper.params``); none when the
    config does not compose here (the checks that follow say why)."""
    from hydra import compose, initialize_config_module

    try:
        with initialize_config_module("orchestrator_conf", version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        params = cfg.hydra.sweeper.get("params") or {}
    except Exception:
        return set()
    return {str(k).lstrip("+~") for k in params if str(k).lstrip("+~") in groups}


def drop_foreign(cfg: Any, groups: tuple[str, ...]) -> list[str]:
    """Take out of ``cfg`` the sweep-wide keys (``$ORCHESTRATOR_SWEEP_KEYS``) that this trial's option of their
    group does not have; the notes saying so."""
    notes = []
    for path in filter(None, os.environ.get(SWEEP_KEYS_ENV, "").split(",")):
        group, _, rest = path.partition(".")
        node = cfg.get(group) if group in groups and hasattr(cfg, "get") else None
        cls = schema_of(node) if isinstance(node, DictConfig) else None
        key = rest.split(".", 1)[0]
        if cls is None or key in {f.name for f in dataclasses.fields(cls)} or key not in node:
            continue
        with open_dict(node):
            del node[key]
        notes.append(f"note: {path} does not apply to {group}={node.get('name', '?')} (given for the sweep's "
                     f"options that have it)")
    return notes
