"""An example third-party plugin: the ``local_sgd`` sync strategy and its Hydra config option."""

from orchestrator.api import hookimpl

ORCHESTRATOR_HOOKSPEC = "1"  # the hook contract this plugin was written for


@hookimpl
def orchestrator_sync_strategies():
    return {"local_sgd": "orch_local_sgd.strategy:LocalSGD"}


@hookimpl
def orchestrator_config_schemas():
    # the typed schema of sync.* for +sync=local_sgd (defaults, ranges, help: written once)
    return {"sync/local_sgd": "orch_local_sgd.strategy:LocalSGDConfig"}


@hookimpl
def orchestrator_config_searchpath():
    # conf/sync/local_sgd.yaml inside this package makes `+sync=local_sgd` work.
    return ["pkg://orch_local_sgd.conf"]
