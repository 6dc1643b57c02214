"""Device profiles: rates of common parts from datasheets, and one measured H200 with its host, each a ``DeviceKind``:
the one description of a kind of device that every view reads (a placement ``cluster.Device`` is made of one,
``presets.make_device``; a plan's GPU type is one, ``GpuCluster.types``: GPUs per node, memory, price; a GPU catalog
entry is one, ``hardware.catalog``: the datasheet figures, each with its source).

Every profile name says where its numbers come from: "(datasheet)" or "(measured)". Datasheet GPU
figures are the SXM parts (K80: one GK210 die of the two on a board), dense rates, no sparsity.
"H200 (measured)" comes from ``<shared>/data/device-profiles/h200-measured.json`` (``orchestrator.paths.shared_dir``;
copied to ``device_profiles/`` in the package): measured on one
machine, one run each; keep the label.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.hardware.cost import GB, GiB

MEASURED_H200_FILE = Path(__file__).resolve().parent / "device_profiles" / "h200-measured.json"


@dataclass(frozen=True)
class DeviceKind:                          # the figures a source does not give keep their defaults
    name: str
    kind: str = "gpu"                      # "cpu" or "gpu"
    flops: dict[str, float] = field(default_factory=dict)   # FLOP/s by precision ("fp32", "tf32", "bf16"), dense
    mem_bandwidth: float = 0.0             # bytes/s
    memory_bytes: float = math.inf         # a plan's GPU type: what a plan may use per GPU (the capacity less the headroom)
    host_link_bandwidth: float = 0.0       # bytes/s per direction to host memory (PCIe)
    peer_link_bandwidth: float = 0.0       # bytes/s per direction GPU<->GPU inside a machine (NVLink, xGMI or PCIe), 0 = none
    source: str = ""
    gpus_per_node: int = 1
    usd_per_gpu_hour: float | None = None
    capacity_bytes: float | None = None    # the GPU's memory when a headroom is kept (None: memory_bytes)
    network_bandwidth: float = 0.0         # bytes/s per GPU between machines (a catalog type's NIC share)
    title: str = ""                        # a catalog type's full name ("H100 SXM5 80GB")
    aliases: tuple[str, ...] = ()          # other names the catalog finds it by
    sources: dict[str, str] = field(default_factory=dict)   # a catalog type's figure -> its source's text

    @property
    def capacity(self) -> float:
        return self.memory_bytes if self.capacity_bytes is None else self.capacity_bytes

    def peak_flops(self, precision: str = "fp32") -> float:
        return self.flops.get(precision, self.flops["fp32"])

    def matmul_flops(self, precision: str = "fp32") -> float:
        """The matmul rate of training at ``precision``: fp32 training multiplies in TF32 where the type has it
        (the rate the shared profiles reach: A100 layers run at 33 TFLOP/s, above fp32's 19.5), else fp32;
        bf16/fp16/fp8 their own rate, an error where the type has none."""
        if precision == "fp32":
            return self.flops.get("tf32", self.flops["fp32"])
        if precision not in self.flops:
            raise ConfigError(f"GPU type {self.name} has no {precision} rate in the catalog "
                              f"(it has: {', '.join(sorted(self.flops))})")
        return self.flops[precision]


def _datasheet() -> dict[str, DeviceKind]:
    p = [
        # 40 cores x 2.3 GHz x 2 AVX-512 FMA (32 fp32 FLOP/cycle); 8 x DDR4-3200
        DeviceKind("Xeon Platinum 8380 (datasheet)", "cpu", {"fp32": 40 * 2.3e9 * 32}, 204.8 * GB,
                        float("inf"), source="Intel ARK; per socket"),
        DeviceKind("K80 (datasheet)", "gpu", {"fp32": 4.37e12}, 240 * GB, 12 * GiB,
                        host_link_bandwidth=15.75 * GB, source="NVIDIA K80 datasheet, one GK210 (half board)"),
        DeviceKind("V100 (datasheet)", "gpu", {"fp32": 15.7e12, "fp16": 125e12}, 900 * GB, 32 * GiB,
                        host_link_bandwidth=15.75 * GB, peer_link_bandwidth=150 * GB, source="V100 SXM2 datasheet"),
        DeviceKind("A100 (datasheet)", "gpu", {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12}, 2039 * GB,
                        80 * GiB, host_link_bandwidth=31.5 * GB, peer_link_bandwidth=300 * GB, source="A100 SXM4 80GB datasheet"),
        DeviceKind("H100 (datasheet)", "gpu", {"fp32": 67e12, "tf32": 494e12, "bf16": 989e12}, 3350 * GB,
                        80 * GiB, host_link_bandwidth=63 * GB, peer_link_bandwidth=450 * GB, source="H100 SXM5 datasheet"),
        DeviceKind("H200 (datasheet)", "gpu", {"fp32": 67e12, "tf32": 494e12, "bf16": 989e12}, 4800 * GB,
                        141 * GiB, host_link_bandwidth=63 * GB, peer_link_bandwidth=450 * GB, source="H200 SXM datasheet"),
    ]
    return {x.name: x for x in p}


def _measured(path: Path = MEASURED_H200_FILE) -> dict[str, DeviceKind]:
    """The H200 and its 16-core host as measured (one machine, one run each); empty if the file is absent."""
    try:
        m = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    g, c = m["gpu"], m["host_cpu_16_cores"]
    src = f"{path.name}, measured on one machine on {m.get('measured_on', '?')}"
    return {
        "H200 (measured)": DeviceKind(
            "H200 (measured)", "gpu",
            {"fp32": g["matmul_fp32_tflops"] * 1e12, "tf32": g["matmul_tf32_tflops"] * 1e12,
             "bf16": g["matmul_bf16_tflops"] * 1e12, "fp16": g["matmul_fp16_tflops"] * 1e12},
            g["d2d_copy_GBps_read_plus_write"] * GB, g["memory_GiB"] * GiB,
            host_link_bandwidth=min(g["h2d_pinned_GBps"], g["d2h_pinned_GBps"]) * GB, source=src),
        "H200 host CPU (measured)": DeviceKind(
            "H200 host CPU (measured)", "cpu",
            {"fp32": c["matmul_fp32_gflops"] * 1e9, "bf16": c["matmul_bf16_gflops"] * 1e9},
            c["copy_GBps_read_plus_write"] * GB, float("inf"), source=src + " (16 cores together)"),
    }


PROFILES: dict[str, DeviceKind] = {**_datasheet(), **_measured()}
# GPU type name prefixes -> the profile a layered profile derived from a layer graph costs that type with
GPU_TYPE_PREFIXES = (("A100", "A100 (datasheet)"), ("V100", "V100 (datasheet)"), ("H100", "H100 (datasheet)"),
                     ("H200", "H200 (datasheet)"), ("GH", "H200 (datasheet)"), ("K80", "K80 (datasheet)"))


def profile(name: str) -> DeviceKind:
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown device profile {name!r} (known: {', '.join(PROFILES)})") from None


def for_gpu_type(name: str) -> DeviceKind | None:
    """The profile a GPU type ``name`` (as a cluster names it) is costed with: the one its name starts with
    (``GPU_TYPE_PREFIXES``, any case); None when no prefix fits."""
    return next((PROFILES[p] for prefix, p in GPU_TYPE_PREFIXES if name.upper().startswith(prefix)), None)
