"""The few lines a trial ends with: what ran, the result, the speedup and relative to what, whether
the target was missed and why, simulated or measured, and where to look at the run."""

from __future__ import annotations

import math
import re
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
        kinds.append("training emulated on a virtual clock (real gradients)" + _fitted_clock(tags.get("sync.compute_model", "")))
    elif tags.get("train.clock") == "wall":
        kinds.append(f"training measured (wall clock, {runtime} runtime)")
    if tags.get("evaluator") == "measured" and tags.get("train.clock") is None:
        kinds.append("step times measured")
    return "; ".join(kinds) or tags.get("evaluator", "?")


def _fitted_clock(tag: str) -> str:
    """The virtual clock's step times fitted in this run (``sync.compute_model``): a rerun fits others (the load)."""
    found = re.match(r"t0=(\S+)s t1=(\S+)s/sample \(measured", tag)
    return "" if not found else (f", its step times fitted on this machine during this run (t0={found[1]} s, t1={found[2]} s per sample): a "
            "rerun under another load fits others and its figures move, whatever the seed; "
            f"sync.step_overhead_s={found[1]} sync.per_sample_s={found[2]} fixes the clock at these values")


_NOTES = {"sailor": "Sailor's published cost model: the anchor's metric"}   # what a simulator's figure is
BUILTIN_SIMULATORS = ("project", "sailor")      # the ones docs/benchmarks/plans.md measures


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**30:.1f}"


def _no_baseline(m: dict[str, float], t: dict[str, str], key: str) -> str:
    """Why a placement has no baseline figure ``key`` (the tag says: an expert split that overflows memory)."""
    return f": {t['placement.baseline']}" if not m.get(key) and t.get("placement.baseline") else ""


def _count(n: float, word: str) -> str:
    return f"{int(n)} {word}{'s' * (int(n) != 1)}"


def _result_line(m: dict[str, float], t: dict[str, str]) -> str:
    """What the plan does: its iteration, throughput, cost; the bubble only where there are stages; the cluster's
    GPUs it leaves out."""
    bubble = (f"; bubble {_fmt(100 * m['plan.bubble_fraction'])}%" if "plan.bubble_fraction" in m
              else "; one stage: no pipeline bubble")
    unused = f" (not in the plan: {t['plan.unused']} of the cluster)" if t.get("plan.unused") else ""
    unused += f" (global batch: {t['plan.global_batch_source']})" if t.get("plan.global_batch_source", "").startswith("default") else ""
    return (f"  result:   {_fmt(m.get('plan.iteration_s'), ' s')} per iteration of {int(m.get('plan.global_batch', 0))} "
            f"samples = {_fmt(m.get('plan.samples_per_s'))} samples/s on {_count(m.get('plan.gpus', 0), 'CPU device' if t.get('plan.device_kind') == 'cpu' else 'GPU')}{unused}{bubble}; "
            + (f"USD: none, {t['plan.unpriced']} has no price (GPU catalog; node_types.TYPE.usd_per_gpu_hour in a "
               "hardware.file)" if t.get("plan.unpriced") else f"{_fmt(m.get('plan.usd_per_iteration'))} USD per "
               f"iteration = {_fmt(m.get('plan.usd_per_hour'))} USD/h"))


