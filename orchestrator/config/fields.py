"""The one place a config value is checked: ``option()`` declares a field of a schema dataclass with
its help line and what it accepts, and ``check()`` holds a composed config node to those
declarations. Types are OmegaConf's (it refuses ``placer.budget_evaluations=abc`` while Hydra
composes); ranges and choices are ours, because OmegaConf has none. Every refusal is a one-line
``ConfigError`` naming the key, the value and what is accepted."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from orchestrator.errors import ConfigError

_MISSING = dataclasses.MISSING


def option(default: Any = _MISSING, help: str = "", *, factory: Callable[[], Any] | None = None,  # noqa: A002
           min: float | None = None, max: float | None = None, gt: float | None = None,  # noqa: A002
           lt: float | None = None, choices: Iterable[Any] | None = None, number: bool = False,
           finite: bool = False, fold: bool = False, integer: bool = False) -> Any:
    """A schema field. ``help``: the one line the reference page and ``--help`` show. ``min``/``max``
    (inclusive) and ``gt``/``lt`` (strict) bound a number; ``choices`` lists the accepted words;
    ``number=True`` with ``choices`` accepts a number besides the words (``init_bias: auto | 0.5``),
    held to the bounds (a whole one with ``integer=True``). ``finite`` refuses inf; ``fold`` matches the words case-insensitively. A
    mutable default is given as ``factory``."""
    meta = {"help": help, "min": min, "max": max, "gt": gt, "lt": lt, "finite": finite,
            "choices": tuple(choices) if choices is not None else None, "number": number, "fold": fold,
            "integer": integer}
    meta = {k: v for k, v in meta.items() if v is not None and v is not False}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def show(v: Any) -> str:
    """A value as the user would have typed it: ``-5`` for the float -5.0 a typed node holds."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    if isinstance(v, (DictConfig, ListConfig)):
        v = OmegaConf.to_container(v, resolve=True)
    return repr(v)


def _words(choices: tuple, number: bool, integer: bool = False) -> str:
    text = ", ".join("null" if c is None else str(c).lower() if isinstance(c, bool) else str(c) for c in choices)
    return text + ((" or an integer" if integer else " or a number") if number else "")


def _bounds(meta: dict) -> str:
    def num(v: float) -> str:             # 4294967295, not 4.29497e+09
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else f"{v:g}"

    parts = [f"{op} {num(meta[k])}" for k, op in (("min", ">="), ("gt", ">"), ("max", "<="), ("lt", "<")) if k in meta]
    return " and ".join(parts)


def _is_int(f: dataclasses.Field) -> bool:
    if f.metadata.get("integer"):
        return True
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace(" ", "") in ("int", "Optional[int]", "int|None")


def check_value(key: str, v: Any, f: dataclasses.Field) -> None:
    """``v`` (the value at ``key``) against the declaration of field ``f``."""
    meta = f.metadata
    if v is None:
        return
    choices = meta.get("choices")
    is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
    if choices is not None:
        ok = v in choices or (isinstance(v, str) and v in [str(c) for c in choices])
        if not ok and meta.get("fold") and isinstance(v, str):
            ok = v.strip().lower() in [str(c).lower() for c in choices]
        if ok:
            return
        if not (meta.get("number") and is_num):
            if meta.get("number") and isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    raise ConfigError(f"{key}={show(v)} (accepted: {_words(choices, True, _is_int(f))})") from None
                is_num = True
            else:
                raise ConfigError(f"{key}={show(v)} (accepted: {_words(choices, meta.get('number', False), _is_int(f))})")
    if not is_num:
        return
    bounds = _bounds(meta)
    kind = "an integer" if _is_int(f) else "a number"
    if isinstance(v, float) and math.isnan(v):
        raise ConfigError(f"{key}={show(v)} is not a number")
    if meta.get("finite") and math.isinf(v):
        raise ConfigError(f"{key}={show(v)} must be finite")
    bad = (("integer" in meta and not float(v).is_integer()) or ("min" in meta and v < meta["min"]) or ("gt" in meta and v <= meta["gt"])
           or ("max" in meta and v > meta["max"]) or ("lt" in meta and v >= meta["lt"]))
    if bad:
        words = f" (or {_words(choices, False)})" if choices else ""
        raise ConfigError(f"{key}={show(v)} must be {kind} {bounds}{words}")


