"""The ranks of a parameter-server job under MPI (``orchestrator.sync.mpi_worker`` runs them): rank 0 is
the server (``run_server``: one thread per worker rank, the strategy's server and staleness gate), ranks
1..W the workers (``run_worker``); numpy buffers go by ``Send``/``Recv`` with the tags below."""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from orchestrator.sync.mpi_job import Job, Stretch, own_metrics, rank_result, rank_stats, warm_up

REQ, GO, PARAMS, HDR, GRAD = 1, 2, 3, 4, 5


# -- parameter server (async, delay-sync, ...) ------------------------------------------------------
class _ServerRank:
    """Rank 0 of a server job: the strategy's server and staleness gate, one thread per worker rank."""

    def __init__(self, job: Job, comm) -> None:
        from orchestrator.sync.server import REJECTED

        self.job, self.comm, self.rejected = job, comm, REJECTED
        rt, data = self.rt, self.data = job.runtime_and_data()
        comm.Barrier()  # every rank has TensorFlow and the data loaded: the clock starts now
        w, o = job.opts.workers, job.opts
        self.theta0, self.strat = rt.get_flat(), job.strategy
        self.server = self.strat.make_server(self.theta0, job.weights, o, job.settings.new_optimizer())
        self.balancer, self.bal_lock = job.balancer, threading.Lock()
        self.gate = self.strat.make_gate(o)
        self.tracker, self.stop = job.tracker(), threading.Event()
        self.every, self.n_eval = self.tracker.s.eval_every, job.settings.eval_samples or len(data.y_test)
        self.wait_s, self.eval_s, self.errors, self.dropped = [0.0] * w, [0.0], [], [0] * w
        self.eval_lock = threading.Lock()
        self.t_start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start - self.eval_s[0]

    def evaluate(self) -> None:
        server = self.server
        with self.eval_lock, server.lock:
            t0 = time.perf_counter()
            self.rt.set_flat(server.params)
            loss, acc = self.rt.evaluate(self.data.x_test[:self.n_eval], self.data.y_test[:self.n_eval])
            self.eval_s[0] += time.perf_counter() - t0
            self.tracker.record(server.version, self.elapsed(), loss, acc)
            if self.tracker.should_stop(server.version, self.elapsed()):
                self.stop.set()

    def serve(self, i: int) -> None:
        """The thread of worker rank i + 1: grant, send the parameters, take the gradient, push it."""
        comm, src, n = self.comm, i + 1, self.theta0.size
        req, hdr = np.zeros(1, np.int64), np.zeros(5, np.float64)
        params, grad = np.empty(n, np.float32), np.empty(n, np.float32)
        last_dropped = 0
        try:
            while True:
                comm.Recv(req, source=src, tag=REQ)
                t0 = time.perf_counter()
                granted = self.gate.wait_and_grant(i, self.stop)
                self.wait_s[i] += time.perf_counter() - t0
                if granted is None:  # stop; says whether this worker's last push was dropped
                    comm.Send(np.array([0, last_dropped, 0], np.int64), dest=src, tag=GO)
                    return
                version = self.server.pull_into(params, i)
                comm.Send(np.array([1, version, self.balancer.batches[i]], np.int64), dest=src, tag=GO)
                comm.Send(params, dest=src, tag=PARAMS)
                comm.Recv(hdr, source=src, tag=HDR)
                comm.Recv(grad, source=src, tag=GRAD)
                if not self.push(i, hdr, grad):
                    last_dropped = 1
        except BaseException as exc:  # a server thread must not die silently
            self.errors.append(exc)
            self.stop.set()

    def push(self, i: int, hdr: np.ndarray, grad: np.ndarray) -> bool:
        """Worker i's gradient to the server; False when it was dropped (stopped while in flight)."""
        server, stop, gate, job = self.server, self.stop, self.gate, self.job
        applied = server.push(i, grad, int(hdr[2]), int(hdr[1]), closed=stop)
        if applied is None:  # stopped while this gradient was in flight: the worker ends at its next request
            self.dropped[i] += 1
            return False
        with self.bal_lock:
            if self.balancer.observe(i, int(hdr[1]), float(hdr[4])):
                server.set_weights(self.strat.push_weights(job.settings.lr, self.balancer.batches, job.opts,
                                                           job.settings.batch_size))
        with gate.cond:
            gate.completed_push(i, float(hdr[3]))
            gate.cond.notify_all()
        if applied == self.rejected:  # too stale for the server's rule (computed, sent, not applied)
            return True
        if applied % self.every == 0:
            self.evaluate()
        elif self.tracker.budget_spent(applied, self.elapsed()):
            stop.set()
        return True

    def run(self) -> None:
        self.evaluate()
        threads = [threading.Thread(target=self.serve, args=(i,), daemon=True) for i in range(self.job.opts.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        elapsed = self.elapsed()
        if self.tracker.history[-1].step != self.server.version:
            self.evaluate()
        self.finish(elapsed)

    def finish(self, elapsed: float) -> None:
        from orchestrator.sync.server import histogram_dict

        job, server, gate, balancer, tracker = self.job, self.server, self.gate, self.balancer, self.tracker
        server_metrics = server.metrics()
        stats = rank_stats(0, 0.0, gap_histogram=dict(gate.gap_histogram), update_staleness=dict(server.update_staleness),
                            pushes_applied=server.version, pushes_dropped=sum(self.dropped), bound_max=gate.max_bound_used,
                            batches=list(balancer.batches), rebalances=balancer.rebalances, server_metrics=server_metrics)
        result = tracker.result(server.version, elapsed, server.samples, "wall")
        job.write("rank0.json", {"iterations": 0, "wait_s": 0.0, "pushes_by_worker": server.pushes_by_worker,
                                 "gate_completed": gate.completed, "gate_wait_s": self.wait_s,
                                 "rejected_by_worker": server.rejected_by_worker,
                                 "batches": balancer.batches, "rebalances": balancer.rebalances,
                                 "server_metrics": server_metrics, "strategy_metrics": own_metrics(job, stats, result)})
        if job.inject.get("audit"):
            np.save(job.out / "theta0.npy", self.theta0)
            np.save(job.out / "theta_final.npy", server.params)
        job.write("result.json", rank_result(tracker, server.version, elapsed, server.samples,
                                         histogram_dict(gate.gap_histogram), histogram_dict(server.update_staleness),
                                         gate.max_bound_used, server.version, sum(self.dropped)))


def run_server(job: Job, comm) -> None:
    _ServerRank(job, comm).run()


def run_worker(job: Job, comm, rank: int) -> None:
    from orchestrator.execution.training import BatchSampler

    i = rank - 1
    rt, data = job.runtime_and_data()
    sampler, stretch = BatchSampler(len(data.y_train), job.settings.seed, i), Stretch(job, i)
    warm_up(rt, data, job.batches[i])
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
    own = own_metrics(job, rank_stats(iterations, 0.0, batches=[int(go[2]) or job.batches[i]],
                                        pushes_made=iterations))
    job.write(f"rank{rank}.json", {"iterations": iterations, "pushes": iterations, "strategy_metrics": own,
                                   "compute_s": stretch.busy_s,
                                   "compute_median_s": float(np.median(stretch.compute)) if stretch.compute else math.nan})
