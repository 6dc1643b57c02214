"""The plugin contract: every placer, sync strategy, hardware adapter and model is provided through
these hooks, built-ins included; the types the hooks name are in ``orchestrator.api`` (they are registered from the same ``orchestrator`` entry-point group).

A plugin module implements any subset of the hooks with ``@orchestrator.hookimpl``. Registry hooks
return ``{name: "package.module:attribute"}`` (a lazy reference, imported only when the trial uses
that name) so that listing plugins never imports TensorFlow.

Bump HOOKSPEC_VERSION's major number on incompatible changes; a plugin can check it with
``orchestrator.hookspecs.HOOKSPEC_VERSION`` or declare ``ORCHESTRATOR_HOOKSPEC = "1"`` at module level,
which the plugin manager verifies when it loads the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pluggy

PROJECT = "orchestrator"
HOOKSPEC_VERSION = "1.0"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# A registry entry: "module:attr", resolved lazily by orchestrator.plugins.load().
Ref = str


@hookspec
def orchestrator_placers() -> Mapping[str, Ref]:
    """Placers this plugin provides, ``{name: "module:Class"}``.

    The class is built as ``Class(cfg)`` with the trial's ``placer`` config node and satisfies
    ``orchestrator.api.Placer``: ``place(graph, worker, evaluator, context) -> Placement``.
    Called when plugins are listed or a trial looks up ``placer.name``.
    """


@hookspec
def orchestrator_sync_strategies() -> Mapping[str, Ref]:
    """Data-parallel sync strategies, ``{name: "module:Class"}``; ``Class`` subclasses
    ``orchestrator.api.CollectiveStrategy`` or ``orchestrator.api.ServerStrategy`` and is built as
    ``Class(cfg)`` with the trial's ``sync`` node (under MPI, again in every rank from the plain node).
    The virtual and the MPI runtime run it; the trial refuses any other class with one line."""


@hookspec
def orchestrator_hardware_adapters() -> Mapping[str, Ref]:
    """Hardware adapters, ``{name: "module:Class"}``; ``Class(cfg)`` satisfies ``orchestrator.api.HardwareAdapter``:
    ``cluster(context: TrialContext) -> Cluster``."""


@hookspec
def orchestrator_planners() -> Mapping[str, Ref]:
    """Planners of plans for clusters of mixed GPUs, ``{name: "module:Class"}``; ``Class(cfg)`` with the
    trial's ``planner`` node satisfies ``orchestrator.api.Planner``:
    ``plan(model, cluster, objective, evaluator) -> Plan``."""


@hookspec
def orchestrator_simulators() -> Mapping[str, Ref]:
    """Plan simulators, ``{name: "module:Class"}`` (``planner.simulator=NAME``); ``Class()`` subclasses
    ``orchestrator.api.PlanSimulator``: ``estimate`` and the rules the planners' search and bounds read."""


@hookspec
def orchestrator_models() -> Mapping[str, Ref]:
    """Model builders, ``{name: "module:function"}``; ``function(cfg)`` returns a ``ModelSpec``
    (see ``orchestrator.models``)."""


@hookspec
def orchestrator_config_searchpath() -> list[str]:
    """Config directories to add to Hydra's search path, as ``pkg://package.module`` or ``file://DIR``.

    This is how a plugin ships its own config option (``conf/placer/NAME.yaml`` inside its package)
    so that ``+placer=NAME`` works after ``pip install`` and nothing in this project changes.
    """


@hookspec
def orchestrator_config_schemas() -> Mapping[str, Ref]:
    """Typed schemas of config options, ``{"group/name": "module:Class"}`` with ``Class`` a dataclass
    (fields made with ``orchestrator.config.option``: default, help line, range, choices).

    Each is registered in Hydra's ConfigStore as ``schema/group/name`` before the config is composed;
    the option's YAML extends it with ``defaults: [/schema/group@_here_: name, _self_]``, so its keys
    are typed and checked (``orchestrator.config.validate``) before any run. ``name`` is the plugin
    name (``placer.name``). Without a schema an option's YAML is its own, untyped, schema.
    """


@hookspec
def orchestrator_trial_start(run_id: str, cfg: Any) -> None:
    """A trial listener: called after the trial's MLflow run started and its config was logged."""


@hookspec
def orchestrator_trial_end(run_id: str, cfg: Any, status: str, metrics: Mapping[str, float]) -> None:
    """A trial listener: called once the trial ended (status FINISHED, FAILED or KILLED), before the
    MLflow run is closed; ``metrics`` are the trial's final metrics."""
