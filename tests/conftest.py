"""Shared helpers: run the real CLI (in a subprocess, or in-process for the fast tier) in a scratch
directory and read the MLflow store it wrote; TensorFlow set up lazily; new MLflow stores in this
process copied from one migrated empty store; Hypothesis profiles.

Nothing here imports TensorFlow: tests that never touch it (config errors, ``--help``, plugin listing,
layout, the simulator) do not pay its import. The first import of ``tensorflow``, by whatever test or
module, is configured on the spot (two logical CPU devices, two threads), before TF initialises.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hypothesis import settings

# The project's own fixtures come through the pytest11 entry point once installed; from a source
# tree whose installed metadata predates it, load them here (never twice).
if not any(ep.value == "orchestrator.testing" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["orchestrator.testing"]

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

# Small, fast training settings for tests that only need a trial to run end to end (the same budget
# the fixture exported to plugin authors uses).
from orchestrator.testing import NO_CONTEXT, QUICK  # noqa: E402,F401

from inprocess import run_inprocess  # noqa: E402,F401  (re-exported: tests import it from conftest)

TF_LOGICAL_CPUS = 2   # in-process placement tests place on two logical CPU devices
TF_THREADS = 2

# Hypothesis: CI (.ci/run sets CI=true) runs the full budget, a contributor's run a short one.
# HYPOTHESIS_PROFILE picks one explicitly. Tests whose examples are expensive cap their count with
# ``max_examples=min(n, settings.default.max_examples)``: n in CI, never more than the profile's.
settings.register_profile("ci", max_examples=1000, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def _configure_tensorflow(tf) -> None:
    """Two logical CPUs and two threads per pool. Written against ``tf.config`` directly rather than
    through ``orchestrator.execution.runtime`` (which does the same): that module imports Keras, which
    may be the very module whose import is pulling TensorFlow in."""
    try:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * TF_LOGICAL_CPUS)
        tf.config.threading.set_intra_op_parallelism_threads(TF_THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(TF_THREADS)
    except RuntimeError:
        pass  # already initialised (imported before this conftest): keep what is there


class _AfterImport(importlib.abc.MetaPathFinder):
    """A one-shot import hook: finds the real module ``name`` and calls ``then(module)`` as soon as
    its body has run, i.e. before anything else can use it."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then, self.done = name, then, False
        self.marker = _marker(name)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.done:
            return None
        self.done = True                       # before the lookup below, which asks us again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        real_exec, then = spec.loader.exec_module, self.then

        def exec_module(module):
            real_exec(module)
            then(module)

        spec.loader.exec_module = exec_module  # this spec's own loader instance
        return spec


def _marker(name: str) -> str:
    return f"orchestrator-tests-after-import:{name}"


def _after_import(name: str, then) -> None:
    """``then(module)`` once ``name`` is imported: now if it is, else from an import hook (one per
    name, however often this file is imported)."""
    if name in sys.modules:
        then(sys.modules[name])
    elif not any(getattr(f, "marker", None) == _marker(name) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def _sqlite_copy(src, dst) -> None:
    """SQLite's online backup from ``src`` to ``dst``, each a file path or a SQLAlchemy engine (whose
    own connection is used, so the engine sees the copy)."""
    import sqlite3

    with contextlib.ExitStack() as stack:
        conns = []
        for end in (src, dst):
            if isinstance(end, Path):
                conns.append(stack.enter_context(contextlib.closing(sqlite3.connect(end))))
            else:
                raw = end.raw_connection()
                stack.callback(raw.close)
                conns.append(raw.driver_connection)
        conns[0].backup(conns[1])


def _share_the_empty_store(utils) -> None:
    """MLflow builds every new SQLite store by running its whole migration history (seconds a store;
    a trial or ``store_runs`` in this process makes one in each test's directory). In this process the
    first store is migrated for real and its empty schema kept; later new stores start as a copy of
    it (the same tables, indexes and schema version, no rows). Child processes migrate theirs as a
    user's would; a store the copy cannot write gets MLflow's own migration and its own error."""
    import sqlite3

    real = utils._initialize_tables
    if getattr(real, "copies_the_empty_store", False):
        return
    made: list[Path] = []   # the migrated empty store, once there is one

    def initialize_tables(engine):
        if engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
            return real(engine)
        if made:
            try:
                return _sqlite_copy(made[0], engine)
            except sqlite3.Error:
                pass
        real(engine)
        if not made:
            keep = Path(tempfile.mkdtemp(prefix="orchestrator-tests-store-"))
            atexit.register(shutil.rmtree, keep, True)
            _sqlite_copy(engine, keep / "empty.db")
            made.append(keep / "empty.db")

    initialize_tables.copies_the_empty_store = True
    utils._initialize_tables = initialize_tables


_after_import("tensorflow", _configure_tensorflow)
_after_import("mlflow.store.db.utils", _share_the_empty_store)


def __getattr__(name: str):
    """``LOGICAL_CPUS`` (TF's logical CPU device names) is computed, and TF imported, on first use."""
    if name == "LOGICAL_CPUS":
        import tensorflow as tf

        return [d.name for d in tf.config.list_logical_devices("CPU")]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_cli(cwd: Path, *args: str, module: str = "orchestrator", timeout: float = 600, env: dict | None = None):
    """The CLI in a child process: for tests where the process boundary is what is tested (signals,
    MPI, launchers, a whole trial that must not share this process's TensorFlow)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@contextlib.contextmanager
def pip_installed(package: Path):
    """A plugin package pip-installed (no deps, no build isolation) into a folder of its own, for the block:
    how a user adds a third-party plugin. Yields the environment (PYTHONPATH) under which the CLI, and the
    MPI ranks it starts, find it. Not into this environment: a test on another xdist worker would see its
    entry points come and go, and a rank loading them mid-uninstall failed to import it."""
    with tempfile.TemporaryDirectory(prefix="plugin-") as target:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--target", target, str(package)],
                       check=True, timeout=300)
        path = os.environ.get("PYTHONPATH")
        yield {"PYTHONPATH": target + (os.pathsep + path if path else "")}


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


# `nox -s tests` runs the suite in two passes: every test but the system ones on two pytest-xdist workers, then the
# system ones in one process (`-m system`). System tests build system-wide things (network namespaces of a fixed
# prefix and subnet, the one-node Slurm cluster and munge, PostgreSQL and the MLflow server of the multi-host
# sweep) and time real links and ranks: beside another worker's load, MPI ranks on emulated hosts lost contact.
SYSTEM_MARKERS = ("netns", "slurm", "postgres")
SYSTEM_FILES = {"test_parallel_sweep.py"}   # the others by marker: their quick tests run in the first pass


def pytest_configure(config):
    """One results cache (orchestrator.cache) for the run, shared by its xdist workers and the trials they start
    (they inherit the variable), removed at the end: a bound computed by one test serves the others; nothing is
    read from or left in the user's ~/.cache."""
    if hasattr(config, "workerinput") or os.environ.get("ORCHESTRATOR_CACHE"):
        return
    folder = tempfile.mkdtemp(prefix="orchestrator-tests-cache-")
    os.environ["ORCHESTRATOR_CACHE"] = folder
    atexit.register(shutil.rmtree, folder, True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SYSTEM_FILES or any(item.get_closest_marker(m) for m in SYSTEM_MARKERS):
            item.add_marker(pytest.mark.system)
