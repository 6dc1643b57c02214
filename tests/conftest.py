"""Shared helpers: run the real CLI in a scratch directory and read the MLflow store it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

# The project's own fixtures come through the pytest11 entry point once installed; from a source
# tree whose installed metadata predates it, load them here (never twice).
if not any(ep.value == "orchestrator.testing" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["orchestrator.testing"]

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

from orchestrator.execution.runtime import configure_threads, split_cpu  # noqa: E402

# Two logical CPU devices for in-process placement tests; must happen before TensorFlow initialises.
LOGICAL_CPUS = split_cpu(2)
configure_threads(2)

# Small, fast training settings for tests that only need a trial to run end to end (the same budget
# the fixture exported to plugin authors uses).
from orchestrator.testing import QUICK  # noqa: E402,F401


def run_cli(cwd: Path, *args: str, module: str = "orchestrator", timeout: float = 600, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def store_runs(cwd: Path):
    """All runs in ``cwd/mlflow.db`` (every experiment), newest first."""
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.store import init_store

    uri = f"sqlite:///{cwd / 'mlflow.db'}"
    init_store(uri)  # under the same lock as the trials: no two processes migrate a new store at once
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps, order_by=["attributes.start_time DESC"]) if exps else []


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
