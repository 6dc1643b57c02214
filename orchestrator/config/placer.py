"""Schemas of the built-in placers (``+placer=NAME``). ``PlacerConfig`` holds what every placer
shares (its name and how its candidates are judged); ``SearchPlacerConfig`` adds the measuring
budget of the searching placers (``placer.reward=measured|mixed``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.fields import option

REWARDS = ("auto", "simulated", "measured", "mixed")


@dataclass
class PlacerConfig(Schema):
    group = "placer"

    name: str = option("", "the placer plugin that runs (placer.name)")
    reward: str = option("auto", "auto (simulated on real hardware too: the answer is then also measured) | simulated "
                         "| measured (each candidate run for real) | mixed (the simulator screens, the promising are "
                         "measured)", choices=REWARDS)
    baseline: Any = option(None, "the human-expert baseline other placers are measured against: a manual-placer config "
                           "such as {strategy: chain} (null: the manual placer's defaults, conf/placer/manual.yaml)")


@dataclass
class SearchPlacerConfig(PlacerConfig):
    budget_s: float | None = option(None, "reward=measured|mixed: seconds of measuring (null: no limit); then "
                                       "candidates needing a new measurement score inf", gt=0)
    measure_steps: int = option(5, "reward=measured|mixed: timed training steps per candidate (median, after 2 "
                                "warm-up steps)", min=1)
    measure_within: float = option(0.1, "reward=mixed: measure a candidate whose re-calibrated simulated time is "
                                   "within this fraction of the best measured", min=0)
    compare_simulated: bool = option(False, "reward=measured|mixed: also search with the simulated reward and measure "
                                     "that answer (placement.vs_simulated_reward)")


@dataclass
class ManualPlacerConfig(PlacerConfig):
    name: str = option("manual", "the human expert's placement")
    rules: Any = option(None, "node (layer) name pattern -> device, fnmatch globs, first match wins, e.g. "
                        "[{pattern:'conv*',device:'cpu:0'},{pattern:'*',device:'cpu:1'}] (null: the model's own "
                        "model.expert_rules when this worker has their devices)")
    strategy: str | None = option("auto", "auto: split if given, else rules, else model.expert_rules if the worker "
                                     "has their devices, else rnn for recurrent models and fastest otherwise | split | "
                                     "rules | fastest (whole graph on the fastest device that fits) | rnn (one "
                                     "recurrent layer per accelerator, attention and softmax on the last) | chain "
                                     "(balanced contiguous pieces)",
                                     choices=("auto", "split", "rules", "fastest", "rnn", "chain"))
    split: str | None = option(None, "or a human-expert split file (msr-dnn-partitioning format)")


@dataclass
class GreedyPlacerConfig(SearchPlacerConfig):
    name: str = option("greedy", "memory-aware list scheduling (HEFT-style earliest finish time), deterministic")
    variants: list[str] = option(factory=lambda: ["heft", "topo", "single"],
                                 help="candidates judged by the evaluator, the best wins: heft (upward-rank order), "
                                 "topo (topological order), single (the fastest single device that holds the whole graph)",
                                 choices=("heft", "topo", "single"))


@dataclass
class RandomPlacerConfig(SearchPlacerConfig):
    name: str = option("random", "best of N random placements (baseline), seeded by the trial seed")
    samples: int = option(200, "placements scored", min=1)
    redraws: int = option(20, "redraws of a memory-infeasible sample before scoring it anyway", min=0)


@dataclass
class OptunaPlacerConfig(SearchPlacerConfig):
    name: str = option("optuna", "Optuna TPE over per-group device choices (baseline), seeded by the trial seed")
    trials: int = option(200, "placements scored", min=1)
    max_groups: int = option(32, "colocation groups merged along topological order into at most this many", min=1)


@dataclass
class OptimalPlacerConfig(PlacerConfig):
    name: str = option("optimal", "exact DP over contiguous splits for placement.objective=pipeline, with a certified bound")
    reward: str = option("auto", "auto (simulated: the pipeline objective is a cost model) | simulated", choices=REWARDS)
    time_limit_s: float = option(60.0, "the full search over ideals stops here (the prefixes of one order are kept; "
                                 "meta order: timeout)", gt=0)
    ideals_limit: int = option(200_000, "more ideals than this: only the prefixes of one topological order "
                               "(meta order: linear)", min=1)
    milp_time_limit_s: float = option(60.0, "then any split: a MILP (HiGHS) for this long; its proven bound tightens "
                                      "placement.lower_bound_s (0: skip)", min=0)
    bound_time_limit_s: float = option(30.0, "last, the configuration-LP bound (each device pays its own cuts) "
                                       "certifies the gap for this long (0: skip)", min=0)


@dataclass
class RLPlacerConfig(SearchPlacerConfig):
    name: str = option("rl", "a graph policy (TensorFlow, message passing; docs/placer_policy.md) trained by "
                       "REINFORCE, greedy as incumbent")
    mode: str = option("finetune", "zero_shot (the pre-trained policy, no updates) | finetune (REINFORCE from it) | "
                       "scratch (from random weights)", choices=("zero_shot", "finetune", "scratch"))
    refine: str = option("auto", "local (iterated local search on the best placement after the policy) | none "
                         "(the policy alone) | auto: none for mode=zero_shot (no search), else local",
                         choices=("auto", "none", "local"))
    policy: str | None = option(None, "pre-trained checkpoint (.npz from python -m orchestrator.pretrain); null = "
                                   "the one shipped in the package")
    zero_shot_samples: int = option(32, "zero_shot: placements drawn besides the greedy decode (the best is kept)", min=0)
    policy_lr: float = option(0.001, "Adam learning rate of the network when fine-tuning (scratch: 3x)", min=0)
    budget_evaluations: int = option(12000, "placements scored in all (greedy candidates + samples + local moves)", min=1)
    batch: int = option(16, "samples per policy update", min=1)
    lr: float = option(0.05, "Adam learning rate of the per-atom logit table", min=0)
    entropy: float = option(0.01, "entropy bonus, decays linearly to 0", min=0)
    init_bias: Any = option("auto", "logit bonus per atom at the start of the updates, toward greedy (scratch) or the "
                            "incumbent after the zero-shot step (finetune); auto: 0 for finetune, from placer.flips "
                            "for scratch", choices=("auto",), number=True)
    flips: float = option(4.0, "init_bias=auto: atoms a sample moves off the start in expectation", gt=0)
    hidden: int = option(32, "scratch: width of the network (a checkpoint carries its own)", min=1)
    local_fraction: float = option(0.3, "refine=local: share of the budget for the local search on the best placement "
                                   "(it also gets what the policy phase leaves; 0 = pure RL)", min=0, max=1)
    checkpoint: str | None = option(None, ".npz of this trial's policy (weights + table): restored if present "
                                       "(resume), saved at the end")
    seed_contiguous: bool = option(True, "placement.objective=pipeline: start from the exact contiguous optimum "
                                   "(placer=optimal's DP) when better than greedy")
    contiguous_time_limit_s: float = option(30.0, "time limit of that DP", min=0)
