"""Where data outside the package lives. The shared workloads and device profiles sit beside the
repository (``../shared`` from its root), never at one machine's absolute path;
``ORCHESTRATOR_SHARED`` points elsewhere (an installed package has no repository around it)."""

from __future__ import annotations

import os
from pathlib import Path

import orchestrator

ENV = "ORCHESTRATOR_SHARED"


def repo_root() -> Path:
    """The source tree holding the ``orchestrator`` package (its ``tests/`` and ``benchmarks/``)."""
    return Path(orchestrator.__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``$ORCHESTRATOR_SHARED``, else ``shared/`` beside the repository root. It may not exist:
    callers say what they skip."""
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else repo_root().parent / "shared"


def msr_workloads() -> Path:
    """The msr-dnn-partitioning workloads (``<shared>/workloads/msr-dnn-partitioning``)."""
    return shared_dir() / "workloads" / "msr-dnn-partitioning"
