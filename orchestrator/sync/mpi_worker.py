"""The program every MPI rank runs: ``python -m orchestrator.sync.mpi_worker JOB.json``.

The job names its strategy (``orchestrator.sync.strategy``), rebuilt here from ``SyncStrategy.ref()``:
a ``CollectiveStrategy`` runs on W ranks in lockstep rounds (the strategy's local steps, then one Horovod
all-reduce, ``Sum`` of each rank's weighted flat vector, then the strategy's apply); a ``ServerStrategy``
makes rank 0 the parameter server (one thread per worker, the strategy's server and staleness gate)
and ranks 1..W workers; numpy buffers go by ``Send``/``Recv``.
Heterogeneity: a worker sleeps to stretch its compute time to ``time * slowdown / speed``.
Each rank writes ``rank{r}.json``; rank 0 writes ``result.json``. A failing rank writes
``rank{r}.error`` (one line) and aborts the job. The collective ranks are here, the parameter server's
ranks in ``orchestrator.sync.mpi_server``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from orchestrator.sync.checks import checked_quorum
from orchestrator.sync.mpi_job import Job, RankAdaptive, Stretch, own_metrics, rank_result, rank_stats, warm_up
from orchestrator.sync.mpi_server import run_server, run_worker

__all__ = ["Job", "Stretch", "main"]


# -- collective rounds (Horovod) ------------------------------------------------------------------
class _CollectiveRank:
    """One rank of a collective job: its replica, its share of each round and the rounds' bookkeeping.
    ``run_collective`` drives it; the Horovod calls happen in the same order on every rank."""

    def __init__(self, job: Job, hvd, tf) -> None:
        from orchestrator.execution.training import BatchSampler

        self.job, self.hvd, self.tf = job, hvd, tf
        rank, w = self.rank, self.w = hvd.rank(), hvd.size()
        rt, data = self.rt, self.data = job.runtime_and_data()
        for v in rt.variables:
            v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0))
        self.theta, self.strat = rt.get_flat(), job.strategy
        self.optimizer = job.settings.new_optimizer()   # every rank applies the same reduced gradients: the same state
        self.h, self.bal = int(self.strat.local_steps()), job.balancer
        self.sampler, self.stretch = BatchSampler(len(data.y_train), job.settings.seed, rank), Stretch(job, rank)
        warm_up(rt, data, self.bal.batches[rank])
        self.tracker = job.tracker()
        self.every = self.tracker.s.eval_every
        self.ada = RankAdaptive(job, rank, w, self.h) if job.opts.train.batch_policy == "adaptive" else None
        self.n_eval = job.settings.eval_samples or len(data.y_test)
        self.step, self.samples, self.wait_s, self.eval_s, self.max_diff = 0, 0, 0.0, 0.0, 0.0
        self.verify = int(job.inject.get("verify_every", 0))

    def start(self) -> None:
        """Every rank warmed up: the clock starts now (rank 0 evaluates the start)."""
        self.hvd.allreduce(self.tf.constant(0.0))
        self.t_start = self.stretch.t_start = time.perf_counter()
        if self.rank == 0:
            self.evaluate()
        self.quorum = checked_quorum(self.strat, self.w)
        self.stretch.defer = self.quorum < self.w
        self.dropped = 0
        self.next_eval, self.noise, self.bcast_s = self.every, None, 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start - self.eval_s

    def evaluate(self) -> None:
        t0 = time.perf_counter()
        self.rt.set_flat(self.theta)
        loss, acc = self.rt.evaluate(self.data.x_test[:self.n_eval], self.data.y_test[:self.n_eval])
        self.eval_s += time.perf_counter() - t0
        self.tracker.record(self.step, self.elapsed(), loss, acc)

    def grad(self, params: np.ndarray) -> np.ndarray:
        batch = self.bal.batches[self.rank]
        idx = self.sampler.next(batch)
        t0 = time.perf_counter()
        self.rt.set_flat(params)
        _, g = self.rt.gradient(self.data.x_train[idx], self.data.y_train[idx])
        self.stretch.after_compute(time.perf_counter() - t0, batch)
        if self.ada is not None:
            self.ada.rounds.capture(g)
        return g

    def contribute_backup(self, rnd, t_round: float):
        """Backup workers, emulated: every rank computes, then all learn each rank's emulated finish time; the
        round closes at the quorum-th, everyone sleeps until then and the late ranks' vectors weigh 0.
        (round with its contributors, this rank's vector, its weighted vector for the all-reduce)"""
        strat, rank, w, stretch = self.strat, self.rank, self.w, self.stretch
        stretch.pending = 0.0
        vec = strat.local(rank, self.theta, self.grad, rnd)
        done = time.perf_counter() - t_round + stretch.pending
        finish = self.hvd.allgather(self.tf.constant([done], self.tf.float64)).numpy()
        first = sorted(range(w), key=lambda r: (finish[r], r))[:self.quorum]
        rnd = dataclasses.replace(rnd, contributors=tuple(sorted(first)))
        close = float(finish[first[-1]])
        time.sleep(max(0.0, t_round + close - time.perf_counter()))
        if rank not in rnd.contributors:   # abandoned at the close: its compute ends there
            self.dropped += 1
            stretch.busy_s -= max(0.0, done - close)
        return rnd, vec, np.float32(strat.weights(rnd)[rank] if rank in rnd.contributors else 0.0) * vec

    def round(self) -> bool:
        """One round: local steps, the all-reduce, the update; True when rank 0 says stop."""
        from orchestrator.sync.strategy import Round

        hvd, tf, ada = self.hvd, self.tf, self.ada
        settings = self.job.settings
        rnd = Round(self.job.opts, tuple(self.bal.batches), settings.lr, settings.batch_size, self.samples,
                    self.optimizer, self.step, noise_scale=self.noise)
        t_round, busy0 = time.perf_counter(), self.stretch.busy_s
        if ada is not None:
            ada.begin_round(self.optimizer)
        if self.quorum < self.w:
            t_round = time.perf_counter()
            rnd, vec, mine = self.contribute_backup(rnd, t_round)
        else:
            vec = self.strat.local(self.rank, self.theta, self.grad, rnd)
            mine = np.float32(self.strat.weights(rnd)[self.rank]) * vec
        if ada is not None:     # the noise scale's and the goodput's measurements ride on the same all-reduce
            mine = np.concatenate([mine, ada.rounds.tail(vec, self.stretch.busy_s - busy0)])
        t0 = time.perf_counter()
        reduced = hvd.allreduce(tf.constant(mine), op=hvd.Sum).numpy()
        self.wait_s += time.perf_counter() - t0
        if ada is not None:
            reduced, summed = reduced[:self.theta.size], reduced[self.theta.size:]
            # the round's seconds: from its start through the all-reduce, plus the previous round's broadcast
            ada.after_reduce(hvd, tf, rnd, self.strat.weights(rnd), reduced, summed,
                             time.perf_counter() - t_round + self.bcast_s)
        self.theta = self.strat.apply(self.theta, reduced, rnd)
        self.step, self.samples = self.step + 1, self.samples + self.h * rnd.total
        if self.verify and self.step % self.verify == 0:
            flat = tf.constant(self.theta)
            diff = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
            self.max_diff = max(self.max_diff, float(tf.reduce_max(diff)))
        return self.share_decision(*self.decide())

    def decide(self) -> tuple[int, int]:
        """Rank 0's (stop, new total batch or 0) after a round; the other ranks' placeholders."""
        stop, new_batch = 0, 0
        if self.rank != 0:
            return stop, new_batch
        if self.ada is None:
            if self.step % self.every == 0:
                self.evaluate()
            return int(self.tracker.should_stop(self.step, self.elapsed())), new_batch
        # rounds of changing size: evaluations and the budget count batch_size-sample updates
        new_batch = self.ada.decide(self.step, self.elapsed()) or 0
        done = int(self.samples // self.job.settings.batch_size)
        if done >= self.next_eval:
            self.evaluate()
            self.next_eval = (done // self.every + 1) * self.every
        return int(self.tracker.should_stop(done, self.elapsed())), new_batch

    def share_decision(self, stop: int, new_batch: int) -> bool:
        hvd, tf = self.hvd, self.tf
        if self.ada is None:
            return bool(int(hvd.broadcast(tf.constant([stop]), root_rank=0).numpy()[0]))
        # rank 0's decision and noise scale (for train.lr_scaling=adascale) reach every rank with the stop
        phi = self.ada.chooser.noise.value if self.rank == 0 else None
        t0 = time.perf_counter()
        got = hvd.broadcast(tf.constant([stop, new_batch, math.nan if phi is None else phi], tf.float64),
                            root_rank=0).numpy()
        self.bcast_s = time.perf_counter() - t0
        stop, new_batch, self.noise = int(got[0]), int(got[1]), None if math.isnan(got[2]) else float(got[2])
        if new_batch:
            self.bal.set_total(new_batch)
        return bool(stop)

    def finish(self) -> None:
        """Each rank's ``rank{r}.json``; rank 0 evaluates the end and writes ``result.json``."""
        job, step, h, rank, stretch = self.job, self.step, self.h, self.rank, self.stretch
        result = None
        if rank == 0:
            if not self.tracker.history or self.tracker.history[-1].step != step:
                self.evaluate()
            elapsed = self.elapsed()
            result = self.tracker.result(step, elapsed, self.samples, "wall")
        own = own_metrics(job, rank_stats(step * h, self.wait_s, batches=[self.bal.batches[rank]], pushes_made=step,
                                            pushes_applied=step), result)
        job.write(f"rank{rank}.json", {"iterations": (step - self.dropped) * h, "wait_s": self.wait_s, "pushes": step,
                                       "compute_s": stretch.busy_s,
                                       "dropped": self.dropped, "applied": step - self.dropped,
                                       "compute_median_s": float(np.median(stretch.compute)),
                                       "replica_max_diff": self.max_diff,
                                       "compute_median_per_sample_s": float(np.median(stretch.per_sample)),
                                       "strategy_metrics": own})
        if rank == 0:
            out = rank_result(self.tracker, step, elapsed, self.samples, {"0": step * self.quorum}, {}, 0.0,
                          step * self.quorum)
            out["batches"] = list(self.bal.batches)
            if self.ada is not None:
                out["batch_history"] = self.ada.log
            job.write("result.json", out)


def run_collective(job: Job) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    me = _CollectiveRank(job, hvd, tf)
    me.start()
    while not me.round():
        pass
    me.finish()


def watch_launcher(job: Job, rank: int, period_s: float = 1.0) -> None:
    """End this rank when the trial process that launched the job is gone (``kill -9``, a crash):
    a daemon thread checks the launcher's pid (and start time) every ``period_s`` on its host; a rank
    that exits non-zero makes mpiexec end the ranks on other hosts too."""
    import socket

    pid, start, host = job.raw.get("launcher_pid"), job.raw.get("launcher_start"), job.raw.get("launcher_host")
    if not pid or host != socket.gethostname():
        return

    def alive() -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return start is None or stat.rsplit(")", 1)[1].split()[19] == start

    def loop() -> None:
        while alive():
            time.sleep(period_s)
        try:
            (job.out / f"rank{rank}.error").write_text(f"its launcher (pid {pid}) is gone\n")
        finally:
            os._exit(1)

    threading.Thread(target=loop, name="watch-launcher", daemon=True).start()


def main(argv: list[str]) -> int:
    import socket

    job = Job(argv[0])
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    host = socket.gethostname()
    (job.out / f"rank{rank}.host").write_text(f"{host} {os.getpid()}\n")
    watch_launcher(job, rank)
    try:
        from orchestrator.hardware.lean import import_tensorflow

        import_tensorflow()          # before the runtime's modules, which then find it loaded (lean.py says why)
        if not job.strategy.uses_server:
            run_collective(job)
        elif rank == 0:
            run_server(job, comm)
        else:
            run_worker(job, comm, rank)
    except BaseException as exc:
        line = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        (job.out / f"rank{rank}.error").write_text(line + "\n" + traceback.format_exc())
        sys.stderr.write(f"rank {rank} failed: {line}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
