"""A cluster of mixed GPUs: node types (``profiles.DeviceKind``: GPUs per node, memory per GPU, USD per GPU-hour), how
many GPUs of each type sit in each zone, and the links between them (``topology.Topology``), whose bandwidth may
depend on the message size.

Two sources (docs/plans.md, "Describing a cluster"):

- a directory laid out like Sailor's public data (``cluster/basic_cluster_config.json``,
  ``network/multizone_bandwidths_het.json``, ``network/intra_node_bandwidths.json``,
  ``network/communication_cost.json``): ``GpuCluster.from_directory``;
- a YAML file a user writes by hand: ``GpuCluster.from_yaml`` (node types, GPU counts, links given as
  a constant bandwidth and latency or as a fit).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.catalog import (
    DEFAULT_INTRA_EFFICIENCY,
    DEFAULT_NETWORK_EFFICIENCY,
    default_catalog,
    derived_link,
    efficiency,
)
from orchestrator.hardware.links import ConstantLink, FittedLink, Link
from orchestrator.hardware.profiles import DeviceKind
from orchestrator.hardware.topology import Topology
from orchestrator.hardware.units import parse_bandwidth, parse_latency_us, parse_memory_gb, parse_whole
from orchestrator.paths import read_json

DEFAULT_ZONE = "us-central1-a"
# USD per GPU-hour (Google Cloud, us-central1; the prices Sailor's cost studies use). A type not listed here takes the
# GPU catalog's price (its source in hardware/gpu_catalog.json), unless the cluster file gives one.
PRICES = {"A100-40": 3.673385, "V100-16": 2.859998, "GH-96": 11.06}


def price_source(kind: DeviceKind) -> str:
    """Where a type's price per GPU-hour comes from, in a few words: the GPU catalog's source, or the cluster file."""
    if kind.usd_per_gpu_hour is None or kind.usd_per_gpu_hour != price(kind.name):
        return "none" if kind.usd_per_gpu_hour is None else "the cluster file"
    spec = None if kind.name in PRICES else default_catalog().find(kind.name)
    text = "Sailor's cost studies" if spec is None else spec.sources.get("usd_per_gpu_hour", "?")
    return re.split(r"[,:(]", text)[0].strip()


def price(name: str) -> float | None:
    """USD per GPU-hour of a type: Sailor's (``PRICES``), else the catalog's, else None (no price known)."""
    if name in PRICES:
        return PRICES[name]
    spec = default_catalog().find(name)
    return spec.usd_per_gpu_hour if spec is not None else None


@dataclass
class GpuCluster:
    """GPU types (``DeviceKind``: GPUs per node, memory, price), counts per (type, zone), and the links between them,
    ``topology`` (a ``hardware.topology.Topology``, as a placement ``Cluster``'s: ``inter_link``, ``intra_link``)."""

    name: str
    types: dict[str, DeviceKind]
    gpus: dict[tuple[str, str], int]          # (type, zone) -> GPUs available
    topology: Topology
    zone: str = DEFAULT_ZONE                  # the zone a GPU count without one is in
    derived: dict[str, str] = field(default_factory=dict)   # type -> how it was derived (types from the GPU catalog)

    def gpu_type(self, name: str) -> DeviceKind:
        if name not in self.types:
            raise ConfigError(f"unknown GPU type {name!r} (the cluster knows: {', '.join(sorted(self.types))})")
        return self.types[name]

    def type_name(self, name: str) -> str | None:
        """The cluster's name for ``name``: itself, or the type a catalog alias of it names (GH200 -> GH-96)."""
        if name in self.types:
            return name
        spec = default_catalog().find(name)
        return spec.name if spec is not None and spec.name in self.types else None

    def count(self, gpu_type: str | None = None) -> int:
        return sum(n for (t, _), n in self.gpus.items() if gpu_type is None or t == gpu_type)

    def with_gpus(self, gpus: Any) -> GpuCluster:
        """This cluster with the GPU counts ``gpus``: ``{TYPE: N}`` or ``{TYPE: {ZONE: N}}`` (a catalog alias of a
        type the cluster has names that type).
        A type the cluster does not describe comes from the GPU catalog (``hardware.catalog``: its datasheet node and
        links, ``with_catalog_type``); one the catalog lacks either is a one-line error listing both."""
        counts: dict[tuple[str, str], int] = {}
        if not hasattr(gpus, "items"):
            raise ConfigError(f"hardware.gpus={gpus!r} must be a mapping {{GPU type: count}}, e.g. {{A100-40: 32}}")
        zones = {self.zone, *(z for v in gpus.values() if hasattr(v, "items") for z in map(str, v))}
        cluster = self
        for t, v in gpus.items():
            name = cluster.type_name(str(t))
            if name is None:
                cluster = cluster.with_catalog_type(default_catalog().get(str(t), self.types), sorted(zones))
                name = cluster.type_name(str(t)) or str(t)
            per_zone = v.items() if hasattr(v, "items") else [(self.zone, v)]
            for z, n in per_zone:
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ConfigError(f"hardware.gpus.{t}={n!r} must be a whole number >= 0")
                counts[(name, str(z))] = counts.get((name, str(z)), 0) + int(n)
        if not any(counts.values()):
            raise ConfigError(f"hardware.gpus={dict(gpus)!r} lists no GPU: give at least one, e.g. {{A100-40: 8}}")
        return GpuCluster(self.name, cluster.types, counts, cluster.topology, self.zone, dict(cluster.derived))

    def with_plan_gpus(self, plan: Any) -> GpuCluster:
        """This cluster with exactly the GPUs ``plan`` uses (a plan file planned without ``hardware.gpus``)."""
        return self.with_gpus({t: {z: n} for (t, z), n in plan.gpus_used().items()})

    def with_headroom(self, headroom: float) -> GpuCluster:
        """This cluster with ``headroom`` (a share, 0 <= h < 1) of every GPU's memory kept free: plans may use
        ``(1 - h)`` of it (``planner.memory_headroom``); 0 is this cluster unchanged."""
        if not 0.0 <= headroom < 1.0:
            raise ConfigError(f"planner.memory_headroom={headroom!r} must be a share in [0, 1)")
        if headroom == 0.0:
            return self
        types = {n: replace(t, memory_bytes=t.capacity * (1.0 - headroom), capacity_bytes=t.capacity)
                 for n, t in self.types.items()}
        return GpuCluster(self.name, types, dict(self.gpus), self.topology, self.zone, dict(self.derived))

    def with_catalog_type(self, spec: DeviceKind, zones: list[str]) -> GpuCluster:
        """This cluster with the catalog type ``spec`` (no GPUs yet): the catalog's entry as its type, its links inside
        a machine at the datasheet's bandwidth times the median efficiency of the measured links of this cluster's
        catalog types (``link_efficiencies``), between machines at its network's times that efficiency, no faster than
        the other end's link and the fastest measured link between the two zones (the site's network bounds it)."""
        intra_eff, net_eff = self.link_efficiencies()
        types = {**self.types, spec.name: spec}
        net = self.topology
        intra: dict[str, dict[int, Link]] = {**net.intra, spec.name: {g: derived_link(spec.peer_link_bandwidth, intra_eff)
                                           for g in range(2, spec.gpus_per_node + 1)}}
        links = dict(net.links)
        if net.default_inter is None:
            own = spec.network_bandwidth * net_eff
            for other in types:
                for za in zones:
                    for zb in zones:
                        bw = min(own, self._machine_bandwidth(other, za, net_eff), self._zone_bandwidth(za, zb))
                        for a, b in ((spec.name, other), (other, spec.name)):
                            for ga in range(1, types[a].gpus_per_node + 1):
                                for gb in range(1, types[b].gpus_per_node + 1):
                                    links[(za, a, str(ga)), (zb, b, str(gb))] = ConstantLink(bw)
        topo = Topology(links, intra, net.egress_usd_per_gb, net.default_inter, net.default_intra)
        note = (f"derived from datasheet: {spec.title} (links: {intra_eff:.2f}x its intra-node bandwidth; {net_eff:.2f}x its "
                "per-GPU share of the machine's network, the median of measured one-GPU links over that share: one GPU "
                "alone may use more than its share)")
        return GpuCluster(self.name, types, dict(self.gpus), topo, self.zone, {**self.derived, spec.name: note})

    def link_efficiencies(self) -> tuple[float, float]:
        """(inside a machine, between machines): the medians of measured / datasheet bandwidth over this cluster's
        types that the catalog has and its network measured (the fastest group inside a machine; one GPU to one
        GPU of the same type in the cluster's zone); the catalog's defaults where none is measured."""
        intra, inter = [], []
        for name in self.types:
            spec = default_catalog().find(name)
            if spec is None or name in self.derived:
                continue
            per = self.topology.intra.get(name, {})
            if per:
                intra.append((_max_bandwidth(per[max(per)]), spec.peer_link_bandwidth))
            link = self.topology.links.get(((self.zone, name, "1"), (self.zone, name, "1")))
            if link is not None:
                inter.append((_max_bandwidth(link), spec.network_bandwidth))
        return efficiency(intra, DEFAULT_INTRA_EFFICIENCY), efficiency(inter, DEFAULT_NETWORK_EFFICIENCY)

    def _machine_bandwidth(self, name: str, zone: str, net_eff: float) -> float:
        """The bandwidth a machine of ``name`` reaches to another in ``zone``: measured, else from the catalog."""
        link = self.topology.links.get(((zone, name, "1"), (zone, name, "1")))
        if link is not None:
            return _max_bandwidth(link)
        spec = default_catalog().find(name)
        return spec.network_bandwidth * net_eff if spec is not None else math.inf

    def _zone_bandwidth(self, za: str, zb: str) -> float:
        """The fastest measured link between machines of zones ``za`` and ``zb`` (inf when none is measured)."""
        got = [_max_bandwidth(link) for (a, b), link in self.topology.links.items()
               if len(a) == 3 and a[0] == za and b[0] == zb]
        return max(got) if got else math.inf

    def describe(self) -> str:
        parts = [f"{n} {t}" + (f" ({z})" if z != self.zone else "") for (t, z), n in sorted(self.gpus.items()) if n]
        return " + ".join(parts) or "no GPUs"

    # -- readers ---------------------------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | Path) -> GpuCluster:
        """A directory laid out like ``shared/workloads/sailor`` (its README lists the files)."""
        root = Path(path)
        if not root.is_dir():
            raise ConfigError(f"hardware.data={str(path)!r} is not a directory")
        basic = read_json(root / "cluster" / "basic_cluster_config.json", top=dict)
        zone = str(basic.get("zone", DEFAULT_ZONE))
        types = {}
        for name, spec in basic.items():
            if name == "zone":
                continue
            if not isinstance(spec, dict):
                raise WorkloadError(f"{root / 'cluster' / 'basic_cluster_config.json'}: GPU type {name!r} needs a mapping "
                                    f"{{gpus_per_node, mem_per_gpu}}, got {spec!r}"[:200])
            mem, per_node = spec.get("mem_per_gpu"), spec.get("gpus_per_node")
            if (isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1 or isinstance(mem, bool)
                    or not isinstance(mem, (int, float)) or not 0 < mem < math.inf):
                raise WorkloadError(f"{root / 'cluster' / 'basic_cluster_config.json'}: GPU type {name!r} needs "
                                    f"gpus_per_node (a whole number >= 1) and mem_per_gpu (bytes > 0): got {per_node!r} "
                                    f"and {mem!r}")
            kind = spec.get("kind", "gpu")          # "cpu": a type the layer profiler timed on CPUs (no CUDA context)
            if kind not in ("cpu", "gpu"):
                raise WorkloadError(f"{root / 'cluster' / 'basic_cluster_config.json'}: type {name!r}: kind is 'cpu' or "
                                    f"'gpu', got {kind!r}"[:200])
            types[name] = DeviceKind(name, kind=kind, memory_bytes=float(mem), gpus_per_node=per_node,
                                     usd_per_gpu_hour=price(name))
        inter_raw = read_json(root / "network" / "multizone_bandwidths_het.json")
        intra = _intra(read_json(root / "network" / "intra_node_bandwidths.json", top=dict),
                       root / "network" / "intra_node_bandwidths.json")
        cost_file = root / "network" / "communication_cost.json"
        egress = _egress(read_json(cost_file) if cost_file.exists() else {}, str(cost_file))
        topology = Topology(_fits(inter_raw, root / "network" / "multizone_bandwidths_het.json"),
                            intra=intra,
                            egress_usd_per_gb=egress)
        return cls(root.name, types, {}, topology, zone)

    @classmethod
    def from_yaml(cls, path: str | Path) -> GpuCluster:
        """A cluster described by hand (format in docs/plans.md)."""
        import yaml

        p = Path(path)
        try:
            doc = yaml.safe_load(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"hardware.file={str(path)!r} does not exist") from None
        except yaml.YAMLError as exc:
            raise WorkloadError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("node_types"), dict):
            raise WorkloadError(f"{p}: a cluster file needs a mapping 'node_types: {{TYPE: {{gpus_per_node, memory_GB}}}}'")
        zone = str(doc.get("zone", DEFAULT_ZONE))
        types = {str(name): _node_type(str(name), spec, f"{p}: node_types.{name}") for name, spec in doc["node_types"].items()}
        links = _section(doc, "links", p)
        intra: dict[str, dict[int, Link]] = {}
        for t, spec in _section(links, "intra", p).items():
            link = _link_spec(spec, f"{p}: links.intra.{t}")
            intra[str(t)] = {g: link for g in (2, 4, 8, 16)}
        topology = Topology(intra=intra, egress_usd_per_gb=_egress(doc.get("egress_usd_per_gb") or {},
                                                                   f"{p}: egress_usd_per_gb"),
                            default_inter=_link_spec(links.get("inter", {"bandwidth_GBps": 3.0}), f"{p}: links.inter"),
                            default_intra=_link_spec(links.get("intra_default", {"bandwidth_GBps": 100.0}),
                                                     f"{p}: links.intra_default"))
        cluster = cls(str(doc.get("name", p.stem)), types, {}, topology, zone)
        return cluster.with_gpus(doc["gpus"]) if doc.get("gpus") else cluster


