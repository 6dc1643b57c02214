"""Built-in placers."""

from orchestrator.hookspecs import hookimpl


@hookimpl
def orchestrator_placers():
    return {
        "manual": "orchestrator_plugins.placers.manual:ManualPlacer",
        "greedy": "orchestrator_plugins.placers.greedy:GreedyPlacer",
        "rl": "orchestrator_plugins.placers.rl:RLPlacer",
        "random": "orchestrator_plugins.placers.random:RandomPlacer",
        "optuna": "orchestrator_plugins.placers.optuna_placer:OptunaPlacer",
        "optimal": "orchestrator_plugins.placers.optimal:OptimalPlacer",
    }


@hookimpl
def orchestrator_config_schemas():
    return {f"placer/{name}": f"orchestrator.config.placer:{cls}" for name, cls in (
        ("manual", "ManualPlacerConfig"), ("greedy", "GreedyPlacerConfig"), ("rl", "RLPlacerConfig"),
        ("random", "RandomPlacerConfig"), ("optuna", "OptunaPlacerConfig"), ("optimal", "OptimalPlacerConfig"))}
