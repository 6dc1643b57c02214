"""A data-parallel training run of a sync strategy on ``sync.runtime``: the entry point the trial calls.
Above the runtimes (``virtual``, ``mpi``) and the strategy contract, so that neither imports the other.

With ``train.seeds=k`` the strategy runs k times (seeds ``seed .. seed+k-1``: data order, initial
weights, stragglers); the trial's figures are the medians (a missed target counts as infinitely
slow), ``_min`` / ``_max`` the spread, and the reference is computed once, over the same seeds. Only
the first seed's curve and artifacts are logged."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.execution.training import NullSink, TrainContext, TrainResult
from orchestrator.sync.reference import for_trial, median_time, same_settings_time
from orchestrator.sync.report import write_artifacts
from orchestrator.sync.strategy import SyncStrategy


def train(strategy: SyncStrategy, ctx: TrainContext) -> TrainResult:
    """Train ``ctx.model`` on ``ctx.dataset`` with ``strategy`` on ``sync.runtime``; logs its ``sync.*``
    metrics and artifacts, and the reference's tags."""
    opts = strategy.run_options(ctx.cfg)      # validated where the trial started (check_config)
    if ctx.cluster is not None:
        # The hardware adapter is the authority on how many workers there are and how fast each is
        # (it may derive speeds from the workers' devices and placed step times).
        opts = dataclasses.replace(opts, speeds=[float(w.speed) for w in ctx.cluster.workers])
    runs: list[tuple[TrainResult, Any]] = []
    for k in range(ctx.settings.seeds):
        sctx = ctx if k == 0 else dataclasses.replace(
            ctx, settings=dataclasses.replace(ctx.settings, seed=ctx.settings.seed + k), sink=NullSink())
        runs.append(_run_once(strategy, opts, sctx))
    result, stats = runs[0]
    if len(runs) > 1:
        _summarise(result, [r for r, _ in runs])
    ref = None
    if result.time_to_target_s is not None:   # no speedup without a time to target: the reference would be idle
        ref = result.reference = for_trial(opts, ctx, result.compute_model)
        result.reference_time_to_target_s = ref.time_to_target_s
        _log_reference(result, ref, ctx)
    else:
        ctx.sink.set_tags({"train.reference": "not computed: this trial missed its target (no speedup to measure)"})
    result.extra_metrics.update(run_metrics(strategy, result, stats))
    m = result.extra_metrics
    label = strategy.label(opts)
    if "sync.speedup" in m:
        print(f"{label[:-1]}, {result.clock} clock): speedup {m['sync.speedup']:.2f} over {_short(ref)}, "
              f"capacity {stats.capacity:.2f}, scaling efficiency {m['sync.scaling_efficiency']:.2f}", flush=True)
    write_artifacts(result, stats, ctx.output_dir, label, ctx.sink)
    return result


def run_metrics(strategy: SyncStrategy, result: TrainResult, stats) -> dict[str, float]:
    """The strategy's ``sync.*`` metrics. Virtual runtime: ``strategy.metrics`` of the instance that ran every
    worker. MPI: the engine's keys from the gathered statistics, plus what the ranks' instances added in
    ``metrics()`` (``own_metrics``), combined by ``strategy.gather_metrics``; the server rule's
    ``ParameterServer.metrics()`` arrive in ``stats.server_metrics`` on both runtimes."""
    if stats.rank_metrics is None:
        return strategy.metrics(result, stats)
    return {**SyncStrategy.metrics(strategy, result, stats),
            **strategy.gather_metrics([m for m in stats.rank_metrics if m])}


def _run_once(strategy: SyncStrategy, opts, ctx: TrainContext):
    if opts.runtime == "mpi":
        from orchestrator.sync.mpi import train_mpi

        return train_mpi(strategy, opts, ctx)
    from orchestrator.sync.virtual import train_virtual

    result, stats, _ = train_virtual(strategy, opts, ctx)
    return result, stats


def _summarise(result: TrainResult, results: list[TrainResult]) -> None:
    """The first seed's result, its time and updates to target replaced by the medians over the seeds."""
    times = [r.time_to_target_s for r in results]
    result.time_to_target_s = median_time(times)
    ups = [r.updates_to_target for r in results]
    result.updates_to_target = median_time(ups) if result.time_to_target_s is not None else None
    reached = [t for t in times if t is not None]
    m = result.extra_metrics
    m["train.seeds"] = float(len(results))
    m["train.seeds_reached_target"] = float(len(reached))
    if reached:
        m["train.time_to_target_s_min"] = min(reached)
    if len(reached) == len(times):      # a seed that missed the target has no finite maximum
        m["train.time_to_target_s_max"] = max(reached)
    m["train.final_test_accuracy_median"] = float(sorted(r.final_test_accuracy for r in results)[len(results) // 2])


def _log_reference(result: TrainResult, ref, ctx: TrainContext) -> None:
    """The speedup's spread over the seeds and the untuned comparison (``train.speedup_same_settings``)."""
    m, tt = result.extra_metrics, result.time_to_target_s
    same = same_settings_time(ref, ctx.settings)
    if same is not None:
        m["train.same_settings_reference_time_to_target_s"] = same
        if tt:
            m["train.speedup_same_settings"] = same / tt
    if ref.time_to_target_s:
        if m.get("train.time_to_target_s_max"):
            m["train.speedup_min"] = ref.time_to_target_s / m["train.time_to_target_s_max"]
        if m.get("train.time_to_target_s_min"):
            m["train.speedup_max"] = ref.time_to_target_s / m["train.time_to_target_s_min"]


def _short(ref) -> str:
    if ref is None:
        return "one speed-1.0 worker"
    return f"one speed-1.0 worker ({ref.method}: {ref.optimizer} lr={ref.lr:g})"