NODE_KEYS = ("gpus_per_node", "memory_GB", "usd_per_gpu_hour")


def _section(doc: dict, key: str, path: Path) -> dict:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise WorkloadError(f"{path}: {key} needs a mapping, got {value!r}"[:200])
    return value


def _egress(value: Any, where: str) -> dict[str, dict[str, float]]:
    """Egress prices ``{zone: {zone: USD per GB >= 0}}``."""
    if not (isinstance(value, dict) and all(
            isinstance(per, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf
                                          for v in per.values()) for per in value.values())):
        raise WorkloadError(f"{where}: expected {{zone: {{zone: USD per GB >= 0}}}}")
    return value


def _node_type(name: str, spec: Any, where: str) -> DeviceKind:
    """One ``node_types`` entry of a cluster file, every figure checked (``where`` names it in the error)."""
    if not isinstance(spec, dict) or "gpus_per_node" not in spec or "memory_GB" not in spec:
        raise WorkloadError(f"{where}: a node type needs {{gpus_per_node, memory_GB}} (usd_per_gpu_hour optional)")
    unknown = sorted(str(k) for k in spec if k not in NODE_KEYS)
    if unknown:
        raise WorkloadError(f"{where}: unknown key {unknown[0]!r} (a node type accepts: {', '.join(NODE_KEYS)})")
    gpus = parse_whole(spec["gpus_per_node"], f"{where}.gpus_per_node", 1, WorkloadError)
    usd = spec.get("usd_per_gpu_hour", price(name))
    memory = parse_memory_gb(spec["memory_GB"], f"{where}.memory_GB", WorkloadError)
    if not 0 < memory < math.inf:
        raise WorkloadError(f"{where}.memory_GB={spec['memory_GB']!r} must be a finite number > 0")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 <= usd < math.inf):
        raise WorkloadError(f"{where}.usd_per_gpu_hour={usd!r} must be a finite number >= 0")
    return DeviceKind(name, memory_bytes=memory, gpus_per_node=gpus, usd_per_gpu_hour=None if usd is None else float(usd))


