"""Where data outside the package lives. The shared workloads and device profiles sit beside the
repository (``../shared`` from its root), never at one machine's absolute path;
``ORCHESTRATOR_SHARED`` points elsewhere (an installed package has no repository around it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.errors import UserError, WorkloadError

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


def read_json(path: str | Path, missing: str | None = None, error: type[UserError] = WorkloadError,
              top: type | None = None) -> Any:
    """A JSON file of the user's or of a data directory, the one reader: a missing one is ``error(missing)`` (default: a
    ``WorkloadError`` saying it does not exist); a directory, a binary, a malformed or truncated one, or (with ``top``,
    dict or list) one whose top level is not an object or a list, is a one-line ``WorkloadError`` naming it."""
    p = Path(path)
    try:
        doc = json.loads(p.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise error(missing or f"{p} does not exist") from None
    except IsADirectoryError:
        raise WorkloadError(f"{p}: is a directory, not a JSON file") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p}: not a text (UTF-8 JSON) file (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{p}: malformed or truncated JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise WorkloadError(f"{p}: JSON nested too deeply") from None
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if top is not None and not isinstance(doc, top):
        names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
                 float: "a number", type(None): "null"}
        raise WorkloadError(f"{p}: expected {names[top]} at the top, got {names.get(type(doc), type(doc).__name__)}")
    return doc
