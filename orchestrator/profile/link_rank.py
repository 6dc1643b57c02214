"""One MPI rank of the link profiler (``mpiexec ... python -m orchestrator.profile.link_rank``).

For each message size, after warm-up: a ping-pong between ranks 0 and 1 (rank 0 sends ``n`` bytes, rank 1
sends them back; one-way seconds = half the round trip, as the OSU latency test measures it), then an
all-reduce (sum) of ``n`` bytes of float32 over every rank, each round started together (a barrier) and
timed as the slowest rank's. Rank 0 writes every timed repeat to ``--out`` (JSON)."""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np


def ping_pong(comm: Any, nbytes: int, warmup: int, repeats: int) -> list[float]:
    rank = comm.Get_rank()
    buf = np.zeros(max(nbytes, 1), dtype=np.uint8)
    out = []
    comm.Barrier()
    for i in range(warmup + repeats):
        if rank == 0:
            t0 = time.perf_counter()
            comm.Send(buf, dest=1, tag=7)
            comm.Recv(buf, source=1, tag=8)
            if i >= warmup:
                out.append((time.perf_counter() - t0) / 2)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=7)
            comm.Send(buf, dest=0, tag=8)
    return out


def allreduce(comm: Any, nbytes: int, warmup: int, repeats: int) -> list[float]:
    from mpi4py import MPI

    a = np.ones(max(nbytes // 4, 1), dtype=np.float32)
    b = np.empty_like(a)
    out = []
    for i in range(warmup + repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(a, b, op=MPI.SUM)
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if i >= warmup:
            out.append(dt)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.profile.link_rank")
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    hosts = comm.gather(socket.gethostname(), root=0)
    doc: dict[str, Any] = {"ranks": comm.Get_size(), "hosts": hosts, "sizes": sizes, "p2p_s": [], "allreduce_s": []}
    for n in sizes:
        doc["p2p_s"].append(ping_pong(comm, n, args.warmup, args.repeats))
        doc["allreduce_s"].append(allreduce(comm, n, args.warmup, args.repeats))
    if comm.Get_rank() == 0:
        Path(args.out).write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
