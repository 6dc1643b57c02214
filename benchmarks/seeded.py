"""One ``ModelRuntime`` per seed, reset to that seed's initial weights on every use: the benchmarks' runs of
one seed all start from the same model, without rebuilding it (the Keras build is the slow part)."""

from __future__ import annotations


class SeededRuntimes:
    def __init__(self, model_fn):
        self.model_fn = model_fn
        self._rt: dict[int, tuple] = {}

    def __call__(self, seed: int):
        from orchestrator.execution.runtime import ModelRuntime

        if seed not in self._rt:
            rt = ModelRuntime(self.model_fn, seed=seed, lr=0.1)
            self._rt[seed] = (rt, rt.get_flat())
        rt, theta0 = self._rt[seed]
        rt.set_flat(theta0)
        return rt
