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
    builtin: bool = False


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
        try:
            pm.register(module, name=ep.name)
        except pluggy.PluginValidationError as exc:        # a hook with a wrong signature
            raise PluginError(f"plugin {ep.name!r} ({ep.value}): {exc}") from None
        dist = getattr(ep, "dist", None)
        _DISTS[ep.name] = (dist.metadata["Name"], dist.version) if dist is not None else ("?", "?")
    try:
        pm.check_pending()                                  # a hook name that is not in the contract (misspelt)
    except pluggy.PluginValidationError as exc:
        hooks = ", ".join(n for n in dir(hookspecs) if n.startswith("orchestrator_"))
        raise PluginError(f"{exc} (the hooks: {hooks})") from None
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
            if not isinstance(result or {}, dict) or not all(isinstance(r, str) for r in (result or {}).values()):
                raise PluginError(f"plugin {plugin_name!r}: {hook_name}() returned {result!r}, not a dict "
                                  "{name: 'module:attribute'}"[:300])
            for name, ref in (result or {}).items():
                out.append(PluginEntry(k, name, ref, dist, ver, plugin_name.startswith("builtin_")))
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
    chosen = [e for e in matches if not e.builtin] or matches     # a third party's overrides a built-in of the name
    if not chosen[-1].builtin and len(chosen) < len(matches):
        print(f"note: {kind} {name!r} is {chosen[-1].distribution}'s ({chosen[-1].ref}), not the built-in",
              file=sys.stderr, flush=True)
    module_name, _, attr = chosen[-1].ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except ImportError as exc:
        raise PluginError(f"{kind} {name!r} is unavailable: {exc}") from exc
    except AttributeError:
        raise PluginError(f"{kind} {name!r} is registered as {chosen[-1].ref!r}, but {module_name} has no "
                          f"{attr!r}") from None
    return obj


def culprit(exc: BaseException) -> str | None:
    """Where a third party's plugin code raised ``exc`` (the innermost frame of its traceback in a plugin's
    package): 'ValueError: ... at FILE:LINE in FUNC, code of the plugin DIST (it provides placer 'x')'; None
    where no third party's code is on the traceback (a bug of the tool's own, whose traceback is the report)."""
    def top(e: PluginEntry) -> str:
        return e.ref.partition(":")[0].split(".")[0]

    try:
        third = [e for e in entries() if not e.builtin and top(e) not in ("orchestrator", "orchestrator_plugins", "plugins")]
    except Exception:
        return None
    packages = {top(e): e for e in third}
    hit = None
    tb = exc.__traceback__
    while tb is not None:
        name = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        if name in packages:
            hit = (packages[name], tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    if hit is None:
        return None
    entry, path, line, func = hit
    provides = ", ".join(f"{e.kind} {e.name!r}" for e in third if top(e) == top(entry))
    who = entry.distribution if entry.distribution != "?" else entry.ref.partition(":")[0]
    return f"{type(exc).__name__}: {exc} at {path}:{line} in {func}, code of the plugin {who} (it provides {provides})"


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
