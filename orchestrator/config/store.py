"""Schemas into Hydra's ConfigStore, before any composition: the root as ``orchestrator_schema``
(``conf/config.yaml`` extends it) and every option's schema as ``schema/GROUP/NAME``, which the
option's YAML extends through its defaults list (``- /schema/placer@_here_: rl``). The schemas come
from the ``orchestrator_config_schemas`` hook (``{"placer/rl": "module:Class"}``), so a plugin's
schema is registered exactly like a built-in's; a plugin without one keeps an untyped YAML."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from orchestrator.errors import PluginError

ROOT_SCHEMA = "orchestrator_schema"
BUILTIN = {"dataset/mnist": "orchestrator.config.model:MNISTDatasetConfig",
           "dataset/fashion_mnist": "orchestrator.config.model:FashionMNISTDatasetConfig"}


def _resolve(key: str, ref: str) -> type:
    module_name, _, attr = str(ref).partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"config schema {key!r} ({ref}) cannot be imported: {exc}") from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise PluginError(f"config schema {key!r} ({ref}) is not a dataclass")
    return obj


def schema_refs() -> dict[str, str]:
    """``{"group/name": "module:Class"}``: the built-ins, then the plugins' (a later one wins)."""
    from orchestrator import plugins

    refs = dict(BUILTIN)
    for result in plugins.get_plugin_manager().hook.orchestrator_config_schemas():
        for key, ref in (result or {}).items():
            if str(key).count("/") != 1:
                raise PluginError(f"config schema key {key!r} must be 'group/name' (e.g. 'placer/round_robin')")
            refs[str(key)] = str(ref)
    return refs


_CLASSES: dict[str, type] = {}   # by "module:Class", imported once per process


def schemas() -> dict[str, type]:
    """Every registered schema class by ``group/name``."""
    out = {}
    for key, ref in schema_refs().items():
        if ref not in _CLASSES:
            _CLASSES[ref] = _resolve(key, ref)
        out[key] = _CLASSES[ref]
    return out


def register() -> None:
    """Put the root and every option schema in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    from orchestrator.config.root import OrchestratorConfig

    cs = ConfigStore.instance()
    found = schemas()
    if _REGISTERED == found:
        return
    cs.store(name=ROOT_SCHEMA, node=OrchestratorConfig, replace=True)
    for key, cls in found.items():
        group, _, name = key.partition("/")
        cs.store(group=f"schema/{group}", name=name, node=cls, replace=True)
    _REGISTERED.clear()
    _REGISTERED.update(found)


_REGISTERED: dict[str, type] = {}
