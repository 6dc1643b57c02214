"""``hardware=gpu_cluster``: a cluster of mixed GPUs for planning trials (simulated): from a directory laid
out like Sailor's public data (``hardware.data``) or a YAML file (``hardware.file``), with the GPU counts
of ``hardware.gpus``."""

from __future__ import annotations

from typing import Any

from orchestrator.api import TrialContext
from orchestrator.config.planning import GpuClusterHardwareConfig
from orchestrator.errors import ConfigError
from orchestrator.hardware.gpu_cluster import GpuCluster


class GpuClusterHardware:
    def __init__(self, cfg: Any):
        self.cfg = GpuClusterHardwareConfig.from_node(cfg, "hardware")
        if bool(self.cfg.data) == bool(self.cfg.file):
            raise ConfigError("hardware=gpu_cluster needs one of hardware.data=DIR (laid out like "
                              "shared/workloads/sailor) or hardware.file=CLUSTER.yaml")

    def gpu_cluster(self) -> GpuCluster:
        c = self.cfg
        cluster = GpuCluster.from_directory(c.data) if c.data else GpuCluster.from_yaml(str(c.file))
        return cluster.with_gpus(c.gpus) if c.gpus is not None else cluster

    def cluster(self, context: TrialContext):  # noqa: ARG002
        raise ConfigError("hardware=gpu_cluster is for planning trials: add +planner=NAME (file, uniform, ...)")
