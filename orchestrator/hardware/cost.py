"""The cost core: the one place where a transfer time (or a roofline compute time) is computed.

Every other module calls these functions; ``tests/test_cost_core.py`` fails when a file outside
``orchestrator/hardware/`` divides by a bandwidth or multiplies by an inverse bandwidth itself. A new
communication term (say, a per-message overhead) is added here and reaches placement, sync and plans alike.

Units: bytes, bytes/s, seconds (``GB`` and ``GBIT`` convert the units users write).

- a hop over one link: ``latency + nbytes / bandwidth`` (the alpha-beta model, Hockney 1994), or an
  edge's fixed time ``f`` when ``f >= 0`` (the workload format's edge ``cost``);
- a route of several links, as the per-device-pair tables ``path_tables`` sum it (hops, latency, inverse
  bandwidth): ``latency + nbytes * inv_bw``, or ``hops * f`` for a fixed edge time;
- the inputs of a node summed over its tensors: ``n * latency + nbytes * inv_bw + f * hops``;
- a FIFO link's service time ``nbytes / bandwidth`` (``FifoLink``: the parameter server's shards);
- the roofline time of a node: ``max(flops / peak, bytes_accessed / memory bandwidth)``.

The ring, bucketed and hierarchical all-reduce over a link model, and the ring all-gather (its second half:
``(k - 1) t(nbytes)`` for one message of ``nbytes`` from each of ``k`` members), live beside this in ``links.py``,
made of hops.

Each formula used inside a compiled loop has a numba twin (suffix ``_nb``: the same Python function
compiled with ``njit``; plain Python where numba is not installed) that the placement, list-scheduling
and policy kernels call. The expressions are written in the order of the code they replaced, so
results are the same floats. numba's cache of a kernel does not notice a change of this file: clear
``__pycache__`` (or touch the kernel) after editing a formula here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.graph.arrays import FloatArray, IntArray

try:  # optional accelerator: the kernels' twins
    from numba import njit
except ImportError:  # pragma: no cover - depends on the environment
    def njit(*args: Any, **kwargs: Any) -> Any:
        return (lambda f: f) if not args or not callable(args[0]) else args[0]

GB = 1e9                     # bytes in one gigabyte (GB/s: bytes/s x GB)
GBIT = GB / 8                # bytes in one gigabit (Gbit/s: bytes/s x GBIT)
GiB = 2 ** 30                # bytes in one gibibyte (memory sizes)


# -- one link -----------------------------------------------------------------------------------
def serialize_s(nbytes: Any, bandwidth: Any) -> Any:
    """Seconds to put ``nbytes`` on a link of ``bandwidth`` (a FIFO link's service time)."""
    return nbytes / bandwidth


def hop_s(latency: Any, nbytes: Any, bandwidth: Any) -> Any:
    """One message over one link: ``latency + nbytes / bandwidth`` (numbers or numpy arrays)."""
    return latency + nbytes / bandwidth


def hop_or_fixed_s(fixed: float, latency: float, nbytes: float, bandwidth: float) -> float:
    """A hop, or the edge's fixed time ``fixed`` when it has one (``fixed >= 0``)."""
    return fixed if fixed >= 0 else latency + nbytes / bandwidth


def hop_or_fixed_array(fixed: npt.ArrayLike, latency: npt.ArrayLike, nbytes: npt.ArrayLike,
                       bandwidth: npt.ArrayLike) -> FloatArray:
    """``hop_or_fixed_s`` elementwise over numpy arrays (broadcast)."""
    f, lat, b, bw = (np.asarray(x) for x in (fixed, latency, nbytes, bandwidth))
    out: FloatArray = np.where(f >= 0, f, lat + b / bw)
    return out


# -- a route of links (per-device-pair tables) ---------------------------------------------------
def inverse_bandwidth(bandwidth: Any) -> Any:
    """Seconds per byte of a link; summed over a route's links in ``path_tables``."""
    return 1.0 / bandwidth


def path_s(latency: Any, nbytes: Any, inv_bw: Any) -> Any:
    """A message over a route with summed ``latency`` and summed inverse bandwidth ``inv_bw``."""
    return latency + nbytes * inv_bw


def path_or_fixed_s(fixed: Any, hops: Any, latency: Any, nbytes: Any, inv_bw: Any) -> Any:
    """``path_s``, or ``hops * fixed`` for an edge with a fixed time per hop (``fixed >= 0``, a number;
    the other arguments numbers or arrays)."""
    return hops * fixed if fixed >= 0 else latency + nbytes * inv_bw


def path_or_fixed_array(fixed: npt.ArrayLike, hops: npt.ArrayLike, latency: npt.ArrayLike, nbytes: npt.ArrayLike,
                        inv_bw: npt.ArrayLike) -> FloatArray:
    """``path_or_fixed_s`` elementwise over numpy arrays (broadcast)."""
    f, h, lat, b, ib = (np.asarray(x) for x in (fixed, hops, latency, nbytes, inv_bw))
    out: FloatArray = np.where(f >= 0, h * f, lat + b * ib)
    return out


def inputs_s(n_msgs: Any, latency: Any, nbytes: Any, inv_bw: Any, fixed: Any, hops: Any) -> Any:
    """Tensors into a node over one route, summed: ``n_msgs`` messages of ``nbytes`` bytes in all plus
    ``fixed`` seconds of fixed edge times per hop: ``n * latency + nbytes * inv_bw + fixed * hops``."""
    return n_msgs * latency + nbytes * inv_bw + fixed * hops


def path_tables(nd: int, route_ptr: IntArray, route_link: IntArray, link_lat: FloatArray,
                link_bw: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(hops, latency, inverse bandwidth) [nd, nd] of the route from each device to each other one
    (``route_ptr[a * nd + b]``.. the route's links in ``route_link``), summed over the route's links."""
    hops, lat, inv_bw = np.zeros((nd, nd)), np.zeros((nd, nd)), np.zeros((nd, nd))
    for a in range(nd):
        for b in range(nd):
            r = a * nd + b
            for h in range(route_ptr[r], route_ptr[r + 1]):
                l = route_link[h]
                hops[a, b] += 1
                lat[a, b] += link_lat[l]
                inv_bw[a, b] += inverse_bandwidth(link_bw[l])
    return hops, lat, inv_bw


# -- collectives and shared links ----------------------------------------------------------------
@dataclass
class FifoLink:
    """One direction of a shared link: messages are served one at a time in arrival order."""

    bandwidth: float
    latency_s: float
    free_at: float = 0.0
    busy_s: float = 0.0

    def send(self, now: float, nbytes: float) -> float:
        """A message arriving at ``now``; returns when its last byte left the link (queueing included)."""
        start = max(now, self.free_at)
        service = serialize_s(nbytes, self.bandwidth)
        self.free_at = start + service
        self.busy_s += service
        return self.free_at + self.latency_s


# -- compute -------------------------------------------------------------------------------------
def roofline_s(flops: float, bytes_accessed: float, peak_flops: float, mem_bandwidth: float) -> float:
    """Seconds of a node with no measured cost: compute-bound or memory-bound, whichever is slower."""
    return max(flops / peak_flops, bytes_accessed / mem_bandwidth)


# -- the kernels' twins --------------------------------------------------------------------------
hop_or_fixed_nb = njit(cache=True)(hop_or_fixed_s)
inverse_bandwidth_nb = njit(cache=True)(inverse_bandwidth)
path_or_fixed_nb = njit(cache=True)(path_or_fixed_s)
inputs_nb = njit(cache=True)(inputs_s)