def _objective_lines(m: dict[str, float], t: dict[str, str]) -> list[str]:
    """The objective's own figure against its constraint, and the bound that matches it."""
    kind, out = t.get("plan.objective", "throughput"), []
    if kind == "cost":
        floor = m.get("plan.min_samples_per_s")
        met = "" if floor is None else (" (met)" if m.get("plan.samples_per_s", 0.0) >= floor else " (NOT met)")
        against = (f"against the floor {_fmt(floor)} samples/s{met}" if floor is not None else
                   "with no floor (planner.min_samples_per_s not set: the cheapest plan at any speed)")
        out.append(f"  objective: cost: {_fmt(m.get('plan.usd_per_iteration'))} USD per iteration at "
                   f"{_fmt(m.get('plan.samples_per_s'))} samples/s {against}")
        if "plan.bound_usd_per_iteration" in m:
            out.append(f"  bound:    no plan on these GPUs costs less than {_fmt(m['plan.bound_usd_per_iteration'])} USD "
                       "per iteration (lower bound: every sample's compute at its cheapest GPU per layer); this plan "
                       f"is {_fmt(100 * m.get('plan.optimality_gap', 0.0))}% above it")
    elif kind == "budget":
        ceiling = m.get("plan.max_usd_per_hour")
        met = "" if ceiling is None else (" (met)" if m.get("plan.usd_per_hour", 0.0) <= ceiling * (1 + 1e-9) else " (NOT met)")
        against = (f"against the ceiling {_fmt(ceiling)} USD/h{met}" if ceiling is not None else
                   "with no ceiling (planner.max_usd_per_hour not set: the fastest plan at any price)")
        out.append(f"  objective: budget: {_fmt(m.get('plan.samples_per_s'))} samples/s at {_fmt(m.get('plan.usd_per_hour'))} "
                   f"USD/h {against}")
        if "plan.bound_samples_per_s" in m:
            out.append(f"  bound:    no plan on these GPUs within the ceiling exceeds {_fmt(m['plan.bound_samples_per_s'])} "
                       "samples/s (the time bound's, or the ceiling over the least USD per sample); it is "
                       f"{_fmt(100 * m.get('plan.optimality_gap', 0.0))}% above this plan")     # the gap: bound / plan - 1
    elif "plan.bound_iteration_s" in m:
        given = t.get("plan.cluster_source", "given") == "given"
        what = ("certified lower bound for the cluster given; docs/plans.md" if given else
                "a lower bound over the plan's own GPUs only: hardware.gpus was not given, so it certifies nothing about "
                "a larger cluster")
        gap = (f"this plan is {_fmt(100 * m['plan.optimality_gap'])}% above it" if "plan.optimality_gap" in m else
               "this plan does not fit in memory, and the bound is over plans that fit") + t.get("plan.bound_cut", "")
        out.append(f"  bound:    no plan of this model on {t.get('plan.cluster', 'these GPUs')} is faster than "
                   f"{_fmt(m['plan.bound_iteration_s'], ' s')} per iteration ({what}); {gap}")
    if kind in ("cost", "budget") and t.get("plan.prices"):
        out.append(f"  prices:   USD per GPU-hour {t['plan.prices']}: on-demand list prices, providers as named (sources "
                   "in hardware/gpu_catalog.json); your own: node_types.TYPE.usd_per_gpu_hour in a hardware.file")
    return out


def _memory_line(m: dict[str, float]) -> list[str]:
    """Peak per GPU type as used / capacity, with the headroom's limit when one is kept."""
    parts = []
    for k, v in sorted(m.items()):
        if not k.startswith("plan.peak_memory_bytes."):
            continue
        gpu = k.rsplit(".", 1)[-1]
        cap, lim = m.get(f"plan.memory_capacity_bytes.{gpu}"), m.get(f"plan.memory_limit_bytes.{gpu}")
        part = f"{gpu} {_gib(v)} / {_gib(cap)} GiB" if cap is not None else f"{gpu} {_gib(v)} GiB"
        if lim is not None and cap is not None and lim < cap:
            part += f" (limit {_gib(lim)} GiB)"
        parts.append(part)
    if not parts:
        return []
    head = m.get("plan.memory_headroom")
    return [(f"  memory:   peak per GPU used / capacity: {', '.join(parts)}"
            + (f"; headroom {_fmt(100 * head)}% kept free (planner.memory_headroom)" if head else ""))]


