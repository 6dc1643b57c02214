"""What an MPI rank of a sync run holds besides its loop (``orchestrator.sync.mpi_worker``): the job it was
given (``Job``: the strategy rebuilt from its ``module:qualname``, options, settings, batch split), the emulated
device speed (``Stretch``: sleeps for speed, stragglers, jitter and injected faults), and what a rank writes
back (``result``, its strategy's own metrics)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import numpy as np


class Job:
    def __init__(self, path: str):
        from orchestrator.execution.training import TrainSettings
        from orchestrator.sync.balance import Balancer
        from orchestrator.sync.core import SyncOptions
        from orchestrator.sync.costmodel import ComputeModel
        from orchestrator.sync.strategy import load_ref

        spec = json.loads(Path(path).read_text())
        self.raw = spec
        self.strategy = load_ref(spec["strategy"])(spec.get("cfg_sync") or {})
        self.opts = o = SyncOptions.from_plain(spec["opts"], self.strategy.config)
        self.settings = s = TrainSettings(**spec["settings"])
        self.out = Path(spec["out_dir"])
        # the compute model's shape (for batch-size ratios and balancing); its scale cancels out
        c = o.sync
        self.cm = (ComputeModel(c.step_overhead_s or 0.0, c.per_sample_s) if c.per_sample_s is not None
                   else ComputeModel.linear(1.0, s.batch_size))
        # ranks of a collective decide nothing alone: an online split stays at its static start
        balance = c.balance if self.strategy.uses_server or c.balance != "online" else "static"
        self.balancer = Balancer(balance, o.speeds, o.total_batch(s.batch_size), s.batch_size, self.cm, c.balance_every)
        self.batches = self.balancer.batches
        self.weights = (self.strategy.push_weights(s.lr, self.batches, o, s.batch_size) if self.strategy.uses_server
                        else [])
        self.inject = spec.get("inject", {})

    def runtime_and_data(self):
        from orchestrator import plugins
        from orchestrator.data import load_mnist
        from orchestrator.execution.runtime import ModelRuntime, configure_threads

        configure_threads(int(os.environ.get("TF_NUM_INTRAOP_THREADS", "1")), 1)
        data = load_mnist(self.raw.get("dataset_path"), seed=self.raw.get("dataset_seed", 0),
                          test_fraction=self.raw.get("dataset_test_fraction", 0.2), limit=self.raw.get("dataset_limit"))
        model_cfg = self.raw.get("model_cfg") or {"name": "cnn"}
        spec = plugins.load("model", model_cfg.get("name", "cnn"))(model_cfg)
        rt = ModelRuntime(spec, seed=self.settings.seed, lr=self.settings.lr)
        return rt, data

    def tracker(self):
        from orchestrator.execution.training import ConvergenceTracker, NullSink
        from orchestrator.sync.core import tracked_settings

        return ConvergenceTracker(tracked_settings(self.strategy, self.opts, self.settings), NullSink())

    def write(self, name: str, payload: dict) -> None:
        tmp = self.out / (name + ".tmp")
        tmp.write_text(json.dumps(payload))
        tmp.replace(self.out / name)


class Stretch:
    """Sleeps so that a worker's iteration lasts ``compute * slowdown * jitter / speed`` (seeded stragglers and
    ``hardware.jitter``, emulated as delays: a factor below 1 cannot shorten a real computation;
    the speed follows ``hardware.speed_changes`` in wall seconds since the rank started), or, with
    ``hardware.emulated_step_s = E``, at least ``E * cm(b) / cm(batch_size) * slowdown / speed``: a
    speed-1.0 rank's iteration of ``train.batch_size`` samples lasts E, the rest of it asleep. Plus
    injected delays (tests): ``inject.sleep = {worker, every, seconds}``, ``inject.random_max_s``."""

    def __init__(self, job: Job, worker: int):
        self.sched = job.opts.schedule()
        hw = job.opts.hardware
        self.emulated, self.cm, self.batch_size = hw.emulated_step_s, job.cm, job.settings.batch_size
        self.p, self.k = hw.stragglers.probability, hw.stragglers.slowdown
        self.rng = np.random.default_rng([job.settings.seed, 7919, worker])
        self.sigma = hw.jitter_sigma              # hardware.jitter: the same lognormal factor as the virtual clock's
        self.jitter_rng = np.random.default_rng([job.settings.seed, 104729, worker])
        self.worker, self.inject, self.iteration = worker, job.inject, 0
        self.compute: list[float] = []
        self.per_sample: list[float] = []      # compute seconds per sample of each iteration (batches may change)
        self.t_start = time.perf_counter()
        self.defer, self.pending = False, 0.0   # defer: add the emulated sleep to ``pending`` instead of sleeping
        self.busy_s = 0.0                        # emulated compute seconds so far (the time breakdown's compute)

    def after_compute(self, compute_s: float, batch: int | None = None) -> float:
        """Sleep as the emulated device would; returns the iteration's emulated compute seconds."""
        self.iteration += 1
        self.compute.append(compute_s)
        self.per_sample.append(compute_s / (batch or self.batch_size))
        from orchestrator.sync.core import jitter_factor

        slow = self.k if self.p > 0 and self.rng.random() < self.p else 1.0
        slow *= jitter_factor(self.jitter_rng, self.sigma)
        speed = self.sched.speed(self.worker, time.perf_counter() - self.t_start)
        if self.emulated:
            ratio = self.cm.time(batch or self.batch_size) / self.cm.time(self.batch_size)
            extra = max(0.0, self.emulated * ratio * slow / speed - compute_s)
        else:
            extra = compute_s * (slow / speed - 1.0)
        sl = self.inject.get("sleep")
        if sl and sl["worker"] == self.worker and self.iteration % sl["every"] == 0:
            extra += sl["seconds"]
        if self.inject.get("random_max_s"):
            extra += self.rng.random() * self.inject["random_max_s"]
        fail = self.inject.get("fail")
        if fail and fail["worker"] == self.worker and self.iteration >= fail["after"]:
            raise RuntimeError(f"injected failure at iteration {self.iteration}")
        kill = self.inject.get("kill")  # a rank killed by a signal (the OOM killer, kill -9)
        if kill and kill["worker"] == self.worker and self.iteration >= kill["after"]:
            import signal

            os.kill(os.getpid(), int(kill.get("signal", signal.SIGKILL)))
        self.busy_s += compute_s + max(0.0, extra)
        if self.defer:                     # a quorum round: the sleep waits for the round's close
            self.pending += max(0.0, extra)
        elif extra > 0:
            time.sleep(extra)
        return compute_s + max(0.0, extra)


