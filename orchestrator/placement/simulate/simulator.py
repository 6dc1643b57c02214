"""Simulate one training step of an ``OpGraph`` placed on a ``Worker``: step time, per-device busy time
and peak memory, out-of-memory verdicts, and optionally the full schedule (for ``gantt``).

Model:
- a node runs on its device for ``graph.node_cost_s``; each device runs one node at a time;
- ready-list order: when a device is idle it starts, among its nodes whose inputs have all arrived,
  the one with the largest *upward rank* (longest path to a sink with every node at its fastest
  cost, communication free), ties by node index;
- a node's output goes once per destination device along ``worker.route`` (latency + bytes /
  bandwidth per hop, or the edge's fixed ``cost`` per hop); a link carries one tensor at a time and
  links with one ``shared`` name are one channel (contention);
- memory per device: params + activations of its nodes (all live for the step) + the largest temp;
  devices with one ``memory_pool`` share it. In a micro-batched pipeline (``microbatch``, a
  ``MicrobatchSpec``) a stage holds the forward activations of every micro-batch in flight
  (``orchestrator.placement.simulate.inflight.in_flight``: GPipe m, 1F1B min(m, S - stage)). Over capacity -> infeasible, never simulated as if fine:
  ``step_time_s`` is inf, ``oom`` says where and by how many bytes; ``makespan_s`` still holds the
  schedule length (what a memory-blind evaluator would report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.graph.opgraph import OpGraph
from orchestrator.graph.placement import Placement
from orchestrator.hardware.cluster import Worker
from orchestrator.placement.graph.kernels import upward_rank
from orchestrator.placement.simulate.inflight import F, MicrobatchSpec, flow_position, in_flight_counts, phase_of
from orchestrator.placement.simulate.sim_kernel import HAVE_NUMBA, StepArrays, run_step


@dataclass
class SimResult:
    step_time_s: float
    feasible: bool
    oom: list[tuple[str, float]]                 # (device or memory pool, bytes over)
    peak_memory_bytes: dict[str, float]
    busy_s: dict[str, float]
    schedule: list[dict[str, Any]] | None = None           # {"kind": "node"|"transfer", "row", "name", "start", "end"}
    makespan_s: float = 0.0
    violations: list[str] = field(default_factory=list)   # cpu_only / colocation broken


class Simulator:
    """Precomputes a graph and worker into arrays; then each placement costs one pass of the kernel."""

    def __init__(self, graph: OpGraph, worker: Worker, microbatch: MicrobatchSpec | None = None):
        self.graph, self.worker = graph, worker
        self.microbatch = microbatch
        devs = worker.devices
        self.device_index = {d.name: i for i, d in enumerate(devs)}
        n, nd = len(graph.nodes), len(devs)
        self.cost = np.array([[graph.node_cost_s(nd_, d) for d in devs] for nd_ in graph.nodes], dtype=float).reshape(n, nd)
        # successor CSR: one entry per (source, destination) pair, destinations ascending; a pair's
        # bytes and fixed cost are the largest of its edges (built with numpy: O(E log E))
        ix = graph._index
        e_src = np.fromiter((ix[e.src] for e in graph.edges), np.int64, len(graph.edges))
        e_dst = np.fromiter((ix[e.dst] for e in graph.edges), np.int64, len(graph.edges))
        e_bytes = np.fromiter((e.bytes for e in graph.edges), float, len(graph.edges))
        e_fixed = np.fromiter((-1.0 if e.cost is None else e.cost * graph.time_unit_s for e in graph.edges), float,
                              len(graph.edges))
        pair, inv = np.unique(e_src * n + e_dst, return_inverse=True)
        self.succ_bytes, self.succ_fixed = np.zeros(len(pair)), np.full(len(pair), -1.0)
        np.maximum.at(self.succ_bytes, inv, e_bytes)
        np.maximum.at(self.succ_fixed, inv, e_fixed)
        self.succ_idx = (pair % max(n, 1)).astype(np.int64)
        self.succ_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair // max(n, 1), minlength=n), out=self.succ_ptr[1:])
        self.npred = np.zeros(n, dtype=np.int64)
        np.add.at(self.npred, self.succ_idx, 1)
        self._routes(worker)
        self.fastest = self.cost.min(axis=1)
        # upward rank at the fastest costs, communication free (one compiled pass)
        self.rank = rank = upward_rank(graph.topological_order(), self.succ_ptr, self.succ_idx, self.fastest)
        order = np.lexsort((np.arange(n), -rank))          # by rank descending, ties by index
        self.prio = np.empty(n, dtype=np.int64)
        self.prio[order] = np.arange(n)
        self._memory(graph, worker)
        groups = graph.groups()
        self.group_members = [np.array([graph.index(m) for m in ms]) for ms in groups.values() if len(ms) > 1]
        # the checks every evaluation makes, as flat arrays (a search scores thousands of placements:
        # per-group Python loops and per-call index arrays cost as much as the simulation itself)
        self._nodes = np.arange(n)
        self._grp_nodes = np.concatenate(self.group_members) if self.group_members else np.zeros(0, np.int64)
        self._grp_first = np.concatenate([np.full(len(m), m[0]) for m in self.group_members]) \
            if self.group_members else np.zeros(0, np.int64)
        self._edge_src = np.repeat(self._nodes, np.diff(self.succ_ptr))
        self._all_reachable = bool(self.reachable.all())
        self._pool_ix = [ix for _, ix, _ in self.pools]
        self._pool_cap = [cap for _, _, cap in self.pools]

    def _routes(self, worker: Worker) -> None:
        links = worker.links
        self.link_ends = list(links)                       # link id -> its endpoints
        lid = {k: i for i, k in enumerate(links)}
        self.channel_names: dict[str, int] = {}
        self.link_chan = np.array([self.channel_names.setdefault(worker.topology.channel(k), len(self.channel_names))
                                   for k in links] + [0], dtype=np.int64)
        self.n_chan = max(1, len(self.channel_names))
        self.link_lat = np.array([l.latency_s for l in links.values()] + [0.0])
        self.link_bw = np.array([l.bandwidth for l in links.values()] + [1.0])
        ptr, hops = [0], []
        devs = worker.devices
        for a in devs:
            for b in devs:
                try:
                    hops += [lid[k] for k in worker.route(a, b)]
                except ConfigError:
                    pass                       # unreachable pair: only an error if a placement uses it
                ptr.append(len(hops))
        self.route_ptr, self.route_link = np.array(ptr, dtype=np.int64), np.array(hops + [0], dtype=np.int64)
        self.reachable = np.array([[a is b or self.route_ptr[i * len(devs) + j + 1] > self.route_ptr[i * len(devs) + j]
                                    or (a.kind == "cpu" and b.kind == "cpu" and a.host == b.host)
                                    for j, b in enumerate(devs)] for i, a in enumerate(devs)])

    def _memory(self, graph: OpGraph, worker: Worker) -> None:
        self.resident = np.array([n.param_bytes + n.activation_bytes for n in graph.nodes])
        self.temp = np.array([n.temp_bytes for n in graph.nodes])
        pools: dict[str, list[int]] = {}
        for i, d in enumerate(worker.devices):
            pools.setdefault(d.memory_pool or d.name, []).append(i)
        self.pools = [(name, np.array(ix), min(worker.devices[i].memory_bytes for i in ix)) for name, ix in pools.items()]
        # a micro-batched pipeline (``self.microbatch``, ``orchestrator.placement.simulate.inflight``):
        # each stage also holds the forward activations of the other micro-batches it has in flight
        self.pipeline_schedule: tuple[int, str] | None = None
        mb = self.microbatch
        if mb is not None and mb.micro_batches > 1:
            self.pipeline_schedule = (mb.micro_batches, mb.schedule)
            self.flow_pos = flow_position(graph)
            self.act_fwd = np.array([n.activation_bytes for n in graph.nodes]) * (phase_of(graph) == F)

    # -- evaluation ---------------------------------------------------------------------------
    def assignment(self, placement: Placement) -> IntArray:
        placement.check(self.graph)
        try:
            return np.array([self.device_index[placement.assignment[n.name]] for n in self.graph.nodes], dtype=np.int64)
        except KeyError as exc:
            raise ConfigError(f"placement uses device {exc.args[0]!r}, not on worker {self.worker.name!r}") from None

    def memory(self, assign: IntArray) -> tuple[FloatArray, list[tuple[str, float]]]:
        nd = len(self.worker.devices)
        res = cast(FloatArray, np.bincount(assign, weights=self.resident, minlength=nd))  # weighted: float (numpy's stubs say int)
        if self.pipeline_schedule is not None:
            k = in_flight_counts(self.graph, assign, nd, *self.pipeline_schedule, pos=self.flow_pos)
            res += (k - 1) * np.bincount(assign, weights=self.act_fwd, minlength=nd)
        tmp = np.zeros(nd)
        np.maximum.at(tmp, assign, self.temp)
        peak = res + tmp
        oom = []
        for name, ix, cap in self.pools:
            used = res[ix].sum() + tmp[ix].max()
            if used > cap:
                oom.append((name, float(used - cap)))
        return peak, oom

    def violations(self, assign: IntArray) -> list[str]:
        out = []
        bad = np.flatnonzero(~np.isfinite(self.cost[self._nodes, assign]))
        out += [f"node {self.graph.nodes[i].name!r} cannot run on {self.worker.devices[assign[i]].name}" for i in bad[:3]]
        split = np.flatnonzero(assign[self._grp_nodes] != assign[self._grp_first])
        if len(split):
            out.append(f"colocation group {self.graph.nodes[self._grp_first[split[0]]].group!r} is split")
        if not self._all_reachable and len(self._edge_src) and \
                not self.reachable[assign[self._edge_src], assign[self.succ_idx]].all():
            out.append("an edge joins devices with no route between them")
        return out

    def admissible(self, assign: IntArray) -> bool:
        """No memory pool over capacity and no violation (``memory`` and ``violations`` both empty),
        without building their reports: the check in front of every fast-path evaluation."""
        if self.pipeline_schedule is not None:
            return not self.memory(assign)[1] and not self.violations(assign)
        nd = len(self.worker.devices)
        res = np.bincount(assign, weights=self.resident, minlength=nd)
        tmp = np.zeros(nd)
        np.maximum.at(tmp, assign, self.temp)
        for ix, cap in zip(self._pool_ix, self._pool_cap):
            if res[ix].sum() + tmp[ix].max() > cap:
                return False
        if not np.isfinite(self.cost[self._nodes, assign]).all():
            return False
        if len(self._grp_nodes) and (assign[self._grp_nodes] != assign[self._grp_first]).any():
            return False
        return self._all_reachable or not len(self._edge_src) or \
            bool(self.reachable[assign[self._edge_src], assign[self.succ_idx]].all())

    def _run(self, assign: IntArray, record: bool) -> StepArrays:
        return cast(StepArrays, run_step(assign, self.cost, self.succ_ptr, self.succ_idx, self.succ_bytes, self.succ_fixed, self.npred,
                        self.prio, self.route_ptr, self.route_link, self.link_chan, self.link_lat, self.link_bw,
                        self.n_chan, record))  # numba's @njit is untyped

    def step_time(self, assign: npt.ArrayLike) -> float:
        """Seconds for one step; inf when the placement breaks memory or placement constraints."""
        assign = np.asarray(assign, dtype=np.int64)
        if not self.admissible(assign):
            return math.inf
        return float(self._run(assign, False)[0])

    def evaluate(self, assign: npt.ArrayLike, *, schedule: bool = False) -> SimResult:
        assign = np.asarray(assign, dtype=np.int64)
        peak, oom = self.memory(assign)
        viol = self.violations(assign)
        makespan, start, finish, busy, tx, n_tx = self._run(assign, schedule)
        names = [d.name for d in self.worker.devices]
        events = None
        if schedule:
            events = [{"kind": "node", "row": names[assign[i]], "name": n.name, "start": float(start[i]),
                       "end": float(finish[i])} for i, n in enumerate(self.graph.nodes)]
            for row in tx[:n_tx]:
                events.append({"kind": "transfer", "row": self.worker.topology.channel(self.link_ends[int(row[2])]),
                               "name": f"{self.graph.nodes[int(row[0])].name}->{names[int(row[1])]}",
                               "start": float(row[3]), "end": float(row[4])})
        feasible = not oom and not viol
        return SimResult(float(makespan) if feasible else math.inf, feasible, oom,
                         dict(zip(names, map(float, peak))), dict(zip(names, map(float, busy))), events,
                         float(makespan), viol)


def simulate(graph: OpGraph, worker: Worker, placement: Placement, *, schedule: bool = False) -> SimResult:
    sim = Simulator(graph, worker)
    return sim.evaluate(sim.assignment(placement), schedule=schedule)


def lower_bound(graph: OpGraph, worker: Worker, sim: Simulator | None = None) -> float:
    """max(critical path at fastest costs with free communication, total fastest work / devices);
    ``sim``: a simulator of this graph and worker already built (its ranks are the critical path)."""
    sim = Simulator(graph, worker) if sim is None or sim.graph is not graph or sim.worker is not worker else sim
    return float(max(sim.rank.max(initial=0.0), sim.fastest.sum() / len(worker.devices)))


__all__ = ["SimResult", "Simulator", "simulate", "lower_bound", "HAVE_NUMBA"]
