"""A one-node Slurm cluster for the tests, started and stopped the way tests/services.py does PostgreSQL:
Debian's ``slurm-wlm`` and ``munge`` run from a temporary directory (their own munge key and socket, a
minimal ``slurm.conf``, state and spool there), as root, without systemd. ``SLURM_CONF`` in the yielded
environment points Slurm's commands (and the jobs they submit, which inherit it) at this cluster.

Why not the machine's own Slurm: a test must not depend on, or disturb, a cluster someone configured; and
every daemon it starts is stopped when it exits (``scancel`` of whatever is left first), so no job or
daemon outlives the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "scontrol")


def unavailable() -> str | None:
    """Why the daemons cannot run here (one line), or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"Slurm is not installed: no {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (SlurmUser=root); not root here"
    return None


def require_slurm() -> None:
    why = unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why} (.ci/system-deps installs it)")
        pytest.skip(why)


@dataclass
class Cluster:
    """The running cluster: its directory, environment (``SLURM_CONF``), node and CPU count."""

    root: Path
    env: dict[str, str]
    node: str
    cpus: int
    procs: list[subprocess.Popen] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def jobs(self) -> list[str]:
        """``JOBID STATE REASON NAME`` of every job the controller still knows (finished ones for
        ``MinJobAge`` seconds)."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i %T %r %j", check=False).stdout
        return [line for line in out.splitlines() if line.strip()]

    def job_info(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, Reason, ExitCode ...): there is no accounting
        database (``sacct`` needs slurmdbd), so this is what a finished job leaves."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def wait_idle(self, timeout: float = 120) -> None:
        """Until no job is pending or running (and the node is idle again)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            active = self.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i", check=False).stdout.split()
            if not active and set(node_state(self).split()) == {"idle"}:
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm jobs still active after {timeout:.0f}s: {self.jobs()}")


def node_state(cluster: Cluster) -> str:
    """The nodes' states, one a line (``idle``, ``alloc``, ``unk*`` ...)."""
    return cluster.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.strip()


def _free_port() -> int:
    import portpicker

    return portpicker.pick_unused_port()


def _config(root: Path, controller: str, nodes: list[tuple[str, str | None, int]], mem_mb: int,
            overrides: bool = False) -> str:
    """The smallest configuration that runs jobs here: no cgroups (linuxproc tracking, no task
    plugin), no accounting database, root as the Slurm user, every path under ``root``; ``nodes`` are
    (name, address or None, CPUs). ``overrides``: nodes declare fewer CPUs than the machine has (the
    emulated hosts share its cores), which slurmd accepts only with ``config_overrides``."""
    lines = [f"NodeName={n}" + (f" NodeAddr={a}" if a else "") + f" CPUs={c} RealMemory={mem_mb} State=UNKNOWN"
             for n, a, c in nodes]
    names = ",".join(n for n, _, _ in nodes)
    return f"""\
ClusterName=orchtest
SlurmctldHost={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerType=sched/backfill
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmdTimeout=60
{"SlurmdParameters=config_overrides" if overrides else ""}
{chr(10).join(lines)}
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _cgroup_mounts() -> str:
    """Shell commands that mount this machine's cgroup file systems again: ``ip netns exec`` gives
    an emulated host a fresh /sys where /sys/fs/cgroup is empty, and slurmd 22.05 starts its cgroup
    plugin even with linuxproc tracking, expecting the machine's own layout (v1, v2 or hybrid)."""
    cmds = []
    for line in Path("/proc/mounts").read_text().splitlines():
        src, mnt, fstype, opts = line.split()[:4]
        if mnt == "/sys/fs/cgroup" or mnt.startswith("/sys/fs/cgroup/"):
            cmds.append(f"mkdir -p {mnt} && mount -t {fstype} -o {opts} {src} {mnt}")
    return " && ".join(cmds) or "true"


def _node_hardware() -> tuple[int, int]:
    """This machine's CPUs and memory (MB) as slurmd itself reports them (``slurmd -C``)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    kv = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return int(kv["CPUs"]), int(kv["RealMemory"])


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


@contextlib.contextmanager
def slurm_cluster(start_timeout: float = 60, lab=None):
    """Start munged, slurmctld and slurmd (all in the foreground, ``-D``/``-F``, as children of this
    process) on a fresh configuration; yield a :class:`Cluster` once ``sinfo`` shows every node idle.
    With ``lab`` (a netlab ``Lab``), one node per emulated host: its slurmd runs in the host's
    namespaces at its address with its slots as CPUs, the controller on the lab's head address."""
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="orch-slurm-"))   # 0700, root's: munged checks that
    here = socket.gethostname().split(".")[0]
    cpus, mem = _node_hardware()
    if lab is None:
        nodes, controller = [(here, None, cpus)], here
    else:
        nodes, controller = [(h.name, h.address, h.slots) for h in lab.hosts], f"{here}({lab.head})"
        mem = mem // len(lab.hosts)
    for d in ("munge", "state", "spool"):
        (root / d).mkdir(mode=0o700)
    for n, _, _ in nodes:
        (root / "spool" / n).mkdir()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(_config(root, controller, nodes, mem, overrides=lab is not None))
    node = nodes[0][0]
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for k in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and k != "SLURM_CONF"]:
        env.pop(k)   # a test run inside a Slurm job must not hand that job's allocation on
    cluster = Cluster(root, env, node, cpus)
    try:
        cluster.procs.append(_start(
            ["munged", "-F", "--force", f"--socket={root}/munge/munge.socket", f"--key-file={key}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
             f"--seed-file={root}/munge/seed"], root / "munged.out", env))
        deadline = time.monotonic() + start_timeout
        while not (root / "munge" / "munge.socket").exists():
            if cluster.procs[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("munged did not start: " + _tail(root / "munged.out", root / "munge" / "munged.log"))
            time.sleep(0.1)
        cluster.procs.append(_start(["slurmctld", "-D", "-i", "-f", str(conf)], root / "slurmctld.out", env))
        if lab is None:
            cluster.procs.append(_start(["slurmd", "-D", "-f", str(conf)], root / "slurmd.out", env))
        for h in lab.hosts if lab is not None else []:
            script = f"{_cgroup_mounts()} && exec slurmd -D -N {h.name} -f {conf}"
            cluster.procs.append(_start(lab.exec_prefix(h) + ["/bin/sh", "-c", script], root / f"slurmd-{h.name}.out", env))
        cluster.nodes = [n for n, _, _ in nodes]
        while set(node_state(cluster).split()) != {"idle"}:
            dead = [p.args[0] for p in cluster.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"Slurm did not come up ({'exited: ' + ', '.join(dead) if dead else 'timeout'}; "
                                   f"node {node_state(cluster)!r}): "
                                   + _tail(root / "slurmctld.log", *root.glob("slurmd*"), root / "slurmctld.out"))
            time.sleep(0.3)
        yield cluster
    finally:
        _teardown(cluster)


def _teardown(cluster: Cluster) -> None:
    """Cancel every job (its processes die with it), wait for the node to drain, then stop the
    daemons, slurmd first: it kills what is left of its jobs' steps."""
    if len(cluster.procs) >= 3 and all(p.poll() is None for p in cluster.procs):
        cluster.run("scancel", "--full", "-u", "root", check=False)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.wait_idle(timeout=30)
    for proc in reversed(cluster.procs):
        _stop(proc)
    shutil.rmtree(cluster.root, ignore_errors=True)


def _tail(*logs: Path, n: int = 1500) -> str:
    return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-n:]}" for p in logs if p.exists())
