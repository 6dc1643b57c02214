"""Typed config: one dataclass schema per config option, the defaults and help written once.

- ``fields``: ``option()`` (a field with its help line, range and choices) and ``check()``, the
  one place a composed value is held to its declaration;
- ``root``, ``placer``, ``hardware``, ``model``: the built-in schemas;
- ``store``: registers them (and plugins' schemas, hook ``orchestrator_config_schemas``) in
  Hydra's ConfigStore, which each option's YAML extends.

A plugin reads its typed config with ``MySchema.from_node(node)`` (or ``from_node(MySchema, node)``).

Typing an option (a built-in's or a plugin's, any group, e.g. ``sync``):
1. a dataclass (base ``Schema``, ``group = "sync"``) whose fields are ``option(default, help, min=...,
   choices=...)``; ``Any`` for a value of several shapes the plugin checks itself;
2. the hook ``orchestrator_config_schemas`` returns ``{"sync/NAME": "module:Class"}``;
3. ``conf/sync/NAME.yaml`` starts ``defaults: [/schema/sync@_here_: NAME, _self_]`` and keeps ``name``
   plus what differs from the schema;
4. the plugin reads ``Class.from_node(cfg)`` instead of ``cfg.get(key, default)``; checks across keys
   or groups stay in the plugin. ``docs/gen_config_reference.py`` then documents it from the schema.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from orchestrator.config.fields import check, describe, option, schema_of
from orchestrator.errors import ConfigError

T = TypeVar("T")
GROUPS = ("hardware", "model", "dataset", "placer", "sync", "planner")

__all__ = ["ConfigError", "check", "describe", "from_node", "option", "plain", "schema_of", "validate"]


def from_node(cls: type[T], node: Any, prefix: str) -> T:
    """``node`` (a composed DictConfig, a dict or None) as an instance of the schema ``cls``,
    its missing keys at their defaults, after the same checks as ``validate``: a wrong type, a
    value out of range or an unknown key is a one-line ``ConfigError`` naming ``prefix.KEY``."""
    from omegaconf.errors import OmegaConfBaseException

    typed = schema_of(node)
    if typed is not None and issubclass(typed, cls):
        merged = node
    elif isinstance(node, cls):                      # an instance (built by hand, or by from_node before)
        merged = OmegaConf.structured(node)
    else:
        try:
            raw = node if isinstance(node, DictConfig) else OmegaConf.create(dict(node or {}))
            merged = OmegaConf.merge(_template(cls), raw)      # merge copies the template: it is never changed
        except OmegaConfBaseException as exc:
            from omegaconf.errors import ValidationError

            if isinstance(exc, ValidationError):      # a wrong type: "KEY='abc' is not an integer"
                text = f"{prefix}.{describe(exc)}"
            else:                                     # a key the schema lacks
                key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or str(exc).splitlines()[0]
                text = f"unknown key {prefix}.{key} ({prefix} accepts: {', '.join(_names(cls))})"
            raise ConfigError(text) from None
    check(merged, f"{prefix}.")
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


@functools.cache
def _template(cls: type) -> DictConfig:
    """The schema ``cls`` as a structured config, built once (about 15 ms each time; a trial validates its groups
    several times, the fuzzers thousands)."""
    base = OmegaConf.structured(cls)
    if getattr(cls, "extra_keys", False):
        OmegaConf.set_struct(base, False)
    return base


def plain(node: Any) -> Any:
    """A DictConfig / ListConfig as plain dicts and lists (JSON-able, e.g. for the MPI job file); anything
    else as it is."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _names(cls: type) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


def validate(cfg: Any) -> None:
    """The trial's whole config against its schemas, before anything runs: the root's keys and every
    typed group (a plugin without a schema checks its own keys when it is built)."""
    check(cfg, "")
    if schema_of(cfg) is None:            # built by hand (tests, API use): the groups' nodes still
        for group in GROUPS:
            node = cfg.get(group) if hasattr(cfg, "get") else None
            if isinstance(node, DictConfig):
                check(node, f"{group}.")


class Schema:
    """A mixin for schema dataclasses: ``RLPlacerConfig.from_node(cfg.placer)``; ``group`` names
    the config group in error messages."""

    group = "config"

    @classmethod
    def from_node(cls: type[T], node: Any, prefix: str | None = None) -> T:
        return from_node(cls, node, prefix or getattr(cls, "group", "config"))
