"""What every search placer shares: the graph cut into *atoms* (a colocation group or a lone node,
placed as a unit), the devices each atom may use, memory accounting per memory pool, the
up-front infeasibility check, transfer-time estimates, and scoring through the shared evaluator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from orchestrator.errors import InfeasiblePlacementError
from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.graph.opgraph import OpGraph
from orchestrator.graph.placement import Placement
from orchestrator.hardware.cluster import Worker
from orchestrator.hardware.cost import GiB, path_or_fixed_s, path_tables
from orchestrator.placement.graph.kernels import predecessors_csr
from orchestrator.placement.simulate.simulator import Simulator


class PlacementProblem:
    """A graph on a worker, as arrays: ``assign`` is a device index per node (``graph.nodes`` order).

    Search placers keep ``memory_headroom`` (a fraction of each memory pool; the evaluator's
    ``memory_headroom``, ``placement.memory_headroom`` in a trial) free: ``overflow``, ``fits`` and
    ``objective_value`` use the reduced capacity ``pool_cap``; ``full_cap`` is the device's own."""

    def __init__(self, graph: OpGraph, worker: Worker, evaluator: Any = None, memory_headroom: float | None = None):
        self.graph, self.worker, self.evaluator = graph, worker, evaluator
        sim = getattr(evaluator, "simulator", None)
        self.sim = sim if sim is not None and sim.graph is graph else \
            Simulator(graph, worker, getattr(evaluator, "microbatch", None))
        n, nd = len(graph.nodes), len(worker.devices)
        self.n, self.nd = n, nd
        key = [nd_.group if nd_.group is not None else f"#{i}" for i, nd_ in enumerate(graph.nodes)]
        ids = {k: j for j, k in enumerate(dict.fromkeys(key))}
        self.atom_of = np.array([ids[k] for k in key], dtype=np.int64)
        self.n_atoms = len(ids)
        self.members = _members(self.atom_of, self.n_atoms)
        finite = np.isfinite(self.sim.cost)
        self.allowed = np.ones((self.n_atoms, nd), dtype=bool)
        np.logical_and.at(self.allowed, self.atom_of, finite)
        self.atom_resident = cast(FloatArray, np.bincount(self.atom_of, weights=self.sim.resident, minlength=self.n_atoms))  # weighted: float
        self.atom_temp = np.zeros(self.n_atoms)
        np.maximum.at(self.atom_temp, self.atom_of, self.sim.temp)
        cost = np.where(finite, self.sim.cost, 0.0)
        self.atom_cost = np.zeros((self.n_atoms, nd))
        np.add.at(self.atom_cost, self.atom_of, cost)
        self.atom_cost[~self.allowed] = np.inf
        topo = np.empty(n, dtype=np.int64)
        topo[graph.topological_order()] = np.arange(n)
        self.topo_pos = topo
        self.atom_pos = np.full(self.n_atoms, n, dtype=np.int64)
        np.minimum.at(self.atom_pos, self.atom_of, topo)
        self.pool_of = np.zeros(nd, dtype=np.int64)
        self.full_cap = np.array([cap for _, _, cap in self.sim.pools], dtype=float)
        h = getattr(evaluator, "memory_headroom", 0.0) if memory_headroom is None else memory_headroom
        self.headroom = float(h or 0.0)
        self.pool_cap = self.full_cap * (1.0 - self.headroom)
        for p, (_, ix, _) in enumerate(self.sim.pools):
            self.pool_of[ix] = p
        self._comm_tables()

    # -- feasibility --------------------------------------------------------------------------
    def check_feasible(self) -> None:
        """``InfeasiblePlacementError`` when no placement can fit: an atom with no device it may run
        on, an atom larger than every pool it may use, or more memory than the worker has."""
        g = self.graph
        for a in range(self.n_atoms):
            name = g.nodes[self.members[a][0]].group or g.nodes[self.members[a][0]].name
            if not self.allowed[a].any():
                raise InfeasiblePlacementError(f"{name!r} can run on no device of worker {self.worker.name!r}")
            need = self.atom_resident[a] + self.atom_temp[a]
            caps = self.pool_cap[self.pool_of[self.allowed[a]]]
            if need > caps.max():
                raise InfeasiblePlacementError(
                    f"{name!r} needs {need / GiB:.2f} GiB, more than any device it may run on "
                    f"(largest {caps.max() / GiB:.2f} GiB)")
        total = self.sim.resident.sum() + self.sim.temp.max(initial=0.0)
        if total > self.pool_cap.sum():
            raise InfeasiblePlacementError(
                f"{g.name}: needs {total / GiB:.2f} GiB, worker {self.worker.name!r} has "
                f"{self.pool_cap.sum() / GiB:.2f} GiB in all; no placement fits")

    def overflow(self, assign: npt.ArrayLike) -> float:
        """Bytes over capacity less the headroom, summed over memory pools (0 when it fits)."""
        a = np.asarray(assign, dtype=np.int64)
        if self.headroom == 0.0:
            return float(sum(b for _, b in self.sim.memory(a)[1]))
        res = np.bincount(a, weights=self.sim.resident, minlength=self.nd)
        tmp = np.zeros(self.nd)
        np.maximum.at(tmp, a, self.sim.temp)
        over = 0.0
        for p, (_, ix, _) in enumerate(self.sim.pools):
            used = res[ix].sum() + tmp[ix].max()
            if used > self.pool_cap[p]:
                over += float(used - self.pool_cap[p])
        return over

    def fits(self, atom_assign: npt.ArrayLike) -> bool:
        return self.overflow(self.expand(atom_assign)) == 0.0

    # -- conversions --------------------------------------------------------------------------
    def expand(self, atom_assign: npt.ArrayLike) -> IntArray:
        return np.asarray(atom_assign, dtype=np.int64)[self.atom_of]

    def atoms_of(self, assign: IntArray) -> IntArray:
        out = np.empty(self.n_atoms, dtype=np.int64)
        out[self.atom_of] = assign
        return out

    def placement(self, assign: Sequence[int] | IntArray, **meta: Any) -> Placement:
        names = self.worker.device_names
        return Placement(list(names), {n.name: names[int(d)] for n, d in zip(self.graph.nodes, assign)}, meta)

    # -- scoring ------------------------------------------------------------------------------
    def objective_value(self, assign: IntArray) -> float:
        """The evaluator's verdict on the trial's objective (its fast path when it has one: one-step
        latency, or time per sample for ``pipeline``); inf when infeasible or over the headroom."""
        ev = self.evaluator
        if self.headroom and self.overflow(assign) > 0:
            return math.inf
        if ev is None:
            return self.sim.step_time(assign)
        if hasattr(ev, "objective_value"):
            return float(ev.objective_value(assign))
        if self.overflow(assign) > 0:
            return math.inf
        v = ev.evaluate(self.placement(assign))
        return v.step_time_s if v.feasible else math.inf

    # -- transfers ----------------------------------------------------------------------------
    def _comm_tables(self) -> None:
        s = self.sim
        self.hops, self.lat, self.inv_bw = path_tables(self.nd, s.route_ptr, s.route_link, s.link_lat, s.link_bw)

    @cached_property
    def pred_csr(self) -> tuple[IntArray, IntArray, IntArray]:
        """(pred_ptr, pred_src, pred_edge): each node's in-edges (simulator edge index), sources ascending."""
        return predecessors_csr(self.n, self.sim.succ_ptr, self.sim.succ_idx)

    @cached_property
    def preds(self) -> list[list[tuple[int, int]]]:
        """Per node, its (source node, simulator edge) pairs, sources ascending; built on first use
        (the expert rules walk it), as the hot paths use ``pred_csr``."""
        ptr, src, edge = self.pred_csr
        pairs = list(zip(src.tolist(), edge.tolist()))
        return [pairs[ptr[u]:ptr[u + 1]] for u in range(self.n)]

    def comm_row(self, k: int, src_dev: int) -> FloatArray:
        """Transfer time of edge ``k`` (simulator index) from ``src_dev`` to every device, contention free."""
        row: FloatArray = path_or_fixed_s(self.sim.succ_fixed[k], self.hops[src_dev], self.lat[src_dev],
                                          self.sim.succ_bytes[k], self.inv_bw[src_dev])
        return row

    def mean_comm(self, k: int) -> float:
        m = path_or_fixed_s(self.sim.succ_fixed[k], self.hops, self.lat, self.sim.succ_bytes[k], self.inv_bw)
        return float(m.sum() / max(1, self.nd * (self.nd - 1)))


