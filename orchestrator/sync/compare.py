"""What a data-parallel trial's speedup is worth: the same cluster under another strategy
(``train.compare_with``, allreduce in conf/config.yaml), and the statistical limit of synchronous data
parallelism on it (issue 30; ``sync.limit``).

**The comparison.** By default bulk-synchronous allreduce with the batch split by speed
(``sync.balance=static``) and its own tuned defaults (``conf/sync/allreduce.yaml``: the optimizer and lr
measured best for it, the same rule that set the trial's strategy's defaults), on the trial's workers, network, stragglers,
data, target, evaluation cadence and seeds. Rennala SGD (Tyurin and Richtarik, NeurIPS'23) shows a
speed-proportional synchronous batch is time-optimal for fixed speeds, so it is the comparison a
stale or asynchronous scheme has to beat. Measured on the trial's clock: on the virtual runtime it is
computed and cached per clock (the key holds the trial's compute model, as the reference's and the limit's do:
a later trial reads it only on the same clock); an MPI trial (its own measured clock) reads none, never a
virtual estimate.

The statistical limit it is also set beside: ``sync.limit``. Both figures are cached (``sync.figures``).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.execution.training import NullSink
from orchestrator.sync.core import SyncOptions
from orchestrator.sync.figures import Figure, cluster_key, key_hash, lookup, record, speed_changes
from orchestrator.sync.limit import candidates, limit_metrics, statistical_limit


# -- balanced allreduce on the same cluster ------------------------------------------------------
def compare_with(cfg: Any) -> str | None:
    """``train.compare_with``: the strategy a sync trial is compared with (conf/config.yaml names
    allreduce; null: none)."""
    name = ((cfg or {}).get("train") or {}).get("compare_with")
    return str(name) if name else None


def strategy_defaults(name: str) -> dict[str, Any]:
    """``conf/sync/NAME.yaml``'s sync and train values (its tuned defaults); none for a plugin's
    strategy without such a file."""
    from importlib import resources

    path = resources.files("orchestrator_conf") / "sync" / f"{name}.yaml"
    if not path.is_file():
        return {"sync": {}, "train": {}}
    node = OmegaConf.load(str(path))
    return {"sync": OmegaConf.to_container(node.get("sync") or {}), "train": OmegaConf.to_container(node.get("train") or {})}


def flat_record(opts: SyncOptions) -> dict[str, Any]:
    """``opts`` as the flat record ``SyncOptions`` was before it held the typed groups (issue 42): the cache keys
    hash these names and values, so that figures an earlier version cached in a tracking store still hit."""
    c, t, hw = opts.sync, opts.train, opts.hardware
    return {"name": opts.name, "runtime": c.runtime, "workers": opts.workers, "speeds": list(opts.speeds),
            "straggler_p": hw.stragglers.probability, "straggler_slowdown": hw.stragglers.slowdown,
            "jitter_sigma": hw.jitter_sigma, "staleness": opts.staleness, "push_lr": getattr(c, "push_lr", "scaled"),
            "balance": c.balance, "balance_every": c.balance_every,
            "dynamic_staleness": bool(getattr(c, "dynamic_staleness", False)),
            "max_staleness": float(getattr(c, "max_staleness", 8.0)), "lr_rule": t.lr_scaling,
            "warmup_samples": opts.warmup_samples, "batch_policy": t.batch_policy,
            "global_batch_max": t.global_batch_max, "adaptive_min_batch": t.adaptive_min_batch,
            "adaptive_max_batch": t.adaptive_max_batch, "adaptive_every": t.adaptive_every,
            "adaptive_ema": t.adaptive_ema, "adaptive_noise": t.adaptive_noise, "base_time_s": c.base_time_s,
            "step_overhead_s": c.step_overhead_s, "per_sample_s": c.per_sample_s, "shards": opts.shards,
            "colocated": opts.colocated, "overlap": bool(c.overlap), "network": opts.network,
            "speed_changes": speed_changes(opts), "emulated_step_s": hw.emulated_step_s,
            "timeout_s": float(c.timeout_s), "hostfile": opts.hostfile,
            "delay_compensation": float(getattr(c, "delay_compensation", 0.0)),
            "delay_compensation_mode": str(getattr(c, "delay_compensation_mode", "constant"))}


def comparison_key(opts: Any, ctx: Any, settings: Any, sync_node: dict[str, Any], cm: Any) -> str:
    """Everything the comparison's run depends on: its options (cluster, network, stragglers, jitter,
    batch policy...), settings, model, data, the workers' step times and the clock (``cm``, the trial's compute
    model: a figure timed on another process's measured clock, or an MPI trial's, is another clock's)."""
    o = {k: v for k, v in flat_record(opts).items() if k not in ("runtime", "timeout_s", "hostfile")}
    return key_hash(["comparison", o, cluster_key(opts, ctx), dataclasses.asdict(settings), sync_node, repr(cm)])


