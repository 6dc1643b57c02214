"""What the virtual-clock benchmarks (``adaptive_batch.py``, ``sync_regimes.py``, ``sync_tuned.py``) share:

- the fixed compute model ``t = T0 + b x T1`` of a speed-1.0 worker and each dataset's target accuracy,
  evaluation cadence (samples), sample budget and path;
- ``SeededRuntimes``: one ``ModelRuntime`` per seed, reset to that seed's initial weights on every use: the
  benchmarks' runs of one seed all start from the same model, without rebuilding it (the Keras build is the
  slow part);
- ``VirtualBench``: the dataset, the compute model, the trial context and the per-seed runtimes of one dataset;
- ``load_cache`` / ``save_cache``: the JSON files the benchmarks keep their runs in (``--cache``,
  ``--results-cache``, ``--curve-cache``, the results file), read back as they were written."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

T0, T1 = 0.0009, 0.000195                                   # seconds per step and per sample, speed 1.0
MIXED = (1.0, 0.5, 0.25)                                   # the mixed cluster's speeds, cycled over the workers
TARGET = {"mnist": 0.97, "fashion_mnist": 0.90}
CADENCE = {"mnist": 1024, "fashion_mnist": 8192}           # samples between evaluations (dataset.eval_every x 64)
BUDGET = {"mnist": 400_000, "fashion_mnist": 1_200_000}    # samples a measured run may train
PATH = {"mnist": None, "fashion_mnist": "/usr/share/datasets/fashion-mnist"}


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


class VirtualBench:
    """One dataset on the virtual clock: ``ds``, ``target``, the compute model ``cm`` (T0, T1), the trial
    context ``ctx`` (in a fresh temporary directory ``tmp``) and ``runtime(seed)``."""

    def __init__(self, dataset: str, target: float, prefix: str | None = None):
        from orchestrator.data import load_mnist
        from orchestrator.sync.costmodel import ComputeModel
        from orchestrator.sync.virtual import make_context

        self.name, self.target = dataset, target
        self.ds = load_mnist(PATH[dataset])
        self.cm = ComputeModel(T0, T1)
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.ctx = make_context({"train": {"target_accuracy": target}}, self.tmp, dataset=self.ds)
        self._rt = SeededRuntimes(self.ctx.model)

    def runtime(self, seed: int):
        return self._rt(seed)


def load_cache(path: Path | None, empty: Any = None) -> Any:
    """The JSON in ``path``; ``empty`` (default ``{}``) when there is no path or no file yet."""
    if path is not None and path.exists():
        return json.loads(path.read_text())
    return {} if empty is None else empty


def save_cache(path: Path | None, data: Any, indent: int | None = None) -> None:
    """Write ``data`` to ``path`` as JSON (nothing without a path); ``indent`` as each cache was written."""
    if path is not None:
        path.write_text(json.dumps(data, indent=indent))
