"""An example third-party plugin: the ``round_robin`` placer and its Hydra config option."""

from orchestrator.hookspecs import hookimpl

ORCHESTRATOR_HOOKSPEC = "1"  # the hook contract this plugin was written for


@hookimpl
def orchestrator_placers():
    return {"round_robin": "orch_example_placer.placer:RoundRobinPlacer"}


@hookimpl
def orchestrator_config_searchpath():
    # conf/placer/round_robin.yaml inside this package makes `+placer=round_robin` work.
    return ["pkg://orch_example_placer.conf"]
