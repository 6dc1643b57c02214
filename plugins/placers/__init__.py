"""Built-in placers."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_placers():
    return {"manual": "orchestrator_plugins.placers.manual:ManualPlacer"}
