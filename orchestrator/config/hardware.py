"""Schemas of the built-in hardware options (``hardware=OPTION``). ``HardwareConfig`` holds the
data-parallel layout every adapter shares (workers, their speeds, the links of the virtual clock).
Its keys of several shapes (stragglers, jitter, speed changes) are validated once, where a sync
trial starts, into ``DataParallelHardware`` (``DataParallelHardware.from_node``); the links
(``hardware.network``) are checked by the sync cost model, which needs the worker count."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config import Schema, plain
from orchestrator.config.choices import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US, JITTER_DISTRIBUTIONS
from orchestrator.config.fields import option
from orchestrator.errors import ConfigError, number

PRESETS = ("sim_1cpu_4gpu", "sim_hetero_cluster")


@dataclass
class NetworkConfig:
    bandwidth_Gbps: Any = option(DEFAULT_BANDWIDTH_GBPS, "Gbit/s (gigabits per second): every worker's link and the "
                                 "parameter server's (each shard's)")
    latency_us: Any = option(DEFAULT_LATENCY_US, "microseconds per message on a data-parallel link")
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
    network: NetworkConfig = option(factory=NetworkConfig, help="data-parallel links (virtual clock), bandwidths in "
                                    "Gbit/s; per worker: workers: {2: {bandwidth_Gbps: 1}}")
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
    link_latency_us: float | None = option(None, "microseconds per tensor sent between two logical CPU devices "
                                              "(null and bandwidth null: free)", min=0)
    link_bandwidth_GBps: float | None = option(None, "GB/s (gigabytes per second) between two logical CPU devices "
                                                  "(null: infinite once a latency is set)", gt=0)
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
    link_bandwidth_GBps: float = option(1.0, "GB/s (gigabytes per second) the simulator assumes between two tasks "
                                        "(gRPC; loopback here) ...", gt=0)
    link_latency_us: float = option(200.0, "... and microseconds per transfer: calibration knobs for searching "
                                    "placers", min=0)
    netlab: str | None = option(None, "an emulated cluster's directory (python -m orchestrator.netlab): its hosts' "
                                   "bandwidths are the links'")


@dataclass
class SimulatedHardwareConfig(HardwareConfig):
    name: str = option("simulated", "the cost model: nothing runs for real, every figure is labelled simulated")
    preset: str | None = option(None, "a built-in cluster", choices=PRESETS)
    path: str | None = option(None, "a user's own cluster file (YAML; see docs: cluster files; its network in "
                                 "bandwidth_GBps, GB/s, and latency_us), instead of a preset")
    gpu: str | None = option(None, "preset sim_1cpu_4gpu: the GPU profile (null: \"K80 (datasheet)\"); see "
                                "orchestrator.hardware.profiles")


@dataclass
class AutoHardwareConfig(HardwareConfig):
    name: str = option("auto", "the hardware a workload file describes (model=workload)")


@dataclass(frozen=True)
class Stragglers:
    """``hardware.stragglers``: each iteration of a worker is, with this probability, this many times longer."""

    probability: float = 0.0
    slowdown: float = 1.0

    @classmethod
    def from_node(cls, node: Any) -> Stragglers:
        if node is None:
            return cls()
        if not hasattr(node, "get"):
            raise ConfigError(f"hardware.stragglers={node!r} must be a mapping {{probability: P, slowdown: K}}")
        unknown = sorted(set(node.keys()) - {"probability", "slowdown"})
        if unknown:        # a misspelt key ran a trial without stragglers
            raise ConfigError(f"unknown key hardware.stragglers.{unknown[0]} (hardware.stragglers accepts: probability, slowdown)")
        p = number(_value(node, "probability", 0.0), "hardware.stragglers.probability")
        k = number(_value(node, "slowdown", 1.0), "hardware.stragglers.slowdown")
        if not 0.0 <= p <= 1.0 or k < 1.0:
            raise ConfigError(f"hardware.stragglers needs probability in [0,1], slowdown >= 1 (got {p}, {k})")
        return cls(p, k)


@dataclass(frozen=True)
class SpeedChange:
    """One entry of ``hardware.speed_changes``: worker ``worker`` runs at ``speed`` from ``at_s`` on (seconds
    on the run's clock: virtual seconds, or wall seconds under MPI)."""

    worker: int
    at_s: float
    speed: float


def parse_speed_changes(node: Any, workers: int) -> tuple[SpeedChange, ...]:
    """``hardware.speed_changes``: a list of ``{worker, at_s, speed}``, in time order; one-line errors name the key."""
    if not node:
        return ()
    out = []
    for k, ch in enumerate(node):
        key = f"hardware.speed_changes[{k}]"
        extra = sorted(set(ch.keys()) - {"worker", "at_s", "speed"}) if hasattr(ch, "keys") else []
        if extra:
            raise ConfigError(f"unknown key {key}.{extra[0]} (each change accepts: worker, at_s, speed)")
        try:
            w, at, v = int(ch["worker"]), float(ch["at_s"]), float(ch["speed"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{key}={ch!r} needs worker (int), at_s and speed (numbers)") from None
        if not 0 <= w < workers:
            raise ConfigError(f"{key}.worker={w}: no such worker (W={workers}, workers 0..{workers - 1})")
        if at < 0 or not math.isfinite(at):
            raise ConfigError(f"{key}.at_s={at:g} must be >= 0")
        if not v > 0:
            raise ConfigError(f"{key}.speed={v:g} must be > 0")
        out.append(SpeedChange(w, at, v))
    return tuple(sorted(out, key=lambda c: c.at_s))


def parse_jitter(node: Any) -> float:
    """``hardware.jitter: {distribution: lognormal, sigma: S}``: every compute time is multiplied by an
    independent ``exp(S Z - S^2 / 2)``, ``Z ~ N(0, 1)``: a lognormal factor of mean 1 (the mean step time
    stays, its spread grows with S; the median factor is ``exp(-S^2/2)``, the 99th percentile
    ``exp(2.33 S - S^2/2)``). Step times of shared clusters are right-skewed, and a lognormal is the usual
    fit (Dutta et al. 2018, "Slow and stale gradients can win the race"). Returns S (0: no jitter)."""
    if node is None:
        return 0.0
    if not hasattr(node, "get"):
        raise ConfigError(f"hardware.jitter={node!r} must be a mapping {{distribution: lognormal, sigma: S}}")
    unknown = sorted(set(node.keys()) - {"distribution", "sigma"})
    if unknown:
        raise ConfigError(f"unknown key hardware.jitter.{unknown[0]} (hardware.jitter accepts: distribution, sigma)")
    dist = str(node.get("distribution", "lognormal"))
    if dist not in JITTER_DISTRIBUTIONS:
        raise ConfigError(f"hardware.jitter.distribution={dist!r} is not one of {', '.join(JITTER_DISTRIBUTIONS)}")
    sigma = number(node.get("sigma", 0.0), "hardware.jitter.sigma")
    if not 0.0 <= sigma <= 5.0:
        raise ConfigError(f"hardware.jitter.sigma={sigma:g} must be in [0, 5]")
    return float(sigma)


@dataclass(frozen=True)
class DataParallelHardware:
    """The hardware group as the data-parallel runtimes read it, validated once (one-line errors naming
    the key) from any adapter's node, typed or a plain mapping: the workers' disturbances (stragglers,
    jitter, speed changes), the MPI ranks' emulated step, the links (``hardware.network``, as plain
    data) and the emulated cluster (``hardware.netlab``)."""

    stragglers: Stragglers = field(default_factory=Stragglers)
    jitter_sigma: float = 0.0
    speed_changes: tuple[SpeedChange, ...] = ()
    emulated_step_s: float | None = None
    network: dict | None = None
    netlab: str | None = None

    @classmethod
    def from_node(cls, node: Any, workers: int) -> DataParallelHardware:
        """``node``: the trial's ``hardware`` (None: the defaults); ``workers``: W, for the speed changes."""
        strag = Stragglers.from_node(_value(node, "stragglers"))
        emulated = _seconds(_value(node, "emulated_step_s"), "hardware.emulated_step_s")
        changes = parse_speed_changes(plain(_value(node, "speed_changes")), workers)
        netlab = _value(node, "netlab")
        return cls(strag, parse_jitter(_value(node, "jitter")), changes, emulated, plain(_value(node, "network")),
                   str(netlab) if netlab else None)


def _seconds(value: Any, key: str) -> float | None:
    """A duration > 0 (or None)."""
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a number") from None
    if not out > 0:
        raise ConfigError(f"{key}={out:g} must be > 0")
    return out


def _value(node: Any, key: str, default: Any = None) -> Any:
    """``node[key]`` of a mapping or a typed node, ``default`` where it is absent or null."""
    if node is None:
        return default
    value = node.get(key, None) if hasattr(node, "get") else getattr(node, key, None)
    return default if value is None else value
