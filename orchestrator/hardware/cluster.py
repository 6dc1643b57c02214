"""The hardware model: devices, links, workers, hosts. Hardware adapters build a ``Cluster``;
placers place a model on one ``Worker``'s devices; sync strategies run one replica per worker.

Units: FLOP/s, bytes, bytes/s, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Device:
    name: str                      # unique within its worker, e.g. "gpu:0", "cpu:0"
    kind: str                      # "cpu", "gpu" or "accelerator"
    peak_flops: float = 1e12       # FLOP/s
    mem_bandwidth: float = 1e11    # bytes/s
    memory_bytes: float = math.inf
    profile: str = "generic"       # e.g. "V100 (datasheet)", "H200 (measured)"
    tf_device: str | None = None   # a real TensorFlow device string when the device exists
    host: str = "host0"
    memory_pool: str | None = None  # devices naming one pool share its memory (CPU cores of a host)

    @property
    def is_real(self) -> bool:
        return self.tf_device is not None


@dataclass
class Link:
    """A connection between two devices (or a device and host memory): latency + bytes/bandwidth.
    Links with the same ``shared`` name contend (a PCIe switch, a host's NIC)."""

    src: str
    dst: str
    bandwidth: float               # bytes/s
    latency_s: float = 0.0
    shared: str | None = None
    kind: str = "pcie"             # "pcie", "nvlink", "network", "local"

    def transfer_time(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth


@dataclass
class Worker:
    """A data-parallel worker: the devices one replica of the model is placed on."""

    name: str
    devices: list[Device]
    links: list[Link] = field(default_factory=list)
    speed: float = 1.0             # relative compute speed of this worker (1.0 = reference)
    host: str = "host0"

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    def route(self, src: Device, dst: Device) -> list[Link]:
        return _route(self, src, dst)


@dataclass
class Cluster:
    name: str
    workers: list[Worker]
    simulated: bool                # True when no device of it exists for real here
    network_bandwidth: float = 1.25e9   # bytes/s between hosts (10 GbE)
    network_latency_s: float = 50e-6
    description: str = ""

    @property
    def hosts(self) -> list[str]:
        return sorted({w.host for w in self.workers})


# -- routes ------------------------------------------------------------------------------------
def host_memory(host: str) -> str:
    """The name of a host's memory as a link endpoint (CPU devices compute in it directly)."""
    return f"{host}:mem"


def _route(worker: Worker, src: Device, dst: Device) -> list[Link]:
    """Links a tensor crosses from ``src`` to ``dst``: none on one device, a direct link where there
    is one (NVLink; a calibrated link between logical CPUs), none between CPUs of one host, else up
    to host memory, across the network between hosts, and down. Raises ``ConfigError`` when a
    needed link is missing."""
    if src.name == dst.name:
        return []
    by_ends = {(l.src, l.dst): l for l in worker.links}
    if (src.name, dst.name) in by_ends:
        return [by_ends[src.name, dst.name]]
    if src.kind == "cpu" and dst.kind == "cpu" and src.host == dst.host:
        return []
    hops = []
    a, b = host_memory(src.host), host_memory(dst.host)
    if src.kind != "cpu":
        hops.append((src.name, a))
    if a != b:
        hops.append((a, b))
    if dst.kind != "cpu":
        hops.append((b, dst.name))
    missing = [h for h in hops if h not in by_ends]
    if missing:
        from orchestrator.errors import ConfigError
        raise ConfigError(f"worker {worker.name!r}: no link {missing[0][0]} -> {missing[0][1]} (needed from {src.name} to {dst.name})")
    return [by_ends[h] for h in hops]