def schema_of(node: Any) -> type | None:
    """The dataclass a composed node was built from (None for an untyped node)."""
    if not isinstance(node, DictConfig):
        return None
    t = OmegaConf.get_type(node)
    return t if t is not None and dataclasses.is_dataclass(t) else None


def check(node: Any, prefix: str) -> None:
    """Every field of a typed node (recursively) against its declaration, and no key the schema
    lacks (``+placer.typo=1`` gets past Hydra's struct mode; it is refused here) unless the schema says
    ``extra_keys = True`` (an option whose code passes its node on, e.g. ``model=keras``'s factory)."""
    cls = schema_of(node)
    if cls is None:
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [] if getattr(cls, "extra_keys", False) else [k for k in node.keys() if k not in fields]
    if unknown:
        raise ConfigError(f"unknown key {prefix}{unknown[0]} ({prefix.rstrip('.') or 'the config'} accepts: "
                          f"{', '.join(fields)})")
    for name, f in fields.items():
        v = node._get_node(name)
        if v is None:
            continue
        try:
            value = node[name]
        except Exception as exc:  # an interpolation that does not resolve
            raise ConfigError(f"{prefix}{name}: {str(exc).splitlines()[0]}") from None
        if isinstance(value, DictConfig):
            if f.metadata.get("choices") is not None:              # a word or number, not a mapping
                raise ConfigError(f"{prefix}{name}={show(value)} (accepted: "
                                  f"{_words(f.metadata['choices'], f.metadata.get('number', False))})")
            check(value, f"{prefix}{name}.")
        elif isinstance(value, ListConfig):
            if f.metadata.get("choices") is None:
                continue
            if not str(f.type).startswith(("List", "list")):   # a word or number, not a list
                raise ConfigError(f"{prefix}{name}={show(value)} (accepted: "
                                  f"{_words(f.metadata['choices'], f.metadata.get('number', False))})")
            for i, item in enumerate(value):                   # a list of words (placer.variants)
                check_value(f"{prefix}{name}[{i}]", item, f)
        else:
            check_value(f"{prefix}{name}", value, f)


_CONVERT = re.compile(r"Value '(?P<value>.*)' of type '(?P<type>\w+)' could not be converted to (?P<target>\w+)", re.S)
_KINDS = {"Integer": "an integer", "Float": "a number", "Boolean": "a boolean (true or false)", "String": "a string"}


def describe(exc: BaseException) -> str | None:
    """One line for an OmegaConf validation error raised while composing (a wrong type, null where a
    value is required), naming the key and what it accepts; None for other errors."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    seen = exc
    while seen is not None and not isinstance(seen, (ValidationError, ConfigAttributeError, ConfigKeyError)):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    if not isinstance(seen, ValidationError):       # a key the schema lacks
        cls = getattr(seen, "object_type", None)
        key = getattr(seen, "full_key", None)
        if not (key and dataclasses.is_dataclass(cls)) or "not in" not in str(seen):
            return None
        where = key.rpartition(".")[0]
        names = ", ".join(f.name for f in dataclasses.fields(cls))
        top = str(exc).splitlines()[0].rstrip(".") if str(exc).startswith("Could not override") else f"unknown key {key}"
        return f"{top}: no such key ({where or 'the root'} accepts: {names})"
    key = getattr(seen, "full_key", None) or "a config value"
    msg = str(seen).splitlines()[0]
    m = _CONVERT.search(msg)
    if m:
        value = repr(m["value"]) if m["type"] == "str" else m["value"]
        return f"{key}={value} is not {_KINDS.get(m['target'], m['target'].lower())}"
    if "is not Optional" in msg or "cannot be assigned None" in msg:
        return f"{key}=null is not accepted (give a value; the default is in docs/configuration.md)"
    return f"{key}: {msg}"
