"""A cache of expensive pure results across trials: the bound on Sailor's metric of a large cluster takes tens of
seconds and is the same for every planner of a sweep over the same cluster (``-m +planner=joint,metis,amp``).

A result is stored under a key made of its inputs (pickled) and of the source of the ``orchestrator`` package (any
change to the code makes new keys), in ``$ORCHESTRATOR_CACHE`` (``off`` or ``0``: no cache), else
``$XDG_CACHE_HOME/orchestrator``, else ``~/.cache/orchestrator``: one file per result, written whole (a temporary
file renamed), so that parallel trials never read half a file; an unreadable file is recomputed and replaced.
Figures that came from the cache say so (``plan.bound_cached``)."""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
PACKAGE = Path(__file__).resolve().parent
_memo: dict[str, Any] = {}
hits = 0                            # results served from the cache in this process (the phases label their figures)


def cache_dir() -> Path | None:
    """The folder of the cache; None when ``ORCHESTRATOR_CACHE`` is ``off`` or ``0``."""
    env = os.environ.get("ORCHESTRATOR_CACHE", "").strip()
    if env.lower() in ("off", "0", "false", "no"):
        return None
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orchestrator"


@functools.cache
def code_version() -> str:
    """A digest of every source file of the package: results of other code are never read."""
    h = hashlib.sha256()
    for f in sorted(PACKAGE.rglob("*.py")):
        h.update(str(f.relative_to(PACKAGE)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def cached(kind: str, inputs: Any, compute: Callable[[], T]) -> tuple[T, bool]:
    """``compute()``, or its result stored for the same ``kind`` and ``inputs`` (which must pickle): (result, from
    the cache?). Inputs that do not pickle are computed without the cache."""
    try:
        key = hashlib.sha256(code_version().encode() + kind.encode() + pickle.dumps(inputs, protocol=4)).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        return compute(), False
    global hits
    if key in _memo:
        hits += 1
        return _memo[key], True
    folder = cache_dir()
    path = folder / f"{kind}-{key[:32]}.pkl" if folder is not None else None
    if path is not None and path.is_file():
        try:
            _memo[key] = pickle.loads(path.read_bytes())
            hits += 1
            return _memo[key], True
        except Exception:           # a truncated or foreign file: computed again and replaced below
            pass
    value = compute()
    _memo[key] = value
    if path is not None:
        _store(path, value)
    return value, False


def _store(path: Path, value: Any) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=4)
        os.replace(tmp, path)
    except OSError:                 # a read-only or full disk: the result is still returned, not stored
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
