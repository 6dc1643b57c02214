"""The processes of an MPI job (``mpiexec`` started in a session of its own): find them, end them. Shared by the
sync strategies' MPI runtime (``sync.mpi``) and the link profiler (``profile.links``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any


def job_processes(marker: str) -> list[int]:
    """PIDs whose command line names ``marker`` (the job's file: ranks that outlived mpiexec), this process aside."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (d / "cmdline").read_bytes().decode(errors="ignore"):
                    pids.append(int(d.name))
    return pids


def kill_job(proc: subprocess.Popen[Any], marker: str) -> None:
    """End the job: its process group, then any process naming ``marker`` (a rank that left the group); SIGTERM,
    then SIGKILL, each given 3 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for pid in job_processes(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue
        if not job_processes(marker):
            return
