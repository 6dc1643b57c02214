"""``hardware=local``: this machine's real TensorFlow devices. The CPU can be split into several
logical devices so that placements have somewhere to go on a CPU-only machine.

Calibration knobs for the simulator that searching placers judge with (``orchestrator.hardware.calibration``;
fit them with ``benchmarks/calibration.py``): ``cost_scale`` multiplies this machine's profiled
costs; ``link_latency_us`` / ``link_bandwidth_GBps`` put links between the logical CPU devices
(null for both: transfers between them are free, as the simulator assumes for CPUs of one host).

``core_sharing`` (``auto`` | ``none`` | a number c > 0): the logical CPUs are the same physical cores
and thread pools, so tasks running on several of them at once slow each other down
(``orchestrator.hardware.contention``: k concurrent tasks each at eff(k) / k of their speed alone;
``auto`` measures eff(k) here on a fixed probe workload, at the first pipeline schedule that needs
it (about 2 s); ``model`` measures it on the trial's own model instead (its training step on one
micro-batch, k copies at once: the model's op mix, but a large model's copies take a while to
trace, e.g. a minute for Inception-V3); c sets eff(k) = min(k, c); ``none``: independent devices,
as before). GPUs do not share the pool."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.api import TrialContext
from orchestrator.config.hardware import LocalHardwareConfig
from orchestrator.errors import ConfigError
from orchestrator.hardware.calibration import Calibration, calibrate_worker
from orchestrator.hardware.cluster import Cluster, Device, Worker
from orchestrator.hardware.contention import core_pool, pool_name
from orchestrator.hardware.units import parse_bandwidth, parse_latency_us
from orchestrator.hardware.workers import worker_layout


class LocalHardware:
    def __init__(self, cfg: Any):
        self.cfg = cfg                                   # the data-parallel layout reads the node (worker_layout)
        self.options = _typed(cfg)
        self.logical_cpus = self.options.logical_cpus
        self.calibration = calibration_of(self.options)
        self.core_sharing = core_sharing_of(self.options)

    def cluster(self, context: TrialContext) -> Cluster:
        from orchestrator.execution.runtime import split_cpu, tf

        cpus = split_cpu(self.logical_cpus)
        if len(cpus) < self.logical_cpus:
            raise ConfigError(f"hardware.logical_cpus={self.logical_cpus} cannot take effect: TensorFlow in this process "
                              f"already has {len(cpus)} CPU device(s) (sweep it with hydra/launcher=joblib, one process per trial)")
        cpus = cpus[: self.logical_cpus]
        pool = core_pool(self.core_sharing, cpus)
        pools = {pool_name("host0"): pool} if pool is not None else {}
        devices = [Device(f"cpu:{i}", "cpu", profile="local-cpu", tf_device=name,
                          core_pool=pool_name("host0") if pool is not None else None) for i, name in enumerate(cpus)]
        if self.options.gpus:
            for i, d in enumerate(tf.config.list_logical_devices("GPU")):
                devices.append(Device(f"gpu:{i}", "gpu", profile="local-gpu", tf_device=d.name))
        speeds = worker_layout(self.cfg, context.has_sync)
        base = calibrate_worker(Worker("worker0", devices, core_pools=pools), self.calibration)   # one topology
        workers = [replace(base, name=f"worker{i}", speed=s) for i, s in enumerate(speeds)]
        return Cluster("local", workers, simulated=False,
                       description=f"this machine: {len(cpus)} logical CPU device(s) "
                                   f"({'sharing its cores: ' + pool.source if pool else 'independent'}), "
                                   f"{len(devices) - len(cpus)} GPU(s)")


def _typed(cfg: Any) -> LocalHardwareConfig:
    return cfg if isinstance(cfg, LocalHardwareConfig) else LocalHardwareConfig.from_node(cfg)


def core_sharing_of(cfg: Any) -> str | float:
    """``hardware.core_sharing``: "auto" (the default), "model", "none" or a number c > 0 (eff(k) = min(k, c));
    the schema has checked it (words in any case, null meaning none)."""
    v = _typed(cfg).core_sharing
    if v is None or isinstance(v, str) and v.strip().lower() in ("auto", "model", "none"):
        return "none" if v is None else v.strip().lower()
    return float(v)


def calibration_of(cfg: Any) -> Calibration:
    """``hardware.cost_scale`` (on the "local-cpu" profiled costs), ``hardware.link_latency_us`` and
    ``hardware.link_bandwidth_GBps`` as a ``Calibration``; null knobs leave the simulator as it is
    (their ranges: the schema's)."""
    c = _typed(cfg)
    scale, lat, bw = c.cost_scale, c.link_latency_us, c.link_bandwidth_GBps
    return Calibration({"local-cpu": scale} if scale is not None else {},
                       None if lat is None else parse_latency_us(lat, "hardware.link_latency_us"),
                       None if bw is None else parse_bandwidth(bw, "GB/s", "hardware.link_bandwidth_GBps", finite=False))
