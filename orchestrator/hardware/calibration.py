"""Calibration knobs for the simulator (``orchestrator.placement.simulate.simulator``), and the error measures used to
fit them against measured step times.

``Calibration`` changes only what the simulator consumes -- there is no second estimator:

- ``scale``: per device profile, a multiplier on the profiled costs ``Node.cost[profile]`` (what
  ``OpGraph.node_cost_s`` returns for a device with that profile); roofline costs are untouched;
- ``link_latency_s`` / ``link_bandwidth``: links between the CPU devices of one host (logical CPU
  devices of ``runtime.split_cpu``), which the simulator otherwise treats as free. ``None`` for
  both leaves the worker as it is; one of them set adds a direct link per ordered pair to a copy of the
  worker's topology (the other one then costs nothing: latency 0 s or infinite bandwidth). ``Worker.route``
  prefers a direct link over the free CPU-to-CPU path.

``calibrate_graph(graph, calib)`` and ``calibrate_worker(worker, calib)`` return calibrated copies.
``hardware=local`` exposes the knobs as ``hardware.cost_scale``, ``hardware.link_latency_us`` and
``hardware.link_bandwidth_GBps``;
``benchmarks/calibration.py`` fits them on this machine.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from itertools import permutations

import numpy as np

from orchestrator.graph import OpGraph
from orchestrator.hardware.cluster import Worker
from orchestrator.hardware.links import ConstantLink


@dataclass
class Calibration:
    scale: dict[str, float] = field(default_factory=dict)   # device profile -> multiplier on Node.cost[profile]
    link_latency_s: float | None = None                     # per transfer between CPU devices of one host
    link_bandwidth: float | None = None                     # bytes/s between CPU devices of one host

    @property
    def has_links(self) -> bool:
        return self.link_latency_s is not None or self.link_bandwidth is not None


def calibrate_graph(graph: OpGraph, calib: Calibration) -> OpGraph:
    """A copy of ``graph`` with ``Node.cost[profile]`` multiplied by ``calib.scale[profile]``."""
    scale = {p: float(s) for p, s in calib.scale.items() if float(s) != 1.0}
    if not scale:
        return graph
    nodes = [dataclasses.replace(n, cost={k: c * scale.get(k, 1.0) for k, c in n.cost.items()}) for n in graph.nodes]
    done = dict(graph.meta.get("cost_scale", {}))
    done.update({p: done.get(p, 1.0) * s for p, s in scale.items()})
    return OpGraph(graph.name, nodes, list(graph.edges), graph.granularity, graph.time_unit_s,
                   {**graph.meta, "cost_scale": done})


def calibrate_worker(worker: Worker, calib: Calibration) -> Worker:
    """A copy of ``worker`` with a direct link (``calib``'s latency and bandwidth) from every CPU
    device to every other CPU device of its host; links it already has are kept."""
    if not calib.has_links:
        return worker
    lat = float(calib.link_latency_s or 0.0)
    bw = math.inf if calib.link_bandwidth is None else float(calib.link_bandwidth)
    if lat < 0 or bw <= 0:
        from orchestrator.errors import ConfigError
        raise ConfigError(f"link latency {lat} s must be >= 0 and bandwidth {bw} B/s > 0")
    topo = worker.topology
    topo = dataclasses.replace(topo, links=dict(topo.links), channels=dict(topo.channels), kinds=dict(topo.kinds))
    cpus = [d for d in worker.devices if d.kind == "cpu"]
    for a, b in permutations(cpus, 2):
        if a.host == b.host and (a.name, b.name) not in topo.links:
            topo.connect(a.name, b.name, ConstantLink(bw, lat), kind="local")
    return dataclasses.replace(worker, topology=topo)


def median_abs_rel_error(estimated, measured) -> float:
    e, m = np.asarray(estimated, float), np.asarray(measured, float)
    return float(np.median(np.abs(e - m) / m))


def fit_scale(estimated, measured) -> float:
    """The cost scale that makes the median measurement/estimate ratio 1."""
    return float(np.median(np.asarray(measured, float) / np.asarray(estimated, float)))
