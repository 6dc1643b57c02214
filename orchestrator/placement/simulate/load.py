"""The pipeline objective: steady-state time per sample of a pipelined schedule (micro-batches flow
through the devices, every device works at once), i.e. the largest *load* over devices and link
channels.

Formula (the workload authors' evaluator, msr-fiddle/dnn-partitioning ``throughput-dp/dp.cpp``,
``computeLoadForResultOrg``, generalised from their star topology to any worker)::

    load(d)  = sum of cost(v, d) over the nodes v on d                          (compute)
             + sum over tensors t = (node u, link l) crossing a link l that ends at d  (communication)
    time per sample = max( max_d load(d), max_c busy(c) )    busy(c): hop times on link channel c

A node's output crosses each link of the routes to its consumers' devices once (one tensor per
node and link, however many consumers sit behind it); a hop costs the edge's fixed ``cost`` (the
workload format) or latency + bytes / bandwidth. Each *device* endpoint of the link pays the hop;
host memory is not a device, so on the format's hardware (every accelerator linked to host memory)
this is exactly the authors' rule: a node with an edge to another device charges its outgoing
cost once to its own accelerator and once to each other accelerator that receives it, and the CPU
pays no communication. Only the file's own edges count (not the forward->backward edges that
``workload._connect_training_step`` adds for the one-step simulation). Placements that break
memory, ``cpu_only`` or colocation are ``inf``, as in the simulator.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import numpy.typing as npt

from orchestrator.graph.arrays import FloatArray
from orchestrator.graph.opgraph import OpGraph, original_edges
from orchestrator.hardware.cluster import Worker
from orchestrator.hardware.cost import hop_or_fixed_array, hop_or_fixed_s
from orchestrator.placement.simulate.simulator import Simulator


class LoadModel:
    """Arrays for the fast evaluation of ``time_per_sample(assign)`` (device index per node)."""

    def __init__(self, graph: OpGraph, worker: Worker, sim: Simulator | None = None):
        self.graph, self.worker = graph, worker
        self.sim = sim if sim is not None else Simulator(graph, worker)
        n, nd = len(graph.nodes), len(worker.devices)
        self.n, self.nd = n, nd
        self.cost = self.sim.cost
        pairs: dict[tuple[int, int], None] = {}   # an ordered set of (src, dst) node pairs
        self.fixed = np.full(n, -1.0)
        self.nbytes = np.zeros(n)
        for e in original_edges(graph):
            u, v = graph.index(e.src), graph.index(e.dst)
            if u == v:
                continue
            pairs[u, v] = None
            self.nbytes[u] = max(self.nbytes[u], e.bytes)
            if e.cost is not None:
                self.fixed[u] = max(self.fixed[u], e.cost * graph.time_unit_s)
        self.src = np.array([p[0] for p in pairs], dtype=np.int64)
        self.dst = np.array([p[1] for p in pairs], dtype=np.int64)
        ends = self.sim.link_ends
        dev_ix = {d.name: i for i, d in enumerate(worker.devices)}
        self.n_links = max(1, len(ends))
        self.link_src = np.array([dev_ix.get(a, -1) for a, _ in ends] + [-1], dtype=np.int64)
        self.link_dst = np.array([dev_ix.get(b, -1) for _, b in ends] + [-1], dtype=np.int64)
        self.link_lat, self.link_bw = self.sim.link_lat, self.sim.link_bw
        self.link_chan = self.sim.link_chan
        hops = max([self.sim.route_ptr[i + 1] - self.sim.route_ptr[i] for i in range(nd * nd)] + [1])
        self.routes = np.full((nd, nd, hops), -1, dtype=np.int64)
        for a in range(nd):
            for b in range(nd):
                r = a * nd + b
                ls = self.sim.route_link[self.sim.route_ptr[r]:self.sim.route_ptr[r + 1]]
                self.routes[a, b, :len(ls)] = ls

    def hop_s(self, u: int, l: int) -> float:
        """Seconds of node ``u``'s output over link ``l`` (0 for no link, -1): the edge's fixed cost, else
        latency + bytes / bandwidth (the hop ``loads`` charges)."""
        if l < 0:
            return 0.0
        return float(hop_or_fixed_s(self.fixed[u], self.link_lat[l], self.nbytes[u], self.link_bw[l]))

    def loads(self, assign: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(load per device, busy time per link channel), in seconds per sample."""
        a = np.asarray(assign, dtype=np.int64)
        comp = self.cost[np.arange(self.n), a]
        load = cast(FloatArray, np.bincount(a, weights=np.where(np.isfinite(comp), comp, np.inf), minlength=self.nd))  # weighted: float
        chan: FloatArray = np.zeros(self.sim.n_chan)
        if len(self.src):
            du, dv = a[self.src], a[self.dst]
            x = du != dv
            if x.any():
                route = self.routes[du[x], dv[x]]                       # (m, hops) link ids, -1 padded
                uu = np.repeat(self.src[x], route.shape[1])
                ll = route.ravel()
                keep = ll >= 0
                key = np.unique(uu[keep] * self.n_links + ll[keep])     # one tensor per (node, link)
                uu, ll = key // self.n_links, key % self.n_links
                f = self.fixed[uu]
                hop = hop_or_fixed_array(f, self.link_lat[ll], self.nbytes[uu], self.link_bw[ll])
                for ends in (self.link_src[ll], self.link_dst[ll]):
                    ok = ends >= 0
                    load += np.bincount(ends[ok], weights=hop[ok], minlength=self.nd)
                chan = cast(FloatArray, np.bincount(self.link_chan[ll], weights=hop, minlength=self.sim.n_chan))
        return load, chan

    def time_per_sample(self, assign: npt.ArrayLike) -> float:
        a = np.asarray(assign, dtype=np.int64)
        if self.sim.memory(a)[1] or self.sim.violations(a):
            return math.inf
        load, chan = self.loads(a)
        return float(max(load.max(initial=0.0), chan.max(initial=0.0)))

    def device_loads(self, assign: npt.ArrayLike) -> dict[str, float]:
        load, _ = self.loads(assign)
        return {d.name: float(x) for d, x in zip(self.worker.devices, load)}