def _judged_lines(m: dict[str, float], t: dict[str, str], sim: str) -> list[str]:
    out = []
    others = sorted(k.rpartition(".")[2] for k in m if k.startswith("plan.iteration_s.") and k != f"plan.iteration_s.{sim}")
    if others:   # every other registered simulator's figure of the plan (planning.phase logs one per simulator)
        out.append(f"  judged:   {_fmt(m.get(f'plan.iteration_s.{sim}'), ' s')} by the {sim} simulator (the trial's), "
                   + ", ".join(f"{_fmt(m[f'plan.iteration_s.{o}'], ' s')} by the {o} simulator"
                               + (f" ({_NOTES[o]})" if o in _NOTES else "") for o in others))
    if "plan.trust" in t:      # planning.trust: the plan's shape against the measured plans the simulators were checked on
        out.append(f"  trust:    {t['plan.trust'].removeprefix('trust: ')}"[:600])
    out += [f"  WARNING:  {t[k]}"[:600] for k in ("plan.simulators_disagree", "plan.fits_disagree") if k in t]
    if "plan.measured_iteration_s" in m:
        real = m["plan.measured_iteration_s"]
        line = (f"  measured: {_fmt(real, ' s')} per iteration (the plan file's `real`); simulated "
                f"{_fmt(m.get(f'plan.iteration_s.{sim}'), ' s')} ({sim}), error {100 * m.get('plan.simulated_error', 0.0):+.1f}%")
        if "plan.measured_peak_memory_bytes" in m:
            line += f"; measured peak memory {_gib(m['plan.measured_peak_memory_bytes'])} GiB"
        out.append(line)
    return out


