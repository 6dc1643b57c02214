"""How many data-parallel workers a trial has and how fast each is (``hardware.workers``,
``hardware.worker_speeds``), shared by every hardware adapter."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ConfigError

DEFAULT_WORKERS_WITH_SYNC = 4


def worker_layout(hw_cfg: Any, has_sync: bool) -> list[float]:
    """Relative speed of each worker; the list's length is W."""
    w = hw_cfg.get("workers")
    speeds = hw_cfg.get("worker_speeds")
    pattern = hw_cfg.get("speed_pattern")
    if speeds is None and pattern:
        if w is None:
            w = DEFAULT_WORKERS_WITH_SYNC if has_sync else 1
        if not isinstance(w, int) or w < 1:
            raise ConfigError(f"hardware.workers={w!r} must be an integer >= 1")
        speeds = [pattern[i % len(pattern)] for i in range(w)]  # cycled: scalability sweeps keep the mix
    if speeds is not None:
        try:
            speeds = [float(s) for s in speeds]
        except (TypeError, ValueError):
            raise ConfigError(f"hardware.worker_speeds={speeds!r} must be a list of numbers") from None
        if any(s <= 0 for s in speeds):
            raise ConfigError(f"hardware.worker_speeds={speeds!r}: speeds must be > 0")
    if w is None:
        w = len(speeds) if speeds else (DEFAULT_WORKERS_WITH_SYNC if has_sync else 1)
    if not isinstance(w, int) or w < 1:
        raise ConfigError(f"hardware.workers={w!r} must be an integer >= 1")
    if speeds is None:
        return [1.0] * w
    if len(speeds) != w:
        raise ConfigError(f"hardware.worker_speeds has {len(speeds)} entries but hardware.workers={w}")
    return speeds
