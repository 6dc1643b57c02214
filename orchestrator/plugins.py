"""The plugin manager, the registry of placers / sync strategies / hardware adapters / models, and
``python -m orchestrator.plugins`` (a listing that imports no TensorFlow).

Plugins are modules named in the ``orchestrator`` entry-point group (built-ins too). Setting
``ORCHESTRATOR_DISABLE_PLUGINS=name1,name2`` skips the named entry points.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from orchestrator import hookspecs
from orchestrator.errors import PluginError

KINDS = {
    "placer": "orchestrator_placers",
    "sync": "orchestrator_sync_strategies",
    "hardware": "orchestrator_hardware_adapters",
    "model": "orchestrator_models",
    "planner": "orchestrator_planners",
    "simulator": "orchestrator_simulators",
}


@dataclass(frozen=True)
class PluginEntry:
    kind: str
    name: str
    ref: str
    distribution: str
    version: str


def _check_version(module: Any, ep_name: str) -> None:
    wanted = getattr(module, "ORCHESTRATOR_HOOKSPEC", None)
    if wanted is None:
        return
    have = hookspecs.HOOKSPEC_VERSION.split(".")[0]
    if str(wanted).split(".")[0] != have:
        raise PluginError(
            f"plugin {ep_name!r} needs hook contract {wanted}, this orchestrator provides {hookspecs.HOOKSPEC_VERSION}"
        )


@functools.lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    disabled = {n.strip() for n in os.environ.get("ORCHESTRATOR_DISABLE_PLUGINS", "").split(",") if n.strip()}
    for ep in metadata.entry_points(group=hookspecs.PROJECT):
        if ep.name in disabled or pm.get_plugin(ep.name) is not None:
            continue
        try:
            module = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the tool down silently
            raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}") from exc
        _check_version(module, ep.name)
        pm.register(module, name=ep.name)
        dist = getattr(ep, "dist", None)
        _DISTS[ep.name] = (dist.metadata["Name"], dist.version) if dist is not None else ("?", "?")
    pm.check_pending()
    return pm


_DISTS: dict[str, tuple[str, str]] = {}


def entries(kind: str | None = None) -> list[PluginEntry]:
    """Every registered (kind, name) with the distribution that provides it."""
    pm = get_plugin_manager()
    out: list[PluginEntry] = []
    for k, hook_name in KINDS.items():
        if kind is not None and k != kind:
            continue
        hook = getattr(pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            result = impl.function()
            plugin_name = pm.get_name(impl.plugin) or "?"
            dist, ver = _DISTS.get(plugin_name, ("?", "?"))
            for name, ref in (result or {}).items():
                out.append(PluginEntry(k, name, ref, dist, ver))
    return out


def names(kind: str) -> list[str]:
    return sorted({e.name for e in entries(kind)})


def load(kind: str, name: str) -> Any:
    """Import and return the object registered as ``name`` for ``kind`` (a class or function)."""
    if kind not in KINDS:
        raise PluginError(f"unknown plugin kind {kind!r} (known: {', '.join(KINDS)})")
    matches = [e for e in entries(kind) if e.name == name]
    if not matches:
        available = ", ".join(names(kind)) or "none installed"
        raise PluginError(f"unknown {kind} {name!r} (available: {available})")
    ref = matches[-1].ref  # a later registration (third party) overrides a built-in of the same name
    module_name, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except ImportError as exc:
        raise PluginError(f"{kind} {name!r} is unavailable: {exc}") from exc
    return obj


def config_searchpath() -> list[str]:
    pm = get_plugin_manager()
    paths: list[str] = []
    for result in pm.hook.orchestrator_config_searchpath():
        paths.extend(result or [])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.plugins", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(KINDS), help="list only this kind")
    args = parser.parse_args(argv)
    try:
        rows = entries(args.kind)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    header = ("kind", "name", "distribution", "version", "provided by")
    table = [header] + [(e.kind, e.name, e.distribution, e.version, e.ref) for e in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
