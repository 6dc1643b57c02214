"""How many data-parallel workers a trial has and how fast each is (``hardware.workers``,
``hardware.worker_speeds``), shared by every hardware adapter."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.errors import ConfigError

DEFAULT_WORKERS_WITH_SYNC = 4
# A data-parallel trial that names neither a worker count nor speeds runs on the default cluster: 4
# unequal workers, the reference study's setting (the pattern cycled: speeds 1, 0.5, 0.25, 1; capacity
# 2.75). ``hardware.workers=N`` alone gives N equal workers; ``hardware.speed_pattern=[1]`` 4 equal ones.
DEFAULT_SPEED_PATTERN_WITH_SYNC = (1.0, 0.5, 0.25)


MAX_WORKERS = 1_000_000   # a sanity bound on the config; memory and rank limits are checked per runtime


def _check_count(w: Any) -> None:
    if not isinstance(w, int) or isinstance(w, bool) or w < 1:
        raise ConfigError(f"hardware.workers={w!r} must be an integer >= 1")
    if w > MAX_WORKERS:
        raise ConfigError(f"hardware.workers={w} is more than {MAX_WORKERS:,} workers")


def worker_layout(hw_cfg: Any, has_sync: bool) -> list[float]:
    """Relative speed of each worker; the list's length is W."""
    w = hw_cfg.get("workers")
    speeds = hw_cfg.get("worker_speeds")
    pattern = hw_cfg.get("speed_pattern")
    if speeds is None and pattern is None and w is None and has_sync:
        pattern = list(DEFAULT_SPEED_PATTERN_WITH_SYNC)
    if speeds is None and pattern is not None:
        if (isinstance(pattern, (str, bytes)) or not hasattr(pattern, "__getitem__") or hasattr(pattern, "keys")
                or not len(pattern)):
            raise ConfigError(f"hardware.speed_pattern={pattern!r} must be a non-empty list of numbers")
        if w is None:
            w = DEFAULT_WORKERS_WITH_SYNC if has_sync else 1
        _check_count(w)
        speeds = [pattern[i % len(pattern)] for i in range(w)]  # cycled: scalability sweeps keep the mix
    if speeds is not None:
        key = "hardware.worker_speeds" if hw_cfg.get("worker_speeds") is not None else "hardware.speed_pattern"
        try:
            if isinstance(speeds, (str, bytes, dict)) or isinstance(speeds[0], bool):
                raise TypeError
            speeds = [float(s) for s in speeds]
        except (TypeError, ValueError, KeyError, IndexError, OverflowError):
            raise ConfigError(f"{key}={speeds!r} must be a non-empty list of numbers") from None
        if not all(math.isfinite(s) and s > 0 for s in speeds):
            raise ConfigError(f"{key}={speeds!r}: speeds must be finite and > 0")
    if w is None:
        w = len(speeds) if speeds else (DEFAULT_WORKERS_WITH_SYNC if has_sync else 1)
    _check_count(w)
    if speeds is None:
        return [1.0] * w
    if len(speeds) != w:
        raise ConfigError(f"hardware.worker_speeds has {len(speeds)} entries but hardware.workers={w}")
    return speeds
