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