def _max_bandwidth(link: Link) -> float:
    """A link's largest bandwidth (bytes/s): a fit's measured maximum, a constant link's bandwidth."""
    return link.max_bandwidth if isinstance(link, FittedLink) else link.bandwidth


def _fit(value: Any, where: str) -> FittedLink:
    try:
        coeffs, max_bw = value
        link = FittedLink(tuple(float(c) for c in coeffs), float(max_bw))
    except (TypeError, ValueError):
        raise WorkloadError(f"link fit {where}: expected [[a, b, c], max_bytes_per_s], got {value!r}"[:200]) from None
    if not (all(map(math.isfinite, link.coeffs)) and 0 < link.max_bandwidth < math.inf):
        raise WorkloadError(f"link fit {where}: {value!r} needs finite coefficients and a largest bandwidth > 0"[:200])
    return _checked(link, f"link fit {where}")


def _checked(link: FittedLink, where: str) -> FittedLink:
    """A fit ``[a, b, c]`` of GB/s on log2(n / 1 MB): three coefficients, a bandwidth > 0 at 1 MB (``c``; every
    fit of Sailor's data has one). ``[[0, 0], 1e9]`` had put every message at the 1% floor of its cap."""
    if len(link.coeffs) != 3 or not link.coeffs[2] > 0:
        raise WorkloadError(f"{where}: {list(link.coeffs)!r} is not a fit [a, b, c] of GB/s on log2(bytes / 1 MB) with "
                            "a bandwidth c > 0 at 1 MB"[:300])
    return link


