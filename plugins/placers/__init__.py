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