CLOCK_KEYS = ("base_time_s", "step_overhead_s", "per_sample_s")   # the trial's compute model: not a strategy's choice


def comparison_setup(ctx: Any, name: str) -> tuple[DictConfig, Any, dict[str, Any]]:
    """(the config, settings and sync node of strategy ``name`` with its tuned defaults on the trial's cluster and
    clock: the trial's ``sync.base_time_s`` / ``step_overhead_s`` / ``per_sample_s`` are kept)."""
    d = strategy_defaults(name)
    mine = ((ctx.cfg or {}).get("sync") or {}) if ctx.cfg is not None else {}
    clock = {k: mine.get(k) for k in CLOCK_KEYS if mine.get(k) is not None}
    sync_node = {"name": name, **{k: v for k, v in d["sync"].items() if k not in ("name", *CLOCK_KEYS)}, **clock,
                 "runtime": "virtual"}
    cfg = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True) if ctx.cfg is not None else {})
    OmegaConf.set_struct(cfg, False)
    cfg.sync = sync_node
    cfg.train = {**(OmegaConf.to_container(cfg.train) if cfg.get("train") is not None else {}), **d["train"]}
    if cfg.train.get("lr_scaling") == "adascale" and cfg.train.get("batch_policy") != "adaptive":
        cfg.train.lr_scaling = "sqrt"       # AdaScale needs the adaptive batch's noise scale: a fixed batch, the default
    settings = dataclasses.replace(ctx.settings, **{k: v for k, v in d["train"].items()
                                                    if k in {f.name for f in dataclasses.fields(ctx.settings)}})
    return cfg, settings, sync_node


def is_the_comparison(strategy: Any, opts: Any, ctx: Any, name: str, cm: Any) -> str | None:
    """The comparison's key when this trial *is* the comparison (strategy ``name`` with its tuned
    defaults, on the virtual runtime: its own time is then the figure later trials read), else None."""
    if getattr(strategy, "name", None) != name or opts.runtime != "virtual":
        return None
    cfg, settings, sync_node = comparison_setup(ctx, name)
    if (settings.optimizer, float(settings.lr)) != (ctx.settings.optimizer, float(ctx.settings.lr)) or any(
            getattr(strategy.config, k, v) != v for k, v in sync_node.items() if k not in ("name", "runtime")):
        return None
    mine = (ctx.cfg or {}).get("train") or {}
    if any(k in mine and mine[k] != v for k, v in strategy_defaults(name)["train"].items()):
        return None               # another batch policy (adaptive, a cap of its own): not the comparison
    return comparison_key(opts, ctx, settings, sync_node, cm)


