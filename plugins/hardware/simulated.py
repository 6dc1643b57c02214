"""Simulated hardware (the cost model): presets, a user's cluster file, or a workload's own hardware.
Nothing here exists for real, and every figure computed on it is labelled ``simulated``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.api import TrialContext
from orchestrator.config.hardware import PRESETS, AutoHardwareConfig, SimulatedHardwareConfig
from orchestrator.errors import ConfigError
from orchestrator.hardware.cluster import Cluster, Worker
from orchestrator.hardware.workers import worker_layout

__all__ = ["PRESETS", "SimulatedHardware", "WorkloadHardware"]


def _replicate(cluster: Cluster, cfg: Any, has_sync: bool) -> Cluster:
    """A one-worker preset becomes W identical-device workers of the configured relative speeds;
    a multi-worker cluster keeps its workers (their speeds follow from their devices)."""
    if len(cluster.workers) > 1:
        asked = cfg.get("workers")
        if asked is not None and int(asked) != len(cluster.workers):
            raise ConfigError(f"hardware.workers={asked} but {cluster.name} has {len(cluster.workers)} workers (one per "
                              "host): leave it unset, or describe the hosts you want in a cluster file (hardware=file hardware.path=...)")
        speeds = cfg.get("worker_speeds")
        if speeds is not None:
            if len(speeds) != len(cluster.workers):
                raise ConfigError(f"hardware.worker_speeds has {len(speeds)} entries; {cluster.name} has {len(cluster.workers)} workers")
            cluster.workers = [replace(w, speed=float(s)) for w, s in zip(cluster.workers, speeds)]
        return cluster
    base = cluster.workers[0]
    cluster.workers = [Worker(f"worker{i}", base.devices, base.topology, speed=s, host=base.host)
                       for i, s in enumerate(worker_layout(cfg, has_sync))]
    return cluster


class SimulatedHardware:
    def __init__(self, cfg: Any):
        self.cfg = cfg                                   # the data-parallel layout reads the node (worker_layout)
        self.options = SimulatedHardwareConfig.from_node(cfg)   # preset: one of PRESETS (the schema's choices)
        self.preset, self.path = self.options.preset, self.options.path
        if self.preset is None and self.path is None:
            raise ConfigError("hardware=simulated needs hardware.preset (sim_1cpu_4gpu, sim_hetero_cluster) or hardware.path")

    def cluster(self, context: TrialContext) -> Cluster:
        from orchestrator.hardware import presets as cluster_presets

        if self.path:
            cluster = cluster_presets.load_cluster_file(self.path)
        elif self.preset == "sim_1cpu_4gpu":
            cluster = cluster_presets.sim_1cpu_4gpu(**({"gpu": self.options.gpu} if self.options.gpu else {}))
        else:
            cluster = cluster_presets.sim_hetero_cluster()
        return _replicate(cluster, self.cfg, context.has_sync)


class WorkloadHardware:
    """``hardware=auto``: the hardware a cost-graph workload file describes."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.options = AutoHardwareConfig.from_node(cfg)

    def cluster(self, context: TrialContext) -> Cluster:
        hw = getattr(context.model, "hardware", None)
        if hw is None:
            raise ConfigError(f"hardware=auto takes the hardware of a workload file; model={context.names['model']} has none")
        return _replicate(hw, self.cfg, context.has_sync)
