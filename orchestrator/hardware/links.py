"""One link and collective cost model, shared by the sync virtual clock and the plan simulator.

A link answers one question, ``time(nbytes)``: how long a message of ``nbytes`` takes from one end to
the other. Two kinds:

- ``ConstantLink``: ``latency + n / B`` (the alpha-beta model, Hockney 1994);
- ``FittedLink``: the bandwidth depends on the message size, fitted to measurements as
  ``B(n) [GB/s] = a x^2 + b x + c`` with ``x = log2(n / 1e6)`` (Sailor, SOSP'25, the format of its
  ``multizone_bandwidths_het.json`` / ``intra_node_bandwidths.json``), capped at the fit's measured
  maximum and floored at 1% of it, so that an extrapolated fit never goes to zero or negative.

Both compute their time with the cost core's hop (``cost.hop_s``). Collectives on top of any link
(formulas in docs/plans.md):

- ring all-reduce of ``n`` bytes over ``k`` members: ``2 (k-1) * t(n / k)`` (Patarasuk and Yuan 2009:
  reduce-scatter then all-gather, ``k-1`` steps each, every step moves ``n/k`` bytes on every link);
- bucketed: the message cut into buckets of at most ``bucket`` bytes, reduced one after the other
  (DeepSpeed's ``allreduce_bucket_size``, PyTorch DDP's buckets);
- hierarchical, for ``k = nodes x per_node`` members: a ring reduce-scatter inside each node, a ring
  all-reduce of ``n / per_node`` bytes across nodes, a ring all-gather inside each node
  (NCCL's tree/ring hybrid, Horovod's hierarchical all-reduce).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.hardware.cost import GB, hop_s


@dataclass(frozen=True)
class ConstantLink:
    """latency + bytes / bandwidth."""

    bandwidth: float                    # bytes/s
    latency_s: float = 0.0

    def __post_init__(self):
        if not (self.bandwidth > 0 and 0 <= self.latency_s < math.inf):    # NaN fails both
            from orchestrator.errors import ConfigError

            raise ConfigError(f"a link needs a bandwidth > 0 bytes/s and a latency >= 0 s, got {self.bandwidth!r} and "
                              f"{self.latency_s!r}")

    def time(self, nbytes, senders: int = 1):
        """Seconds of a message of ``nbytes`` (a number or a numpy array; 0 for none) while ``senders``
        messages share the link's bandwidth."""
        if isinstance(nbytes, np.ndarray):
            return np.where(nbytes > 0, hop_s(self.latency_s, nbytes, self.bandwidth / senders), 0.0)
        if nbytes <= 0:
            return 0.0
        return hop_s(self.latency_s, nbytes, self.bandwidth / senders)


@dataclass(frozen=True)
class FittedLink:
    """A bandwidth that depends on the message size: ``B(n) = a x^2 + b x + c`` GB/s, ``x = log2(n/1e6)``."""

    coeffs: tuple[float, ...]            # highest power first (a, b, c)
    max_bandwidth: float = math.inf      # bytes/s: the largest measured; the fit is capped there
    latency_s: float = 0.0

    def raw_bandwidth(self, nbytes):
        """The fit itself, uncapped (bytes/s): what Sailor's simulator uses. Scalars or numpy arrays."""
        x = np.log2(nbytes / 1e6) if isinstance(nbytes, np.ndarray) else math.log2(nbytes / 1e6)
        gbps = 0.0
        for c in self.coeffs:
            gbps = gbps * x + c
        return gbps * GB

    def bandwidth_at(self, nbytes):
        bw = self.raw_bandwidth(nbytes)
        if isinstance(bw, np.ndarray):
            cap = self.max_bandwidth if math.isfinite(self.max_bandwidth) else np.abs(bw)
            return np.minimum(np.maximum(bw, 0.01 * cap), cap)
        cap = self.max_bandwidth if math.isfinite(self.max_bandwidth) else abs(bw)
        return min(max(bw, 0.01 * cap), cap) if cap > 0 else bw

    def time(self, nbytes, senders: int = 1):
        """As ``ConstantLink.time``, at the bandwidth fitted for a message of ``nbytes``."""
        if isinstance(nbytes, np.ndarray):
            safe = np.where(nbytes > 0, nbytes, 1.0)
            return np.where(nbytes > 0, hop_s(self.latency_s, safe, self.bandwidth_at(safe) / senders), 0.0)
        if nbytes <= 0:
            return 0.0
        return hop_s(self.latency_s, nbytes, self.bandwidth_at(nbytes) / senders)


Link = ConstantLink | FittedLink


def ring_allreduce_time(link: Link, nbytes, members):
    """Ring all-reduce of ``nbytes`` (a number or a numpy array) over ``members``: ``2 (k-1) t(n/k)``; ``members``
    a number, or a numpy array of ring sizes broadcast against ``nbytes`` (a table of sizes x members)."""
    if isinstance(members, np.ndarray):
        return np.where(members > 1, 2.0 * (members - 1) * np.asarray(link.time(nbytes / members)), 0.0)
    if members <= 1:
        return 0.0 * nbytes
    if isinstance(nbytes, np.ndarray):
        return 2.0 * (members - 1) * link.time(nbytes / members)
    if nbytes <= 0:
        return 0.0
    return 2.0 * (members - 1) * link.time(nbytes / members)


def ring_half_time(link: Link, nbytes, members: int):
    """A ring reduce-scatter (or all-gather) alone: ``(k-1) t(n/k)``."""
    return 0.5 * ring_allreduce_time(link, nbytes, members)


def buckets(nbytes: float, bucket: float) -> list[float]:
    """``nbytes`` cut into buckets of at most ``bucket`` bytes (the last one smaller)."""
    if nbytes <= 0:
        return []
    if not math.isfinite(bucket) or bucket <= 0 or nbytes <= bucket:
        return [nbytes]
    full = int(nbytes // bucket)
    rest = nbytes - full * bucket
    return [bucket] * full + ([rest] if rest > 0 else [])


def bucketed_allreduce_time(link: Link, nbytes, members, bucket: float = math.inf):
    """Ring all-reduce of each bucket in turn (``nbytes`` a number or a numpy array; ``members`` a number or, with
    an array ``nbytes``, an array of ring sizes broadcast against it)."""
    if isinstance(nbytes, np.ndarray):
        if not math.isfinite(bucket) or bucket <= 0:
            return ring_allreduce_time(link, nbytes, members)
        full = np.floor(nbytes / bucket)
        return full * ring_allreduce_time(link, bucket, members) + ring_allreduce_time(link, nbytes - full * bucket, members)
    return sum(ring_allreduce_time(link, b, members) for b in buckets(nbytes, bucket))


def hierarchical_allreduce_time(intra: Link, inter: Link, nbytes: float, nodes: int, per_node: int,
                                bucket: float = math.inf) -> float:
    """Reduce-scatter inside each node, all-reduce of a 1/per_node shard across nodes, all-gather inside."""
    def one(b):
        return 2.0 * ring_half_time(intra, b, per_node) + ring_allreduce_time(inter, b / max(per_node, 1), nodes)

    if isinstance(nbytes, np.ndarray):
        if not math.isfinite(bucket) or bucket <= 0:
            return one(nbytes)
        full = np.floor(nbytes / bucket)
        return full * one(bucket) + one(nbytes - full * bucket)
    return sum(one(b) for b in buckets(nbytes, bucket))
