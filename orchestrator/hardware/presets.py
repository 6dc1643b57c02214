"""Simulated clusters: presets and user cluster files (YAML), built from ``hardware_profiles``.

Rates: PCIe per direction from the GPU profile; NVLink per direction between every GPU pair of a
host where the profile has one; the network between hosts is one shared channel per host NIC (one ``Topology``).
"""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.hardware.cluster import Cluster, Device, Worker, host_memory
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.profiles import DeviceKind, profile
from orchestrator.hardware.topology import Topology
from orchestrator.hardware.units import parse_bandwidth, parse_latency_us, parse_whole

PCIE_LATENCY_S = 10e-6
NVLINK_LATENCY_S = 2e-6


def make_device(p: DeviceKind, name: str, host: str, precision: str = "fp32") -> Device:
    kind = "cpu" if p.kind == "cpu" else "gpu"
    return Device(name, kind, p.peak_flops(precision), p.mem_bandwidth, p.memory_bytes, p.name, host=host,
                  memory_pool=host_memory(host) if kind == "cpu" else None)


def make_host(host: str, cpu: str, gpu: str | None, n_gpus: int, *, cpus: int = 1, nvlink: bool = True,
              pcie_switch_per: int = 0, precision: str = "fp32",
              topology: Topology | None = None) -> tuple[list[Device], Topology]:
    """Devices of one host and its links, added to ``topology`` (a new one if None): ``cpus`` CPU devices sharing
    host memory, ``n_gpus`` GPUs on PCIe (``pcie_switch_per`` GPUs share one upstream link, 0 = each its own),
    NVLink between GPUs if asked and the profile has it."""
    devs = [make_device(profile(cpu), f"{host}/cpu:{i}", host, precision) for i in range(cpus)]
    topo = Topology() if topology is None else topology
    mem = host_memory(host)
    if gpu:
        gp = profile(gpu)
        pcie = ConstantLink(gp.host_link_bandwidth, PCIE_LATENCY_S)
        for i in range(n_gpus):
            d = make_device(gp, f"{host}/gpu:{i}", host, precision)
            devs.append(d)
            share = f"{host}/pcie-switch{i // pcie_switch_per}" if pcie_switch_per else None
            topo.connect(d.name, mem, pcie, f"{share}:up" if share else None, "pcie")
            topo.connect(mem, d.name, pcie, f"{share}:down" if share else None, "pcie")
        if nvlink and gp.peer_link_bandwidth:
            for a, b in permutations([d for d in devs if d.kind == "gpu"], 2):
                topo.connect(a.name, b.name, ConstantLink(gp.peer_link_bandwidth, NVLINK_LATENCY_S), None, "nvlink")
    return devs, topo


def connect_hosts(topology: Topology, hosts: list[str], network: ConstantLink) -> Topology:
    """``network`` between every two hosts' memories, one shared NIC channel per host (its outgoing traffic)."""
    for a, b in permutations(sorted(set(hosts)), 2):
        topology.connect(host_memory(a), host_memory(b), network, f"{a}/nic:out", "network")
    return topology


def sim_1cpu_4gpu(gpu: str = "K80 (datasheet)", cpu: str = "Xeon Platinum 8380 (datasheet)") -> Cluster:
    """The reference study: one host, 1 CPU + 4 GPUs, one worker. Default K80-class GPUs (the
    generation of the original device-placement studies), two per PCIe switch as on K80 boards, so
    transfers of GPU pairs contend; no NVLink."""
    devs, topo = make_host("host0", cpu, gpu, 4, pcie_switch_per=2, nvlink=False)
    return Cluster("sim_1cpu_4gpu", [Worker("worker0", devs, topo, host="host0")], simulated=True,
                   description=f"1 x {cpu} + 4 x {gpu}, PCIe (2 GPUs per switch)")


