"""Micro-batched pipeline schedules of a placed training-step graph (models extracted from
TensorFlow): GPipe fill-drain and 1F1B (PipeDream-Flush), scheduled task by task.

A placement's **stages** are the devices it uses, ordered by the graph's topological flow (mean
position of their nodes, a backward or update node counting at its forward twin's). Per stage and
micro-batch j there are two tasks, ``F<j>`` (the stage's forward and loss nodes) and ``B<j>`` (its
backward nodes), and once per mini-batch ``U`` (its update nodes: one optimizer step, gradients
accumulated over the micro-batches). A task lasts the sum of its nodes' costs on the device. Each
tensor that crosses devices (one per source node and destination device, as in the simulator) is
sent when its producer task ends, hop by hop along the route, one tensor at a time per link channel
(FIFO); its consumer tasks wait for it. Each device runs its tasks in the schedule's fixed order:

- ``gpipe`` (Huang et al. 2019, GPipe, Fig. 2c): F1 .. Fm, then Bm .. B1, then U;
- ``1f1b`` (Narayanan et al. 2019, PipeDream's one-forward-one-backward steady state, flushed once
  per mini-batch as in PipeDream-Flush, Narayanan et al. 2021): stage s (0-based, of S) runs
  w = min(S - 1 - s, m) warm-up forwards, then alternates F, B, then drains the last w backwards.

Devices that share a core pool (``cluster.CorePool``: ``hardware=local``'s logical CPUs) slow each
other down: while k tasks run on a pool's devices, each progresses at eff(k) / k of its speed alone
(processor sharing, ``orchestrator.hardware.contention``), simulated event by event; without two
stages on one pool every task simply lasts its duration (the code path as before).

A dependency against the stage order (a non-contiguous split: a forward tensor going back to an
earlier stage, a backward one to a later stage) cannot be waited for without a cycle; its transfer
time is added to the receiving task instead (counted, not waited for: ``against_order``).

Results: ``minibatch_time_s`` (the last task's end: fill, steady state, drain and the update),
``time_per_microbatch_s`` (steady state: the schedule's slope, (T(m1 + S) - T(m1)) / S with
m1 = max(m, S), both scheduled), ``bubble_fraction`` = 1 - m * time_per_microbatch / minibatch time
(GPipe's (S - 1) / (m + S - 1) on balanced stages), and per stage the peak number of micro-batches
in flight (F started, B not finished: ``gpipe`` m, ``1f1b`` min(m, S - s)) and the activation
memory they hold. Memory of a device = its parameters + in-flight x its forward nodes'
activations + its largest temporary buffer (``Simulator.memory``, which uses the same counts);
a placement over a memory pool's capacity is infeasible.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.graph.opgraph import OpGraph, original_edges
from orchestrator.hardware.cluster import Worker
from orchestrator.hardware.contention import SharedCores
from orchestrator.hardware.cost import hop_or_fixed_s
from orchestrator.placement.simulate.inflight import (
    SCHEDULES,
    B,
    F,
    MicrobatchSpec,
    U,
    flow_position,
    phase_of,
    stage_order,
)
from orchestrator.placement.simulate.simulator import Simulator
from orchestrator.schedules import schedule

Task = tuple[int, int, int]                                  # (phase, device, micro-batch)
# (src phase, src device, dst device) -> [{link channel: seconds}, consumer phases]
Transfers = dict[tuple[int, int, int], list[Any]]
# per (src phase, src dev): (dst dev, [(channel, seconds)] hops, consumer phases) of each tensor it sends
Sends = dict[tuple[int, int], list[tuple[int, list[tuple[int, float]], set[int]]]]
_NAMES = "FBU"


def settings(cfg: Any) -> tuple[int, str]:
    """``placement.micro_batches`` (int >= 1, default 1) and ``placement.schedule`` (gpipe | 1f1b)."""
    m = cfg.get("micro_batches", 1) if cfg is not None else 1
    kind = str(cfg.get("schedule", "1f1b") if cfg is not None else "1f1b").lower()
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ConfigError(f"placement.micro_batches={m!r} must be an integer >= 1")
    if kind not in SCHEDULES:
        raise ConfigError(f"placement.schedule={kind!r} (accepted: {', '.join(SCHEDULES)})")
    return m, kind


def task_order(kind: str, m: int, n_stages: int, stage: int) -> list[tuple[int, int]]:
    """The (phase, micro-batch) tasks of one stage in the order it runs them (micro-batches 0-based)."""
    return schedule(kind).order(m, n_stages, stage)


@dataclass
class ScheduleResult:
    schedule: str
    micro_batches: int
    stages: list[str]                               # device names, stage order
    minibatch_time_s: float
    time_per_microbatch_s: float
    bubble_fraction: float
    in_flight: dict[str, int]                       # peak micro-batches in flight per stage (simulated)
    activation_memory_bytes: dict[str, float]       # in flight x activations of one micro-batch
    memory_bytes: dict[str, float]                  # parameters + in-flight activations + largest temp
    oom: list[tuple[str, float]] = field(default_factory=list)
    stage_time_s: dict[str, float] = field(default_factory=dict)   # F + B of one micro-batch per stage
    against_order: int = 0
    schedule_events: list[dict[str, Any]] | None = None

    @property
    def feasible(self) -> bool:
        return not self.oom


class MicrobatchSchedule:
    """A graph on a worker, ready to schedule any assignment (device index per node) with
    ``micro_batches`` micro-batches; ``evaluate`` returns a ``ScheduleResult``."""

    def __init__(self, graph: OpGraph, worker: Worker, micro_batches: int, kind: str = "1f1b",
                 sim: Simulator | None = None):
        if kind not in SCHEDULES:
            raise ConfigError(f"placement.schedule={kind!r} (accepted: {', '.join(SCHEDULES)})")
        self.graph, self.worker, self.m, self.kind = graph, worker, int(micro_batches), kind
        self.sim = sim if sim is not None else Simulator(graph, worker, MicrobatchSpec(self.m, kind))
        self.phase = phase_of(graph)
        self.pos = flow_position(graph)
        self.nd = len(worker.devices)
        cost = self.sim.cost
        self.cost = np.where(np.isfinite(cost), cost, np.inf)
        pairs: dict[tuple[int, int], tuple[float, float]] = {}
        for e in original_edges(graph):
            u, v = graph.index(e.src), graph.index(e.dst)
            if u != v:
                b, f = pairs.get((u, v), (0.0, -1.0))
                pairs[u, v] = (max(b, e.bytes), max(f, -1.0 if e.cost is None else e.cost * graph.time_unit_s))
        self.e_src = np.array([p[0] for p in pairs], dtype=np.int64)
        self.e_dst = np.array([p[1] for p in pairs], dtype=np.int64)
        self.e_bytes = np.array([v[0] for v in pairs.values()])
        self.e_fixed = np.array([v[1] for v in pairs.values()])
        self.act = np.array([n.activation_bytes if self.phase[i] == F else 0.0 for i, n in enumerate(graph.nodes)])
        # shared cores (cluster.CorePool): the pool of each device and its group (pool name, or itself)
        self.pool = [worker.core_pool_of(d) for d in worker.devices]
        self.group: list[str | tuple[str, int] | None] = [d.core_pool if p is not None else ("device", i)
                      for i, (d, p) in enumerate(zip(worker.devices, self.pool))]

    # -- the plan of one assignment -------------------------------------------------------------
    def _plan(self, assign: IntArray) -> tuple[list[int], FloatArray, Transfers, int]:
        nd = self.nd
        stages = stage_order(self.pos, assign, nd)
        si = {d: k for k, d in enumerate(stages)}
        dur = np.zeros((3, nd))
        np.add.at(dur, (self.phase, assign), self.cost[np.arange(len(assign)), assign])
        # one tensor per (source node, destination device): bytes and fixed cost are the max over its edges
        items: dict[tuple[int, int], list[Any]] = {}   # (src node, dst device) -> [bytes, fixed, consumer phases]
        du, dv = assign[self.e_src], assign[self.e_dst]
        for k in np.flatnonzero(du != dv):
            key = (int(self.e_src[k]), int(dv[k]))
            it = items.setdefault(key, [0.0, -1.0, set()])
            it[0], it[1] = max(it[0], self.e_bytes[k]), max(it[1], self.e_fixed[k])
            it[2].add(int(self.phase[self.e_dst[k]]))
        transfers: Transfers = {}   # (src phase, src dev, dst dev) -> [hops, consumers]
        against = 0
        for (u, b), (nbytes, fixed, consumers) in items.items():
            a, pu = int(assign[u]), int(self.phase[u])
            r = a * nd + b
            hops: list[tuple[int, float]] = []
            for h in range(self.sim.route_ptr[r], self.sim.route_ptr[r + 1]):
                link = self.sim.route_link[h]
                t = hop_or_fixed_s(fixed, self.sim.link_lat[link], nbytes, self.sim.link_bw[link])
                hops.append((int(self.sim.link_chan[link]), float(t)))
            ok: set[int] = set()
            for pv in consumers:
                if _in_order(pu, pv, si[a], si[b]):
                    ok.add(pv)
                else:
                    against += 1
                    dur[pv, b] += sum(t for _, t in hops)
            if ok:
                tr = transfers.setdefault((pu, a, b), [{}, set()])
                for ch, t in hops:
                    tr[0][ch] = tr[0].get(ch, 0.0) + t
                tr[1] |= ok
        return stages, dur, transfers, against

    # -- scheduling -----------------------------------------------------------------------------
    def _run(self, m: int, stages: list[int], dur: FloatArray, transfers: Transfers, record: bool, update: bool = True,
             ) -> tuple[float, dict[Task, float], dict[Task, float], list[dict[str, Any]]]:
        """Times of every task of an ``m``-micro-batch mini-batch: (makespan, starts, ends, events)."""
        S = len(stages)
        order = {d: [(p, j) for p, j in task_order(self.kind, m, S, s)] + ([(U, 0)] if update else [])
                 for s, d in enumerate(stages)}
        out_of, pending = self._dependencies(m, transfers, update)
        ready: dict[Task, float] = {}
        chan_free: dict[int, float] = {}
        ptr = {d: 0 for d in stages}
        busy = {d: False for d in stages}
        free_at = {d: 0.0 for d in stages}
        start: dict[Task, float] = {}
        end: dict[Task, float] = {}
        events: list[dict[str, Any]] = []
        heap: list[tuple[float, int, int, Task, int]] = []   # (time, 0 end | 1 start, seq, task, version)
        seq = 0
        shared = self._sharing(stages)

        def try_start(d: int, t: float) -> None:
            nonlocal seq
            if busy[d] or ptr[d] >= len(order[d]):
                return
            p, j = order[d][ptr[d]]
            key = (p, d, j)
            if pending.get(key, 0) > 0:
                return
            s = max(t, free_at[d], ready.get(key, 0.0))
            start[key] = s
            busy[d] = True
            seq += 1
            if shared is None:   # its own cores: it ends dur later
                heapq.heappush(heap, (s + dur[p, d], 0, seq, key, 0))
            else:                # a start event: its pool's rates change at s
                heapq.heappush(heap, (s, 1, seq, key, 0))

        def push_ends(items: list[tuple[float, Task, int]]) -> None:
            nonlocal seq
            for at, k, version in items:
                seq += 1
                heapq.heappush(heap, (at, 0, seq, k, version))

        for d in stages:
            try_start(d, 0.0)
        while heap:
            t, kind, _, key, version = heapq.heappop(heap)
            p, d, j = key
            if shared is not None:
                if kind == 1:
                    push_ends(shared.start(key, self.group[d], self.pool[d], dur[p, d], t))
                    continue
                if not shared.current(key, version):
                    continue      # its finish time moved since this event was queued
                push_ends(shared.finish(key, t))
            end[key] = t
            busy[d], free_at[d] = False, t
            ptr[d] += 1
            for b, hops, consumers in out_of.get((p, d), []) if p != U else []:
                at = self._send(hops, t, chan_free, events if record else None, key, b)
                for pv in consumers:
                    if pv == U and not update:
                        continue
                    ck = (pv, b, 0 if pv == U else j)
                    pending[ck] -= 1
                    ready[ck] = max(ready.get(ck, 0.0), at)
                    try_start(b, t)
            try_start(d, t)
        n_tasks = sum(len(o) for o in order.values())
        if len(end) < n_tasks:  # pragma: no cover - the orders are deadlock-free by construction
            raise RuntimeError(f"pipeline schedule {self.kind} deadlocked after {len(end)} of {n_tasks} tasks")
        if record:
            events += self._task_events(start, end)
        return max(end.values(), default=0.0), start, end, events

    def _dependencies(self, m: int, transfers: Transfers, update: bool) -> tuple[Sends, dict[Task, int]]:
        """What each (phase, device) sends, and how many inputs each task waits for (an update waits for
        every micro-batch's tensors; without ``update`` nothing waits for it)."""
        out_of: Sends = {}
        pending: dict[Task, int] = {}
        for (pu, a, b), (hops, consumers) in transfers.items():
            out_of.setdefault((pu, a), []).append((b, list(hops.items()), consumers))
            for pv in consumers:
                if pv == U and update:
                    pending[U, b, 0] = pending.get((U, b, 0), 0) + m
                elif pv != U:
                    for j in range(m):
                        pending[pv, b, j] = pending.get((pv, b, j), 0) + 1
        return out_of, pending

    def _send(self, hops: list[tuple[int, float]], t: float, chan_free: dict[int, float],
              events: list[dict[str, Any]] | None, task: Task, b: int) -> float:
        """Task ``task``'s tensor to device ``b``, sent at ``t`` along ``hops`` (store and forward, each
        channel FIFO): when it arrives. With ``events``, one transfer event per hop is appended."""
        p, d, j = task
        at = t
        for ch, h in hops:
            s = max(at, chan_free.get(ch, 0.0))
            at = s + h
            chan_free[ch] = at
            if events is not None:
                events.append({"kind": "transfer", "row": self._chan_name(ch), "name": f"{_NAMES[p]}{j + 1} "
                               f"{self.worker.devices[d].name}->{self.worker.devices[b].name}",
                               "label": f"{_NAMES[p]}{j + 1}", "start": s, "end": at})
        return at

    def _task_events(self, start: dict[Task, float], end: dict[Task, float]) -> list[dict[str, Any]]:
        """One node event per task (the Gantt rows of the devices)."""
        events = []
        for (p, d, j), s in start.items():
            lab = "U" if p == U else f"{_NAMES[p]}{j + 1}"
            events.append({"kind": "node", "row": self.worker.devices[d].name, "name": lab, "label": lab,
                           "start": s, "end": end[p, d, j]})
        return events

    def _sharing(self, stages: list[int]) -> SharedCores | None:
        """A processor-sharing clock when two stages share a core pool, else None (each task lasts
        its duration: the schedule of devices with cores of their own)."""
        pooled = [self.group[d] for d in stages if self.pool[d] is not None]
        # SharedCores.__init__ (orchestrator.hardware, outside the strict set) is not annotated
        return SharedCores() if len(pooled) > len(set(pooled)) else None  # type: ignore[no-untyped-call]

    def _chan_name(self, ch: int) -> str:
        return next((name for name, c in self.sim.channel_names.items() if c == ch), f"channel {ch}")

    def minibatch_time(self, assign: npt.ArrayLike) -> float:
        """The mini-batch time only (the fast path for placers); inf where memory breaks."""
        a = np.asarray(assign, dtype=np.int64)
        if self.sim.memory(a)[1] or self.sim.violations(a):
            return math.inf
        stages, dur, transfers, _ = self._plan(a)
        if not np.isfinite(dur).all():
            return math.inf
        return float(self._run(self.m, stages, dur, transfers, False)[0])

    def evaluate(self, assign: npt.ArrayLike, *, record: bool = False) -> ScheduleResult:
        a = np.asarray(assign, dtype=np.int64)
        stages, dur, transfers, against = self._plan(a)
        names = [self.worker.devices[d].name for d in stages]
        S, m = len(stages), self.m
        total, start, end, events = self._run(m, stages, dur, transfers, record)
        m1 = max(m, S)
        t1 = self._run(m1, stages, dur, transfers, False, update=False)[0]
        t2 = self._run(m1 + S, stages, dur, transfers, False, update=False)[0]
        steady = (t2 - t1) / S
        peak: dict[int, int] = {}
        for d in stages:
            spans = sorted([(start[F, d, j], 1) for j in range(m)] + [(end[B, d, j], -1) for j in range(m)],
                           key=lambda x: (x[0], x[1]))
            cur = best = 0
            for _, step in spans:
                cur += step
                best = max(best, cur)
            peak[d] = best
        act_dev = np.bincount(a, weights=self.act, minlength=self.nd)
        mem, oom = self.sim.memory(a)
        return ScheduleResult(
            self.kind, m, names, float(total), float(steady),
            float(max(0.0, 1.0 - m * steady / total)) if total > 0 else 0.0,
            {self.worker.devices[d].name: int(peak[d]) for d in stages},
            {self.worker.devices[d].name: float(peak[d] * act_dev[d]) for d in stages},
            {n: float(x) for n, x in zip(self.worker.device_names, mem) if x > 0},
            oom, {self.worker.devices[d].name: float(dur[F, d] + dur[B, d]) for d in stages}, against,
            events if record else None)


def _in_order(pu: int, pv: int, su: int, sv: int) -> bool:
    """May the consumer task wait for this tensor without a cycle in the schedule?"""
    if pu == U:
        return False
    if pu == F and pv == F:
        return su < sv
    if pu == B and pv == B:
        return su > sv
    return not (pu == B and pv == F)
