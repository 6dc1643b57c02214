"""Built-in planners of plans for clusters of mixed GPUs (``+planner=NAME``) and plan simulators
(``planner.simulator=NAME``)."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_planners():
    return {
        "file": "orchestrator_plugins.planners.file:FilePlanner",
        "uniform": "orchestrator_plugins.planners.uniform:UniformPlanner",
        "joint": "orchestrator_plugins.planners.joint:JointPlanner",
        "amp": "orchestrator_plugins.planners.baselines:AMPPlanner",
        "metis": "orchestrator_plugins.planners.baselines:MetisPlanner",
    }


@hookimpl
def orchestrator_simulators():
    return {
        "project": "orchestrator.planning.simulator:ProjectSimulator",
        "sailor": "orchestrator.planning.sailor:SailorSimulator",
    }


@hookimpl
def orchestrator_config_schemas():
    return {f"planner/{name}": f"orchestrator.config.planning:{cls}" for name, cls in (
        ("file", "FilePlannerConfig"), ("uniform", "UniformPlannerConfig"), ("joint", "JointPlannerConfig"), ("amp", "BaselinePlannerConfig"),
        ("metis", "BaselinePlannerConfig"))}
