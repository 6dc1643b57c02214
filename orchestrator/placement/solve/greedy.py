"""Greedy placement heuristics on a ``PlacementProblem``: memory-aware earliest-finish-time list
scheduling (HEFT-style) under two priorities (upward rank, topological order), the fastest single
device that holds the graph, and for the load objective the best split of one topological order into
consecutive stages. ``best_greedy`` judges every candidate with the problem's evaluator and keeps
the best; ``placer=greedy`` is it, and rl and pre-training start from it. Deterministic."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from orchestrator.errors import ConfigError
from orchestrator.placement.graph.arrays import FloatArray, IntArray
from orchestrator.placement.solve.contiguous import solve
from orchestrator.placement.solve.problem import PlacementProblem


def best_greedy(prob: PlacementProblem, variants: Iterable[str] = ("heft", "topo", "single"),
                ) -> tuple[IntArray, str, dict[str, float]]:
    """Every variant's placement judged by the evaluator; (best assignment, its variant, all times)."""
    cands: dict[str, IntArray] = {}
    for v in variants:
        if v == "heft":
            cands[v] = list_schedule(prob, heft_rank(prob))
        elif v == "topo":
            cands[v] = list_schedule(prob, -prob.topo_pos.astype(float))
        elif v == "single":
            a = single_device(prob)
            if a is not None:
                cands[v] = a
        else:
            raise ConfigError(f"placer.variants: unknown greedy variant {v!r} (heft, topo, single)")
    if getattr(prob.evaluator, "load_model", None) is not None:
        # The pipeline objective: also the best split of one topological order into consecutive
        # stages (``contiguous.solve(linear=True)``, cheap), which list scheduling does not aim at.
        chain = solve(prob, prob.evaluator.load_model, linear=True)
        if chain.assign is not None:
            cands["chain"] = chain.assign
    times = {k: prob.objective_value(a) for k, a in cands.items()}
    best = min(times, key=lambda k: (times[k], list(times).index(k)))
    return cands[best], best, times


def heft_rank(prob: PlacementProblem) -> FloatArray:
    """Upward rank: mean cost over allowed devices plus the largest (mean transfer + rank) of a successor."""
    s = prob.sim
    cost = np.where(np.isfinite(s.cost), s.cost, np.nan)
    w = np.nan_to_num(np.nanmean(cost, axis=1))
    rank = np.zeros(prob.n)
    mc = np.array([prob.mean_comm(k) for k in range(len(s.succ_idx))])
    for u in reversed(prob.graph.topological_order()):
        lo, hi = s.succ_ptr[u], s.succ_ptr[u + 1]
        rank[u] = w[u] + ((mc[lo:hi] + rank[s.succ_idx[lo:hi]]).max() if hi > lo else 0.0)
    return rank


def list_schedule(prob: PlacementProblem, priority: FloatArray) -> IntArray:
    """Earliest-finish-time list scheduling, highest ``priority`` first among ready nodes."""
    s = prob.sim
    n, nd = prob.n, prob.nd
    pending = s.npred.copy()
    ready = [(-priority[i], i) for i in range(n) if pending[i] == 0]
    heapq.heapify(ready)
    dev = np.full(n, -1, dtype=np.int64)
    atom_dev = np.full(prob.n_atoms, -1, dtype=np.int64)
    finish = np.zeros(n)
    avail = np.zeros(nd)
    used = np.zeros(len(prob.pool_cap))
    tmax = np.zeros(len(prob.pool_cap))
    chan_free: dict[int, float] = {}
    sent: dict[tuple[int, int], float] = {}
    while ready:
        _, u = heapq.heappop(ready)
        a = prob.atom_of[u]
        if atom_dev[a] >= 0:
            cands = [int(atom_dev[a])]
        else:
            pool = prob.pool_of
            room = (used[pool] + prob.atom_resident[a] + np.maximum(tmax[pool], prob.atom_temp[a])
                    <= prob.pool_cap[pool])
            ok = prob.allowed[a] & room
            if not ok.any():   # nothing holds it any more: the allowed device with the most room
                free = np.where(prob.allowed[a], prob.pool_cap[pool] - used[pool], -np.inf)
                ok = free == free.max()
            cands = [int(d) for d in np.flatnonzero(ok)]
        best = (math.inf, -1)
        for d in cands:
            arrive = _arrival(prob, u, d, dev, finish, chan_free, sent, commit=False)
            best = min(best, (max(avail[d], arrive) + s.cost[u, d], d))
        d = best[1]
        if atom_dev[a] < 0:
            atom_dev[a] = d
            used[prob.pool_of[d]] += prob.atom_resident[a]
            tmax[prob.pool_of[d]] = max(tmax[prob.pool_of[d]], prob.atom_temp[a])
        arrive = _arrival(prob, u, d, dev, finish, chan_free, sent, commit=True)
        dev[u] = d
        finish[u] = max(avail[d], arrive) + s.cost[u, d]
        avail[d] = finish[u]
        for k in range(s.succ_ptr[u], s.succ_ptr[u + 1]):
            v = s.succ_idx[k]
            pending[v] -= 1
            if pending[v] == 0:
                heapq.heappush(ready, (-priority[v], int(v)))
    return dev


def _arrival(prob: PlacementProblem, u: int, d: int, dev: IntArray, finish: FloatArray,
             chan_free: dict[int, float], sent: dict[tuple[int, int], float], commit: bool) -> float:
    """When all of ``u``'s inputs are on ``d``: each missing input crosses its route hop by hop, a
    link channel carrying one tensor at a time (as in the simulator); ``commit`` books the channels."""
    s = prob.sim
    free = chan_free if commit else dict(chan_free)
    arrive = 0.0
    for p, k in prob.preds[u]:
        dp = int(dev[p])
        if (p, d) in sent:
            at = sent[p, d]
        else:
            at = finish[p]
            f = s.succ_fixed[k]
            for ch, lat, inv_bw in prob.route[dp][d]:
                at = max(at, free.get(ch, 0.0)) + (f if f >= 0 else lat + s.succ_bytes[k] * inv_bw)
                free[ch] = at
            if commit and dp != d:
                sent[p, d] = at
        arrive = max(arrive, at)
    return arrive


def single_device(prob: PlacementProblem) -> IntArray | None:
    """Every atom on the fastest device (by total cost) that holds the whole graph; atoms that cannot
    run there go to their fastest allowed device. None when no single device fits."""
    fastest = prob.atom_cost.min(axis=1, keepdims=True)
    order = np.argsort(np.where(prob.allowed, prob.atom_cost, fastest).sum(axis=0), kind="stable")
    for d in order:
        a = np.where(prob.allowed[:, d], d, np.argmin(prob.atom_cost, axis=1))
        if prob.fits(a):
            return prob.expand(a)
    return None
