"""Virtual (emulated) data-parallel runtime: W workers in one process on a virtual clock.

Each worker owns a flat parameter snapshot; real gradients on real data come from ONE shared
``ModelRuntime`` (``set_flat`` then ``gradient``). Time comes from the cost model
(``orchestrator.sync.costmodel``): a worker's compute lasts ``(t0 + b t1) / v`` (times ``slowdown`` when a
seeded transient straggler hits; ``v`` follows ``hardware.speed_changes``), an allreduce step adds the
ring allreduce of the model's bytes, a parameter-server iteration adds its push and pull through the
server's shared (queued) links. Events run in virtual-time order from a heap: a run is deterministic.

The runtime is generic over the strategy (``orchestrator.sync.strategy``): a ``CollectiveStrategy`` runs
rounds behind a barrier (H local steps per worker, then one weighted all-reduce), a ``ServerStrategy``
runs the parameter server's push loop under its staleness gate. Steps: a collective counts rounds, a
server counts applied pushes. ``train.eval_every`` and ``train.budget_updates`` count sample-equivalent
updates of ``train.batch_size`` samples (``core.tracked_settings``): a round over W batches counts W.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

import numpy as np

from orchestrator.execution.training import ConvergenceTracker, NullSink, TrainResult, TrainSettings
from orchestrator.sync.adaptive import AdaptiveBatch, NoiseScale
from orchestrator.sync.balance import Balancer
from orchestrator.sync.checks import checked_bytes, checked_quorum, checked_vector, checked_weights
from orchestrator.sync.core import SyncOptions, jitter_factor, tracked_settings
from orchestrator.sync.costmodel import ComputeModel, collective_s, server_links
from orchestrator.sync.limits import check_virtual_memory
from orchestrator.sync.server import REJECTED
from orchestrator.sync.strategy import Round, SyncStrategy


@dataclass
class SyncStats:
    """What a runtime observed besides convergence (turned into ``sync.*`` metrics)."""

    iterations: list[int]
    wait_s: list[float]
    gap_histogram: dict[int, int] = field(default_factory=dict)
    update_staleness: dict[int, int] = field(default_factory=dict)
    pushes_made: int = 0
    pushes_applied: int = 0
    pushes_dropped: int = 0                     # arrived after training stopped (target, budget): not applied
    bound_max: float = 0.0
    batches: list[int] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    comm_s: list[float] = field(default_factory=list)
    queue_s: list[float] = field(default_factory=list)      # of comm_s: waiting in the server's shard queues
    dropped: list[int] = field(default_factory=list)        # gradients computed but not applied (late, too stale)
    server_utilisation: float | None = None
    rebalances: int = 0
    capacity: float = 1.0                       # time-averaged sum of speeds (reference speed 1.0)
    server_metrics: dict[str, float] = field(default_factory=dict)   # the server rule's own (ParameterServer.metrics)
    breakdown_kind: str = "simulated (virtual clock)"      # what the time breakdown's figure is
    rank_metrics: list[dict[str, float]] | None = None   # MPI: each rank's SyncStrategy.own_metrics (None: virtual)
    batch_history: list[tuple[int, float, int, float | None]] = field(default_factory=list)
    # train.batch_policy=adaptive: (round, virtual s, global batch from then on, noise scale) at each decision


class _Clock:
    """Per-worker compute durations from the compute model, speed changes, seeded transient stragglers and
    seeded step-time jitter (``hardware.jitter``: a lognormal factor of mean 1, its own random stream so that
    the straggler draws do not change with it)."""

    def __init__(self, opts: SyncOptions, cm: ComputeModel, seed: int):
        self.cm, self.sched = cm, opts.schedule()
        hw = opts.hardware
        self.p, self.k, self.sigma = hw.stragglers.probability, hw.stragglers.slowdown, hw.jitter_sigma
        self.rngs = [np.random.default_rng([seed, 7919, i]) for i in range(opts.workers)]
        self.jitter_rngs = [np.random.default_rng([seed, 104729, i]) for i in range(opts.workers)]

    def duration(self, i: int, batch: int, now: float) -> float:
        slow = self.k if self.p > 0 and self.rngs[i].random() < self.p else 1.0
        return self.cm.time(batch, self.sched.speed(i, now)) * slow * jitter_factor(self.jitter_rngs[i], self.sigma)


class VirtualRun:
    """One emulated training run; ``run()`` returns (TrainResult, SyncStats).
    ``base`` is a ``ComputeModel``, or a speed-1.0 step time at ``settings.batch_size`` (linear model)."""

    def __init__(self, strategy: SyncStrategy, opts: SyncOptions, settings: TrainSettings, runtime, dataset, base,
                 sink=None, progress=None):
        from orchestrator.execution.training import BatchSampler

        self.strategy, self.o, self.s, self.rt, self.data = strategy, opts, settings, runtime, dataset
        w = opts.workers
        self.cm = base if isinstance(base, ComputeModel) else ComputeModel.linear(float(base), settings.batch_size)
        self.balancer = Balancer(opts.sync.balance, opts.speeds, opts.total_batch(settings.batch_size),
                                 settings.batch_size, self.cm, opts.sync.balance_every)
        self.clock = _Clock(opts, self.cm, settings.seed)
        self.samplers = [BatchSampler(len(dataset.y_train), settings.seed, i) for i in range(w)]
        self.tracker = ConvergenceTracker(tracked_settings(strategy, opts, settings), sink or NullSink(), progress)
        n = settings.eval_samples or len(dataset.y_test)
        self.x_test, self.y_test = dataset.x_test[:n], dataset.y_test[:n]
        self.theta0 = runtime.get_flat()
        self.nbytes = strategy.dense_bytes(self.theta0.size)   # the dense model (the message-size hooks' default)
        self.net = opts.net()
        self.stats = SyncStats([0] * w, [0.0] * w, batches=list(self.batches), compute_s=[0.0] * w, comm_s=[0.0] * w,
                               queue_s=[0.0] * w, dropped=[0] * w)
        self.adaptive = self._adaptive() if opts.train.batch_policy == "adaptive" and not strategy.uses_server else None
        self._capture: tuple[list[float | None], np.ndarray] | None = None   # this round's |g_i|^2, sum_i b_i g_i
        self._comm_s, self._now = 0.0, 0.0
        self._precond: np.ndarray | None = None   # adaptive_noise=preconditioned: Adam's 1/(sqrt(v)+eps) this round

    def _adaptive(self) -> AdaptiveBatch:
        """``train.batch_policy=adaptive``: the chooser, its throughput from this run's cost model."""
        low, high = self.o.adaptive_range(self.s.batch_size)
        h = int(self.strategy.local_steps())

        def step_time(m: int) -> float:
            b = self.balancer.split(m)
            speeds = (self.balancer.estimate if self.o.sync.balance == "online"
                      else [self.clock.sched.speed(i, self._now) for i in range(self.o.workers)])
            compute = h * max(self.cm.time(bi, v) for bi, v in zip(b, speeds))
            return max(compute, self._comm_s) if self.o.sync.overlap else compute + self._comm_s

        return AdaptiveBatch(low, high, self.s.batch_size, self.o.train.adaptive_every, step_time,
                             samples=lambda m: float(h * m), noise=NoiseScale(decay=self.o.train.adaptive_ema))

    @property
    def batches(self) -> list[int]:
        return self.balancer.batches

    def _weights(self) -> list[float]:
        return self.strategy.push_weights(self.s.lr, self.batches, self.o, self.s.batch_size)

    def _grad(self, i: int, params: np.ndarray, batch: int) -> np.ndarray:
        idx = self.samplers[i].next(batch)
        self.rt.set_flat(params)
        return self.rt.gradient(self.data.x_train[idx], self.data.y_train[idx])[1]

    def _timed_grad(self, i: int, batch: int, t: float, durs: list[float]):
        """Worker i's gradient for this round: each call also adds one compute duration to ``durs[i]``."""
        def grad(params: np.ndarray) -> np.ndarray:
            durs[i] += self.clock.duration(i, batch, t + durs[i])
            g = self._grad(i, params, batch)
            if self._capture is not None and self._capture[0][i] is None:   # the round's first gradient, at theta
                g64 = g.astype(np.float64) if self._precond is None else g * self._precond
                self._capture[0][i] = float(np.dot(g64, g64))
                self._capture[1][:] += batch * g64
            return g

        return grad

    def _evaluate(self, step: int, t: float, params: np.ndarray) -> None:
        self.rt.set_flat(params)
        loss, acc = self.rt.evaluate(self.x_test, self.y_test)
        self.tracker.record(step, t, loss, acc)

    def run(self) -> tuple[TrainResult, SyncStats]:
        self._evaluate(0, 0.0, self.theta0)
        self.samples = 0
        steps, t, params = self._push_loop() if self.strategy.uses_server else self._collective()
        if not self.tracker.history or self.tracker.history[-1].step != steps:
            self._evaluate(steps, t, params)
        self.final_params = params
        self.stats.batches = list(self.batches)
        self.stats.rebalances = self.balancer.rebalances
        self.stats.capacity = self.o.schedule().capacity(t)
        return self.tracker.result(steps, t, self.samples, "virtual"), self.stats

    # -- collective rounds (allreduce, local SGD, ...) ----------------------------------------
    def _collective(self):
        theta, t, step, w = self.theta0.copy(), 0.0, 0, self.o.workers
        tr, every, st, strat = self.tracker, self.tracker.s.eval_every, self.stats, self.strategy
        n_params, h = self.theta0.size, int(strat.local_steps())
        quorum = checked_quorum(strat, w)
        optimizer = self.s.new_optimizer()          # train.optimizer: its state lives for the run
        ada, next_eval = self.adaptive, every
        if ada is not None:
            self._log_batch(0, 0.0, ada.current, None)
        while True:
            batches = list(self.batches)
            rnd = Round(self.o, tuple(batches), self.s.lr, self.s.batch_size, self.samples, optimizer, step,
                        noise_scale=None if ada is None else ada.noise.value)
            durs = [0.0] * w
            if ada is not None:
                self._capture = ([None] * w, np.zeros(n_params, dtype=np.float64))
                if self.o.train.adaptive_noise == "preconditioned":
                    self._precond = optimizer.preconditioner()
                    if self._precond is None and self.s.optimizer == "adam":
                        self._capture = None        # before Adam's first step: no preconditioner to measure with
            update = np.zeros_like(theta)
            if quorum == w:
                weights = checked_weights(strat, strat.weights(rnd), w)
                for i in range(w):
                    update += np.float32(weights[i]) * checked_vector(strat, strat.local(i, theta, self._timed_grad(
                        i, batches[i], t, durs), rnd), theta)
                included, close = range(w), max(durs)
            else:   # the round closes when the quorum-th worker is done: the late ones' vectors are dropped
                vecs = [checked_vector(strat, strat.local(i, theta, self._timed_grad(i, batches[i], t, durs), rnd), theta)
                        for i in range(w)]
                first = sorted(range(w), key=lambda i: (durs[i], i))[:quorum]
                rnd = dataclasses.replace(rnd, contributors=tuple(sorted(first)))
                weights = checked_weights(strat, strat.weights(rnd), w)
                for i in rnd.contributors:
                    update += np.float32(weights[i]) * vecs[i]
                included, close = rnd.contributors, durs[first[-1]]
            comm = collective_s(strat.collective, checked_bytes(strat, strat.message_bytes(rnd, n_params)), self.net)
            step_s = max(close, comm) if self.o.sync.overlap else close + comm
            inc = set(included)
            for i in range(w):
                if i in inc:
                    st.wait_s[i] += close - durs[i]
                    st.compute_s[i] += durs[i]
                    st.iterations[i] += h
                else:                                   # abandoned at the close (its work is lost)
                    st.compute_s[i] += close
                    st.dropped[i] += 1
                st.comm_s[i] += step_s - close
                self.balancer.observe(i, batches[i], durs[i] / h)
            theta = strat.apply(theta, update, rnd)
            t, step, self.samples = t + step_s, step + 1, self.samples + h * rnd.total
            st.pushes_made += w
            st.pushes_applied += len(inc)
            st.gap_histogram[0] = st.gap_histogram.get(0, 0) + len(inc)
            if ada is None:
                if step % every == 0:
                    self._evaluate(step, t, theta)
                if tr.should_stop(step, t):
                    return step, t, theta
                continue
            # adaptive: rounds differ in size, so evaluations and the budget count batch_size-sample updates
            self._comm_s, self._now = comm, t
            self._observe_noise(batches)
            new = ada.after_round(step - 1, t)
            if (step % ada.every) == 0:
                self._log_batch(step, t, new, ada.noise.value)
            if new is not None:
                self.balancer.set_total(new)
            done = int(self.samples // self.s.batch_size)
            if done >= next_eval:
                self._evaluate(step, t, theta)
                next_eval = (done // every + 1) * every
            if tr.should_stop(done, t):
                return step, t, theta

    def _observe_noise(self, batches: list[int]) -> None:
        """The round's noise-scale estimate from the workers' first gradients (``sync.adaptive.NoiseScale``)."""
        sq, acc = self._capture if self._capture is not None else ([], None)
        if acc is None or any(v is None for v in sq):
            return
        mean = acc / float(sum(batches))
        assert self.adaptive is not None
        self.adaptive.noise.add_round(sq, batches, float(np.dot(mean, mean)))

    def _log_batch(self, step: int, t: float, new: int | None, noise: float | None) -> None:
        """``train.global_batch`` (the batch from this round on) and ``sync.noise_scale``, at round ``step``."""
        assert self.adaptive is not None
        m = self.adaptive.current if new is None else new
        self.stats.batch_history.append((step, t, m, noise))
        out = {"train.global_batch": float(m)}
        if noise is not None and np.isfinite(noise):
            out["sync.noise_scale"] = float(noise)
        self.tracker.sink.log_metrics(out, step=step)

    # -- parameter server (async, delay-sync, ...) ---------------------------------------------
    def _push_loop(self):
        o, w, st = self.o, self.o.workers, self.stats
        server = self.strategy.make_server(self.theta0, self._weights(), o, self.s.new_optimizer())
        gate = self.strategy.make_gate(o)
        links = server_links(self.net, o.shards, self.nbytes, o.colocated)
        strat, n_params = self.strategy, self.theta0.size
        heap: list[tuple[float, int, int, int]] = []          # (time, seq, kind, worker)
        COMPUTED, PUSHED = 0, 1
        snap: list = [None] * w
        pulled, started, batch_of, dur_of, blocked = [0] * w, [0.0] * w, [0] * w, [0.0] * w, {}
        seq = 0

        def event(t_at: float, kind: int, i: int) -> None:
            nonlocal seq
            heapq.heappush(heap, (t_at, seq, kind, i))
            seq += 1

        def start(i: int, now: float) -> None:
            gate.grant(i)
            snap[i], pulled[i] = server.pull(i)
            ready = links.pull(i, now, strat.pull_bytes(i, st.iterations[i], n_params))
            batch_of[i] = self.batches[i]
            dur = dur_of[i] = self.clock.duration(i, batch_of[i], ready)
            st.comm_s[i] += ready - now
            st.compute_s[i] += dur
            started[i] = now
            event(ready + dur, COMPUTED, i)

        for i in range(w):
            start(i, 0.0)
        every, t = self.tracker.s.eval_every, 0.0
        while heap:
            t, _, kind, i = heapq.heappop(heap)
            if kind == COMPUTED:
                done = links.push(i, t, strat.push_bytes(i, st.iterations[i], n_params))
                st.comm_s[i] += done - t
                event(done, PUSHED, i)
                continue
            grad = self._grad(i, snap[i], batch_of[i])
            st.pushes_made += 1
            version = server.push(i, grad, pulled[i], batch_of[i])
            gate.completed_push(i, t - started[i])
            st.iterations[i] += 1
            if version == REJECTED:                 # too stale for the server's rule: computed, not applied
                st.dropped[i] += 1
            else:
                self.samples += batch_of[i]
            if self.balancer.observe(i, batch_of[i], dur_of[i]):
                server.set_weights(self._weights())
            for j in sorted(blocked):
                if gate.may_proceed(j):
                    st.wait_s[j] += t - blocked.pop(j)
                    start(j, t)
            if gate.may_proceed(i):
                start(i, t)
            else:
                blocked[i] = t
            if version == REJECTED:
                continue
            if version % every == 0:
                self._evaluate(version, t, server.params)
            if self.tracker.should_stop(version, t):
                break
        for j, since in blocked.items():
            st.wait_s[j] += t - since
        st.pushes_applied = server.version
        st.gap_histogram = dict(gate.gap_histogram)
        st.update_staleness = dict(server.update_staleness)
        st.server_metrics = server.metrics()
        st.bound_max = gate.max_bound_used
        st.server_utilisation = links.utilisation(t)
        st.queue_s = list(links.queued_s)
        self.server, self.gate = server, gate
        return server.version, t, server.params.copy()


_MEASURED: dict[tuple, ComputeModel] = {}
FIT_BATCH_FACTORS = (0.25, 0.5, 1.0, 2.0)   # the compute model is fitted at these multiples of train.batch_size


def measure_compute_model(runtime, x, y, batch_size: int, repeats: int = 10) -> ComputeModel:
    """Fit ``t = t0 + b t1`` to median step times measured at several batch sizes."""
    bs = sorted({max(1, int(batch_size * f)) for f in FIT_BATCH_FACTORS})
    return ComputeModel.fit(bs, [runtime.measure_step_time(x[:b], y[:b], repeats=repeats) for b in bs])


def compute_model(opts: SyncOptions, ctx, runtime) -> tuple[ComputeModel, str]:
    """The compute model of a speed-1.0 worker: configured (``sync.step_overhead_s`` + ``sync.per_sample_s``,
    or ``sync.base_time_s`` as a linear model), placed (median of ``ctx.worker_step_time_s``, linear) or
    measured here (fitted at several batch sizes, cached per process). ``hardware.emulated_step_s`` rescales
    it so that a speed-1.0 step of ``train.batch_size`` lasts that long (what the MPI ranks emulate)."""
    b = ctx.settings.batch_size
    c = opts.sync
    if c.per_sample_s is not None:
        cm, how = ComputeModel(c.step_overhead_s or 0.0, c.per_sample_s), "configured"
    elif c.base_time_s:
        cm, how = ComputeModel.linear(c.base_time_s, b), "configured, linear"
    elif ctx.worker_step_time_s:
        cm, how = ComputeModel.linear(float(np.median(list(ctx.worker_step_time_s.values()))), b), "placed, linear"
    else:
        key = (getattr(ctx.model, "name", "?"), b)
        if key not in _MEASURED:
            _MEASURED[key] = measure_compute_model(runtime, ctx.dataset.x_train, ctx.dataset.y_train, b)
        cm, how = _MEASURED[key], "measured, fitted"
    emulated = opts.hardware.emulated_step_s
    if emulated:
        f = emulated / cm.time(b)
        cm, how = ComputeModel(cm.t0 * f, cm.t1 * f), how + f", scaled to emulated_step_s={emulated:g}"
    return cm, how


def train_virtual(strategy: SyncStrategy, opts: SyncOptions, ctx):
    """Run the emulation for ``ctx``; returns (result, stats, compute model). The reference
    (``orchestrator.sync.reference``) runs on the same compute model, ``result.compute_model``."""
    from orchestrator.execution.runtime import ModelRuntime

    runtime = ModelRuntime(ctx.model, seed=ctx.settings.seed, lr=ctx.settings.lr)
    theta0 = runtime.get_flat()
    check_virtual_memory(opts.workers, theta0.size, ctx.dataset)  # refuse what would not fit in memory
    cm, how = compute_model(opts, ctx, runtime)
    ctx.sink.set_tags({"sync.compute_model": f"t0={cm.t0:.6f}s t1={cm.t1:.8f}s/sample ({how})",
                       "sync.base_time": f"{cm.time(ctx.settings.batch_size):.6f}s ({how})"})
    run = VirtualRun(strategy, opts, ctx.settings, runtime, ctx.dataset, cm, ctx.sink)
    result, stats = run.run()
    result.compute_model = cm
    return result, stats, cm


def make_context(cfg: dict, output_dir, *, dataset=None, sink=None):
    """A ``TrainContext`` for the MNIST CNN from a plain config dict (benchmarks, tests)."""
    from pathlib import Path

    from orchestrator.data import load_mnist
    from orchestrator.execution.training import TrainContext
    from orchestrator.models import cnn

    settings = TrainSettings.from_cfg(cfg.get("train", {}), seed=cfg.get("seed"))
    return TrainContext(settings=settings, dataset=dataset or load_mnist(seed=cfg.get("seed", 0)),
                        model=cnn.spec({}), cluster=None, sink=sink or NullSink(), output_dir=Path(output_dir), cfg=cfg)