def plan_lines(outcome: dict[str, Any]) -> list[str]:
    """What a planning trial planned, its figures and against what they were judged."""
    m, t = outcome["metrics"], outcome["tags"]
    est = outcome.get("plan")
    sim = t.get("plan.simulator", "?")
    lines = [f"  ran:      planner {t.get('planner')} for model {t.get('model')} on {t.get('plan.cluster', '?')} "
             f"(hardware {t.get('hardware')}), objective {t.get('plan.objective', 'throughput')}",
             f"  plan:     {t.get('plan.description', '?')}"[:600]]
    if m.get("plan.fits") == 1.0:
        lines.append(_result_line(m, t))
    else:
        lines.append(f"  result:   DOES NOT FIT in memory: {t.get('plan.violations', '?')}"[:600])
        lines.append(f"            (it would take {_fmt(m.get('plan.iteration_s_if_it_fitted'), ' s')} per iteration if it fitted)")
    lines += _objective_lines(m, t)
    lines += _memory_line(m)
    lines += _judged_lines(m, t, sim)
    timing = f"  search:   {_fmt(m.get('plan.search_time_s'), ' s')}, {int(m.get('plan.evaluations', 0))} plans judged"
    if "plan.bound_time_s" in m:
        timing += f"; bound {_fmt(m['plan.bound_time_s'], ' s')}{' (cached from an earlier trial)' if t.get('plan.bound_cached') else ''}; planning phase {_fmt(m.get('plan.phase_time_s'), ' s')} in all"
    if m.get("plan.skipped_candidates"):
        timing += (f"; {int(m['plan.skipped_candidates'])} candidates skipped: "
                   f"{t.get('plan.skipped_reasons', 'missing profile entries or links')}"[:300])
    lines.append(timing)
    if m.get("plan.search_cut") == 1.0:
        lines.append(f"            cut by planner.budget_s={m.get('plan.search_budget_s', 0):g} before the search was complete: "
                     "a rerun may give another plan (a larger budget_s searches on)")
    if est is not None:
        worst = max(est.stages, key=lambda s: s.compute_s + s.send_s)
        lines.append(f"  where:    slowest stage p{worst.pipeline} s{worst.stage} ({worst.gpu}): compute {_fmt(worst.compute_s, ' s')}, "
                     f"sends {_fmt(worst.send_s, ' s')}, all-reduce {_fmt(worst.allreduce_s, ' s')}, update {_fmt(worst.update_s, ' s')}")
    layers = ("layer times derived from the model's graph and built-in device profiles (not measured)"
              if t.get("plan.profile") == "derived" else "profiled layers")
    if "plan.derived_types" in t:
        layers = "profiled layers and, for the types below, layers derived from datasheets (not measured)"
    links = "fitted links" + (", and datasheet links for the types below" if "plan.derived_nodes" in t else "")
    if sim in BUILTIN_SIMULATORS:
        lines.append(f"  figures:  simulated ({sim} simulator: cost model from {layers} and {links}; "
                     "docs/benchmarks/plans.md has its error against measured GPU runs)")
    else:                                     # a plugin's: what it models, and how well, is its author's to say
        lines.append(f"  figures:  simulated (the {sim} simulator, a plugin's, on {layers}; its error against measured "
                     "runs is not known here)")
    precision, recompute = t.get("plan.precision", "fp32"), t.get("plan.recompute") == "true"
    if precision != "fp32" or recompute or "plan.variants_tried" in t:
        tried = [f"{v} {_fmt(m.get(f'plan.variant_iteration_s.{v}'), ' s')}"
                 for v in t.get("plan.variants_tried", "").split(", ") if v]
        lines.append(f"  training: {precision} (planner.precision; fp32 master weights, activations in "
                     f"{'32' if precision == 'fp32' else '16'} bits), activation recomputation "
                     f"{'on' if recompute else 'off'} (planner.recompute)"
                     + (f"; tried {', '.join(tried)} (the objective's best kept)" if tried else "")
                     + (f"; no plan fits: {t['plan.variants_refused']}" if t.get("plan.variants_refused") else "")
                     + ("; layer times carried from the fp32 profile, derived (docs/plans.md, 'Precision')"
                        if precision != "fp32" else ""))
    if "plan.derived_nodes" in t:
        layers = "layer times measured" if t.get("plan.profile", "measured") == "measured" else "layer times derived too"
        lines.append(f"  derived:  machines and links not in the cluster data, from the GPU catalog ({layers}): "
                     f"{t['plan.derived_nodes']}"[:600])
    if "plan.derived_types" in t:
        how = ("derived from datasheet" if precision == "fp32"
               else f"not measured at {precision} (datasheet and fitted roofline)")
        lines.append(f"  derived:  {how}: {t['plan.derived_types']}; the plan uses "
                     f"{t.get('plan.derived_used', '?')} (error of a type left out of the fit: "
                     "docs/benchmarks/derived_profiles.md)"[:600])
    return lines


def headline_speedup(metrics: dict[str, float], trained: bool) -> dict[str, float]:
    """One meaning of ``speedup`` per trial: the training speedup when it trained (absent if the target
    was not reached), the placement speedup when it only placed. Set in ``metrics``; returned to log."""
    key = "train.speedup" if trained else "placement.speedup"
    if key in metrics:
        metrics["speedup"] = metrics[key]
    return {"speedup": metrics["speedup"]} if "speedup" in metrics else {}


def objective_value(outcome: dict[str, Any], metrics: dict[str, float], objective: str) -> float:
    """The value a trial returns (to a sweeper): its ``objective.metric``, NaN (said on stdout) when
    the trial did not log it."""
    value = metrics.get(objective, outcome["metrics"].get(objective))
    if value is None:
        tags = outcome["tags"]
        why = (" (it missed its target: no time to target, so no speedup)" if tags.get("train.reached_target") == "false"
               else f" (no baseline placement to be a speedup over: {tags['placement.baseline']})"
               if str(tags.get("placement.baseline", "")).startswith("none") else "")
        print(f"objective.metric {objective!r} was not logged by this trial{why}", flush=True)
        return math.nan
    return float(value)


