"""Built-in data-parallel sync strategies (allreduce, async parameter server, delay-sync)."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_sync_strategies():
    return {
        "allreduce": "orchestrator_plugins.sync.strategies:AllReduce",
        "async": "orchestrator_plugins.sync.strategies:AsyncParameterServer",
        "delay": "orchestrator_plugins.sync.strategies:DelaySync",
    }


@hookimpl
def orchestrator_config_schemas():
    return {f"sync/{name}": f"orchestrator_plugins.sync.config:{cls}" for name, cls in (
        ("allreduce", "AllReduceConfig"), ("async", "AsyncConfig"), ("delay", "DelaySyncConfig"))}