def _members(atom_of: IntArray, n_atoms: int) -> list[IntArray]:
    order = np.argsort(atom_of, kind="stable")
    cuts = np.searchsorted(atom_of[order], np.arange(1, n_atoms))
    return np.split(order, cuts)


def group_atoms(prob: PlacementProblem, max_groups: int, hint: IntArray | None = None) -> IntArray:
    """A group index per atom: atoms in topological order (of their first node) cut into at most
    ``max_groups`` contiguous runs (like the hierarchical placer's grouper). With ``hint`` (a device
    per atom, e.g. the greedy placement) runs start where the hint changes device, so the groups can
    express the hint exactly when there are few enough changes; runs are then merged (smallest
    neighbours first) or split (costliest first) towards ``max_groups``. Only atoms of one allowed
    device set share a group."""
    order = np.argsort(prob.atom_pos, kind="stable")
    w = prob.atom_cost.min(axis=1)[order]
    sig = [prob.allowed[a].tobytes() for a in order]
    hard = [i for i in range(1, len(order)) if sig[i] != sig[i - 1]]
    soft = [i for i in range(1, len(order)) if hint is not None and hint[order[i]] != hint[order[i - 1]]]
    cuts = sorted(set(hard) | set(soft))
    bounds = [0] + cuts + [len(order)]
    runs = [[bounds[i], bounds[i + 1]] for i in range(len(bounds) - 1)]
    hard_set = set(hard)
    while len(runs) > max_groups:          # merge the cheapest mergeable neighbours
        cost = [(w[r[0]:r[1]].sum() + w[s[0]:s[1]].sum(), i) for i, (r, s) in enumerate(zip(runs, runs[1:]))
                if s[0] not in hard_set]
        if not cost:
            break
        _, i = min(cost)
        runs[i:i + 2] = [[runs[i][0], runs[i + 1][1]]]
    while len(runs) < max_groups:          # split the costliest run that has more than one atom
        cand = [(w[r[0]:r[1]].sum(), i) for i, r in enumerate(runs) if r[1] - r[0] > 1]
        if not cand:
            break
        _, i = max(cand)
        lo, hi = runs[i]
        c = np.cumsum(w[lo:hi])
        mid = lo + 1 + int(np.searchsorted(c, c[-1] / 2)) if c[-1] > 0 else (lo + hi) // 2
        mid = min(max(mid, lo + 1), hi - 1)
        runs[i:i + 1] = [[lo, mid], [mid, hi]]
    out = np.empty(prob.n_atoms, dtype=np.int64)
    for gi, (lo, hi) in enumerate(runs):
        out[order[lo:hi]] = gi
    return out