def trial_summary(outcome: dict[str, Any], objective: str, value: float) -> str:
    m, t = outcome["metrics"], outcome["tags"]
    if outcome.get("runtime") == "plan":
        lines = [f"trial finished: {objective} = {_fmt(value)}", *plan_lines(outcome)]
        return "\n".join(lines + _where(outcome))
    clock = ", on a virtual clock" if t.get("train.clock") == "virtual" and outcome["runtime"] != "virtual" else ""
    ran = (f"placer {t.get('placer', 'none')}, sync {t.get('sync', 'none')} ({outcome['runtime']} runtime{clock}, "
           f"{outcome['workers']} worker{'s' if outcome['workers'] != 1 else ''}), hardware {t.get('hardware')}, "
           f"model {t.get('model')}")
    lines = [f"trial finished: {objective} = {_fmt(value)}", f"  ran:      {ran}"]
    if "train.final_test_accuracy" in m:
        res = f"test accuracy {_fmt(m['train.final_test_accuracy'])} after {int(m.get('train.updates', 0))} updates"
        if "train.time_to_target_s" in m:
            res += f"; time to target {_fmt(m['train.time_to_target_s'], ' s')}"
        lines.append(f"  result:   {res}")
    pipeline = t.get("placement.objective") == "pipeline" and "placement.time_per_sample_s" in m
    if "placement.objective" in t:   # which objective, and why (the same file is judged otherwise in another folder)
        why = t.get("placement.objective_source", "set")
        lines.append(f"  objective: {t['placement.objective']} ({'placement.objective' if why == 'set' else why}; "
                     f"{'the busiest device or link per ' + t.get('placement.graph_unit', 'sample') if pipeline else 'one training step'})")
    if "placement.unused_workers" in t:
        lines.append(f"  WARNING:  placed on {t.get('placement.worker', 'the first worker')} only; no sync strategy uses "
                     f"the other workers: {t['placement.unused_workers']} (placement.hosts=all places across every "
                     "host's devices; +sync=... trains on them as data-parallel workers)"[:600])
    if pipeline:  # the objective, its baseline and its bound, in one unit: seconds per sample
        lines.append(f"  placement: time per {t.get('placement.graph_unit', 'sample')} {_fmt(m['placement.time_per_sample_s'], ' s')} "
                     f"(baseline {_fmt(m.get('placement.baseline_time_per_sample_s'), ' s')}"
                     f"{_no_baseline(m, t, 'placement.baseline_time_per_sample_s')}, lower bound "
                     f"{_fmt(m.get('placement.lower_bound_s'), ' s')}); one step {_fmt(m.get('placement.step_time_s'), ' s')}")
    elif "placement.step_time_s" in m:
        step, base, lb = m["placement.step_time_s"], m.get("placement.baseline_step_time_s"), m.get("placement.lower_bound_s")
        gain = (f"; {t.get('placer', 'the placer')} {100 * (base / step - 1):+.1f}% over {t.get('placement.baseline', 'it')}"
                if base and step else "")
        pct = 100 * (step / lb - 1) if lb and step else 0.0
        gap = f", {0.0 if abs(pct) < 0.05 else pct:.1f}% above the bound" if lb and step else ""   # no '-0.0%
        lines.append(f"  placement: step time {_fmt(step, ' s')} (baseline {_fmt(base, ' s')}"
                     f"{_no_baseline(m, t, 'placement.baseline_step_time_s')}, lower bound "
                     f"{_fmt(lb, ' s')}{gain}{gap})")
    if "placement.measured_step_time_s" in m:       # a simulated search's answer, also run on the real devices
        mb, ms = m.get("placement.measured_baseline_step_time_s"), m.get("placement.measured_speedup")
        err = m.get("placement.sim_error")
        lines.append(f"  measured: step time {_fmt(m['placement.measured_step_time_s'], ' s')} on the real devices"
                     + (f" (baseline {_fmt(mb, ' s')}: {_fmt(ms)}x)" if mb and ms else "")
                     + (f"; the simulator's median error on them {100 * err:.1f}%" if err is not None else "")
                     + "; the lower bound above is on simulated times")
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
        if outcome["runtime"] == "mpi" and "train.speedup" in m:
            ref += (" (estimated: the reference runs on the virtual clock with the per-rank step time measured "
                    "in this MPI run, under its contention)")
        lines.append(f"  speedup:  {_fmt(m['speedup'])}x{spread} relative to {ref}")
        if "train.reference_time_to_target_s" in m and "train.speedup" in m and "train.time_to_target_s" in m:
            est = m.get("train.estimated_time_to_target_s")      # the speedup's own figure, where it is estimated
            mine = (f"{_fmt(est, ' s')} to target estimated alike (measured {_fmt(m['train.time_to_target_s'], ' s')})"
                    if est else f"{_fmt(m['train.time_to_target_s'], ' s')} to target")
            lines.append(f"  times:    {mine}, the reference {_fmt(m['train.reference_time_to_target_s'], ' s')}")
        if "train.speedup_same_settings" in m and t.get("train.reference_method") == "tuned":
            lines += _untuned_lines(m)
    lines += context_lines(m, t)
    if outcome["runtime"] == "mpi" and "train.speedup" in m and "compare.time_to_target_s" not in m:
        lines.append("  versus:   none on sync.runtime=mpi: the comparison with balanced allreduce and the statistical "
                     "limit run on the virtual clock (rerun with sync.runtime=virtual for them)")
    if t.get("train.reached_target") == "false":
        lines.append(f"  target:   MISSED (test accuracy {_fmt(outcome.get('target'))} not reached): {t.get('train.missed_target', '?')}")
    lines.append(f"  figures:  {_figures(t, outcome['runtime'])}")
    return "\n".join(lines + _where(outcome))


