"""``model=workload model.path=FILE``: a profiled cost graph in the msr-dnn-partitioning format
(placement only: there is nothing to train), with its own hardware and optional expert split."""

from __future__ import annotations

import math

from orchestrator.errors import ConfigError
from orchestrator.models import ModelSpec


def spec(cfg) -> ModelSpec:
    from orchestrator.config import from_node
    from orchestrator.config.model import WorkloadModelConfig
    from orchestrator.placement.graph.workload import load_msr_split, load_msr_workload

    c = from_node(WorkloadModelConfig, cfg, "model")
    path = c.path
    if not path:
        raise ConfigError("model=workload needs model.path=FILE (a workload in the msr-dnn-partitioning format)")
    host_mem = c.host_memory_bytes
    wl = load_msr_workload(path, time_unit=c.time_unit,
                           host_memory_bytes=math.inf if host_mem is None else float(host_mem))
    split = c.split
    return ModelSpec(
        name=wl.graph.name, build=None, input_shape=(), num_classes=0, trainable_on_mnist=False,
        graph=wl.graph, hardware=wl.cluster, expert_split=load_msr_split(split, wl) if split else None,
    )
