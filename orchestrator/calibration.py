"""Calibration knobs for predicted step times, and a simple critical-path estimate to calibrate.

``Calibration``: a per-profile scale on node costs and a per-transfer latency plus bandwidth for
edges between devices. ``critical_path_estimate`` is a list schedule (each device runs its nodes
one at a time in topological order; a node starts when its device is free and its inputs arrived)
-- a stand-in for calibration where ``orchestrator.simulator`` is absent, not that simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from orchestrator.graph import OpGraph


@dataclass
class Calibration:
    scale: dict[str, float] = field(default_factory=dict)   # device profile -> cost multiplier
    transfer_latency_s: float = 0.0                         # per edge that crosses devices
    link_bandwidth: float = 10e9                            # bytes/s between local devices

    def node_cost_s(self, graph: OpGraph, node, device) -> float:
        return graph.node_cost_s(node, device) * self.scale.get(device.profile, 1.0)

    def transfer_s(self, nbytes: float) -> float:
        return self.transfer_latency_s + nbytes / self.link_bandwidth


def critical_path_estimate(graph: OpGraph, assignment: dict[str, str], devices: dict, calib: Calibration | None = None) -> float:
    """Estimated step seconds of ``graph`` placed by ``assignment`` ({node: device name}) on
    ``devices`` ({name: cluster.Device})."""
    calib = calib or Calibration()
    preds = graph.predecessors()
    in_edges: dict[int, list] = {}
    for e in graph.edges:
        in_edges.setdefault(graph.index(e.dst), []).append(e)
    finish = [0.0] * len(graph.nodes)
    free: dict[str, float] = {}
    order = _step_order(graph, preds)
    for i in order:
        node = graph.nodes[i]
        dev = assignment[node.name]
        ready = 0.0
        for e in in_edges.get(i, []):
            j = graph.index(e.src)
            t = finish[j]
            if assignment[e.src] != dev:
                t += e.cost * graph.time_unit_s if e.cost is not None else calib.transfer_s(e.bytes)
            ready = max(ready, t)
        start = max(ready, free.get(dev, 0.0))
        finish[i] = start + calib.node_cost_s(graph, node, devices[dev])
        free[dev] = finish[i]
    return max(finish, default=0.0)


def _step_order(graph: OpGraph, preds: list[list[int]]) -> list[int]:
    """Topological order that keeps the graph's listing order where dependencies allow."""
    import heapq

    indeg = [len(p) for p in preds]
    succ = graph.successors()
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        i = heapq.heappop(heap)
        out.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    return out


def median_abs_rel_error(estimated, measured) -> float:
    e, m = np.asarray(estimated, float), np.asarray(measured, float)
    return float(np.median(np.abs(e - m) / m))


def fit_scale(estimated, measured) -> float:
    """The cost scale that makes the median estimate/measurement ratio 1."""
    return float(np.median(np.asarray(measured, float) / np.asarray(estimated, float)))
