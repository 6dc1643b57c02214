"""``hardware=local``: this machine's real TensorFlow devices. The CPU can be split into several
logical devices so that placements have somewhere to go on a CPU-only machine."""

from __future__ import annotations

from typing import Any

from orchestrator.cluster import Cluster, Device, Worker
from orchestrator.errors import ConfigError
from orchestrator.workers import worker_layout


class LocalHardware:
    def __init__(self, cfg: Any):
        self.cfg = cfg
        n = cfg.get("logical_cpus", 1)
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"hardware.logical_cpus={n!r} must be an integer >= 1")
        self.logical_cpus = n

    def cluster(self, trial: Any) -> Cluster:
        from orchestrator.runtime import split_cpu, tf

        cpus = split_cpu(self.logical_cpus)
        devices = [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=name) for i, name in enumerate(cpus)]
        if self.cfg.get("gpus", True):
            for i, d in enumerate(tf.config.list_logical_devices("GPU")):
                devices.append(Device(f"gpu:{i}", "gpu", profile="local-gpu", tf_device=d.name))
        speeds = worker_layout(self.cfg, trial.has_sync)
        workers = [Worker(f"worker{i}", devices, speed=s) for i, s in enumerate(speeds)]
        return Cluster("local", workers, simulated=False,
                       description=f"this machine: {len(cpus)} logical CPU device(s), {len(devices) - len(cpus)} GPU(s)")
