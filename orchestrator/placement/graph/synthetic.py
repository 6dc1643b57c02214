"""Seeded random layered op graphs in the public workload format (msr-dnn-partitioning), for
measuring placement speed at sizes no published graph has (10^4 - 10^5 ops): a user's large graph
reaches the placers through the same loader (``model=workload model.path=FILE``), so timing a
file of this format times what a user runs.

Shape: ``width`` ops a layer; each op is fed by 1-3 ops of the layer before and, with probability
``skip``, by one op two to four layers back (residual-like). Accelerator latencies are drawn
log-uniformly, CPU latencies 4-20x slower; 2% of the ops run only on the CPU; 5% join a colocation
group (``colorClass``) with the op that feeds them, so groups are chains of a few ops. Each
accelerator holds ``1 / memory_share`` of the total parameter bytes, so memory binds the search.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.graph.arrays import IntArray


def layered_workload(n: int, *, width: int = 20, seed: int = 0, accelerators: int = 4, cpus: int = 1,
                     skip: float = 0.1, memory_share: float = 0.4) -> dict[str, Any]:
    """A workload file's content (a dict to ``json.dump``) with ``n`` ops; same seed, same graph."""
    rng = np.random.default_rng(seed)
    layer = np.arange(n) // width
    fpga = np.exp(rng.uniform(np.log(0.01), np.log(2.0), n))
    cpu = fpga * rng.uniform(4.0, 20.0, n)
    size = rng.uniform(1e5, 5e7, n)
    cpu_only = rng.random(n) < 0.02
    src: list[IntArray] = []
    dst: list[IntArray] = []
    first = np.flatnonzero(layer >= 1)[0] if n > width else n
    for k in range(3):                          # 1-3 inputs from the layer before
        v = np.arange(first, n)
        v = v[rng.random(len(v)) < (1.0 if k == 0 else 0.5)]
        src.append((layer[v] - 1) * width + rng.integers(0, width, len(v)))
        dst.append(v)
    v = np.flatnonzero(layer >= 4)
    v = v[rng.random(len(v)) < skip]            # residual-like skips two to four layers back
    src.append((layer[v] - rng.integers(2, 5, len(v))) * width + rng.integers(0, width, len(v)))
    dst.append(v)
    s, d = np.concatenate(src), np.concatenate(dst)
    key = np.unique(s * n + d)                  # one edge per (source, destination)
    s, d = key // n, key % n
    color = np.full(n, -1, dtype=np.int64)
    join = np.flatnonzero(rng.random(len(s)) < 0.05)
    for e in join:                              # the destination joins its source's group
        a, b = int(s[e]), int(d[e])
        if color[b] < 0 and cpu_only[a] == cpu_only[b]:
            color[b] = color[a] if color[a] >= 0 else a
            color[a] = color[b]
    ebytes = rng.uniform(1e4, 1e7, len(s))
    nodes = [{"id": i, "name": f"op{i}", "supportedOnFpga": 0 if cpu_only[i] else 1,
              "cpuLatency": round(float(cpu[i]), 6), "fpgaLatency": round(float(fpga[i]), 6),
              "size": round(float(size[i])), **({"colorClass": int(color[i])} if color[i] >= 0 else {})}
             for i in range(n)]
    edges = [{"sourceId": int(a), "destId": int(b), "cost": round(float(c) / 1e7, 6), "size": round(float(c))}
             for a, b, c in zip(s, d, ebytes)]
    return {"maxSizePerFPGA": float(size.sum() * memory_share), "maxFPGAs": accelerators, "maxCPUs": cpus,
            "nodes": nodes, "edges": edges}


def write_layered_workload(path: str | Path, n: int, **kw: Any) -> Path:
    """``layered_workload`` saved as JSON at ``path`` (parent folders made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(layered_workload(n, **kw)))
    return path
