"""Virtual (emulated) data-parallel runtime: W workers in one process on a virtual clock.

Each worker owns a flat parameter snapshot; real gradients on real data come from ONE shared
``ModelRuntime`` (``set_flat`` then ``gradient``). A worker's iteration lasts
``base_time * (batch / batch_size) / speed`` (times ``slowdown`` when a seeded transient straggler hits).
Events run in virtual-time order from a heap, so a run is deterministic for a seed and a base time.

Steps: allreduce counts synchronous steps; async/delay count applied pushes. ``train.eval_every`` and
``train.budget_updates`` count sample-equivalent steps: for push strategies one step = W pushes.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

import numpy as np

from orchestrator.sync.limits import check_virtual_memory
from orchestrator.sync.core import ParameterServer, StalenessGate, SyncOptions, batch_shares, push_weights
from orchestrator.execution.training import ConvergenceTracker, NullSink, TrainResult, TrainSettings


@dataclass
class SyncStats:
    """What a runtime observed besides convergence (turned into ``sync.*`` metrics)."""

    iterations: list[int]
    wait_s: list[float]
    gap_histogram: dict[int, int] = field(default_factory=dict)
    update_staleness: dict[int, int] = field(default_factory=dict)
    pushes_made: int = 0
    pushes_applied: int = 0
    bound_max: float = 0.0
    batches: list[int] = field(default_factory=list)


class _Clock:
    """Per-worker iteration durations with seeded transient stragglers."""

    def __init__(self, opts: SyncOptions, base_time: float, batches: list[int], batch_size: int, seed: int):
        self.base = [base_time * b / batch_size / s for b, s in zip(batches, opts.speeds)]
        self.p, self.k = opts.straggler_p, opts.straggler_slowdown
        self.rngs = [np.random.default_rng([seed, 7919, i]) for i in range(opts.workers)]

    def duration(self, i: int) -> float:
        slow = self.k if self.p > 0 and self.rngs[i].random() < self.p else 1.0
        return self.base[i] * slow


class VirtualRun:
    """One emulated training run; ``run()`` returns (TrainResult, SyncStats)."""

    def __init__(self, opts: SyncOptions, settings: TrainSettings, runtime, dataset, base_time: float,
                 sink=None, progress=None):
        from orchestrator.execution.training import BatchSampler

        self.o, self.s, self.rt, self.data = opts, settings, runtime, dataset
        w = opts.workers
        self.batches = batch_shares(opts.speeds, settings.batch_size, opts.proportional_batches)
        self.weights = push_weights(settings.lr, self.batches, opts.lr_scaling if opts.name != "allreduce" else "lr/W")
        self.clock = _Clock(opts, base_time, self.batches, settings.batch_size, settings.seed)
        self.samplers = [BatchSampler(len(dataset.y_train), settings.seed, i) for i in range(w)]
        per_step = 1 if opts.name == "allreduce" else w
        tracked = dataclasses.replace(settings, eval_every=settings.eval_every * per_step,
                                      budget_updates=None if settings.budget_updates is None
                                      else settings.budget_updates * per_step)
        self.tracker = ConvergenceTracker(tracked, sink or NullSink(), progress)
        n = settings.eval_samples or len(dataset.y_test)
        self.x_test, self.y_test = dataset.x_test[:n], dataset.y_test[:n]
        self.theta0 = runtime.get_flat()
        self.stats = SyncStats([0] * w, [0.0] * w, batches=list(self.batches))

    def _grad(self, i: int, params: np.ndarray) -> np.ndarray:
        idx = self.samplers[i].next(self.batches[i])
        self.rt.set_flat(params)
        return self.rt.gradient(self.data.x_train[idx], self.data.y_train[idx])[1]

    def _evaluate(self, step: int, t: float, params: np.ndarray) -> None:
        self.rt.set_flat(params)
        loss, acc = self.rt.evaluate(self.x_test, self.y_test)
        self.tracker.record(step, t, loss, acc)

    def run(self) -> tuple[TrainResult, SyncStats]:
        self._evaluate(0, 0.0, self.theta0)
        steps, t, params = self._allreduce() if self.o.name == "allreduce" else self._push_loop()
        if not self.tracker.history or self.tracker.history[-1].step != steps:
            self._evaluate(steps, t, params)
        samples = sum(c * b for c, b in zip(self.stats.iterations, self.batches))
        self.final_params = params
        return self.tracker.result(steps, t, samples, "virtual"), self.stats

    # -- bulk synchronous ---------------------------------------------------------------------
    def _allreduce(self):
        theta, t, step, w = self.theta0.copy(), 0.0, 0, self.o.workers
        tr, every = self.tracker, self.tracker.s.eval_every
        while True:
            durs = [self.clock.duration(i) for i in range(w)]
            update = np.zeros_like(theta)
            for i in range(w):
                update += np.float32(self.weights[i]) * self._grad(i, theta)
                self.stats.wait_s[i] += max(durs) - durs[i]
                self.stats.iterations[i] += 1
            theta -= update
            t, step = t + max(durs), step + 1
            self.stats.pushes_made += w
            self.stats.pushes_applied += w
            self.stats.gap_histogram[0] = self.stats.gap_histogram.get(0, 0) + w
            if step % every == 0:
                self._evaluate(step, t, theta)
            if tr.should_stop(step, t):
                return step, t, theta

    # -- parameter server (async / delay) -----------------------------------------------------
    def _push_loop(self):
        o, w = self.o, self.o.workers
        server = ParameterServer(self.theta0, self.weights)
        gate = StalenessGate(w, o.staleness, dynamic=o.dynamic_staleness, max_staleness=o.max_staleness)
        heap: list[tuple[float, int, int]] = []
        snap: list = [None] * w
        pulled, started, blocked = [0] * w, [0.0] * w, {}
        seq = 0

        def start(i: int, now: float) -> None:
            nonlocal seq
            gate.grant(i)
            snap[i], pulled[i] = server.pull()
            started[i] = now
            heapq.heappush(heap, (now + self.clock.duration(i), seq, i))
            seq += 1

        for i in range(w):
            start(i, 0.0)
        every, t = self.tracker.s.eval_every, 0.0
        while heap:
            t, _, i = heapq.heappop(heap)
            grad = self._grad(i, snap[i])
            self.stats.pushes_made += 1
            version = server.push(i, grad, pulled[i], self.batches[i])
            gate.completed_push(i, t - started[i])
            self.stats.iterations[i] += 1
            for j in sorted(blocked):
                if gate.may_proceed(j):
                    self.stats.wait_s[j] += t - blocked.pop(j)
                    start(j, t)
            if gate.may_proceed(i):
                start(i, t)
            else:
                blocked[i] = t
            if version % every == 0:
                self._evaluate(version, t, server.params)
            if self.tracker.should_stop(version, t):
                break
        for j, since in blocked.items():
            self.stats.wait_s[j] += t - since
        self.stats.pushes_applied = server.version
        self.stats.gap_histogram = dict(gate.gap_histogram)
        self.stats.update_staleness = dict(server.update_staleness)
        self.stats.bound_max = gate.max_bound_used
        self.server, self.gate = server, gate
        return server.version, t, server.params.copy()


def reference_options(opts: SyncOptions) -> SyncOptions:
    """One worker of speed 1.0, no stragglers: the single-worker baseline for speedups."""
    return dataclasses.replace(opts, name="allreduce", workers=1, speeds=[1.0], straggler_p=0.0,
                               straggler_slowdown=1.0, staleness=0.0, proportional_batches=False,
                               dynamic_staleness=False)


_MEASURED: dict[tuple, float] = {}
_REFERENCE: dict[tuple, TrainResult] = {}


def base_step_time(opts: SyncOptions, ctx, runtime) -> tuple[float, str]:
    """Seconds of one speed-1.0 iteration at ``train.batch_size``: configured (``sync.base_time_s``),
    placed (median of ``ctx.worker_step_time_s``) or measured here (median step time, cached per process)."""
    if opts.base_time_s:
        return opts.base_time_s, "configured"
    if ctx.worker_step_time_s:
        return float(np.median(list(ctx.worker_step_time_s.values()))), "placed"
    b = ctx.settings.batch_size
    key = (getattr(ctx.model, "name", "?"), b)
    if key not in _MEASURED:
        _MEASURED[key] = runtime.measure_step_time(ctx.dataset.x_train[:b], ctx.dataset.y_train[:b])
    return _MEASURED[key], "measured"


def train_virtual(opts: SyncOptions, ctx, *, reference: bool = True):
    """Run the emulation for ``ctx`` (plus the W=1 reference run); returns (result, stats, base_time)."""
    from orchestrator.execution.runtime import ModelRuntime

    runtime = ModelRuntime(ctx.model, seed=ctx.settings.seed, lr=ctx.settings.lr)
    theta0 = runtime.get_flat()
    check_virtual_memory(opts.workers, theta0.size, ctx.dataset)  # refuse what would not fit in memory
    base, how = base_step_time(opts, ctx, runtime)
    ctx.sink.set_tags({"sync.base_time": f"{base:.6f}s ({how})"})
    run = VirtualRun(opts, ctx.settings, runtime, ctx.dataset, base, ctx.sink)
    result, stats = run.run()
    if reference:
        result.reference_time_to_target_s = reference_time(opts, ctx, runtime, theta0, base)
    return result, stats, base


def reference_time(opts: SyncOptions, ctx, runtime, theta0: np.ndarray, base: float) -> float | None:
    """Time to target of one speed-1.0 worker with the same settings on the virtual clock (cached)."""
    key = (dataclasses.astuple(ctx.settings), base, getattr(ctx.model, "name", "?"),
           getattr(ctx.dataset, "source", "?"), float(np.sum(theta0)))
    if key not in _REFERENCE:
        runtime.set_flat(theta0)
        ref_settings = dataclasses.replace(ctx.settings, stop="target")
        _REFERENCE[key] = VirtualRun(reference_options(opts), ref_settings, runtime, ctx.dataset, base).run()[0]
    return _REFERENCE[key].time_to_target_s


def make_context(cfg: dict, output_dir, *, dataset=None, sink=None):
    """A ``TrainContext`` for the MNIST CNN from a plain config dict (benchmarks, tests)."""
    from pathlib import Path

    from orchestrator.data import load_mnist
    from orchestrator.models import cnn
    from orchestrator.execution.training import TrainContext

    settings = TrainSettings.from_cfg(cfg.get("train", {}), seed=cfg.get("seed"))
    return TrainContext(settings=settings, dataset=dataset or load_mnist(seed=cfg.get("seed", 0)),
                        model=cnn.spec({}), cluster=None, sink=sink or NullSink(), output_dir=Path(output_dir), cfg=cfg)
