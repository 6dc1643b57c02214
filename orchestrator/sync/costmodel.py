"""The cost model of one data-parallel iteration, used by the virtual clock (formulas in docs/sync.md):

- compute: a batch of ``b`` samples on a worker of speed ``v`` takes ``(t0 + b * t1) / v`` seconds
  (``ComputeModel``; t0, t1 fitted to step times measured at several batch sizes, or configured);
- links (``hardware.topology.Topology``, from ``hardware.network``): each worker has a link (bandwidth,
  latency), the parameter server has one link per shard; default 10 Gbit/s and 50 us everywhere;
- ring allreduce of ``n`` bytes over W workers: ``2 (W-1)/W * n / B + 2 (W-1) * L`` with B the slowest
  worker link's bandwidth and L the largest latency (Patarasuk & Yuan 2009; Horovod's algorithm);
- parameter server: a push (gradient) and a pull (parameters) per iteration, each split over
  ``sync.shards`` server shards; each shard's link is a FIFO queue shared by all workers (``FifoLink``),
  in each direction (full duplex), so with many workers the server saturates; ``sync.shards=colocated`` puts
  one shard on each worker instead, its traffic on the workers' own links (``ColocatedServerLinks``).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from orchestrator.errors import ConfigError
from orchestrator.hardware.cost import FifoLink
from orchestrator.hardware.links import ConstantLink, ring_allreduce_time, ring_half_time
from orchestrator.hardware.topology import Topology

# FifoLink lives in the cost core; the links are the hardware topology's view (``Topology.workers``,
# ``.server``).


def ring_allreduce_s(nbytes: float, workers: int, bandwidth: float, latency_s: float) -> float:
    """Ring allreduce: 2(W-1) steps (reduce-scatter, all-gather), each moving n/W bytes on every link."""
    if workers <= 1:
        return 0.0
    return ring_allreduce_time(ConstantLink(bandwidth, latency_s), nbytes, workers)


def _slowest(net: Topology, workers: list[int] | None) -> tuple[int, float, float]:
    """(W, the smallest bandwidth, the largest latency) of the links of ``workers`` (default: all)."""
    links = net.workers if workers is None else [net.workers[i] for i in workers]
    return len(links), min(l.bandwidth for l in links), max(l.latency_s for l in links)


def allreduce_s(nbytes: float, net: Topology, workers: list[int] | None = None) -> float:
    """Ring allreduce on the slowest link (smallest bandwidth, largest latency) among ``workers``."""
    w, bw, lat = _slowest(net, workers)
    return ring_allreduce_s(nbytes, w, bw, lat)


def allgather_s(nbytes: float, net: Topology, workers: list[int] | None = None) -> float:
    """Ring all-gather of one message of ``nbytes`` from each of the W workers (every worker ends with all W):
    ``(W-1)`` steps, each moving one message on every link, ``(W-1) (n / B + L)`` on the slowest link. What a
    sparse collective costs (top-k values and indices cannot be summed on the way, Renggli et al. 2019
    "SparCML"; Lin et al. 2018 "Deep Gradient Compression")."""
    w, bw, lat = _slowest(net, workers)
    # the second half of a ring all-reduce of the W messages together: (W-1) t(W n / W)
    return float(ring_half_time(ConstantLink(bw, lat), w * nbytes, w)) if nbytes > 0 else 0.0


COLLECTIVES = ("ring_allreduce", "ring_allgather")


def collective_s(kind: str, nbytes: float, net: Topology) -> float:
    """One collective round's communication: ``ring_allreduce`` (dense sums) or ``ring_allgather`` (sparse messages)."""
    if kind == "ring_allgather":
        return allgather_s(nbytes, net)
    if kind != "ring_allreduce":
        raise ConfigError(f"a strategy's collective={kind!r} is not one of {', '.join(COLLECTIVES)}")
    return allreduce_s(nbytes, net)


@dataclass
class ServerLinks:
    """The parameter server's shards: each has an inbound (pushes) and an outbound (pulls) FIFO link."""

    net: Topology
    shards: int
    nbytes: float
    inbound: list[FifoLink] = field(default_factory=list)
    outbound: list[FifoLink] = field(default_factory=list)
    queued_s: list[float] = field(default_factory=list)     # per worker: seconds its messages waited in a shard queue

    def __post_init__(self):
        s = self.net.server
        self.inbound = [FifoLink(s.bandwidth, s.latency_s) for _ in range(self.shards)]
        self.outbound = [FifoLink(s.bandwidth, s.latency_s) for _ in range(self.shards)]
        self.queued_s = [0.0] * len(self.net.workers)

    def _transfer(self, queues: list[FifoLink], worker: int, now: float, nbytes: float | None) -> float:
        n = self.nbytes if nbytes is None else nbytes
        part = n / self.shards
        own = self.net.workers[worker]
        self.queued_s[worker] += max(max(now, q.free_at) - now for q in queues)   # before its slice starts
        done = max(q.send(now, part) for q in queues)            # every shard's slice, each queued
        return max(done, now + own.time(n))                       # the worker's own link carries it all

    def push(self, worker: int, now: float, nbytes: float | None = None) -> float:
        """A push of ``nbytes`` (default: the dense model's ``self.nbytes``) starting at ``now``; returns its end."""
        return self._transfer(self.inbound, worker, now, nbytes)

    def pull(self, worker: int, now: float, nbytes: float | None = None) -> float:
        return self._transfer(self.outbound, worker, now, nbytes)

    def utilisation(self, elapsed: float) -> float:
        """Busy fraction of the busiest shard direction over the run."""
        if elapsed <= 0:
            return 0.0
        return min(1.0, max(q.busy_s for q in self.inbound + self.outbound) / elapsed)


