"""``model=llm``: a model given by its layered profile (Sailor's files: ``profiles_tmp.json``,
``llm_info.json``, ``cluster/training_config_*.json``), for planning trials only (nothing to train here)."""

from __future__ import annotations

from orchestrator.errors import ConfigError
from orchestrator.models import ModelSpec


def spec(cfg) -> ModelSpec:
    from orchestrator.config import from_node
    from orchestrator.config.planning import LLMModelConfig
    from orchestrator.plan.profile import LayeredProfile

    c = from_node(LLMModelConfig, cfg, "model")
    if not c.data:
        raise ConfigError("model=llm needs model.data=DIR (a directory laid out like shared/workloads/sailor)")
    profile = LayeredProfile.from_directory(c.data, c.name)
    return ModelSpec(name=c.name, build=None, input_shape=(), num_classes=0, trainable_on_mnist=False,
                     extra={"layered_profile": profile, "global_batch": c.global_batch})