class RankAdaptive:
    """``train.batch_policy=adaptive`` on a rank of a collective (``sync.adaptive.RankRounds``): every rank
    measures, rank 0 decides every ``train.adaptive_every`` rounds and the stop broadcast carries the new
    global batch, which every rank's balancer splits the same way."""

    def __init__(self, job: Job, rank: int, workers: int, local_steps: int):
        from orchestrator.sync.adaptive import AdaptiveBatch, NoiseScale, RankRounds

        o, s = job.opts, job.settings
        self.job, self.rank, self.h, self.o = job, rank, local_steps, o
        self.rounds = RankRounds(workers, rank)
        low, high = o.adaptive_range(s.batch_size)
        step_time = self.rounds.step_time(job.balancer.split, local_steps, job.cm, o.sync.overlap)
        self.chooser = AdaptiveBatch(low, high, s.batch_size, o.train.adaptive_every, step_time,
                                     samples=lambda m: float(local_steps * m), noise=NoiseScale(decay=o.train.adaptive_ema))
        self.log: list[list] = [[0, 0.0, self.chooser.current, None]]

    def begin_round(self, optimizer) -> None:
        precond, skip = None, False
        if self.o.train.adaptive_noise == "preconditioned":
            precond = optimizer.preconditioner()
            skip = precond is None and self.job.settings.optimizer == "adam"   # before Adam's first step
        self.rounds.begin(precond, skip)

    def after_reduce(self, hvd, tf, rnd, weights, reduced, summed, round_s: float) -> None:
        r = self.rounds
        if r.needs_second_reduce(summed, weights, rnd.batches, rnd.included):
            acc = hvd.allreduce(tf.constant(r.mine_for_second_reduce(rnd.batches[self.rank])), op=hvd.Sum).numpy()
            mean = acc.astype(np.float64) / float(sum(rnd.batches))
            included = tuple(range(len(rnd.batches)))
        else:
            mean = None if r.skip else r.big_gradient(reduced, weights, rnd.included)
            included = rnd.included
        if self.rank == 0:
            if mean is not None:
                r.observe(self.chooser.noise, summed, rnd.batches, included, mean)
            r.measured(summed, rnd.batches, self.h, round_s, self.job.cm)

    def decide(self, rounds_done: int, t: float) -> int | None:
        new = self.chooser.after_round(rounds_done - 1, t)
        if rounds_done % self.chooser.every == 0:
            noise = self.chooser.noise.value
            self.log.append([rounds_done, t, self.chooser.current, None if noise is None or not math.isfinite(noise)
                             else float(noise)])
        return new


def own_metrics(job: Job, stats, result=None) -> dict:
    """What this rank's strategy instance adds in ``metrics()`` beyond the engine's keys, computed on the
    rank's own view (its worker's statistics, or the server's); sent back in ``rank{r}.json``."""
    from orchestrator.execution.training import TrainResult

    if result is None:
        result = TrainResult(0, 0.0, 0, math.nan, None, None, "wall")
    return job.strategy.own_metrics(result, stats)


def rank_stats(iterations: int, wait_s: float, **kw):
    from orchestrator.sync.virtual import SyncStats

    return SyncStats([iterations], [wait_s], **kw)


def warm_up(rt, data, batch: int) -> None:
    """Trace the gradient function (two batch sizes, so that later sizes reuse a relaxed trace) before
    the clock starts: tracing is start-up cost, not an iteration's."""
    for b in (batch, batch + 1):
        rt.gradient(data.x_train[:b], data.y_train[:b])


def rank_result(tracker, updates, elapsed, samples, gaps, upd_staleness, bound, applied, dropped: int = 0) -> dict:
    return {"updates": updates, "elapsed_s": elapsed, "samples": samples,
            "history": [dataclasses.asdict(p) for p in tracker.history],
            "gap_histogram": gaps, "update_staleness": upd_staleness, "bound_max": bound, "pushes_applied": applied,
            "pushes_dropped": dropped}
