"""Built-in data-parallel sync strategies (allreduce, async parameter server, delay-sync, backup workers,
async with a staleness cut-off) and ``auto``, which runs the one the measured regime map picks."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_sync_strategies():
    return {
        "allreduce": "orchestrator_plugins.sync.strategies:AllReduce",
        "async": "orchestrator_plugins.sync.strategies:AsyncParameterServer",
        "delay": "orchestrator_plugins.sync.strategies:DelaySync",
        "backup": "orchestrator_plugins.sync.strategies:BackupWorkers",
        "async_cutoff": "orchestrator_plugins.sync.strategies:AsyncCutoff",
        "auto": "orchestrator_plugins.sync.auto:AutoSync",
    }


@hookimpl
def orchestrator_config_schemas():
    return {f"sync/{name}": f"orchestrator_plugins.sync.config:{cls}" for name, cls in (
        ("allreduce", "AllReduceConfig"), ("async", "AsyncConfig"), ("delay", "DelaySyncConfig"),
        ("backup", "BackupWorkersConfig"), ("async_cutoff", "AsyncCutoffConfig"), ("auto", "AutoSyncConfig"))}
