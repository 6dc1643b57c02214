"""The few lines a trial ends with: what ran, the result, the speedup and relative to what, whether
the target was missed and why, simulated or measured, and where to look at the run."""

from __future__ import annotations

import math
from typing import Any


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.4g}{unit}"


def _figures(tags: dict[str, str], runtime: str) -> str:
    kinds = []
    if tags.get("evaluator") == "simulated" or tags.get("cluster.simulated") == "true":
        kinds.append("placement and step times simulated (cost model)")
    if tags.get("train.clock") == "virtual":
        kinds.append("training emulated on a virtual clock (real gradients)")
    elif tags.get("train.clock") == "wall":
        kinds.append(f"training measured (wall clock, {runtime} runtime)")
    if tags.get("evaluator") == "measured" and tags.get("train.clock") is None:
        kinds.append("step times measured")
    return "; ".join(kinds) or tags.get("evaluator", "?")


def trial_summary(outcome: dict[str, Any], objective: str, value: float) -> str:
    m, t = outcome["metrics"], outcome["tags"]
    uri = outcome["uri"]
    ran = (f"placer {t.get('placer', 'none')}, sync {t.get('sync', 'none')} ({outcome['runtime']} runtime, "
           f"{outcome['workers']} worker{'s' if outcome['workers'] != 1 else ''}), hardware {t.get('hardware')}, "
           f"model {t.get('model')}")
    lines = [f"trial finished: {objective} = {_fmt(value)}", f"  ran:      {ran}"]
    if "train.final_test_accuracy" in m:
        res = f"test accuracy {_fmt(m['train.final_test_accuracy'])} after {int(m.get('train.updates', 0))} updates"
        if "train.time_to_target_s" in m:
            res += f"; time to target {_fmt(m['train.time_to_target_s'], ' s')}"
        lines.append(f"  result:   {res}")
    pipeline = t.get("placement.objective") == "pipeline" and "placement.time_per_sample_s" in m
    if pipeline:  # the objective, its baseline and its bound, in one unit: seconds per sample
        lines.append(f"  placement: time per sample {_fmt(m['placement.time_per_sample_s'], ' s')} "
                     f"(baseline {_fmt(m.get('placement.baseline_time_per_sample_s'), ' s')}, lower bound "
                     f"{_fmt(m.get('placement.lower_bound_s'), ' s')}); one step {_fmt(m.get('placement.step_time_s'), ' s')}")
    elif "placement.step_time_s" in m:
        lines.append(f"  placement: step time {_fmt(m['placement.step_time_s'], ' s')} "
                     f"(baseline {_fmt(m.get('placement.baseline_step_time_s'), ' s')}, lower bound "
                     f"{_fmt(m.get('placement.lower_bound_s'), ' s')})")
    if "speedup" in m:
        if "train.speedup" in m:
            ref = t.get("train.reference", "the reference run")
            if ref.startswith("this trial"):
                ref += ": a baseline is its own reference, so 1; compare baselines on train.time_to_target_s"
        else:
            key = "placement.baseline_time_per_sample_s" if pipeline else "placement.baseline_step_time_s"
            ref = f"{t.get('placement.baseline', 'the baseline placement')} ({key})"
        spread = (f" (seeds {_fmt(m['train.speedup_min'])}-{_fmt(m['train.speedup_max'])}x)"
                  if "train.speedup_min" in m and "train.speedup_max" in m else "")
        lines.append(f"  speedup:  {_fmt(m['speedup'])}x{spread} relative to {ref}")
        if "train.reference_time_to_target_s" in m and "train.speedup" in m and "train.time_to_target_s" in m:
            lines.append(f"  times:    {_fmt(m['train.time_to_target_s'], ' s')} to target, the reference "
                         f"{_fmt(m['train.reference_time_to_target_s'], ' s')}")
        if "train.speedup_same_settings" in m and t.get("train.reference_method") == "tuned":
            lines.append(f"  untuned:  {_fmt(m['train.speedup_same_settings'])}x over one speed-1.0 worker with this "
                         "trial's own optimizer and lr (train.speedup_same_settings)")
    if t.get("train.reached_target") == "false":
        lines.append(f"  target:   MISSED (test accuracy {_fmt(outcome.get('target'))} not reached): {t.get('train.missed_target', '?')}")
    lines.append(f"  figures:  {_figures(t, outcome['runtime'])}")
    lines.append(f"  run:      {outcome['run_id']} in {uri} (experiment {outcome['experiment']})")
    uri_arg = "" if uri == "sqlite:///mlflow.db" else f" --tracking-uri {uri}"
    lines.append(f"  look:     python -m orchestrator.report{uri_arg}")
    if outcome.get("experiment_id") is not None:
        from orchestrator.tracking.store import ui_link

        if uri.startswith("sqlite:"):
            lines.append(f"            mlflow ui --backend-store-uri {uri}, then open {ui_link(outcome['experiment_id'])}")
        elif uri.startswith(("http://", "https://")):
            lines.append(f"            {ui_link(outcome['experiment_id'], uri.rstrip('/'))}")
    return "\n".join(lines)
