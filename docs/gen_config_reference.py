"""Generate docs/configuration.md: one table per config option, from its typed schema (the
dataclasses of ``orchestrator.config``: each field's default, help line and accepted values), with
the values the option's YAML sets over them. An option without a schema (the sync strategies, a
plugin's untyped YAML) is read from its YAML: comment lines above a key and a trailing ``# comment``
describe it.

    python docs/gen_config_reference.py [--check]

``--check`` exits 1 when the committed page is out of date.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:      # the schemas of this checkout, not of an installed copy
    sys.path.insert(0, str(ROOT))
GROUP_SLOTS = ("hardware", "model", "dataset", "placer", "sync")
CONF = ROOT / "conf"
OUT = ROOT / "docs" / "configuration.md"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[\w./*-]+):(?P<value>[^#]*?)\s*(?:#\s?(?P<comment>.*))?$")
ITEM = re.compile(r"^(?P<indent> *)- (?P<value>.*?)\s*(?:#\s?(?P<comment>.*))?$")


def parse(text: str) -> tuple[str, list[list[str]]]:
    """(file description, [[dotted key, default, description]])."""
    header, rows, pending, path = [], [], [], []  # path: [(indent, key)]
    seen_key = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            if not seen_key and header:
                header.append("")
            continue
        if stripped.startswith("#"):
            if not stripped.lstrip("#").strip().startswith("@package"):          # a Hydra directive, not prose
                (pending if seen_key else header).append(stripped.lstrip("#").strip())
            continue
        item = ITEM.match(line)
        if item and rows:
            rows[-1][1] += ("<br>" if rows[-1][1] else "") + f"`- {item['value']}`"
            continue
        m = KEY.match(line)
        if not m:
            continue
        seen_key = True
        indent = len(m["indent"])
        path = [(i, k) for i, k in path if i < indent] + [(indent, m["key"])]
        value = m["value"].strip()
        words = " ".join(x for x in [*pending, m["comment"] or ""] if x).strip()
        rows.append([".".join(k for _, k in path), f"`{value}`" if value else "", words])
        pending = []
    return " ".join(x for x in header if x), rows


def yaml_value(v) -> str:
    """A default as it would be written in YAML (``null``, ``true``, ``[heft, topo]``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def accepts(f: dataclasses.Field) -> str:
    """What a field accepts, from its declaration (``orchestrator.config.option``)."""
    from orchestrator.config.fields import _bounds, _is_int, _words

    meta = f.metadata
    parts = []
    if meta.get("choices") is not None:
        parts.append(_words(meta["choices"], meta.get("number", False), _is_int(f)))
    bounds = _bounds(meta)
    t = str(f.type)
    kind = ("integer" if _is_int(f) else "number" if "float" in t and "list" not in t else "true, false" if "bool" in t
            else "a list" if "list" in t or "tuple" in t else "text" if "str" in t and meta.get("choices") is None else "")
    if bounds and meta.get("choices") is not None:
        parts[-1] += f" {bounds}"
    elif bounds or kind:
        parts.append(f"{kind} {bounds}".strip())
    if "Optional" in str(f.type) or "None" in str(f.type):
        parts.append("null")
    return "; ".join(parts)


def schema_rows(cls, values: dict, prefix: str = "") -> list[list[str]]:
    """[[dotted key, default, accepts, help]] of a schema, nested schemas flattened."""
    rows = []
    for f in dataclasses.fields(cls):
        if prefix == "" and f.name in GROUP_SLOTS:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value = values.get(f.name, default)
        if dataclasses.is_dataclass(default):
            rows.append([prefix + f.name, "", "", f.metadata.get("help", "")])
            rows += schema_rows(type(default), value if isinstance(value, dict) else {}, f"{prefix}{f.name}.")
            continue
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        rows.append([prefix + f.name, f"`{yaml_value(value)}`", accepts(f), f.metadata.get("help", "")])
    return rows


def typed_option(rel: Path):
    """(schema class, the values the YAML sets) for an option that extends a schema, else None."""
    from omegaconf import OmegaConf

    from orchestrator.config.store import schemas

    data = OmegaConf.to_container(OmegaConf.load(CONF / rel))
    for entry in data.pop("defaults", None) or []:
        if isinstance(entry, dict):
            for key, name in entry.items():
                if str(key).startswith("/schema/"):
                    group, _, package = str(key)[len("/schema/"):].partition("@")
                    if package not in ("", "_here_"):     # an @package _global_ option: its own keys under it
                        data = {**(data.get(package) or {}), **{f"{k}.{kk}": vv for k, v in data.items()
                                                               if k != package and isinstance(v, dict)
                                                               for kk, vv in v.items()}}
                    return schemas()[f"{group}/{name}"], data
        elif entry == "orchestrator_schema":
            from orchestrator.config.root import OrchestratorConfig

            return OrchestratorConfig, {k: v for k, v in data.items() if k != "hydra"}
    return None


def header(text: str) -> str:
    """The YAML's leading comment, less the line that points here."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        words = line.lstrip("#").strip()
        if words.startswith("@package"):
            continue
        if not words.startswith(("Defaults, help", "Every key's default", "docs/configuration.md is generated")):
            lines.append(words)
    return " ".join(lines)


def section(rel: Path) -> str:
    group = rel.parent.as_posix()
    is_global = (CONF / rel).read_text().startswith("# @package _global_")    # its keys are the root's
    prefix = "" if group == "." or is_global else group + "."
    plus = "+" if group in ("placer", "sync", "planner", "experiment") else ""   # optional groups: not in the defaults
    title = "config.yaml (the root)" if group == "." else f"`{plus}{group}={rel.stem}`"
    how = "" if group == "." else (f"Select with `{plus}{group}={rel.stem}`; " + (
        "its keys are the root's (and Hydra's): override them as `KEY=VALUE`.\n\n" if is_global
        else f"override a key with `{prefix}KEY=VALUE`.\n\n"))
    typed = typed_option(rel)
    if typed is not None:
        cls, values = typed
        description = header((CONF / rel).read_text())
        source = f"Schema: `{cls.__module__}.{cls.__qualname__}`. "
        rows = schema_rows(cls, values)
        others = {k: v for k, v in values.items() if "." in k}   # an @package _global_ option's other groups' keys
        if others:
            description += " Picking it also sets " + ", ".join(f"`{k}={yaml_value(v)}`" for k, v in others.items()) + "."
    else:
        description, plain = parse((CONF / rel).read_text())
        source, rows = "Untyped (no schema): the YAML is the reference. ", [[k, v, "", w] for k, v, w in plain
                                                                            if not (is_global and k == "defaults")]
    lines = [f"## {title}\n", f"File: `conf/{rel.as_posix()}`. {source}{description}".rstrip() + "\n", how,
             "| key | default | accepts | description |", "|---|---|---|---|"]
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    for key, value, ok, words in rows:
        lines.append(f"| `{prefix}{key}` | {cell(value)} | {cell(ok)} | {cell(words)} |")
    return "\n".join(lines) + "\n"


def render() -> str:
    files = sorted(CONF.rglob("*.yaml"), key=lambda p: (p.parent != CONF, p.relative_to(CONF).as_posix()))
    body = "\n".join(section(p.relative_to(CONF)) for p in files)
    return ("# Configuration reference\n\n"
            "<!-- Generated by docs/gen_config_reference.py from the schemas (orchestrator/config/) and conf/**/*.yaml; "
            "do not edit by hand. -->\n\n"
            "Every option of every config group shipped with the orchestrator: each key's default, what it accepts "
            "(checked before any run: a wrong type, range or choice is a one-line error, exit 2) and its help line, "
            "from the option's schema. Plugins add their own groups' options and schemas "
            "(see [Writing a plugin](plugins.md)).\n\n"
            + body)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python docs/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(list(CONF.rglob('*.yaml')))} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
