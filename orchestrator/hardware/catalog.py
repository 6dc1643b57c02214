"""The GPU catalog: datasheet figures of GPU types nobody profiled (``gpu_catalog.json`` beside this file), each
figure with its source, and the links a type gets from them. Each type is a ``profiles.DeviceKind`` (the one
description of a kind of device): a cluster that plans with it holds that very entry (``GpuCluster.with_catalog_type``).

A figure is ``[value, source key]``; the key names an entry of the file's ``sources`` (a datasheet or a price page).
Read once by ``read_catalog``; a figure without a known source, a negative, NaN or missing figure is a one-line
``WorkloadError`` naming the type and the figure. Units in the file: TFLOP/s, GB (1e9 bytes), GB/s per direction,
Gbit/s per GPU, USD per GPU-hour; inside: FLOP/s, bytes, bytes/s (``hardware.cost``'s units). The file's
``intra_GBps`` is ``DeviceKind.peer_link_bandwidth``, its ``network_Gbps`` ``network_bandwidth``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.cost import GB, GBIT, GiB
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.profiles import DeviceKind
from orchestrator.paths import read_json

CATALOG_FILE = Path(__file__).resolve().parent / "gpu_catalog.json"
REQUIRED = ("fp32_tflops", "memory_GB", "memory_GBps", "gpus_per_node", "intra_GBps", "network_Gbps",
            "usd_per_gpu_hour")
OPTIONAL = ("tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops")
# Link efficiencies used when a cluster has no measured link of a catalog type to fit them on (docs/plans.md):
# the medians of the shared data's measured fits over their datasheet bandwidths.
DEFAULT_INTRA_EFFICIENCY = 0.69
DEFAULT_NETWORK_EFFICIENCY = 1.0


def normal(name: str) -> str:
    """A type name as looked up: upper case, without spaces, dashes, underscores or dots."""
    return "".join(c for c in str(name).upper() if c not in " -_.")


@dataclass
class GpuCatalog:
    types: dict[str, DeviceKind]
    path: str = ""

    def find(self, name: str) -> DeviceKind | None:
        key = normal(name)
        for spec in self.types.values():
            if key == normal(spec.name) or key in (normal(a) for a in spec.aliases):
                return spec
        return None

    def get(self, name: str, known: Iterable[str] = ()) -> DeviceKind:
        """The type ``name`` (or an alias); unknown: one line listing ``known`` (a cluster's) and the catalog's."""
        spec = self.find(name)
        if spec is None:
            have = f"the cluster knows: {', '.join(sorted(known))}; " if known else ""
            raise ConfigError(f"unknown GPU type {name!r} ({have}the GPU catalog has: {', '.join(self.names())})")
        return spec

    def names(self) -> list[str]:
        return sorted(self.types)


def _figure(spec: dict[str, Any], key: str, where: str, sources: dict[str, str], nullable: bool = False) -> tuple[Any, str]:
    if key not in spec:
        raise WorkloadError(f"{where}: figure {key} is missing")
    item = spec[key]
    if not isinstance(item, list) or len(item) != 2:
        raise WorkloadError(f"{where}.{key}: a figure is [value, source key], got {item!r}"[:200])
    value, src = item
    if not isinstance(src, str) or src not in sources:
        raise WorkloadError(f"{where}.{key}: figure without a known source ({src!r}; sources: {', '.join(sorted(sources))})"[:300])
    if value is None and nullable:
        return None, sources[src]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{where}.{key}={value!r}: must be a finite number > 0")
    return float(value), sources[src]


def _spec(name: str, raw: Any, where: str, sources: dict[str, str]) -> DeviceKind:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where}: a type is a mapping of figures")
    got = {k: _figure(raw, k, where, sources, nullable=k == "usd_per_gpu_hour") for k in REQUIRED}
    got.update({k: _figure(raw, k, where, sources) for k in OPTIONAL if k in raw})
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL) - {"name", "aliases"})
    if unknown:
        raise WorkloadError(f"{where}: unknown figure {unknown[0]!r} (figures: {', '.join(REQUIRED + OPTIONAL)})")
    per_node = got["gpus_per_node"][0]
    if per_node != int(per_node):
        raise WorkloadError(f"{where}.gpus_per_node={per_node!r}: must be a whole number")
    flops = {k.removesuffix("_tflops"): v[0] * 1e12 for k, v in got.items() if k.endswith("_tflops")}
    price = got["usd_per_gpu_hour"][0]
    # memory_GB as every memory_GB of the project (hardware.units): gibibytes. A GPU's "80 GB" is 80 x 2^30 bytes of
    # HBM (nvidia-smi: 81920 MiB on an A100 80GB; Sailor's measured cluster file: A100-80 85899345920 bytes), where a
    # bandwidth's GB/s is 10^9 bytes/s.
    return DeviceKind(name, "gpu", flops, got["memory_GBps"][0] * GB, got["memory_GB"][0] * GiB,
                      peer_link_bandwidth=got["intra_GBps"][0] * GB, gpus_per_node=int(per_node),
                      usd_per_gpu_hour=price, network_bandwidth=got["network_Gbps"][0] * GBIT,
                      title=str(raw.get("name", name)), aliases=tuple(str(a) for a in raw.get("aliases", ())),
                      sources={k: v[1] for k, v in got.items()})


def read_catalog(path: str | Path = CATALOG_FILE) -> GpuCatalog:
    """The catalog in ``path`` (format: ``gpu_catalog.json``); any bad figure is one line naming it."""
    p = Path(path)
    doc = read_json(p, f"GPU catalog {p} does not exist")
    if not isinstance(doc, dict) or not isinstance(doc.get("sources"), dict) or not isinstance(doc.get("types"), dict):
        raise WorkloadError(f"GPU catalog {p}: needs 'sources: {{key: text}}' and 'types: {{NAME: {{figure: [value, source]}}}}'")
    sources = {str(k): str(v) for k, v in doc["sources"].items()}
    types = {str(n): _spec(str(n), raw, f"GPU catalog {p.name}: types.{n}", sources) for n, raw in doc["types"].items()}
    seen: dict[str, str] = {}
    for spec in types.values():
        for key in {normal(spec.name), *(normal(a) for a in spec.aliases)}:
            if key in seen and seen[key] != spec.name:
                raise WorkloadError(f"GPU catalog {p.name}: the name {key!r} means both {seen[key]} and {spec.name}")
            seen[key] = spec.name
    return GpuCatalog(types, str(p))


@lru_cache(maxsize=1)
def default_catalog() -> GpuCatalog:
    return read_catalog(CATALOG_FILE)


def efficiency(pairs: Iterable[tuple[float, float]], default: float) -> float:
    """The median of measured / datasheet bandwidth over ``pairs`` (``default`` when there are none)."""
    ratios = [m / d for m, d in pairs if m > 0 and d > 0 and math.isfinite(m)]
    return statistics.median(ratios) if ratios else default


def derived_link(bandwidth: float, eff: float) -> ConstantLink:
    """A link at ``eff`` of a datasheet ``bandwidth`` (bytes/s), no latency (the alpha-beta model's beta only)."""
    return ConstantLink(bandwidth * eff)
