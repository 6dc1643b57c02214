"""Pytest fixtures for plugin authors, registered through the ``pytest11`` entry point (``orchestrator``).

``orchestrator_trial(*overrides)`` runs ``python -m orchestrator OVERRIDES`` in a fresh temporary
directory (its own ``mlflow.db``) and returns the trial's MLflow run; it fails the test, with the
trial's stderr, when the command fails. ``QUICK`` is a tiny training budget for such tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

QUICK = ("train.target_accuracy=0.8", "train.eval_every=10", "train.budget_updates=200", "train.eval_samples=500")
# A data-parallel trial without its context: speedup over a worker with the trial's own settings, no comparison, no
# statistical limit (for tests of a strategy's own path; the context has tests of its own).
NO_CONTEXT = ("train.reference=same", "train.compare_with=null", "train.statistical_limit=false")


class TrialRunner:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.uri = f"sqlite:///{workdir / 'mlflow.db'}"

    def __call__(self, *overrides: str, timeout: float = 600, expect_ok: bool = True):
        env = {**os.environ, "MLFLOW_TRACKING_URI": self.uri, "MLFLOW_DISABLE_TELEMETRY":
               os.environ.get("MLFLOW_DISABLE_TELEMETRY", "true")}
        out = subprocess.run([sys.executable, "-m", "orchestrator", *overrides], cwd=self.workdir,
                             capture_output=True, text=True, timeout=timeout, env=env)
        self.last = out
        if expect_ok and out.returncode != 0:
            pytest.fail(f"orchestrator {' '.join(overrides)} exited {out.returncode}:\n{out.stderr[-3000:]}")
        runs = self.runs()
        if not runs:
            pytest.fail(f"orchestrator {' '.join(overrides)} recorded no run:\n{out.stderr[-3000:]}")
        return runs[0]

    def runs(self):
        """The trial runs of this directory's store (sweep parents left out), newest first."""
        from mlflow.tracking import MlflowClient

        if not (self.workdir / "mlflow.db").exists():
            return []
        client = MlflowClient(self.uri)
        exps = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(exps, order_by=["attributes.start_time DESC"])
        return [r for r in runs if r.data.tags.get("orchestrator.kind") != "sweep"]


@pytest.fixture
def orchestrator_trial(tmp_path_factory) -> TrialRunner:
    """Run a trial through the real CLI in a temporary directory; returns its ``mlflow.entities.Run``."""
    return TrialRunner(tmp_path_factory.mktemp("orchestrator-trial"))
