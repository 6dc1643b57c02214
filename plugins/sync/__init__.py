"""Built-in data-parallel sync strategies."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_sync_strategies():
    return {}