def sim_hetero_cluster() -> Cluster:
    """Three hosts with unequal GPUs, one worker each: 4 x V100 (NVLink), 2 x A100 (NVLink),
    2 x K80 (PCIe only); 100 Gb/s network."""
    spec = [("host0", "V100 (datasheet)", 4), ("host1", "A100 (datasheet)", 2), ("host2", "K80 (datasheet)", 2)]
    topo, workers = Topology(), []
    for host, gpu, n in spec:
        devs, _ = make_host(host, "Xeon Platinum 8380 (datasheet)", gpu, n, topology=topo)
        workers.append(Worker(f"worker-{host}", devs, topo, host=host))
    connect_hosts(topo, [h for h, _, _ in spec], ConstantLink(12.5e9, 5e-6))
    return Cluster("sim_hetero_cluster", workers, simulated=True,
                   description="; ".join(f"{h}: {n} x {g}" for h, g, n in spec))


HOST_KEYS = ("name", "cpu", "cpus", "gpu", "gpus", "nvlink", "pcie_switch_per")
_DEFAULTS = {"gpus": 0, "cpus": 1, "pcie_switch_per": 0}


def _count(host: dict, key: str, low: int, where: str) -> int:
    """A host's whole-number ``key`` (its default when absent), at least ``low``: else a one-line error."""
    return parse_whole(host.get(key, _DEFAULTS[key]), f"{where}.{key}", low)


def load_cluster_file(path: str | Path) -> Cluster:
    """A cluster from YAML::

        name: my-cluster
        network: {bandwidth_GBps: 12.5, latency_us: 5}      # optional
        hosts:
          - {name: h0, cpu: "Xeon Platinum 8380 (datasheet)", cpus: 1,
             gpu: "V100 (datasheet)", gpus: 4, nvlink: true, pcie_switch_per: 0}

    One worker per host. Any problem -> ``ConfigError`` naming the file and the key."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such cluster file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list) or not data["hosts"]:
        raise ConfigError(f"{path}: expected a mapping with a non-empty 'hosts' list")
    topo, workers = Topology(), []
    for i, h in enumerate(data["hosts"]):
        if not isinstance(h, dict) or "cpu" not in h:
            raise ConfigError(f"{path}: hosts[{i}] needs at least 'cpu' (a device profile)")
        unknown = sorted(str(k) for k in h if k not in HOST_KEYS)
        if unknown:
            raise ConfigError(f"{path}: hosts[{i}]: unknown key {unknown[0]!r} (a host accepts: {', '.join(HOST_KEYS)})")
        name = str(h.get("name", f"host{i}"))
        if any(w.host == name for w in workers):
            raise ConfigError(f"{path}: hosts[{i}]: a second host named {name!r}")
        n_gpus, cpus, switch = (_count(h, key, low, f"{path}: hosts[{i}]") for key, low in
                                (("gpus", 0), ("cpus", 1), ("pcie_switch_per", 0)))
        if n_gpus and "gpu" not in h:
            raise ConfigError(f"{path}: hosts[{i}] has gpus: {n_gpus} but no 'gpu' profile")
        try:
            devs, _ = make_host(name, h["cpu"], h.get("gpu"), n_gpus, cpus=cpus, nvlink=bool(h.get("nvlink", True)),
                                pcie_switch_per=switch, topology=topo)
        except ConfigError as exc:
            raise ConfigError(f"{path}: hosts[{i}]: {exc}") from None
        workers.append(Worker(f"worker-{name}", devs, topo, host=name))
    net = data.get("network") or {}
    if not isinstance(net, dict):
        raise ConfigError(f"{path}: network needs numeric bandwidth_GBps and latency_us")
    bw = parse_bandwidth(net.get("bandwidth_GBps", 1.25), "GB/s", f"{path}: network.bandwidth_GBps")
    lat = parse_latency_us(net.get("latency_us", 50), f"{path}: network.latency_us")
    connect_hosts(topo, [w.host for w in workers], ConstantLink(bw, lat))
    return Cluster(str(data.get("name", Path(path).stem)), workers, simulated=True)


def multi_host_worker(cluster: Cluster, name: str = "all") -> Worker:
    """All devices of a cluster as one worker (model parallelism across hosts) on the workers' topology: the
    host links and the network between hosts."""
    hosts = sorted({w.host for w in cluster.workers})
    return Worker(name, [d for w in cluster.workers for d in w.devices], cluster.workers[0].topology,
                  host=hosts[0] if hosts else "host0")