@dataclass
class ColocatedServerLinks:
    """Server shards placed with the workers (BytePS-style, Jiang et al. OSDI'20; ``sync.shards=colocated``):
    worker j hosts shard j of W, and the shards' traffic shares the workers' own links, each a FIFO queue in
    each direction (full duplex). A push of n bytes from worker i sends ``(W-1)/W n`` out of i's link and
    ``n/W`` into each other worker's link (its own slice stays local); a pull is the mirror image. Every link
    then carries ``2 (W-1)/W n`` per iteration of each worker, as a ring all-reduce does, and no server link
    exists to saturate. The slices are charged as if cut through (a slice's bytes are queued on the sender's and
    the receiver's link at once, the transfer ending when the later one is done), which under-charges a
    congested link by at most one slice's time."""

    net: Topology
    nbytes: float
    out: list[FifoLink] = field(default_factory=list)
    into: list[FifoLink] = field(default_factory=list)
    queued_s: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.out = [FifoLink(l.bandwidth, l.latency_s) for l in self.net.workers]
        self.into = [FifoLink(l.bandwidth, l.latency_s) for l in self.net.workers]
        self.queued_s = [0.0] * len(self.net.workers)

    def _transfer(self, mine: FifoLink, theirs: list[FifoLink], worker: int, now: float, nbytes: float | None) -> float:
        w = len(self.net.workers)
        if w <= 1:
            return now
        part = (self.nbytes if nbytes is None else nbytes) / w
        others = [q for j, q in enumerate(theirs) if j != worker]
        self.queued_s[worker] += max(max(now, q.free_at) - now for q in [mine] + others)
        return max(mine.send(now, (w - 1) * part), max(q.send(now, part) for q in others))

    def push(self, worker: int, now: float, nbytes: float | None = None) -> float:
        return self._transfer(self.out[worker], self.into, worker, now, nbytes)

    def pull(self, worker: int, now: float, nbytes: float | None = None) -> float:
        return self._transfer(self.into[worker], self.out, worker, now, nbytes)

    def utilisation(self, elapsed: float) -> float:
        """Busy fraction of the busiest worker link direction over the run."""
        if elapsed <= 0:
            return 0.0
        return min(1.0, max(q.busy_s for q in self.out + self.into) / elapsed)


def server_links(net: Topology, shards: int, nbytes: float, colocated: bool = False):
    """The server's links: ``shards`` dedicated ones (``ServerLinks``) or one shard on every worker."""
    return ColocatedServerLinks(net, nbytes) if colocated else ServerLinks(net, shards, nbytes)


@dataclass(frozen=True)
class ComputeModel:
    """Seconds of one gradient computation: ``(t0 + b * t1) / speed``."""

    t0: float                        # fixed per-step overhead [s]
    t1: float                        # per sample [s]

    def time(self, batch: int, speed: float = 1.0) -> float:
        return (self.t0 + batch * self.t1) / speed

    @classmethod
    def linear(cls, step_s: float, batch: int) -> ComputeModel:
        """No fixed overhead: a step of ``batch`` samples lasts ``step_s`` at speed 1."""
        return cls(0.0, step_s / batch)

    @classmethod
    def fit(cls, batches: list[int], times: list[float]) -> ComputeModel:
        """Least squares ``t = t0 + b t1`` with t0 >= 0, t1 > 0 (t0 clipped to 0 refits t1 through the origin)."""
        b, t = np.asarray(batches, float), np.asarray(times, float)
        t1, t0 = np.polyfit(b, t, 1)
        if t0 < 0 or t1 <= 0:
            t0, t1 = 0.0, float(np.dot(b, t) / np.dot(b, b))
        return cls(float(t0), float(t1))


def balanced_batches(speeds: list[float], total: int, cm: ComputeModel) -> list[int]:
    """Split ``total`` samples so that every worker's compute lasts the same ``T``:
    ``(t0 + b_i t1) / v_i = T``  =>  ``b_i = (T v_i - t0) / t1``, ``T = (total t1 + W t0) / sum v``
    (workers whose share would fall below 1 sample get 1; integer rounding by largest remainder)."""
    w = len(speeds)
    if total < w:
        raise ValueError(f"a global batch of {total} cannot feed {w} workers")
    active = list(range(w))
    raw = [0.0] * w
    while True:
        rest = total - (w - len(active))
        vs = sum(speeds[i] for i in active)
        if cm.t1 <= 0:
            share = {i: rest * speeds[i] / vs for i in active}
        else:
            t = (rest * cm.t1 + len(active) * cm.t0) / vs
            share = {i: (t * speeds[i] - cm.t0) / cm.t1 for i in active}
        low = [i for i in active if share[i] < 1.0]
        if not low:
            break
        active = [i for i in active if i not in low]
    for i in range(w):
        raw[i] = share.get(i, 1.0)
    out = [max(1, int(math.floor(r))) for r in raw]
    for i in sorted(range(w), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)[: max(0, total - sum(out))]:
        out[i] += 1
    return out
