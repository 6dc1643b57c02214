"""A trial running as a Slurm job (``hydra/launcher=submitit_slurm``, or ``sbatch``/``srun``): the signals
the scheduler sends end it like Ctrl-C does, and its run records why, in the scheduler's words.

Slurm ends a job with SIGTERM (``scancel``, the time limit, preemption), then SIGKILL after ``KillWait``
seconds; submitit asks for SIGUSR2 ``signal_delay_s`` seconds before the time limit and, in the job,
ignores SIGTERM (it expects a checkpointing callable). A trial has no checkpoint to resume from, so both
end it at once: the run is closed KILLED with the job's state and reason from ``scontrol`` in
``orchestrator.error``, while the job still has time to write its result (submitit's parent is waiting
for that file: without ``sacct`` it cannot tell that a job died)."""

from __future__ import annotations

import os
import signal
import subprocess

from orchestrator.tracking.store import slurm_job_id as job_id  # JOBID, or ARRAYJOB_TASK for an array task


def trial_is_job() -> bool:
    """Whether this process is one trial submitted as its own job by submitit (``submitit_slurm``): an
    interrupted trial then ends its job, and the sweep that waits for it goes on. A sweep that itself
    runs in a job (``sbatch --array`` of sweep processes) stops when interrupted, as on a workstation."""
    return job_id() is not None and "SUBMITIT_FOLDER" in os.environ


def install_handlers() -> bool:
    """Inside a Slurm job, SIGTERM and SIGUSR2 interrupt the trial (``Interrupt.handle``); returns
    whether this is a Slurm job. Called at each job's start (the sweep callback), after submitit has
    installed its own handlers."""
    if job_id() is None:
        return False
    for sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, _interrupt)
    return True


def _interrupt(signum, frame=None):
    """The first signal interrupts; the ones that follow it (srun forwards SIGTERM to the task that
    slurmstepd signals too) are ignored, so that they cannot break the run's closing."""
    from orchestrator.errors import Interrupt

    for sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    # asked now, while the job is still known to the controller; the trial's run records it
    Interrupt.note = interrupt_note(signum)
    Interrupt.handle(signum, frame)


def job_fields(jid: str, timeout: float = 5) -> dict[str, str]:
    """``scontrol show job`` as a dict, {} when it cannot be asked (no accounting database is needed)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", jid], check=False, capture_output=True, text=True,
                             timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def _seconds(text: str) -> float | None:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) as seconds; None for ``UNLIMITED`` and the like."""
    days, _, clock = text.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        return (int(days) if days else 0) * 86400 + sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    except ValueError:
        return None


def end_state(f: dict[str, str]) -> str:
    """The state that ends the job: while its processes are being signalled Slurm shows COMPLETING
    (the CANCELLED/TIMEOUT it will show after is a flag under it), so a job stopped before its time
    limit was cancelled (``scancel``, or preempted), one at its limit ran out of time."""
    state = f.get("JobState", "")
    if state != "COMPLETING":
        return state or "state unknown"
    run, limit = _seconds(f.get("RunTime", "")), _seconds(f.get("TimeLimit", ""))
    if run is not None and limit is not None and run >= limit:
        return "TIMEOUT"
    return "CANCELLED"


def interrupt_note(signum: int | None) -> str:
    """Why the scheduler interrupted this job, e.g. ``Slurm job 12 CANCELLED (run time 00:00:21 of
    00:10:00)`` or, for submitit's warning, ``Slurm job 12 near its time limit 00:01:00``; '' outside
    a Slurm job."""
    jid = job_id()
    if jid is None:
        return ""
    f = job_fields(jid)
    if signum == signal.SIGUSR2:
        return f"Slurm job {jid} near its time limit {f.get('TimeLimit', '?')} (SIGUSR2 from --signal)"
    reason = f" reason {f['Reason']}" if f.get("Reason") not in (None, "None") else ""
    return (f"Slurm job {jid} {end_state(f)} (run time {f.get('RunTime', '?')} of {f.get('TimeLimit', '?')}"
            f"{reason})")
