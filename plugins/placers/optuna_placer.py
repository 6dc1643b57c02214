"""``placer=optuna``: Optuna's TPE sampler over one categorical device choice per group (colocation
groups merged along topological order into at most ``placer.max_groups``), ``placer.trials``
evaluations, seeded by the trial seed. Infeasible trials score their memory overflow as a penalty.
A baseline."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.config.placer import OptunaPlacerConfig
from orchestrator.graph import Placement
from orchestrator.placement.solve.problem import PlacementProblem, group_atoms


class OptunaPlacer:
    def __init__(self, cfg: Any = None):
        c = OptunaPlacerConfig.from_node(cfg)
        self.trials, self.max_groups = c.trials, c.max_groups

    def place(self, graph: Any, worker: Any, evaluator: Any = None, context: Any = None) -> Placement:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        prob = PlacementProblem(graph, worker, evaluator)
        prob.check_feasible()
        group = group_atoms(prob, self.max_groups)
        n_groups = int(group.max()) + 1
        choices = [np.flatnonzero(np.logical_and.reduce(prob.allowed[group == g], axis=0)) for g in range(n_groups)]
        scale = float(np.nansum(np.where(np.isfinite(prob.atom_cost), prob.atom_cost, np.nan).min(axis=1)))
        cap = float(prob.pool_cap[np.isfinite(prob.pool_cap)].sum() or 1.0)
        best: dict[str, Any] = {"t": math.inf, "a": None}

        def objective(trial):
            pick = np.array([trial.suggest_categorical(f"g{g}", [int(x) for x in c]) for g, c in enumerate(choices)])
            a = prob.expand(pick[group])
            over = prob.overflow(a)
            t = math.inf if over else prob.objective_value(a)
            if best["a"] is None or t < best["t"]:
                best.update(t=t, a=a)
            return t if math.isfinite(t) else scale * (2.0 + over / cap)

        sampler = optuna.samplers.TPESampler(seed=int(getattr(context, "seed", 0)))
        study = optuna.create_study(direction="minimize", sampler=sampler)
        try:
            study.optimize(objective, n_trials=self.trials, show_progress_bar=bool(getattr(context, "show_progress", False)))
        except KeyboardInterrupt:
            pass                                   # keep the best so far
        return prob.placement(best["a"], placer="optuna", trials=len(study.trials), groups=n_groups)
