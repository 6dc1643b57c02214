"""The simulator's inner loop over flat arrays (compiled with numba when it is installed, else plain
Python: same code, same results, about 50x slower).

Event-driven list scheduling of one step. Events are (time, kind, id): kind 0 = node finished,
kind 1 = node's inputs all arrived. All events of one time are drained, then every idle device
starts its best ready node: smallest ``prio`` (precomputed rank, see ``simulator``). A finished node
sends its output once per destination device along the route's links; each link channel carries one
tensor at a time (FIFO in request order), hops are store-and-forward.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.hardware.cost import hop_or_fixed_nb

# run_step's result: (makespan, start, finish, busy, tx, n_tx)
StepArrays = tuple[float, FloatArray, FloatArray, FloatArray, FloatArray, int]

try:  # optional accelerator for the loop
    from numba import njit
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False

    def njit(*args: Any, **kwargs: Any) -> Any:
        return (lambda f: f) if not args or not callable(args[0]) else args[0]


@njit(cache=True)
def _push(heap: IntArray, size: IntArray, d: int, node: int, prio: FloatArray) -> None:
    i = size[d]
    size[d] = i + 1
    heap[d, i] = node
    while i > 0:
        p = (i - 1) // 2
        if prio[heap[d, p]] <= prio[heap[d, i]]:
            break
        heap[d, p], heap[d, i] = heap[d, i], heap[d, p]
        i = p


@njit(cache=True)
def _pop(heap: IntArray, size: IntArray, d: int, prio: FloatArray) -> int:
    top = heap[d, 0]
    size[d] -= 1
    n = size[d]
    heap[d, 0] = heap[d, n]
    i = 0
    while True:
        l, r, m = 2 * i + 1, 2 * i + 2, i
        if l < n and prio[heap[d, l]] < prio[heap[d, m]]:
            m = l
        if r < n and prio[heap[d, r]] < prio[heap[d, m]]:
            m = r
        if m == i:
            break
        heap[d, m], heap[d, i] = heap[d, i], heap[d, m]
        i = m
    return top


@njit(cache=True)
def run_step(dev: IntArray, cost: FloatArray, succ_ptr: IntArray, succ_idx: IntArray, succ_bytes: FloatArray,
             succ_fixed: FloatArray, npred: IntArray, prio: FloatArray, route_ptr: IntArray, route_link: IntArray,
             link_chan: IntArray, link_lat: FloatArray, link_bw: FloatArray, n_chan: int, record: bool,
             ) -> StepArrays:
    """Returns (makespan, start, finish, busy, tx, n_tx); tx rows: node, dst device, link, start, end."""
    n = dev.shape[0]
    n_dev = cost.shape[1]
    start = np.zeros(n)
    finish = np.zeros(n)
    ready_t = np.zeros(n)
    pending = npred.copy()
    busy = np.zeros(n_dev)
    idle = np.ones(n_dev, dtype=np.bool_)
    heap = np.empty((n_dev, n), dtype=np.int64)
    hsize = np.zeros(n_dev, dtype=np.int64)
    chan_free = np.zeros(n_chan)
    need_b = np.zeros(n_dev)
    need_f = np.zeros(n_dev)
    stamp = np.full(n_dev, -1, dtype=np.int64)
    arrive = np.zeros(n_dev)
    max_tx = succ_idx.shape[0] * 4 + 1 if record else 1
    tx = np.zeros((max_tx, 5))
    n_tx = 0
    events = [(0.0, 0, 0)]
    events.pop()
    for v in range(n):
        if pending[v] == 0:
            heapq.heappush(events, (0.0, 1, v))
    done = 0
    makespan = 0.0
    while len(events) > 0:
        t = events[0][0]
        while len(events) > 0 and events[0][0] <= t:
            ev = heapq.heappop(events)
            kind = ev[1]
            u = ev[2]
            if kind == 1:
                _push(heap, hsize, dev[u], u, prio)
                continue
            # node u finished at t
            du = dev[u]
            idle[du] = True
            done += 1
            if t > makespan:
                makespan = t
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                dv = dev[succ_idx[k]]
                if stamp[dv] != u:
                    stamp[dv] = u
                    need_b[dv] = succ_bytes[k]
                    need_f[dv] = succ_fixed[k]
                else:
                    need_b[dv] = max(need_b[dv], succ_bytes[k])
                    need_f[dv] = max(need_f[dv], succ_fixed[k])
            for dv in range(n_dev):
                if stamp[dv] != u:
                    continue
                stamp[dv] = -2 - u          # mark: transfer computed for (u, dv)
                at = t
                r = du * n_dev + dv
                for h in range(route_ptr[r], route_ptr[r + 1]):
                    l = route_link[h]
                    ch = link_chan[l]
                    s = max(at, chan_free[ch])
                    at = s + hop_or_fixed_nb(need_f[dv], link_lat[l], need_b[dv], link_bw[l])
                    chan_free[ch] = at
                    if record and n_tx < max_tx:
                        tx[n_tx, 0] = u
                        tx[n_tx, 1] = dv
                        tx[n_tx, 2] = l
                        tx[n_tx, 3] = s
                        tx[n_tx, 4] = at
                        n_tx += 1
                arrive[dv] = at
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                v = succ_idx[k]
                a = arrive[dev[v]]
                if a > ready_t[v]:
                    ready_t[v] = a
                pending[v] -= 1
                if pending[v] == 0:
                    heapq.heappush(events, (ready_t[v], 1, v))
        for d in range(n_dev):
            if idle[d] and hsize[d] > 0:
                v = _pop(heap, hsize, d, prio)
                idle[d] = False
                start[v] = t
                f = t + cost[v, d]
                finish[v] = f
                busy[d] += cost[v, d]
                heapq.heappush(events, (f, 0, v))
    if done < n:
        makespan = np.inf
    return makespan, start, finish, busy, tx, n_tx
