"""The exact optimiser of the pipeline objective among *contiguous* splits: every device gets
``I \\ J`` for two ideals ``J ⊂ I`` of the DAG (down-closed sets of its forward nodes; a backward
node goes with its forward twin), as in the workload authors' DP (msr-fiddle/dnn-partitioning
``throughput-dp/dp.cpp``, ``Graph::runDP``): the partitioning engine's min-max split
(``orchestrator.partition.split``) with ``load_c(S)``, the pipeline load of ``S`` on a device of class c
(``orchestrator.placement.simulate.load``), as its segment cost: compute + the hop cost of each node of S
with an edge leaving S + of each node outside S with an edge into S; infinite when S does not fit the
device's memory (less the headroom) or holds a node the class cannot run.

What makes it fast where the reference takes minutes: (1) the load is updated incrementally as the
engine's walk adds and removes units (O(degree) per step) instead of recomputed per pair; (2) a walk stops
as soon as the compute alone, or the memory, of ``I \\ J`` rules it out against the best answer known
(``upper``, e.g. a heuristic's value): both only grow along a walk, so nothing better is cut off; (3) a J
whose every dp value is already >= ``upper`` is skipped.

Exact when every device reaches the others through one link of its own to a hub (the format's
hardware: accelerators linked to host memory, CPU cores in it); elsewhere the loads are estimated
from each device's first and last hop (``exact`` False) and the final value is the evaluator's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from orchestrator.graph.arrays import IntArray
from orchestrator.graph.opgraph import original_edges
from orchestrator.partition import split as engine
from orchestrator.partition.ideals import IDEALS_LIMIT, chain, ideals, scc
from orchestrator.placement.simulate.load import LoadModel
from orchestrator.placement.solve.problem import PlacementProblem


@dataclass
class DPResult:
    assign: IntArray | None       # device index per node, None when no contiguous split fits
    value: float                  # the DP's time per sample (seconds)
    ideals: int
    pairs: int                    # (J, I) pairs whose load was computed
    exact: bool                   # the DP's loads are the evaluator's (hub topology)
    order: str                    # "ideals" (all contiguous splits) or "linear" (prefixes of one order)


def supers(prob: PlacementProblem) -> tuple[IntArray, int, list[set[int]]]:
    """Atoms fused into the units of the order (``super`` per atom), and each unit's order-predecessors.
    Order edges: forward -> forward edges between atoms; where forward and backward nodes share
    atoms (training), backward -> backward edges into or out of a backward-only atom, mirrored;
    without such sharing, every edge. Strongly connected atoms are fused (as the authors do)."""
    g = prob.graph
    role_bwd = np.array([n.role == "backward" for n in g.nodes])
    atom_bwd_only = np.ones(prob.n_atoms, dtype=bool)
    np.logical_and.at(atom_bwd_only, prob.atom_of, role_bwd)
    mixed = bool((~atom_bwd_only).any() and role_bwd.any()
                 and any(role_bwd[m].any() and not role_bwd[m].all() for m in prob.members))
    adj: list[set[int]] = [set() for _ in range(prob.n_atoms)]
    for e in original_edges(g):
        u, v = g.index(e.src), g.index(e.dst)
        a, b = int(prob.atom_of[u]), int(prob.atom_of[v])
        if a == b:
            continue
        if not mixed:
            adj[a].add(b)
        elif not role_bwd[u] and not role_bwd[v]:
            adj[a].add(b)
        elif role_bwd[u] and role_bwd[v] and (atom_bwd_only[a] or atom_bwd_only[b]):
            adj[b].add(a)
    comp = scc(adj)
    n_sup = int(comp.max()) + 1 if len(comp) else 0
    preds: list[set[int]] = [set() for _ in range(n_sup)]
    for a, outs in enumerate(adj):
        for b in outs:
            if comp[a] != comp[b]:
                preds[comp[b]].add(int(comp[a]))
    return comp, n_sup, preds


def device_classes(prob: PlacementProblem, model: LoadModel) -> tuple[list[list[int]], list[tuple[int, int]], bool]:
    """Identical devices grouped (same costs, memory, links), each class's (up link, down link)
    (link indices or -1), and whether the hub rule holds (the DP's loads are then exact)."""
    nd, exact = prob.nd, True
    up, down = [-1] * nd, [-1] * nd
    for a in range(nd):
        for b in range(nd):
            if a == b:
                continue
            route = [int(l) for l in model.routes[a, b] if l >= 0]
            touch_a = [l for l in route if a in (model.link_src[l], model.link_dst[l])]
            touch_b = [l for l in route if b in (model.link_src[l], model.link_dst[l])]
            others = [l for l in route if {int(model.link_src[l]), int(model.link_dst[l])} - {a, b, -1}]
            if len(touch_a) > 1 or len(touch_b) > 1 or others or (touch_a and touch_a == touch_b):
                exact = False
            for lst, t in ((up, a), (down, b)):
                link = (touch_a if t == a else touch_b)
                if link:
                    if lst[t] not in (-1, link[0]):
                        exact = False
                    lst[t] = link[0] if lst[t] == -1 else lst[t]
    pools = np.bincount(prob.pool_of, minlength=len(prob.pool_cap))
    keys: dict[tuple[object, ...], list[int]] = {}
    for d in range(nd):
        shared = pools[prob.pool_of[d]] > 1 and math.isfinite(prob.pool_cap[prob.pool_of[d]])
        exact &= not shared
        sig = tuple((float(model.link_lat[l]), float(model.link_bw[l])) if l >= 0 else None for l in (up[d], down[d]))
        key = (prob.worker.devices[d].kind, prob.sim.cost[:, d].tobytes(), float(prob.pool_cap[prob.pool_of[d]]), sig)
        keys.setdefault(key, []).append(d)
    classes = list(keys.values())
    return classes, [(up[c[0]], down[c[0]]) for c in classes], exact


def solve(prob: PlacementProblem, model: LoadModel | None = None, upper: float = math.inf,
          limit: int = IDEALS_LIMIT, linear: bool = False, deadline: float = math.inf) -> DPResult:
    """The best contiguous split (see the module doc); ``upper``: a value known to be reachable
    (only better splits are looked for; ``assign`` None if there is none)."""
    model = model or LoadModel(prob.graph, prob.worker, prob.sim)
    comp, n_sup, preds = supers(prob)
    sup_of = comp[prob.atom_of]
    found = None if linear else ideals(n_sup, preds, limit)
    order = "ideals"
    if found is None:                                       # too many (or asked): prefixes of one order
        order = "linear"
        found = ideals(n_sup, chain(n_sup), n_sup + 2)
    assert found is not None   # a chain of n_sup units has n_sup + 1 ideals, under the limit
    masks, steps = found
    classes, links, exact = device_classes(prob, model)
    load = _Load(_UnitCosts(prob, sup_of, n_sup, [c[0] for c in classes]), _CommLoad(model, sup_of, n_sup, links), upper)
    table = engine.Split([len(c) for c in classes], len(masks))
    pairs, done = engine.solve(table, steps, load, upper, deadline)
    if not done:
        return DPResult(None, math.inf, len(masks), pairs, exact, "timeout")
    value = table.value
    if masks[-1] != (1 << n_sup) - 1 or not math.isfinite(value) or value >= upper:
        return DPResult(None, math.inf, len(masks), pairs, exact, order)
    return DPResult(_assignment(table, prob.n, classes, masks, sup_of, n_sup), value, len(masks), pairs, exact, order)


def _assignment(table: engine.Split, n: int, classes: list[list[int]], masks: list[int], sup_of: IntArray,
                n_sup: int) -> IntArray:
    """The device of each node in the best split of all nodes on all devices (each class's devices in turn)."""
    assign = np.full(n, -1, dtype=np.int64)
    free = [list(c) for c in classes]
    for c, j, i in table.segments():
        dev = free[c].pop(0)
        units = masks[i] & ~masks[j]
        for x in range(n_sup):
            if units >> x & 1:
                assign[sup_of == x] = dev
    return assign


class _UnitCosts:
    """Per unit of the order: compute seconds on each device class's representative device, resident and
    temporary bytes; each class's memory capacity (less the headroom)."""

    def __init__(self, prob: PlacementProblem, sup_of: IntArray, n_sup: int, reps: list[int]):
        self.comp_c = np.zeros((n_sup, len(reps)))
        np.add.at(self.comp_c, sup_of, prob.sim.cost[:, reps])
        self.mem = np.bincount(sup_of, weights=prob.sim.resident, minlength=n_sup)
        self.tmp = np.zeros(n_sup)
        np.maximum.at(self.tmp, sup_of, prob.sim.temp)
        self.cap = [float(prob.pool_cap[prob.pool_of[r]]) for r in reps]
        self.max_cap = max(self.cap)


class _CommLoad:
    """The communication part of ``load_c(S)`` for the current set S of units, per device class, kept up to
    date as units enter and leave S (O(degree) per unit): a node in S with an edge leaving S pays its send
    hop, a node outside S with an edge into S its receive hop (``links[c]``: class c's first and last link)."""

    def __init__(self, model: LoadModel, sup_of: IntArray, n_sup: int, links: list[tuple[int, int]]):
        sm: dict[int, set[int]] = {}        # senders (nodes with an edge to another unit) -> their receiving units
        for u, v in zip(model.src, model.dst):
            if sup_of[u] != sup_of[v]:
                sm.setdefault(int(u), set()).add(int(sup_of[v]))
        senders = sorted(sm)
        self.nc = nc = len(links)
        self.deg = {u: len(sm[u]) for u in senders}
        self.send = {u: [model.hop_s(u, links[c][0]) for c in range(nc)] for u in senders}
        self.recv = {u: [model.hop_s(u, links[c][1]) for c in range(nc)] for u in senders}
        self.inside: list[list[int]] = [[] for _ in range(n_sup)]
        self.pred_senders: list[list[int]] = [[] for _ in range(n_sup)]
        for u in senders:
            self.inside[int(sup_of[u])].append(u)
            for x in sm[u]:
                self.pred_senders[x].append(u)
        self.cnt, self.in_s = {u: 0 for u in senders}, {u: False for u in senders}   # receivers in S; u in S

    def contrib(self, u: int, c: int) -> float:
        if self.in_s[u]:
            return self.send[u][c] if self.cnt[u] < self.deg[u] else 0.0
        return self.recv[u][c] if self.cnt[u] > 0 else 0.0

    def move(self, x: int, sign: int, comm: list[float]) -> None:
        """Unit ``x`` enters S (``sign`` +1) or leaves it (-1); ``comm`` (per class) follows."""
        contrib, nc = self.contrib, self.nc
        touched = set(self.inside[x]) | set(self.pred_senders[x])
        for u in touched:
            for c in range(nc):
                comm[c] -= contrib(u, c)
        for u in self.inside[x]:
            self.in_s[u] = sign > 0
        for u in self.pred_senders[x]:
            self.cnt[u] += sign
        for u in touched:
            for c in range(nc):
                comm[c] += contrib(u, c)


class _Load:
    """The engine's ``Segment``: ``load_c(I \\ J)`` per class as units enter and leave (compute, memory and the
    communication of ``_CommLoad``). A segment stops growing where the compute alone or the memory rules it out
    against ``upper`` (supersets only get worse); a class is skipped where it does not fit."""

    def __init__(self, units: _UnitCosts, comm: _CommLoad, upper: float):
        self.comp_c, self.mem, self.tmp, self.cap, self.max_cap = units.comp_c, units.mem, units.tmp, units.cap, units.max_cap
        self.move, self.upper, self.nc, self.classes = comm.move, upper, comm.nc, range(comm.nc)

    def start(self) -> None:
        self.comm, self.compute = [0.0] * self.nc, [0.0] * self.nc
        self.m_used, self.t_stack = 0.0, [0.0]

    def enter(self, x: int) -> bool:
        compute, comp_x = self.compute, self.comp_c[x]
        new_compute = [compute[c] + comp_x[c] for c in self.classes]
        new_mem, new_t = self.m_used + self.mem[x], max(self.t_stack[-1], self.tmp[x])
        if min(new_compute) >= self.upper or new_mem + new_t > self.max_cap:
            return False
        self.compute, self.m_used = new_compute, new_mem
        self.t_stack.append(new_t)
        self.move(x, +1, self.comm)
        return True

    def leave(self, x: int) -> None:
        self.move(x, -1, self.comm)
        compute, comp_x = self.compute, self.comp_c[x]
        for c in self.classes:
            compute[c] -= comp_x[c]
        self.m_used -= self.mem[x]
        self.t_stack.pop()

    def costs(self) -> list[tuple[int, float]]:
        used, cap, compute, comm = self.m_used + self.t_stack[-1], self.cap, self.compute, self.comm
        return [(c, compute[c] + max(comm[c], 0.0)) for c in self.classes
                if not (used > cap[c] or not math.isfinite(compute[c]))]


def best_contiguous(prob: PlacementProblem, model: LoadModel | None = None, upper: float = math.inf,
                    limit: int = IDEALS_LIMIT, time_limit_s: float = math.inf) -> DPResult:
    """The prefixes of one topological order first (a cheap incumbent), then every contiguous
    split, pruned against the incumbent (and ``upper``); the better of the two is returned.
    ``order`` says what was searched: ``ideals`` (all contiguous splits: the answer is the
    contiguous optimum), ``linear`` (too many ideals) or ``timeout`` (the time limit cut it short)."""
    model = model or LoadModel(prob.graph, prob.worker, prob.sim)
    t0 = time.perf_counter()
    lin = solve(prob, model, upper, linear=True)
    full = solve(prob, model, min(upper, lin.value), limit, deadline=t0 + time_limit_s)
    if full.assign is None:
        return DPResult(lin.assign, lin.value, full.ideals, lin.pairs + full.pairs, lin.exact, full.order)
    full.pairs += lin.pairs
    return full
