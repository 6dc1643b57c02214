"""The greedy placer's list schedule as one compiled pass (numba when installed, else plain Python:
same code, same placements). Memory-aware earliest-finish-time list scheduling (HEFT-style): nodes
leave a ready heap by priority (ties by index, as ``heapq`` orders ``(-priority, index)``); a
node goes to the device of earliest finish among those whose memory pool still holds its atom
(its colocation group, placed with its first node); inputs cross their routes hop by hop, a link
channel carrying one tensor at a time, each output sent once per destination device. One pass
is O((V + E) log V + E x D x hops): no per-node Python objects, which made a 20,000-op graph cost
seconds per priority in the Python loop this replaces (``orchestrator.placement.solve.greedy``)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from orchestrator.graph.arrays import BoolArray, FloatArray, IntArray
from orchestrator.hardware.cost import inverse_bandwidth_nb, path_or_fixed_nb
from orchestrator.placement.graph.kernels import njit


@njit(cache=True)
def _arrival(u: int, d: int, dev: IntArray, finish: FloatArray, free: FloatArray, sent: FloatArray,
             pred_ptr: IntArray, pred_src: IntArray, pred_edge: IntArray, succ_bytes: FloatArray,
             succ_fixed: FloatArray, nd: int, route_ptr: IntArray, route_link: IntArray, link_chan: IntArray,
             link_lat: FloatArray, link_bw: FloatArray, commit: bool) -> float:
    """When all of ``u``'s inputs are on ``d``; books the channels of ``free`` (the caller passes a
    scratch copy when it only asks) and, with ``commit``, records each tensor sent to ``d``."""
    arrive = 0.0
    for j in range(pred_ptr[u], pred_ptr[u + 1]):
        p, k = pred_src[j], pred_edge[j]
        dp = dev[p]
        if sent[p, d] >= 0.0:
            at = sent[p, d]
        else:
            at = finish[p]
            f = succ_fixed[k]
            r = dp * nd + d
            for h in range(route_ptr[r], route_ptr[r + 1]):
                l = route_link[h]
                ch = link_chan[l]
                # one link as a route of one hop: the same floats as the per-device-pair tables
                at = max(at, free[ch]) + path_or_fixed_nb(f, 1.0, link_lat[l], succ_bytes[k],
                                                          inverse_bandwidth_nb(link_bw[l]))
                free[ch] = at
            if commit and dp != d:
                sent[p, d] = at
        arrive = max(arrive, at)
    return arrive


@njit(cache=True)
def list_schedule_kernel(priority: FloatArray, cost: FloatArray, npred: IntArray, succ_ptr: IntArray,
                         succ_idx: IntArray, succ_bytes: FloatArray, succ_fixed: FloatArray, pred_ptr: IntArray,
                         pred_src: IntArray, pred_edge: IntArray, atom_of: IntArray, n_atoms: int,
                         allowed: BoolArray, pool_of: IntArray, pool_cap: FloatArray, atom_resident: FloatArray,
                         atom_temp: FloatArray, route_ptr: IntArray, route_link: IntArray, link_chan: IntArray,
                         link_lat: FloatArray, link_bw: FloatArray, n_chan: int) -> IntArray:
    n, nd = cost.shape
    pending = npred.copy()
    ready = [(-priority[i], i) for i in range(n) if pending[i] == 0]
    heapq.heapify(ready)
    dev = np.full(n, -1, dtype=np.int64)
    atom_dev = np.full(n_atoms, -1, dtype=np.int64)
    finish = np.zeros(n)
    avail = np.zeros(nd)
    used = np.zeros(pool_cap.shape[0])
    tmax = np.zeros(pool_cap.shape[0])
    chan_free = np.zeros(n_chan)
    scratch = np.zeros(n_chan)
    sent = np.full((n, nd), -1.0)
    ok = np.zeros(nd, dtype=np.bool_)
    while len(ready) > 0:
        u = heapq.heappop(ready)[1]
        a = atom_of[u]
        if atom_dev[a] >= 0:
            ok[:] = False
            ok[atom_dev[a]] = True
        else:
            anyok = False
            for d in range(nd):
                q = pool_of[d]
                ok[d] = allowed[a, d] and used[q] + atom_resident[a] + max(tmax[q], atom_temp[a]) <= pool_cap[q]
                anyok = anyok or ok[d]
            if not anyok:      # nothing holds it any more: the allowed device(s) with the most room
                top = -np.inf
                for d in range(nd):
                    if allowed[a, d]:
                        top = max(top, pool_cap[pool_of[d]] - used[pool_of[d]])
                for d in range(nd):
                    ok[d] = (pool_cap[pool_of[d]] - used[pool_of[d]] if allowed[a, d] else -np.inf) == top
        best_t, best_d = np.inf, -1
        for d in range(nd):
            if not ok[d]:
                continue
            scratch[:] = chan_free
            arrive = _arrival(u, d, dev, finish, scratch, sent, pred_ptr, pred_src, pred_edge, succ_bytes,
                              succ_fixed, nd, route_ptr, route_link, link_chan, link_lat, link_bw, False)
            t = max(avail[d], arrive) + cost[u, d]
            if t < best_t or (t == best_t and d < best_d):
                best_t, best_d = t, d
        d = best_d
        if atom_dev[a] < 0:
            atom_dev[a] = d
            used[pool_of[d]] += atom_resident[a]
            tmax[pool_of[d]] = max(tmax[pool_of[d]], atom_temp[a])
        arrive = _arrival(u, d, dev, finish, chan_free, sent, pred_ptr, pred_src, pred_edge, succ_bytes,
                          succ_fixed, nd, route_ptr, route_link, link_chan, link_lat, link_bw, True)
        dev[u] = d
        finish[u] = max(avail[d], arrive) + cost[u, d]
        avail[d] = finish[u]
        for k in range(succ_ptr[u], succ_ptr[u + 1]):
            v = succ_idx[k]
            pending[v] -= 1
            if pending[v] == 0:
                heapq.heappush(ready, (-priority[v], v))
    return dev


def run_list_schedule(args: tuple[Any, ...]) -> IntArray:
    """``list_schedule_kernel(*args)``, typed (numba's ``@njit`` is untyped)."""
    out: IntArray = list_schedule_kernel(*args)
    return out
