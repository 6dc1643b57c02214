"""What a data-parallel trial's speedup is worth: the same cluster under another strategy
(``train.compare_with``, allreduce in conf/config.yaml), and the statistical limit of synchronous data
parallelism on it (issue 30).

**The comparison.** By default bulk-synchronous allreduce with the batch split by speed
(``sync.balance=static``) and its own tuned defaults (``conf/sync/allreduce.yaml``: the optimizer and lr
measured best for it, the same rule that set the trial's strategy's defaults), on the trial's workers, network, stragglers,
data, target, evaluation cadence and seeds. Rennala SGD (Tyurin and Richtarik, NeurIPS'23) shows a
speed-proportional synchronous batch is time-optimal for fixed speeds, so it is the comparison a
stale or asynchronous scheme has to beat. Measured on the trial's clock: on the virtual runtime it is
computed (and cached); under MPI only a measured ``+sync=allreduce`` trial in the store with the same
key counts, never a virtual estimate.

**The statistical limit** (Shallue et al. 2019; McCandlish et al. 2018): a global batch G needs S(G)
updates to the target (one speed-1.0 worker at batch G, the tuned reference's optimizer, the lr tuned
per G on lr_ref x sqrt(G/64) x {1, 2, 1/2}, the smaller one skipped when the larger won; S(64) is the
reference itself; each run stops once it cannot beat the best S(G) x T so far), and one synchronous step of
G on the k fastest workers takes T_k(G) = max_i t(b_i, v_i) + allreduce(model bytes, k) with b split so
that they finish together (``costmodel.balanced_batches``). The limit is
``min over (G, k) of S(G) x T_k(G)``, G = 64, 128, ... up to min(512, W x train.batch_size): the best
time to target synchronous data parallelism reaches on this cluster at any of these batches. A
strategy past it got there with fewer updates than S(G) says.

Both are cached like the reference: in the process and as tags of the trial's run (``compare.*``,
``limit.*`` with a key of everything they depend on), read back by a later trial with the same key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.execution.training import NullSink
from orchestrator.sync.core import SyncOptions
from orchestrator.sync.reference import PRUNE, median_time, reference_options

MAX_LIMIT_BATCH = 512


@dataclass
class Figure:
    """A cached time to target with what it is and where it came from."""

    time_to_target_s: float | None
    label: str
    source: str = "computed"         # computed | process cache | store (run ID) | this trial


_CACHE: dict[str, Figure] = {}


def _hash(parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _lookup(sink: Any, tag: str, k: str) -> Figure | None:
    if k in _CACHE:
        return dataclasses.replace(_CACHE[k], source="process cache")
    client, exp = getattr(sink, "client", None), getattr(sink, "experiment_id", None)
    if client is None or exp is None:
        return None
    try:
        runs = client.search_runs([exp], filter_string=f"tags.`{tag}.key` = '{k}'", max_results=1)
    except Exception:  # a cache: a store that cannot answer means computing it
        return None
    if not runs:
        return None
    t = runs[0].data.tags
    try:
        v = t[f"{tag}.time_to_target_s"]
        fig = Figure(None if v == "None" else float(v), t[f"{tag}.label"], f"store (run {runs[0].info.run_id})")
    except (KeyError, ValueError):
        return None
    _CACHE[k] = fig
    return fig


def _record(sink: Any, tag: str, k: str, fig: Figure) -> None:
    _CACHE.setdefault(k, dataclasses.replace(fig, source="computed"))
    sink.set_tags({f"{tag}.time_to_target_s": repr(fig.time_to_target_s), f"{tag}.label": fig.label,
                   f"{tag}.source": fig.source})
    sink.set_tags({f"{tag}.key": k})          # last: a run with the key has the whole figure


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
            "speed_changes": _speed_changes(opts), "emulated_step_s": hw.emulated_step_s,
            "timeout_s": float(c.timeout_s), "hostfile": opts.hostfile,
            "delay_compensation": float(getattr(c, "delay_compensation", 0.0)),
            "delay_compensation_mode": str(getattr(c, "delay_compensation_mode", "constant"))}


def _speed_changes(opts: SyncOptions) -> list[tuple[int, float, float]]:
    return [(ch.worker, ch.at_s, ch.speed) for ch in opts.hardware.speed_changes]


def _cluster_key(opts: SyncOptions, ctx: Any) -> list[Any]:
    ds = ctx.dataset
    hw = opts.hardware
    return [list(opts.speeds), opts.network, hw.stragglers.probability, hw.stragglers.slowdown, _speed_changes(opts),
            str(getattr(ctx.model, "name", "?")), f"{getattr(ds, 'source', '?')}:{len(ds.y_train)}:{len(ds.y_test)}",
            sorted((ctx.worker_step_time_s or {}).items())]


def comparison_key(opts: Any, ctx: Any, settings: Any, sync_node: dict[str, Any]) -> str:
    """Everything the comparison's run depends on: its options (cluster, network, stragglers, jitter,
    batch policy...), settings, model, data and the workers' step times."""
    o = {k: v for k, v in flat_record(opts).items() if k not in ("runtime", "timeout_s", "hostfile")}
    return _hash(["comparison", o, _cluster_key(opts, ctx), dataclasses.asdict(settings), sync_node])


