"""``hardware=tf_cluster``: devices of other processes or hosts through TensorFlow's gRPC runtime.
Either N local ``tf.distribute.Server`` processes started as stand-in hosts, or the servers a user
lists (``hardware.addresses``). Task i's CPU is device ``cpu:i``; everything is measured for real."""

from __future__ import annotations

from itertools import permutations
from typing import Any

from orchestrator.api import TrialContext
from orchestrator.config.hardware import TFClusterHardwareConfig
from orchestrator.errors import ConfigError
from orchestrator.hardware.cluster import Cluster, Device, Worker, host_memory
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.hardware.units import parse_bandwidth, parse_latency_us
from orchestrator.hardware.workers import worker_layout


class TFClusterHardware:
    def __init__(self, cfg: Any):
        self.cfg = cfg                                   # the data-parallel layout reads the node (worker_layout)
        self.options = TFClusterHardwareConfig.from_node(cfg)   # tasks >= 1, threads >= 1, link figures
        self.addresses = list(self.options.addresses or [])
        self.tasks = self.options.tasks
        self._local = None

    def cluster(self, context: TrialContext) -> Cluster:
        from orchestrator.hardware.tf_cluster import LocalTFCluster, connect

        if self.addresses:
            tf_devices = connect([str(a) for a in self.addresses])
            where = f"servers {', '.join(map(str, self.addresses))}"
        else:
            self._local = LocalTFCluster(self.tasks, threads=self.options.threads).start()
            tf_devices = self._local.devices
            where = f"{self.tasks} local tf.distribute.Server processes"
        devices = [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=d, host=f"task{i}",
                          memory_pool=host_memory(f"task{i}")) for i, d in enumerate(tf_devices)]
        # What the simulator assumes between the processes (searching placers judge with it; the
        # final placement is measured): gRPC over the network, here loopback. Calibrate with
        # hardware.link_bandwidth_GBps / hardware.link_latency_us.
        bw = parse_bandwidth(self.options.link_bandwidth_GBps, "GB/s", "hardware.link_bandwidth_GBps", finite=False)
        lat = parse_latency_us(self.options.link_latency_us, "hardware.link_latency_us")
        rates = self._lab_rates(len(devices))
        topo = Topology()
        for (i, a), (j, b) in permutations(enumerate(devices), 2):
            link = ConstantLink(min(rates[i], rates[j]) if rates else bw, lat)
            topo.connect(host_memory(a.host), host_memory(b.host), link, kind="network")
        workers = [Worker(f"worker{i}", devices, topo, speed=s)
                   for i, s in enumerate(worker_layout(self.cfg, context.has_sync))]
        return Cluster("tf_cluster", workers, simulated=False, description=where)

    def _lab_rates(self, n: int) -> list[float] | None:
        """With ``hardware.netlab`` (an emulated cluster's state directory), each task's link rate in
        bytes/s is its host's shaped bandwidth: what the simulator then assumes between tasks."""
        where = self.options.netlab
        if not where:
            return None
        from orchestrator.hardware.netlab import require

        lab = require(where)
        hosts = [str(a).rpartition(":")[0] for a in self.addresses]
        if len(hosts) != n:
            raise ConfigError("hardware.netlab needs hardware.addresses on the emulated hosts")
        return [lab.host(h).bandwidth_Bps for h in hosts]

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None
