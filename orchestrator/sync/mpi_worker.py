"""The program every MPI rank runs: ``python -m orchestrator.sync.mpi_worker JOB.json``.

The job names its strategy (``orchestrator.sync.strategy``), rebuilt here from ``SyncStrategy.ref()``:
a ``CollectiveStrategy`` runs on W ranks in lockstep rounds (the strategy's local steps, then one Horovod
all-reduce, ``Sum`` of each rank's weighted flat vector, then the strategy's apply); a ``ServerStrategy``
makes rank 0 the parameter server (one thread per worker, the strategy's server and staleness gate)
and ranks 1..W workers; numpy buffers go by ``Send``/``Recv``.
Heterogeneity: a worker sleeps to stretch its compute time to ``time * slowdown / speed``.
Each rank writes ``rank{r}.json``; rank 0 writes ``result.json``. A failing rank writes
``rank{r}.error`` (one line) and aborts the job.
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

from orchestrator.sync.mpi_job import Job, RankAdaptive, Stretch, _own_metrics, _rank_stats, _result, _warm_up

__all__ = ["Job", "Stretch", "main"]

REQ, GO, PARAMS, HDR, GRAD = 1, 2, 3, 4, 5


# -- collective rounds (Horovod) ------------------------------------------------------------------
def run_collective(job: Job) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from orchestrator.execution.training import BatchSampler
    from orchestrator.sync.strategy import Round

    hvd.init()
    rank, w = hvd.rank(), hvd.size()
    rt, data = job.runtime_and_data()
    for v in rt.variables:
        v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0))
    theta, strat = rt.get_flat(), job.strategy
    optimizer = job.settings.new_optimizer()   # every rank applies the same reduced gradients: the same state
    h, bal = int(strat.local_steps()), job.balancer
    sampler, stretch = BatchSampler(len(data.y_train), job.settings.seed, rank), Stretch(job, rank)
    _warm_up(rt, data, bal.batches[rank])
    tracker = job.tracker()
    every = tracker.s.eval_every
    ada = RankAdaptive(job, rank, w, h) if job.opts.batch_policy == "adaptive" else None
    n_eval = job.settings.eval_samples or len(data.y_test)
    step, samples, wait_s, eval_s, max_diff = 0, 0, 0.0, 0.0, 0.0
    verify = int(job.inject.get("verify_every", 0))
    hvd.allreduce(tf.constant(0.0))  # every rank warmed up: the clock starts now
    t_start = stretch.t_start = time.perf_counter()

    def evaluate():
        nonlocal eval_s
        t0 = time.perf_counter()
        rt.set_flat(theta)
        loss, acc = rt.evaluate(data.x_test[:n_eval], data.y_test[:n_eval])
        eval_s += time.perf_counter() - t0
        tracker.record(step, time.perf_counter() - t_start - eval_s, loss, acc)

    def grad(params: np.ndarray) -> np.ndarray:
        batch = bal.batches[rank]
        idx = sampler.next(batch)
        t0 = time.perf_counter()
        rt.set_flat(params)
        _, g = rt.gradient(data.x_train[idx], data.y_train[idx])
        stretch.after_compute(time.perf_counter() - t0, batch)
        if ada is not None:
            ada.rounds.capture(g)
        return g

    if rank == 0:
        evaluate()
    quorum = int(strat.quorum(w))
    stretch.defer = quorum < w
    dropped = 0
    next_eval, noise, bcast_s = every, None, 0.0
    while True:
        rnd = Round(job.opts, tuple(bal.batches), job.settings.lr, job.settings.batch_size, samples, optimizer, step,
                    noise_scale=noise)
        t_round, busy0 = time.perf_counter(), stretch.busy_s
        if ada is not None:
            ada.begin_round(optimizer)
        if quorum < w:
            # backup workers, emulated: every rank computes, then all learn each rank's emulated finish time; the
            # round closes at the quorum-th, everyone sleeps until then and the late ranks' vectors weigh 0
            t_round, stretch.pending = time.perf_counter(), 0.0
            vec = strat.local(rank, theta, grad, rnd)
            done = time.perf_counter() - t_round + stretch.pending
            finish = hvd.allgather(tf.constant([done], tf.float64)).numpy()
            first = sorted(range(w), key=lambda r: (finish[r], r))[:quorum]
            rnd = dataclasses.replace(rnd, contributors=tuple(sorted(first)))
            close = float(finish[first[-1]])
            time.sleep(max(0.0, t_round + close - time.perf_counter()))
            if rank not in rnd.contributors:   # abandoned at the close: its compute ends there
                dropped += 1
                stretch.busy_s -= max(0.0, done - close)
            mine = np.float32(strat.weights(rnd)[rank] if rank in rnd.contributors else 0.0) * vec
        else:
            vec = strat.local(rank, theta, grad, rnd)
            mine = np.float32(strat.weights(rnd)[rank]) * vec
        if ada is not None:     # the noise scale's and the goodput's measurements ride on the same all-reduce
            mine = np.concatenate([mine, ada.rounds.tail(vec, stretch.busy_s - busy0)])
        t0 = time.perf_counter()
        reduced = hvd.allreduce(tf.constant(mine), op=hvd.Sum).numpy()
        wait_s += time.perf_counter() - t0
        if ada is not None:
            reduced, summed = reduced[:theta.size], reduced[theta.size:]
            # the round's seconds: from its start through the all-reduce, plus the previous round's broadcast
            ada.after_reduce(hvd, tf, rnd, strat.weights(rnd), reduced, summed, time.perf_counter() - t_round + bcast_s)
        theta = strat.apply(theta, reduced, rnd)
        step, samples = step + 1, samples + h * rnd.total
        if verify and step % verify == 0:
            flat = tf.constant(theta)
            diff = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
            max_diff = max(max_diff, float(tf.reduce_max(diff)))
        stop, new_batch = 0, 0
        if rank == 0:
            if ada is None:
                if step % every == 0:
                    evaluate()
                stop = int(tracker.should_stop(step, time.perf_counter() - t_start - eval_s))
            else:   # rounds of changing size: evaluations and the budget count batch_size-sample updates
                new_batch = ada.decide(step, time.perf_counter() - t_start - eval_s) or 0
                done = int(samples // job.settings.batch_size)
                if done >= next_eval:
                    evaluate()
                    next_eval = (done // every + 1) * every
                stop = int(tracker.should_stop(done, time.perf_counter() - t_start - eval_s))
        if ada is None:
            stop = int(hvd.broadcast(tf.constant([stop]), root_rank=0).numpy()[0])
        else:   # rank 0's decision and noise scale (for train.lr_scaling=adascale) reach every rank with the stop
            phi = ada.chooser.noise.value if rank == 0 else None
            t0 = time.perf_counter()
            got = hvd.broadcast(tf.constant([stop, new_batch, math.nan if phi is None else phi], tf.float64),
                                root_rank=0).numpy()
            bcast_s = time.perf_counter() - t0
            stop, new_batch, noise = int(got[0]), int(got[1]), None if math.isnan(got[2]) else float(got[2])
            if new_batch:
                bal.set_total(new_batch)
        if stop:
            break
    result = None
    if rank == 0:
        if not tracker.history or tracker.history[-1].step != step:
            evaluate()
        elapsed = time.perf_counter() - t_start - eval_s
        result = tracker.result(step, elapsed, samples, "wall")
    own = _own_metrics(job, _rank_stats(step * h, wait_s, batches=[bal.batches[rank]], pushes_made=step,
                                        pushes_applied=step), result)
    job.write(f"rank{rank}.json", {"iterations": (step - dropped) * h, "wait_s": wait_s, "pushes": step,
                                   "compute_s": stretch.busy_s,
                                   "dropped": dropped, "applied": step - dropped,
                                   "compute_median_s": float(np.median(stretch.compute)), "replica_max_diff": max_diff,
                                   "compute_median_per_sample_s": float(np.median(stretch.per_sample)),
                                   "strategy_metrics": own})
    if rank == 0:
        out = _result(tracker, step, elapsed, samples, {"0": step * quorum}, {}, 0.0, step * quorum)
        out["batches"] = list(bal.batches)
        if ada is not None:
            out["batch_history"] = ada.log
        job.write("result.json", out)


# -- parameter server (async, delay-sync, ...) ------------------------------------------------------
def run_server(job: Job, comm) -> None:
    from orchestrator.sync.server import REJECTED

    rt, data = job.runtime_and_data()
    comm.Barrier()  # every rank has TensorFlow and the data loaded: the clock starts now
    w, o = job.opts.workers, job.opts
    theta0, strat = rt.get_flat(), job.strategy
    server = strat.make_server(theta0, job.weights, o, job.settings.new_optimizer())
    balancer, bal_lock = job.balancer, threading.Lock()
    gate = strat.make_gate(o)
    tracker, stop = job.tracker(), threading.Event()
    every, n_eval = tracker.s.eval_every, job.settings.eval_samples or len(data.y_test)
    wait_s, eval_s, errors, dropped = [0.0] * w, [0.0], [], [0] * w
    eval_lock = threading.Lock()
    t_start = time.perf_counter()

    def evaluate() -> None:
        with eval_lock, server.lock:
            t0 = time.perf_counter()
            rt.set_flat(server.params)
            loss, acc = rt.evaluate(data.x_test[:n_eval], data.y_test[:n_eval])
            eval_s[0] += time.perf_counter() - t0
            tracker.record(server.version, time.perf_counter() - t_start - eval_s[0], loss, acc)
            if tracker.should_stop(server.version, time.perf_counter() - t_start - eval_s[0]):
                stop.set()

    def serve(i: int) -> None:
        src, n = i + 1, theta0.size
        req, hdr = np.zeros(1, np.int64), np.zeros(5, np.float64)
        params, grad = np.empty(n, np.float32), np.empty(n, np.float32)
        last_dropped = 0
        try:
            while True:
                comm.Recv(req, source=src, tag=REQ)
                t0 = time.perf_counter()
                granted = gate.wait_and_grant(i, stop)
                wait_s[i] += time.perf_counter() - t0
                if granted is None:  # stop; says whether this worker's last push was dropped
                    comm.Send(np.array([0, last_dropped, 0], np.int64), dest=src, tag=GO)
                    return
                version = server.pull_into(params, i)
                comm.Send(np.array([1, version, balancer.batches[i]], np.int64), dest=src, tag=GO)
                comm.Send(params, dest=src, tag=PARAMS)
                comm.Recv(hdr, source=src, tag=HDR)
                comm.Recv(grad, source=src, tag=GRAD)
                applied = server.push(i, grad, int(hdr[2]), int(hdr[1]), closed=stop)
                if applied is None:  # stopped while this gradient was in flight: the worker ends at its next request
                    dropped[i], last_dropped = dropped[i] + 1, 1
                    continue
                with bal_lock:
                    if balancer.observe(i, int(hdr[1]), float(hdr[4])):
                        server.set_weights(strat.push_weights(job.settings.lr, balancer.batches, o,
                                                              job.settings.batch_size))
                with gate.cond:
                    gate.completed_push(i, float(hdr[3]))
                    gate.cond.notify_all()
                if applied == REJECTED:  # too stale for the server's rule (computed, sent, not applied)
                    continue
                if applied % every == 0:
                    evaluate()
                elif tracker.budget_spent(applied, time.perf_counter() - t_start - eval_s[0]):
                    stop.set()
        except BaseException as exc:  # a server thread must not die silently
            errors.append(exc)
            stop.set()

    evaluate()
    threads = [threading.Thread(target=serve, args=(i,), daemon=True) for i in range(w)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    elapsed = time.perf_counter() - t_start - eval_s[0]
    if tracker.history[-1].step != server.version:
        evaluate()
    from orchestrator.sync.server import histogram_dict

    server_metrics = server.metrics()
    stats = _rank_stats(0, 0.0, gap_histogram=dict(gate.gap_histogram), update_staleness=dict(server.update_staleness),
                        pushes_applied=server.version, pushes_dropped=sum(dropped), bound_max=gate.max_bound_used,
                        batches=list(balancer.batches), rebalances=balancer.rebalances, server_metrics=server_metrics)
    result = tracker.result(server.version, elapsed, server.samples, "wall")
    job.write("rank0.json", {"iterations": 0, "wait_s": 0.0, "pushes_by_worker": server.pushes_by_worker,
                             "gate_completed": gate.completed, "gate_wait_s": wait_s,
                             "rejected_by_worker": server.rejected_by_worker,
                             "batches": balancer.batches, "rebalances": balancer.rebalances,
                             "server_metrics": server_metrics, "strategy_metrics": _own_metrics(job, stats, result)})
    if job.inject.get("audit"):
        np.save(job.out / "theta0.npy", theta0)
        np.save(job.out / "theta_final.npy", server.params)
    job.write("result.json", _result(tracker, server.version, elapsed, server.samples,
                                     histogram_dict(gate.gap_histogram), histogram_dict(server.update_staleness),
                                     gate.max_bound_used, server.version, sum(dropped)))


def run_worker(job: Job, comm, rank: int) -> None:
    from orchestrator.execution.training import BatchSampler

    i = rank - 1
    rt, data = job.runtime_and_data()
    sampler, stretch = BatchSampler(len(data.y_train), job.settings.seed, i), Stretch(job, i)
    _warm_up(rt, data, job.batches[i])
    comm.Barrier()
    stretch.t_start = time.perf_counter()  # speed changes count from the common start
    n = rt.num_parameters
    params, go = np.empty(n, np.float32), np.zeros(3, np.int64)
    pushed, last = np.zeros(n, np.float64), np.zeros(n, np.float64)   # last: this rank's latest push (audit)
    iterations, t_last = 0, time.perf_counter()
    while True:
        comm.Send(np.ones(1, np.int64), dest=0, tag=REQ)
        comm.Recv(go, source=0, tag=GO)
        if go[0] == 0:
            if go[1] and iterations:  # the server dropped this rank's last push (it arrived after the stop)
                pushed -= last
            break
        comm.Recv(params, source=0, tag=PARAMS)
        batch = int(go[2])
        idx = sampler.next(batch)
        t0 = time.perf_counter()
        rt.set_flat(params)
        loss, grad = rt.gradient(data.x_train[idx], data.y_train[idx])
        busy = stretch.after_compute(time.perf_counter() - t0, batch)
        now = time.perf_counter()
        comm.Send(np.array([loss, batch, go[1], now - t_last, busy], np.float64), dest=0, tag=HDR)
        comm.Send(np.ascontiguousarray(grad, np.float32), dest=0, tag=GRAD)
        t_last = now
        last = job.weights[i] * grad.astype(np.float64)  # the audit (tests) runs with a fixed split
        pushed += last
        iterations += 1
    if job.inject.get("audit"):
        np.save(job.out / f"pushed{rank}.npy", pushed)
    own = _own_metrics(job, _rank_stats(iterations, 0.0, batches=[int(go[2]) or job.batches[i]],
                                        pushes_made=iterations))
    job.write(f"rank{rank}.json", {"iterations": iterations, "pushes": iterations, "strategy_metrics": own,
                                   "compute_s": stretch.busy_s,
                                   "compute_median_s": float(np.median(stretch.compute)) if stretch.compute else math.nan})


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