def _comparison_setup(ctx: Any, name: str) -> tuple[DictConfig, Any, dict[str, Any]]:
    """(the config, settings and sync node of strategy ``name`` with its tuned defaults on the trial's cluster)."""
    d = strategy_defaults(name)
    sync_node = {"name": name, **{k: v for k, v in d["sync"].items() if k != "name"}, "runtime": "virtual"}
    cfg = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True) if ctx.cfg is not None else {})
    OmegaConf.set_struct(cfg, False)
    cfg.sync = sync_node
    cfg.train = {**(OmegaConf.to_container(cfg.train) if cfg.get("train") is not None else {}), **d["train"]}
    if cfg.train.get("lr_scaling") == "adascale" and cfg.train.get("batch_policy") != "adaptive":
        cfg.train.lr_scaling = "sqrt"       # AdaScale needs the adaptive batch's noise scale: a fixed batch, the default
    settings = dataclasses.replace(ctx.settings, **{k: v for k, v in d["train"].items()
                                                    if k in {f.name for f in dataclasses.fields(ctx.settings)}})
    return cfg, settings, sync_node


def is_the_comparison(strategy: Any, opts: Any, ctx: Any, name: str) -> str | None:
    """The comparison's key when this trial *is* the comparison (strategy ``name`` with its tuned
    defaults, on the virtual runtime: its own time is then the figure later trials read), else None."""
    if getattr(strategy, "name", None) != name or opts.runtime != "virtual":
        return None
    cfg, settings, sync_node = _comparison_setup(ctx, name)
    if (settings.optimizer, float(settings.lr)) != (ctx.settings.optimizer, float(ctx.settings.lr)) or any(
            getattr(strategy.config, k, v) != v for k, v in sync_node.items() if k not in ("name", "runtime")):
        return None
    mine = (ctx.cfg or {}).get("train") or {}
    if any(k in mine and mine[k] != v for k, v in strategy_defaults(name)["train"].items()):
        return None               # another batch policy (adaptive, a cap of its own): not the comparison
    return comparison_key(opts, ctx, settings, sync_node)


def comparison(strategy: Any, opts: Any, ctx: Any, result: Any, name: str) -> Figure | None:
    """Strategy ``name`` on the trial's cluster (see the module's doc); None when it cannot be had
    on the trial's clock (MPI without a measured one in the store)."""
    from orchestrator import plugins

    own = is_the_comparison(strategy, opts, ctx, name)
    if own is not None:
        fig = Figure(result.time_to_target_s, _label(ctx, name), "this trial")
        _record(ctx.sink, "compare", own, fig)
        return fig
    cfg, settings, sync_node = _comparison_setup(ctx, name)
    strat = plugins.load("sync", name)(OmegaConf.create(sync_node))
    copts = dataclasses.replace(strat.options(cfg), speeds=list(opts.speeds))
    k = comparison_key(copts, ctx, settings, sync_node)
    found = _lookup(ctx.sink, "compare", k)
    if found is not None:
        _record(ctx.sink, "compare", k, found)
        return found
    if opts.runtime != "virtual":
        return None
    from orchestrator.sync.run import train as train_sync

    print(f"compare: {_label(ctx, name)}, on the same {opts.workers} workers", flush=True)
    with tempfile.TemporaryDirectory(prefix="orchestrator-compare-") as tmp:
        cctx = dataclasses.replace(ctx, settings=settings, sink=NullSink(), cfg=cfg, output_dir=Path(tmp),
                                   show_progress=False)
        r = train_sync(strat, cctx)
    fig = Figure(r.time_to_target_s, _label(ctx, name))
    _record(ctx.sink, "compare", k, fig)
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


# -- the statistical limit -----------------------------------------------------------------------
def batches(workers: int, batch_size: int) -> list[int]:
    out, g = [], 64
    while g <= min(MAX_LIMIT_BATCH, max(64, workers * batch_size)):
        out.append(g)
        g *= 2
    return out


