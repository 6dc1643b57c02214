"""Resource bounds checked before a data-parallel run starts, so that ``hardware.workers=100000``
is a one-line error rather than minutes of silence and an out-of-memory kill.

- virtual runtime: ``estimate_virtual_bytes`` = W x (one flat float32 parameter snapshot + the
  worker's batch-sampler permutation, int64 per training sample) + the dataset as float32 + a fixed
  allowance for TensorFlow and the model; refused when above ``MEMORY_FRACTION`` of the available
  memory (``MemAvailable`` of /proc/meminfo, else physical pages x page size);
- MPI runtime: ranks (``strategy.ranks(W)``: W, + 1 for a parameter server) may not exceed the hostfile's slots
  (``host slots=N``; a host line without ``slots`` counts 1) or, without a hostfile,
  ``LOCAL_RANKS_PER_CORE`` x the cores of this machine, unless ``sync.oversubscribe=true``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError

MEMORY_FRACTION = 0.8          # leave a fifth of what is free to the rest of the machine
FIXED_BYTES = 1 << 30          # an allowance for TensorFlow, the model runtime and Python
LOCAL_RANKS_PER_CORE = 4       # MPI ranks allowed per core without a hostfile (the ranks mostly wait)


def available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate_virtual_bytes(workers: int, n_params: int, n_train: int, n_test: int, sample_floats: int) -> int:
    """Bytes the virtual runtime needs for ``workers`` workers (formula in the module docstring)."""
    per_worker = 4 * n_params + 8 * n_train
    dataset = 4 * sample_floats * (n_train + n_test)
    return workers * per_worker + dataset + FIXED_BYTES


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_virtual_memory(workers: int, n_params: int, dataset: Any, available: int | None = None) -> int:
    """Refuse (``ConfigError`` naming ``hardware.workers``) a run that would not fit; returns the estimate."""
    n_train, n_test = len(dataset.y_train), len(dataset.y_test)
    sample = int(dataset.x_train[0].size) if n_train else 0
    need = estimate_virtual_bytes(workers, n_params, n_train, n_test, sample)
    free = available_bytes() if available is None else available
    if free is not None and need > MEMORY_FRACTION * free:
        per = estimate_virtual_bytes(1, n_params, n_train, 0, 0) - FIXED_BYTES
        most = max(0, int((MEMORY_FRACTION * free - need + workers * per) // per))
        raise ConfigError(f"hardware.workers={workers} needs about {_gib(need)} in the virtual runtime "
                          f"({per / 2**20:.2f} MiB per worker: parameter snapshot + batch order), more than "
                          f"{int(MEMORY_FRACTION * 100)}% of the {_gib(free)} available; at most about {most} workers fit")
    return need


def hostfile_slots(path: str) -> int:
    """Slots of an Open MPI hostfile (``host slots=N``; a host without ``slots`` counts 1)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"sync.hostfile={path!r} cannot be read ({type(exc).__name__})") from None
    total = 0
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.search(r"\bslots\s*=\s*(\d+)", line)
        total += int(m.group(1)) if m else 1
    if total == 0:
        raise ConfigError(f"sync.hostfile={path!r} names no host")
    return total


def check_mpi_ranks(strategy: Any, opts: Any) -> int:
    """Refuse more MPI ranks than the hostfile's slots (or, locally, ``LOCAL_RANKS_PER_CORE`` x cores), unless
    the strategy's typed config says ``sync.oversubscribe``."""
    ranks = strategy.ranks(opts.workers)
    if strategy.config.oversubscribe:
        return ranks
    if opts.hostfile:
        slots, where = hostfile_slots(str(opts.hostfile)), f"the {opts.hostfile} hostfile's slots"
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        slots, where = LOCAL_RANKS_PER_CORE * cores, f"{LOCAL_RANKS_PER_CORE} x this machine's {cores} cores"
    if ranks > slots:
        extra = ranks - opts.workers
        server = f" + {extra} server rank{'s' if extra > 1 else ''}" if extra else ""
        raise ConfigError(f"hardware.workers={opts.workers} needs {ranks} MPI ranks ({opts.workers} workers{server}), "
                          f"more than {where} ({slots}); lower hardware.workers, add hosts, or set sync.oversubscribe=true")
    return ranks
