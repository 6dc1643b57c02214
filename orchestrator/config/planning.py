"""Schemas of planning trials: the ``planner`` group (``+planner=NAME``), ``hardware=gpu_cluster`` and
``model=llm``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.choices import TRAINING_PRECISIONS
from orchestrator.config.fields import option
from orchestrator.config.hardware import HardwareConfig
from orchestrator.config.model import ModelConfig


@dataclass
class PlannerConfig(Schema):
    group = "planner"

    name: str = option("", "the planner plugin that runs (planner.name)")
    simulator: str = option("project", "the cost model that judges plans, a registered plan simulator: project (this "
                            "project's, calibrated on measured GPU runs; docs/plans.md) | sailor (Sailor's published "
                            "simulator, the anchor's own metric) | a plugin's (orchestrator_simulators)")
    objective: str = option("throughput", "throughput (least s/iteration) | cost (least USD/iteration with at least "
                            "planner.min_samples_per_s) | budget (most samples/s within planner.max_usd_per_hour)",
                            choices=("throughput", "cost", "budget"))
    min_samples_per_s: float | None = option(None, "objective=cost: the throughput floor", gt=0, finite=True)
    max_usd_per_hour: float | None = option(None, "objective=budget: the spending ceiling", gt=0, finite=True)
    budget_s: float | None = option(None, "seconds of search at most (null: the planner's own limit)", gt=0)
    memory_headroom: float = option(0.0, "share h of each GPU's memory plans keep free: the planners and "
                                    "the project simulator hold every GPU to (1 - h) of its memory (Sailor's "
                                    "simulator reads a GPU's memory from its name)", min=0, lt=1)
    precision: str = option("fp32", "the training precision plans are made for: fp32 (as the shared profiles and this "
                            "project's profiler measure) | bf16 | fp16 | fp8 (mixed precision: activations in 16 bits, "
                            "fp32 master weights; every type's times carried from its fp32 entries by the fitted "
                            "roofline's ratio, so derived; docs/plans.md, 'Precision') | auto (plan fp32 and each "
                            "precision every GPU type of the cluster has in the catalog; keep the best by the objective)",
                            choices=(*TRAINING_PRECISIONS, "auto"))
    recompute: Any = option(False, "full activation recomputation of the decoder blocks: false | true (a block keeps "
                            "only its input and runs its forward again before its backward) | auto (plan both, keep the "
                            "best by the objective); docs/plans.md, 'Activation recomputation'",
                            choices=(False, True, "auto"))
    fill: bool = option(False, "derive the micro-batch sizes and TP degrees that a measured GPU type's profile lacks "
                        "(say, a one-GPU profile of one micro-batch): the roofline fitted on the other measured types, "
                        "scaled to the type's own measured entries per phase, kind of layer and TP degree; those "
                        "figures are labelled derived (docs/plans.md, 'Filling a partial profile')")
    bound_time_limit_s: float = option(30.0, "seconds the certified bound may refine (Sailor's metric: a best-first "
                                       "refinement, anytime): past it, the least bound so far, certified and looser, "
                                       "and the summary says so (0: no limit)", min=0, finite=True)
    compare_simulators: bool = option(True, "also log the plan's figure on the other registered simulators "
                                      "(plan.iteration_s.sailor / plan.iteration_s.project)")


@dataclass
class FilePlannerConfig(PlannerConfig):
    name: str = option("file", "a plan read from a file: plan.json (this project's format) or Sailor's plan_config")
    path: str | None = option(None, "the plan file (required)")


@dataclass
class UniformPlannerConfig(PlannerConfig):
    name: str = option("uniform", "the best Megatron-style plan: one dp x pp x tp over GPUs of one type, layers split "
                       "evenly, every micro-batch size the profile has")
    max_stages: int = option(32, "pipeline depths tried: 1 .. this (and at most the model's layers)", min=1)


@dataclass
class JointPlannerConfig(PlannerConfig):
    name: str = option("joint", "this project's planner: per-stage GPU type and TP degree, the exact contiguous "
                       "layer split by dynamic programming, local search; with a certified lower bound")
    budget_s: float | None = option(30.0, "seconds of search at most", gt=0)
    max_stages: int = option(32, "pipeline depth at most", min=1)
    judged: int = option(48, "templates judged by the simulator (the best by the DP's estimate)", min=1)
    work_limit: int | None = option(None, "null: each step of the search stops at its share of budget_s (the plan may "
                                    "differ with the machine's load) | N: the walk expands N entries and the steps have "
                                    "no time shares, so the plan is the same on any machine; budget_s is then only a "
                                    "hard cap, and the summary says if it cut the search (plan.walk_steps: what a run "
                                    "expanded)", min=1)


@dataclass
class BaselinePlannerConfig(PlannerConfig):
    name: str = option("amp", "a published planner's search, written from its paper: amp | metis (docs/plans.md)",
                       choices=("amp", "metis"))
    budget_s: float | None = option(60.0, "seconds of search at most", gt=0)


@dataclass
class GpuClusterHardwareConfig(HardwareConfig):
    name: str = option("gpu_cluster", "a cluster of mixed GPUs for planning trials (+planner=...): node types, "
                       "counts, zones and message-size-dependent links (simulated)")
    data: str | None = option(None, "a directory laid out like shared/workloads/sailor (cluster/, network/)")
    file: str | None = option(None, "or a cluster described by hand in YAML (docs/plans.md, 'Describing a cluster')")
    gpus: Any = option(None, "GPUs available per type, e.g. {A100-40: 32, V100-16: 96} or {A100-40: {us-west1-b: 8}} "
                       "(null: the GPUs the plan names)")


@dataclass
class LLMModelConfig(ModelConfig):
    plugin: str = option("llm", "a model given by its layered profile (per layer, GPU type, micro-batch and TP degree: "
                         "forward, backward and update seconds; parameter and activation sizes), for planning")
    name: str = option("OPT-350", "the model's name in the profile files (profiles_tmp.json, llm_info.json)")
    data: str | None = option(None, "a directory laid out like shared/workloads/sailor (required)")
    global_batch: int | None = option(None, "samples per iteration (null: the plan file's gbs, else the model's "
                                      "training config, else 1024)", min=1)