def step_time(speeds: list[float], G: int, cm: Any, nbytes: float, network: Any) -> tuple[float, int]:
    """min over k of T_k(G) (see the module's doc) and the k that gives it."""
    from orchestrator.hardware.topology import Topology
    from orchestrator.sync.costmodel import allreduce_s, balanced_batches

    best, at = math.inf, 1
    order = sorted(speeds, reverse=True)
    for k in range(1, len(order) + 1):
        if G < k:
            break
        vs = order[:k]
        b = balanced_batches(vs, G, cm)
        t = max(cm.time(bi, v) for bi, v in zip(b, vs)) + (allreduce_s(nbytes, Topology.from_cfg(network, k)) if k > 1 else 0.0)
        if t < best:
            best, at = t, k
    return best, at


def statistical_limit(opts: Any, ctx: Any, ref: Any, cm: Any) -> Figure | None:
    """The limit of synchronous data parallelism on the trial's cluster (the module's doc); None
    without a reference time."""
    from orchestrator.sync.costmodel import ComputeModel
    from orchestrator.sync.strategy import SingleWorker
    from orchestrator.sync.virtual import VirtualRun

    if ref is None or ref.time_to_target_s is None or not isinstance(cm, ComputeModel):
        return None
    s = ctx.settings
    nbytes = 4.0 * int(ctx.model.new_model().count_params())
    Gs = batches(opts.workers, s.batch_size)
    k = _hash(["limit", _cluster_key(opts, ctx), dataclasses.asdict(dataclasses.replace(s, lr=0.0, optimizer="")),
               ref.optimizer, ref.lr, ref.time_to_target_s, repr(cm), Gs])
    found = _lookup(ctx.sink, "limit", k)
    if found is not None:
        _record(ctx.sink, "limit", k, found)
        return found
    best_t, where = ref.time_to_target_s, f"G={s.batch_size} on 1 worker (the tuned worker itself)"
    ropts = reference_options(opts)
    from orchestrator.execution.runtime import ModelRuntime

    seeds = [s.seed + i for i in range(s.seeds)]
    rts = {seed: ModelRuntime(ctx.model, seed=seed, lr=ref.lr) for seed in seeds}
    theta0 = {seed: rt.get_flat() for seed, rt in rts.items()}
    samples_budget = (s.budget_updates or 3000) * s.batch_size
    print(f"limit: S(G) for G = {', '.join(str(g) for g in Gs[1:])} ({ref.optimizer}, lr tuned per G; "
          "cached in the tracking store)", flush=True)
    for G in Gs[1:]:
        T, kbest = step_time(list(opts.speeds), G, cm, nbytes, opts.network)
        lr0 = ref.lr * math.sqrt(G / s.batch_size)
        tried: dict[float, float | None] = {}
        for lr in (lr0, lr0 * 2, lr0 / 2):
            if lr == lr0 / 2 and tried.get(lr0 * 2) is not None and (tried.get(lr0) is None or tried[lr0 * 2] < tried[lr0]):
                continue                 # the larger lr won: the smaller is not tried
            cap_updates = int(min(samples_budget // G, PRUNE * best_t / T + 1))
            if cap_updates < 1:
                continue
            ups = []
            for seed in seeds:
                rts[seed].set_flat(theta0[seed])
                rs = dataclasses.replace(s, batch_size=G, lr=lr, optimizer=ref.optimizer, seed=seed, seeds=1,
                                         stop="target", budget_s=None, budget_updates=cap_updates,
                                         eval_every=max(1, s.eval_every * s.batch_size // G))
                r, _ = VirtualRun(SingleWorker(), ropts, rs, rts[seed], ctx.dataset, cm, NullSink()).run()
                ups.append(r.updates_to_target)
            med = tried[lr] = median_time(ups)
            if med is not None and med * T < best_t:
                best_t, where = med * T, f"G={G} on the {kbest} fastest worker(s), {ref.optimizer} lr={lr:.3g}"
    fig = Figure(best_t, f"synchronous, {where}; S(G) measured for G = {', '.join(str(g) for g in Gs)} with "
                         f"{len(seeds)} seed(s): an estimate, as noisy as S(G)")
    _record(ctx.sink, "limit", k, fig)
    return fig


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
        lim = statistical_limit(opts, ctx, result.reference, result.compute_model)
        if lim is not None and lim.time_to_target_s:
            out["limit.time_to_target_s"] = lim.time_to_target_s
            out["train.fraction_of_limit"] = lim.time_to_target_s / tt
            if ref_t:
                out["limit.speedup"] = ref_t / lim.time_to_target_s
    return out