def comparison(strategy: Any, opts: Any, ctx: Any, result: Any, name: str) -> Figure | None:
    """Strategy ``name`` on the trial's cluster (see the module's doc); None when it cannot be had
    on the trial's clock (MPI without a measured one in the store)."""
    from orchestrator import plugins

    own = is_the_comparison(strategy, opts, ctx, name, result.compute_model)
    if own is not None:
        fig = Figure(result.time_to_target_s, _label(ctx, name), "this trial")
        record(ctx.sink, "compare", own, fig)
        return fig
    cfg, settings, sync_node = comparison_setup(ctx, name)
    strat = plugins.load("sync", name)(OmegaConf.create(sync_node))
    copts = dataclasses.replace(strat.options(cfg), speeds=list(opts.speeds))
    k = comparison_key(copts, ctx, settings, sync_node, result.compute_model)
    found = lookup(ctx.sink, "compare", k)
    if found is not None:
        record(ctx.sink, "compare", k, found)
        return found
    if opts.runtime != "virtual":
        return None
    from orchestrator.sync.costmodel import ComputeModel
    from orchestrator.sync.run import train as train_sync

    cm = result.compute_model
    if isinstance(cm, ComputeModel):        # the very clock the trial ran on, however it got it (configured, fitted, placed)
        strat = plugins.load("sync", name)(OmegaConf.create(
            {**sync_node, "base_time_s": None, "step_overhead_s": cm.t0, "per_sample_s": cm.t1}))
    print(f"compare: {_label(ctx, name)}, on the same {opts.workers} workers", flush=True)
    with tempfile.TemporaryDirectory(prefix="orchestrator-compare-") as tmp:
        cctx = dataclasses.replace(ctx, settings=settings, sink=NullSink(), cfg=cfg, output_dir=Path(tmp),
                                   show_progress=False)
        r = train_sync(strat, cctx)
    fig = Figure(r.time_to_target_s, _label(ctx, name))
    record(ctx.sink, "compare", k, fig)
    return fig


def _label(ctx: Any, name: str) -> str:
    d = strategy_defaults(name)
    split = f", sync.balance={d['sync']['balance']}" if "balance" in d["sync"] else ""
    policy = d["train"].get("batch_policy")
    if policy:
        split += f", fixed batch {policy}" + (f" G <= {d['train']['global_batch_max']}"
                                                if policy == "hybrid" and "global_batch_max" in d["train"] else "")
    return (f"{name}{split}, its tuned defaults {d['train'].get('optimizer', ctx.settings.optimizer)} "
            f"lr={d['train'].get('lr', ctx.settings.lr)}")


def trial_context(strategy: Any, cfg: Any, ctx: Any, result: Any) -> dict[str, float]:
    """What a data-parallel trial's speedup is worth (``train.context``): balanced allreduce on the same
    workers and the statistical limit there, with the hardware capacity (sum of the workers' speeds)."""
    speeds = [float(w.speed) for w in ctx.cluster.workers]
    out = {"hardware.capacity": sum(speeds)}
    if result.time_to_target_s is None:
        return out
    opts = dataclasses.replace(strategy.run_options(cfg), speeds=speeds)
    if opts.train.batch_policy == "adaptive":     # the summary names the limit of one global batch for what it is
        ctx.sink.set_tags({"train.batch_policy": "adaptive"})
    tt, ref_t = result.time_to_target_s, result.reference_time_to_target_s
    name = compare_with(cfg)
    cmp = comparison(strategy, opts, ctx, result, name) if name else None
    if cmp is not None and cmp.time_to_target_s:
        out["compare.time_to_target_s"] = cmp.time_to_target_s
        out["compare.speedup_over_it"] = cmp.time_to_target_s / tt
        if ref_t:
            out["compare.speedup"] = ref_t / cmp.time_to_target_s
    if opts.runtime == "virtual" and ((cfg.get("train") or {}).get("statistical_limit", True)):
        compared = (name, comparison_setup(ctx, name)[1]) if name else None
        cands = (candidates(result.reference, ctx, str(getattr(strategy, "name", "this trial")), compared)
                 if result.reference is not None else None)
        lim = statistical_limit(opts, ctx, result.reference, result.compute_model, cands)
        if lim is not None and lim.time_to_target_s:
            out.update(limit_metrics(lim, tt, ref_t, out.get("compare.time_to_target_s")))
    return out
