"""The links of a cluster, one table: ``Topology``. Every link is a ``ConstantLink`` or a ``FittedLink``
(``hardware.links``; bytes, seconds, bytes/s inside) between two endpoints, and the views read it:

- the placement (``cluster.Worker.links``, ``Worker.route``): links between device names and ``host_memory(host)``s,
  added by ``connect`` with their contention channel (``channels``: links naming one contend, as on a PCIe switch or
  a host's NIC; absent: its own) and kind (``kinds``: "pcie", "nvlink", "network", "local");
- the sync virtual clock: each worker's link to the network (endpoints ``("worker", i)`` -> ``NETWORK``) and the
  parameter server's, per shard (``SERVER`` -> ``NETWORK``): ``workers``, ``server``; built from
  ``hardware.network`` by ``from_cfg`` (default 10 Gbit/s and 50 us everywhere);
- the plan's GPU cluster: the fits between machines, ``(zone, GPU type, GPUs taking part)`` at each end
  (``inter_link``, Sailor's ``multizone_bandwidths_het.json``), inside one machine by type and GPUs
  (``intra_link``, ``intra_node_bandwidths.json``), and the USD per GB between zones (``egress``).

``default_inter`` links a pair no entry names (between machines, or a worker without its own link);
``default_intra`` inside a machine; without one, a missing entry is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from orchestrator.config.choices import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US
from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.cost import GBIT
from orchestrator.hardware.links import ConstantLink, Link
from orchestrator.hardware.units import parse_bandwidth, parse_latency_us

NETWORK = ("network",)
SERVER = ("server",)


def worker(i: int) -> tuple[str, int]:
    """A data-parallel worker as an endpoint."""
    return ("worker", i)


@dataclass
class Topology:
    """Links by their two endpoints (see the module docstring); the views are computed at their first use."""

    links: dict[tuple[Any, Any], Link] = field(default_factory=dict)
    intra: dict[str, dict[int, Link]] = field(default_factory=dict)
    egress_usd_per_gb: dict[str, dict[str, float]] = field(default_factory=dict)
    default_inter: Link | None = None
    default_intra: Link | None = None
    channels: dict[tuple[Any, Any], str] = field(default_factory=dict)   # the placement's (see the module docstring)
    kinds: dict[tuple[Any, Any], str] = field(default_factory=dict)

    # -- the placement's view ------------------------------------------------------------------
    def connect(self, src: Any, dst: Any, link: Link, shared: str | None = None, kind: str | None = None) -> None:
        """The link ``src -> dst`` (one direction), on the contention channel ``shared`` (None: its own)."""
        self.links[src, dst] = link
        self.channels.update({} if shared is None else {(src, dst): shared})
        self.kinds.update({} if kind is None else {(src, dst): kind})

    def channel(self, ends: tuple[Any, Any]) -> str:
        """The contention channel of the link between ``ends``."""
        return self.channels.get(ends) or f"{ends[0]}->{ends[1]}"

    # -- the sync virtual clock's view ----------------------------------------------------------
    @cached_property
    def workers(self) -> tuple[Link, ...]:
        """Each worker's link to the network, worker 0 first."""
        n = sum(1 for a, _ in self.links if len(a) == 2 and a[0] == "worker")
        return tuple(self.links.get((worker(i), NETWORK), self.default_inter) for i in range(n))  # type: ignore[misc]

    @property
    def server(self) -> Link:
        """The parameter server's link (each shard's)."""
        return self.links.get((SERVER, NETWORK)) or self.default_inter  # type: ignore[return-value]

    @classmethod
    def from_cfg(cls, node: Any, workers: int) -> Topology:
        """``hardware.network: {bandwidth_Gbps, latency_us, server: {...}, workers: {i: {...}}}`` for W workers."""
        base = _link(node, "hardware.network", ConstantLink(DEFAULT_BANDWIDTH_GBPS * GBIT, DEFAULT_LATENCY_US * 1e-6))
        per = (node.get("workers", None) if node is not None and hasattr(node, "get") else None) or {}
        links: dict[tuple[Any, Any], Link] = {(worker(i), NETWORK): base for i in range(workers)}
        for k, v in (per.items() if hasattr(per, "items") else enumerate(per)):
            try:
                i = int(k)
            except (TypeError, ValueError):
                raise ConfigError(f"hardware.network.workers: key {k!r} is not a worker index") from None
            if not 0 <= i < workers:
                raise ConfigError(f"hardware.network.workers.{k}: no such worker (W={workers})")
            links[worker(i), NETWORK] = _link(v, f"hardware.network.workers.{k}", base)
        links[SERVER, NETWORK] = _link(node.get("server", None) if node is not None and hasattr(node, "get") else None,
                                       "hardware.network.server", base)
        return cls(links, default_inter=base)

    @classmethod
    def uniform(cls, workers: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS * GBIT,
                latency_s: float = DEFAULT_LATENCY_US * 1e-6) -> Topology:
        """W workers and the server on links of one bandwidth (bytes/s) and latency (s)."""
        link = ConstantLink(bandwidth, latency_s)
        return cls({**{(worker(i), NETWORK): link for i in range(workers)}, (SERVER, NETWORK): link}, default_inter=link)

    # -- the plan's view ------------------------------------------------------------------------
    def inter_link(self, src_zone: str, src_type: str, src_gpus: int, dst_zone: str, dst_type: str,
                   dst_gpus: int) -> Link:
        """Between machines: ``src_gpus`` GPUs of a ``src_type`` machine in ``src_zone`` sending to ``dst_gpus`` of one
        ``dst_type`` machine in ``dst_zone``."""
        got = self.find_inter(src_zone, src_type, src_gpus, dst_zone, dst_type, dst_gpus)
        if got is not None:
            return got
        raise WorkloadError(f"no link fit from {src_type} x{src_gpus} in {src_zone} to {dst_type} x{dst_gpus} "
                            f"in {dst_zone} (not in the network file)")

    def find_inter(self, src_zone: str, src_type: str, src_gpus: int, dst_zone: str, dst_type: str,
                   dst_gpus: int) -> Link | None:
        """``inter_link``'s link, None where the network has none."""
        got = self.links.get(((src_zone, src_type, str(src_gpus)), (dst_zone, dst_type, str(dst_gpus))))
        return got if got is not None else self.default_inter

    def intra_link(self, gpu_type: str, gpus: int) -> Link:
        """Inside one machine of ``gpu_type``, among ``gpus`` GPUs: its fit, else the smallest measured group above."""
        per = self.intra.get(gpu_type, {})
        if gpus in per:
            return per[gpus]
        larger = sorted(g for g in per if g >= gpus)
        if larger:                                   # a subset of a node: its smallest measured group above
            return per[larger[0]]
        if self.default_intra is not None:
            return self.default_intra
        raise WorkloadError(f"no intra-node link fit for {gpus} GPUs of type {gpu_type}")

    def egress(self, src_zone: str, dst_zone: str) -> float:
        """USD per GB sent from ``src_zone`` to ``dst_zone``."""
        return float(self.egress_usd_per_gb.get(src_zone, {}).get(dst_zone, 0.0))


def _link(node: Any, key: str, default: ConstantLink) -> ConstantLink:
    """``{bandwidth_Gbps, latency_us}`` (each optional: ``default``'s) as a link."""
    bw = node.get("bandwidth_Gbps", None) if hasattr(node, "get") else None
    lat = node.get("latency_us", None) if hasattr(node, "get") else None
    return ConstantLink(default.bandwidth if bw is None else parse_bandwidth(bw, "Gbit/s", f"{key}.bandwidth_Gbps"),
                        default.latency_s if lat is None else parse_latency_us(lat, f"{key}.latency_us"))