def _intra(raw: dict, path: Path) -> dict[str, dict[int, Link]]:
    """``{type: {gpus: fit}}``: the link between GPUs of one machine, per number of GPUs."""
    out: dict[str, dict[int, Link]] = {}
    for t, per in raw.items():
        if not isinstance(per, dict) or not all(isinstance(g, str) and g.isdigit() for g in per):
            raise WorkloadError(f"{path}: {t!r} needs a mapping {{gpus: link fit}} with whole-number keys")
        out[t] = {int(g): _fit(v, f"intra {t} {g}") for g, v in per.items()}
    return out


def _fits(node: Any, path: Path) -> dict[tuple[Any, Any], Link]:
    """``[src_zone][src_type][src_gpus][dst_zone][dst_type][dst_gpus] -> fit`` as links between
    ``(zone, type, gpus)`` endpoints."""
    out: dict[tuple[Any, Any], Link] = {}

    def walk(node: Any, keys: tuple[str, ...]) -> None:
        if len(keys) == 6:
            out[keys[:3], keys[3:]] = _fit(node, f"{path}{''.join(f'[{k}]' for k in keys)}")
        elif not isinstance(node, dict):
            raise WorkloadError(f"{path}: expected a mapping at {''.join(f'[{k}]' for k in keys) or 'the top'}")
        else:
            for k, v in node.items():
                walk(v, (*keys, str(k)))
    walk(node, ())
    return out


def _link_spec(spec: Any, where: str) -> Link:
    """``{bandwidth_GBps, latency_us}`` or ``{fit: [a, b, c], max_GBps}`` (units: ``hardware.units``)."""
    if not isinstance(spec, dict) or not ("fit" in spec or "bandwidth_GBps" in spec):
        raise WorkloadError(f"{where}: a link is {{bandwidth_GBps: B, latency_us: L}} or {{fit: [a, b, c], max_GBps: M}}")
    latency = parse_latency_us(spec.get("latency_us", 0.0), f"{where}.latency_us", WorkloadError)
    if "fit" in spec:
        cap = parse_bandwidth(spec["max_GBps"], "GB/s", f"{where}.max_GBps", WorkloadError, finite=False) \
            if "max_GBps" in spec else math.inf
        try:
            link = FittedLink(tuple(float(c) for c in spec["fit"]), cap, latency)
        except (TypeError, ValueError):
            raise WorkloadError(f"{where}.fit={spec['fit']!r} must be a list of numbers [a, b, c]") from None
        return _checked(link, f"{where}.fit")
    return ConstantLink(parse_bandwidth(spec["bandwidth_GBps"], "GB/s", f"{where}.bandwidth_GBps", WorkloadError,
                                        finite=False), latency)
