"""Schemas of the built-in hardware options (``hardware=OPTION``). ``HardwareConfig`` holds the
data-parallel layout every adapter shares (workers, their speeds, the links of the virtual clock);
the sync runtimes read those keys, and check the shapes of the nested ones themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.fields import option

PRESETS = ("sim_1cpu_4gpu", "sim_hetero_cluster")


@dataclass
class NetworkConfig:
    bandwidth_Gbps: Any = option(10, "every worker's link and the parameter server's (each shard's)")
    latency_us: Any = option(50, "per message on a data-parallel link")
    server: Any = option(None, "the server's link per shard, e.g. {bandwidth_Gbps: 1} (null: as above)")
    workers: Any = option(None, "per-worker links {index: {bandwidth_Gbps, latency_us}} (null: as above)")


@dataclass
class HardwareConfig(Schema):
    group = "hardware"

    name: str = option("", "the hardware adapter that builds the cluster (hardware.name)")
    workers: int | None = option(None, "data-parallel workers W (null: 1, or 4 when a sync strategy is given; "
                                    "multi-host presets: one per host)", min=1)
    worker_speeds: Any = option(None, "relative speed per worker (null: speed_pattern's); slower workers are emulated")
    speed_pattern: Any = option(None, "with worker_speeds null: speeds cycled over the W workers, e.g. [1, 0.5, 0.25] "
                                "(null: all 1.0, except a sync trial that sets neither workers nor speeds: the "
                                "default cluster, 4 workers of speeds 1, 0.5, 0.25, 1, the reference study's "
                                "unequal machines)")
    stragglers: Any = option(None, "transient stragglers: {probability: 0.1, slowdown: 4.0}")
    jitter: Any = option(None, "step-time jitter: {distribution: lognormal, sigma: 0.3}: every compute time x "
                         "exp(sigma Z - sigma^2/2), mean 1 (docs/sync.md)")
    network: NetworkConfig = option(factory=NetworkConfig, help="data-parallel links (virtual clock); per worker: "
                                    "workers: {2: {bandwidth_Gbps: 1}}")
    speed_changes: Any = option(None, "mid-run speed changes: [{worker: 2, at_s: 5.0, speed: 0.25}] (run clock seconds)")
    emulated_step_s: Any = option(None, "sync.runtime=mpi: a speed-1.0 rank's iteration lasts at least this long "
                                  "(the rest asleep)")


@dataclass
class LocalHardwareConfig(HardwareConfig):
    name: str = option("local", "this machine's real TensorFlow devices (measured, never simulated)")
    logical_cpus: int = option(2, "split the CPU into N logical TF devices (cpu:0 ... cpu:N-1) for placements", min=1)
    gpus: bool = option(True, "include the GPUs TensorFlow sees (gpu:0 ...)")
    cost_scale: float | None = option(None, "simulator calibration (fit with benchmarks/calibration.py): multiply "
                                         "this machine's profiled layer costs by this factor (null: 1)", gt=0)
    link_latency_us: float | None = option(None, "per tensor sent between two logical CPU devices (null and "
                                              "bandwidth null: free)", min=0)
    link_bandwidth_GBps: float | None = option(None, "bandwidth between two logical CPU devices (null: infinite "
                                                  "once a latency is set)", gt=0)
    core_sharing: Any = option("auto", "the logical CPUs share this machine's cores: auto (measure their parallel "
                               "efficiency eff(k) here, on a fixed probe workload), model (on the trial's own model's "
                               "training step), none (independent devices) or a number c (eff(k) = min(k, c))",
                               choices=("auto", "model", "none"), number=True, gt=0, finite=True, fold=True)
    netlab: str | None = option(None, "an emulated cluster's directory (python -m orchestrator.netlab): MPI ranks "
                                   "run on its hosts, its links feed the cost model")


@dataclass
class TFClusterHardwareConfig(HardwareConfig):
    name: str = option("tf_cluster", "devices of other processes/hosts through TensorFlow's gRPC runtime (measured)")
    tasks: int = option(2, "start this many local tf.distribute.Server processes as stand-in hosts ...", min=1)
    addresses: Any = option(None, "... or connect to servers you started: [host1:port, host2:port]; task i's CPU is cpu:i")
    threads: int = option(1, "TensorFlow threads per local server process", min=1)
    link_bandwidth_GBps: float = option(1.0, "what the simulator assumes between two tasks (gRPC; loopback here) ...", gt=0)
    link_latency_us: float = option(200.0, "... and per transfer: calibration knobs for searching placers", min=0)
    netlab: str | None = option(None, "an emulated cluster's directory (python -m orchestrator.netlab): its hosts' "
                                   "bandwidths are the links'")


@dataclass
class SimulatedHardwareConfig(HardwareConfig):
    name: str = option("simulated", "the cost model: nothing runs for real, every figure is labelled simulated")
    preset: str | None = option(None, "a built-in cluster", choices=PRESETS)
    path: str | None = option(None, "a user's own cluster file (YAML; see docs: cluster files), instead of a preset")
    gpu: str | None = option(None, "preset sim_1cpu_4gpu: the GPU profile (null: \"K80 (datasheet)\"); see "
                                "orchestrator.hardware.profiles")


@dataclass
class AutoHardwareConfig(HardwareConfig):
    name: str = option("auto", "the hardware a workload file describes (model=workload)")