def _untuned_lines(m: dict[str, float]) -> list[str]:
    """The speedup over one worker at the trial's own optimizer and lr; a WARNING where it beat the tuned reference."""
    out = [f"  untuned:  {_fmt(m['train.speedup_same_settings'])}x over one speed-1.0 worker with this trial's own "
           "optimizer and lr (train.speedup_same_settings)"]
    if m["train.speedup_same_settings"] < m.get("train.speedup", 0.0):
        same = m.get("train.same_settings_reference_time_to_target_s")
        out.append(f"  WARNING: one worker at this trial's own optimizer and lr reached the target in {_fmt(same, ' s')}, "
                   f"faster than the tuned reference's {_fmt(m.get('train.reference_time_to_target_s'), ' s')}: over the "
                   f"fastest single worker measured the speedup is {_fmt(m['train.speedup_same_settings'])}x, not "
                   f"{_fmt(m.get('train.speedup'))}x; add this lr to train.reference_grid to make it the reference")
    return out


def context_lines(m: dict[str, float], t: dict[str, str]) -> list[str]:
    """A data-parallel trial's result in context: the same workers under balanced allreduce, the
    capacity, the statistical limit, and a verdict (``orchestrator.sync.compare``)."""
    out = []
    sync = t.get("sync", "this strategy")
    if "compare.time_to_target_s" in m:
        src = t.get("compare.source", "computed")
        out.append(f"  versus:   {t.get('compare.label', '?')}, on the same workers ({src}): "
                   f"{_fmt(m['compare.time_to_target_s'], ' s')} to target, {_fmt(m.get('compare.speedup'))}x the tuned worker")
    if "hardware.capacity" in m and "limit.speedup" in m:
        adaptive = t.get("train.batch_policy") == "adaptive"
        kind = "fixed-batch limit" if adaptive else "statistical limit"
        what = "the best synchronous time at any one global batch, which an adaptive batch may pass: " if adaptive else ""
        out.append(f"  limits:   capacity {_fmt(m['hardware.capacity'])} (sum of worker speeds); {kind} "
                   f"{_fmt(m['limit.speedup'])}x the tuned worker ({what}{t.get('limit.label', '?')}); "
                   f"this trial reached {_fmt(m.get('train.fraction_of_limit'))} of it" + _limit_spread(m))
        out += _limit_beaten(m, t, sync, kind)
    elif "hardware.capacity" in m and "workers" in m:
        out.append(f"  limits:   capacity {_fmt(m['hardware.capacity'])} (sum of worker speeds)")
    if "train.global_batch_first" in m:      # train.batch_policy=adaptive: what it chose
        noise = m.get("sync.noise_scale_final")
        out.append(f"  batch:    adaptive (goodput from the gradient noise scale): {int(m['train.global_batch_first'])} "
                   f"at first, {int(m.get('train.global_batch_final', 0))} at the end, largest "
                   f"{int(m.get('train.global_batch_max_chosen', 0))}, {int(m.get('train.global_batch_changes', 0))} "
                   f"changes" + (f"; noise scale {noise:.0f} at the end" if noise is not None else "")
                   + " (train.global_batch over time: batch_over_time.png)")
    r = m.get("compare.speedup_over_it")
    label = t.get("compare.label", "?").split(", ")
    other = label[0]
    if t.get("train.batch_policy") == "adaptive":
        sync, other = f"{sync} with the adaptive batch", f"{other} at its fixed batch"
    elif other == sync:  # the same strategy under other settings: name the comparison's, and call this one the trial
        other, sync = f"{label[0]} ({label[1]})" if len(label) > 1 else other, f"this trial ({sync})"
    if r is not None and t.get("compare.source") != "this trial":
        if r >= 1.0:
            out.append(f"  verdict:  {sync} beat {other} on these workers: {r:.2f}x as fast to the target")
        else:
            out.append(f"  verdict:  {other} wins on these workers: {1 / r:.2f}x faster to the target than {sync}")
    return out


