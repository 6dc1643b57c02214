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

JOB_ENV = "SLURM_JOB_ID"


def job_id() -> str | None:
    """This process's Slurm job (``JOBID`` or ``ARRAYJOB_TASK`` for an array task), or None."""
    jid = os.environ.get(JOB_ENV)
    if not jid:
        return None
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else jid


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
    Interrupt.handle(signum, frame)


def job_fields(jid: str, timeout: float = 5) -> dict[str, str]:
    """``scontrol show job`` as a dict, {} when it cannot be asked (no accounting database is needed)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", jid], capture_output=True, text=True,
                             timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def interrupt_note(signum: int | None) -> str:
    """Why the scheduler interrupted this job, e.g. ``Slurm job 12 CANCELLED (reason None)`` or, for
    submitit's warning, ``Slurm job 12 near its time limit 00:01:00``; '' outside a Slurm job."""
    jid = job_id()
    if jid is None:
        return ""
    f = job_fields(jid)
    if signum == signal.SIGUSR2:
        return f"Slurm job {jid} near its time limit {f.get('TimeLimit', '?')} (SIGUSR2 from --signal)"
    state = f.get("JobState", "state unknown")
    # scancel marks the job CANCELLED before it signals; a time limit marks it TIMEOUT
    return f"Slurm job {jid} {state} (reason {f.get('Reason', '?')})"
