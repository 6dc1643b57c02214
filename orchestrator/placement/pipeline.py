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
from typing import Any

import numpy as np


def original_edges(graph) -> list:
    """The graph's edges without the ones the workload loader added to join the two passes."""
    added = int(graph.meta.get("added_training_edges", 0) or 0)
    return graph.edges[:len(graph.edges) - added] if added else list(graph.edges)


class PipelineModel:
    """Arrays for the fast evaluation of ``time_per_sample(assign)`` (device index per node)."""

    def __init__(self, graph: Any, worker: Any, sim: Any = None):
        from orchestrator.placement.simulator import Simulator

        self.graph, self.worker = graph, worker
        self.sim = sim if sim is not None else Simulator(graph, worker)
        n, nd = len(graph.nodes), len(worker.devices)
        self.n, self.nd = n, nd
        self.cost = self.sim.cost
        pairs = {}
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
        links = worker.links
        dev_ix = {d.name: i for i, d in enumerate(worker.devices)}
        self.n_links = max(1, len(links))
        self.link_src = np.array([dev_ix.get(l.src, -1) for l in links] + [-1], dtype=np.int64)
        self.link_dst = np.array([dev_ix.get(l.dst, -1) for l in links] + [-1], dtype=np.int64)
        self.link_lat = np.array([l.latency_s for l in links] + [0.0])
        self.link_bw = np.array([l.bandwidth for l in links] + [1.0])
        self.link_chan = self.sim.link_chan
        hops = max([self.sim.route_ptr[i + 1] - self.sim.route_ptr[i] for i in range(nd * nd)] + [1])
        self.routes = np.full((nd, nd, hops), -1, dtype=np.int64)
        for a in range(nd):
            for b in range(nd):
                r = a * nd + b
                ls = self.sim.route_link[self.sim.route_ptr[r]:self.sim.route_ptr[r + 1]]
                self.routes[a, b, :len(ls)] = ls

    def loads(self, assign) -> tuple[np.ndarray, np.ndarray]:
        """(load per device, busy time per link channel), in seconds per sample."""
        a = np.asarray(assign, dtype=np.int64)
        comp = self.cost[np.arange(self.n), a]
        load = np.bincount(a, weights=np.where(np.isfinite(comp), comp, np.inf), minlength=self.nd)
        chan = np.zeros(self.sim.n_chan)
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
                hop = np.where(f >= 0, f, self.link_lat[ll] + self.nbytes[uu] / self.link_bw[ll])
                for ends in (self.link_src[ll], self.link_dst[ll]):
                    ok = ends >= 0
                    load += np.bincount(ends[ok], weights=hop[ok], minlength=self.nd)
                chan = np.bincount(self.link_chan[ll], weights=hop, minlength=self.sim.n_chan)
        return load, chan

    def time_per_sample(self, assign) -> float:
        a = np.asarray(assign, dtype=np.int64)
        if self.sim.memory(a)[1] or self.sim.violations(a):
            return math.inf
        load, chan = self.loads(a)
        return float(max(load.max(initial=0.0), chan.max(initial=0.0)))

    def device_loads(self, assign) -> dict[str, float]:
        load, _ = self.loads(assign)
        return {d.name: float(x) for d, x in zip(self.worker.devices, load)}


def lower_bound(graph: Any, worker: Any, sim: Any = None, time_limit_s: float = 10.0) -> tuple[float, dict[str, float]]:
    """A certified lower bound on the time per sample of every placement that fits in memory
    (contiguous or not), and its parts. Communication only adds load, so it is left out:

    - ``lp``: the LP relaxation of assigning nodes (colocation groups as units) to devices,
      min T s.t. sum_d x[a,d] = 1, sum_a cost[a,d] x[a,d] <= T, sum_a mem[a] x[a,d] <= cap(pool),
      x >= 0 (x[a,d] = 0 where a may not run on d), solved by HiGHS (``scipy.optimize.linprog``);
    - ``atom``: the largest over groups of the group's cheapest allowed device cost.
    The bound is the larger; ``lp`` is skipped (0) where the solver fails or runs out of time."""
    from orchestrator.placement.search import PlacementProblem

    prob = PlacementProblem(graph, worker) if sim is None else PlacementProblem(graph, worker, _SimOnly(sim))
    cost = prob.atom_cost
    atom = float(np.where(prob.allowed, cost, np.inf).min(axis=1).max(initial=0.0))
    parts = {"atom": atom if math.isfinite(atom) else 0.0, "lp": _lp_bound(prob, time_limit_s)}
    return max(parts.values()), parts


class _SimOnly:
    def __init__(self, sim):
        self.simulator = sim


def _lp_bound(prob: Any, time_limit_s: float) -> float:
    try:
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix
    except ImportError:  # pragma: no cover - scipy is a dependency of the project's set
        return 0.0
    na, nd = prob.n_atoms, prob.nd
    ix = [(a, d) for a in range(na) for d in range(nd) if prob.allowed[a, d]]
    nv = len(ix) + 1                                  # x[a,d] ..., T
    rows, cols, vals, b_ub = [], [], [], []
    r = 0
    for d in range(nd):                               # load_d - T <= 0
        for j, (a, dd) in enumerate(ix):
            if dd == d and prob.atom_cost[a, d] > 0:
                rows.append(r), cols.append(j), vals.append(float(prob.atom_cost[a, d]))
        rows.append(r), cols.append(nv - 1), vals.append(-1.0)
        b_ub.append(0.0)
        r += 1
    need = prob.atom_resident                         # (temp is a max per pool, not a sum: left out)
    for p, cap in enumerate(prob.full_cap):           # memory per pool (full capacity: a valid bound)
        if not math.isfinite(cap):
            continue
        for j, (a, d) in enumerate(ix):
            if prob.pool_of[d] == p and need[a] > 0:
                rows.append(r), cols.append(j), vals.append(float(need[a]))
        b_ub.append(float(cap))
        r += 1
    a_eq = coo_matrix(([1.0] * len(ix), ([a for a, _ in ix], list(range(len(ix))))), shape=(na, nv))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, nv))
    c = np.zeros(nv)
    c[-1] = 1.0
    try:
        res = linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, A_eq=a_eq.tocsr(), b_eq=np.ones(na), bounds=(0, None),
                      method="highs", options={"time_limit": float(time_limit_s)})
    except (ValueError, MemoryError):
        return 0.0
    if res.status != 0:
        return 0.0
    # HiGHS' dual bound on an optimal LP equals the objective; shave the solver's tolerance off so
    # the figure stays a bound.
    return max(0.0, float(res.fun) * (1 - 1e-7) - 1e-12)
