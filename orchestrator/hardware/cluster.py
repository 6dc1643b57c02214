"""The placement's view of the hardware model: devices, workers, hosts. Hardware adapters build a ``Cluster``;
placers place a model on one ``Worker``'s devices; sync strategies run one replica per worker. The links are
the ``hardware.topology.Topology`` the workers share (``Worker.links``: one worker's part). Units: FLOP/s, bytes,
bytes/s, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.hardware.cost import roofline_s
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology


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
    core_pool: str | None = None    # devices naming one pool share its physical cores (Worker.core_pools)

    @property
    def is_real(self) -> bool:
        return self.tf_device is not None

    def __post_init__(self):
        for key in ("peak_flops", "mem_bandwidth", "memory_bytes"):   # an adapter's (a plugin's) figures too
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"device {self.name!r}: {key}={v!r} must be a number > 0")

    def roofline_s(self, flops: float, bytes_accessed: float) -> float:
        """Seconds of a node with no measured cost on this device (``cost.roofline_s``)."""
        return roofline_s(flops, bytes_accessed, self.peak_flops, self.mem_bandwidth)


@dataclass(frozen=True)
class CorePool:
    """Physical cores that several devices share (the logical CPU devices of one host): while k tasks
    run at once on devices of the pool, each progresses at ``rate(k)`` = eff(k) / k of its speed
    alone (processor sharing with a measured parallel efficiency; docs/pipeline.md).
    ``efficiency`` = (eff(2), eff(3), ...), each in (0, k], or a function returning them, called
    at the first use (a calibration that only runs where it matters); eff(1) = 1; beyond the
    tuple the last value holds (the cores are saturated). ``source``: how it was obtained."""

    efficiency: tuple[float, ...] | Callable[[], tuple[float, ...]]
    source: str = "set by hand"

    def __post_init__(self):
        if not callable(self.efficiency):
            self._check(self.efficiency)

    @staticmethod
    def _check(values) -> tuple[float, ...]:
        values = tuple(float(e) for e in values)
        for k, e in enumerate(values, start=2):
            if not (0.0 < e <= k):
                raise ValueError(f"core pool: eff({k})={e!r} must be in (0, {k}]")
        return values

    @property
    def values(self) -> tuple[float, ...]:
        """(eff(2), ...), measured now if it is a function."""
        got = self.__dict__.get("_values")
        if got is None:
            got = self._check(self.efficiency() if callable(self.efficiency) else self.efficiency)
            object.__setattr__(self, "_values", got)
        return got

    def eff(self, k: int) -> float:
        v = self.values
        if k <= 1 or not v:
            return float(min(k, 1))
        return float(min(k, v[min(k, len(v) + 1) - 2]))

    def rate(self, k: int) -> float:
        """Speed of each of k concurrent tasks, relative to one task alone."""
        return 1.0 if k <= 1 else self.eff(k) / k


@dataclass
class Worker:
    """A data-parallel worker: the devices one replica of the model is placed on."""

    name: str
    devices: list[Device]
    topology: Topology = field(default_factory=Topology)   # the cluster's links (the workers share it)
    speed: float = 1.0             # relative compute speed of this worker (1.0 = reference)
    host: str = "host0"
    core_pools: dict[str, CorePool] = field(default_factory=dict)   # Device.core_pool -> its sharing

    def core_pool_of(self, device: Device) -> CorePool | None:
        """The core pool ``device`` shares (None: its cores are its own)."""
        return self.core_pools.get(device.core_pool) if device.core_pool is not None else None

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def links(self) -> dict[tuple[str, str], ConstantLink]:
        """The links between this worker's devices and its hosts' memory, by their endpoints, in the topology's order."""
        ends = {d.name for d in self.devices} | {host_memory(d.host) for d in self.devices}
        out = {}
        for k, link in self.topology.links.items():
            if k[0] in ends and k[1] in ends:
                if not isinstance(link, ConstantLink):
                    raise ConfigError(f"worker {self.name!r}: the link {k[0]} -> {k[1]} is fitted on message size; "
                                      "placement needs a constant one")
                out[k] = link
        return out

    def route(self, src: Device, dst: Device) -> list[tuple[str, str]]:
        """The links (their endpoints) a tensor crosses from ``src`` to ``dst``: none on one device, a direct link where there
        is one (NVLink; a calibrated link between logical CPUs), none between CPUs of one host, else up
        to host memory, across the network between hosts, and down. Raises ``ConfigError`` when a
        needed link is missing."""
        if src.name == dst.name:
            return []
        by_ends = self.topology.links
        if (src.name, dst.name) in by_ends:
            return [(src.name, dst.name)]
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
            raise ConfigError(f"worker {self.name!r}: no link {missing[0][0]} -> {missing[0][1]} (needed from {src.name} to {dst.name})")
        return hops


@dataclass
class Cluster:
    name: str
    workers: list[Worker]
    simulated: bool                # True when no device of it exists for real here
    description: str = ""


def checked(cluster: Any, adapter: str) -> Cluster:
    """A hardware adapter's cluster (a plugin's too), its shape checked: one line naming the adapter otherwise."""
    from orchestrator.errors import PluginError

    if not isinstance(cluster, Cluster):
        raise PluginError(f"hardware={adapter}: cluster() returned {type(cluster).__name__}, not an orchestrator.api.Cluster")
    if not cluster.workers:
        raise PluginError(f"hardware={adapter}: the cluster has no workers")
    for w in cluster.workers:
        names = [d.name for d in w.devices]
        if not names:
            raise PluginError(f"hardware={adapter}: worker {w.name!r} has no devices")
        if len(set(names)) < len(names):
            raise PluginError(f"hardware={adapter}: worker {w.name!r} names device "
                              f"{next(n for n in names if names.count(n) > 1)!r} twice")
        if not (isinstance(w.speed, (int, float)) and 0 < w.speed < math.inf):
            raise PluginError(f"hardware={adapter}: worker {w.name!r} has speed {w.speed!r} (a number > 0)")
    return cluster


def host_memory(host: str) -> str:
    """The name of a host's memory as a link endpoint (CPU devices compute in it directly)."""
    return f"{host}:mem"
