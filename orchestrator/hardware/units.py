"""The units users write, parsed in one place. Inside there is one unit: bytes, seconds, bytes/s.

A config key names its unit (docs/configuration.md says it per key):

- ``*_Gbps``: gigabits per second, ``Gbit/s`` (``hardware.network``: data-parallel links, as networks are sold);
- ``*_GBps``: gigabytes per second, ``GB/s`` (links between devices or tasks, cluster files, GPU-cluster links and fits);
- ``*_us``: microseconds; ``memory_GB``: gibibytes (2^30 bytes);
- a tc rate (``hardware.netlab`` hosts): ``100mbit``, ``1gbit``, ``12.5mbps`` (bits, or bytes with ``bps``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestrator.errors import ConfigError, UserError
from orchestrator.hardware.cost import GB, GBIT, GiB

BANDWIDTH_UNITS = {"Gbit/s": GBIT, "GB/s": GB}          # bytes/s in one unit
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$", re.IGNORECASE)
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def _number(value: Any, key: str, error: type[UserError]) -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise error(f"{key}={value!r} is not a number") from None


def parse_bandwidth(value: Any, unit: str, key: str, error: type[UserError] = ConfigError, finite: bool = True) -> float:
    """``value`` in ``unit`` (``Gbit/s`` or ``GB/s``) as bytes/s; not a number > 0 (and finite, unless ``finite``
    is False): one line naming ``key``."""
    v = _number(value, key, error)
    if not (v > 0 and (math.isfinite(v) or not finite)):
        raise error(f"{key}={v:g} must be > 0")
    return v * BANDWIDTH_UNITS[unit]


def in_unit(bytes_per_s: float, unit: str) -> float:
    """The inverse of ``parse_bandwidth``: ``bytes_per_s`` in ``unit``."""
    return bytes_per_s * 8 / 1e9 if unit == "Gbit/s" else bytes_per_s / BANDWIDTH_UNITS[unit]


def parse_latency_us(value: Any, key: str, error: type[UserError] = ConfigError) -> float:
    """Microseconds ``value`` as seconds; not a number >= 0: one line naming ``key``."""
    v = _number(value, key, error)
    if not v >= 0:
        raise error(f"{key}={v:g} must be >= 0")
    return v * 1e-6


def parse_whole(value: Any, key: str, low: int, error: type[UserError] = ConfigError) -> int:
    """A whole number of things (GPUs, CPUs) at least ``low``; else one line naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise error(f"{key}={value!r} must be a whole number >= {low}")
    return value


def parse_memory_gb(value: Any, key: str, error: type[UserError] = ConfigError) -> float:
    """``memory_GB`` (gibibytes) as bytes."""
    return _number(value, key, error) * GiB


def parse_rate(rate: str) -> float:
    """A tc rate (``100mbit``, ``1gbit``, ``12.5mbps``) in bytes per second."""
    m = _RATE.match(str(rate).strip())
    if not m:
        raise ConfigError(f"bandwidth {rate!r} is not a tc rate (e.g. 100mbit, 1gbit, 10mbps)")
    value = float(m.group(1)) * _BITS[m.group(2).lower()] / 8.0
    if value <= 0:
        raise ConfigError(f"bandwidth {rate!r} must be positive")
    return value
