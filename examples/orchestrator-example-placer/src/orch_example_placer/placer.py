"""Round-robin placement: node i goes to device i mod k (groups stay together)."""

from orchestrator.graph import Placement


class RoundRobinPlacer:
    def __init__(self, cfg):
        self.devices = list(cfg.get("devices") or [])

    def place(self, graph, worker, evaluator=None, context=None) -> Placement:
        devices = self.devices or worker.device_names
        assignment, group_device = {}, {}
        for i, node in enumerate(graph.nodes):
            if node.group is not None and node.group in group_device:
                assignment[node.name] = group_device[node.group]
                continue
            assignment[node.name] = devices[i % len(devices)]
            if node.group is not None:
                group_device[node.group] = assignment[node.name]
        return Placement(worker.device_names, assignment, {"placer": "round_robin"})