def _limit_spread(m: dict[str, float]) -> str:
    """The limit's seeds as speedups over the tuned worker (slowest to fastest)."""
    lo, hi = m.get("limit.fastest_seed_s"), m.get("limit.slowest_seed_s")
    lim, t = m.get("limit.speedup"), m.get("limit.time_to_target_s")
    if lo is None or hi is None or lo == hi or lim is None or t is None or not lo > 0:
        return ""
    ref = lim * t
    return f"; its seeds {_fmt(ref / hi)}x to {_fmt(ref / lo)}x"


def _limit_beaten(m: dict[str, float], t: dict[str, str], sync: str, kind: str) -> list[str]:
    """A line for each figure beside the limit that beats it beyond its spread: the limit was wrong."""
    out = []
    for who, name in (("trial", sync), ("compare", t.get("compare.label", "the comparison").split(",")[0])):
        by = m.get(f"limit.beaten_by_{who}")
        if by is not None:
            out.append(f"  WARNING:  {name} beat the {kind} by {100 * by:.1f}% beyond its spread (its fastest seed): "
                       "the limit, an estimate from S(G), was wrong here by at least that much")
    return out


def _where(outcome: dict[str, Any]) -> list[str]:
    uri = outcome["uri"]
    lines = [f"  run:      {outcome['run_id']} in {uri} (experiment {outcome['experiment']})"]
    uri_arg = "" if uri == "sqlite:///mlflow.db" else f" --tracking-uri {uri}"
    lines.append(f"  look:     python -m orchestrator.report{uri_arg}")
    if outcome.get("experiment_id") is not None:
        from orchestrator.tracking.store import ui_link

        if uri.startswith("sqlite:"):
            lines.append(f"            mlflow ui --backend-store-uri {uri}, then open {ui_link(outcome['experiment_id'])}")
        elif uri.startswith(("http://", "https://")):
            lines.append(f"            {ui_link(outcome['experiment_id'], uri.rstrip('/'))}")
    return lines
