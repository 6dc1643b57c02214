"""The single worker every data-parallel speedup is measured against.

A speedup over a baseline nobody would ship says little: a W=1 run at the ``train.lr`` the parallel runs
then scale up is under-tuned (issue 20 measured 1.65x between lr 0.1 and the best lr at W=1 on MNIST).
``train.reference=tuned`` (the default) therefore times one speed-1.0 worker, on the same clock, cost
model, data, target and evaluation cadence, for every (optimizer, lr) of ``train.reference_grid`` and
keeps the best median over the trial's seeds; ``train.reference=same`` keeps the trial's own optimizer
and lr (the comparison the tool used to make, still logged as ``train.speedup_same_settings``).

A grid is only as good as its edges: when an optimizer's best learning rate is the largest (smallest)
of its list, the tuning goes on past it, x2 (/2) at a time while that improves, at most
``train.reference_extend`` steps (issue 20 found Fashion-MNIST's best Adam lr at the top of the default
grid); the cells it added are in the grid's times like the others.

Each cell's seed runs stop once they pass the best median so far: they cannot win (a median below the best
needs more than half of its seeds below it), so the chosen cell is exactly the one an unpruned search
picks; a cell that stopped shows as missed (None) in the grid's times. The result is cached in the process and in the
tracking store: the trial's run carries ``train.reference_key`` (a hash of everything the reference
depends on) and the reference's tags, and a later trial with the same key reads them back instead of
recomputing (``source`` says which).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.execution.training import NullSink, TrainSettings
from orchestrator.sync.core import SyncOptions

PRUNE = 1.0     # a seed run stops at this multiple of its optimizer's best median so far (past it, it cannot win)


@dataclass
class Reference:
    time_to_target_s: float | None     # median over the seeds; None: not reached in the budget
    optimizer: str
    lr: float
    batch_size: int
    seeds: tuple[int, ...]
    times: tuple[float | None, ...]    # the chosen cell's time to target, per seed
    method: str                        # tuned | same
    grid: dict[str, float | None] = field(default_factory=dict)   # "sgd lr=0.1" -> median (tuned)
    source: str = "computed"           # computed | process cache | store (run ID)

    def describe(self) -> str:
        seeds = ",".join(str(s) for s in self.seeds)
        where = f"; {self.source}" if self.source != "computed" else ""
        what = ("tuned over train.reference_grid" if self.method == "tuned" else "the trial's own optimizer and lr")
        return (f"one speed-1.0 worker, {what}: {self.optimizer} lr={self.lr:g}, batch {self.batch_size}, "
                f"seeds {seeds}{where}")

    def tags(self) -> dict[str, str]:
        return {"train.reference": self.describe(), "train.reference_method": self.method,
                "train.reference_optimizer": self.optimizer, "train.reference_lr": repr(self.lr),
                "train.reference_batch_size": str(self.batch_size),
                "train.reference_seeds": ",".join(str(s) for s in self.seeds),
                "train.reference_time_to_target": repr(self.time_to_target_s),
                "train.reference_times": json.dumps(list(self.times)),
                "train.reference_grid_times": json.dumps(self.grid)}

    @classmethod
    def from_tags(cls, tags: dict[str, str], source: str) -> Reference:
        t = tags["train.reference_time_to_target"]
        return cls(None if t == "None" else float(t), tags["train.reference_optimizer"],
                   float(tags["train.reference_lr"]), int(tags["train.reference_batch_size"]),
                   tuple(int(s) for s in tags["train.reference_seeds"].split(",")),
                   tuple(json.loads(tags["train.reference_times"])), tags["train.reference_method"],
                   json.loads(tags["train.reference_grid_times"]), source)


def check_grid(grid: Any) -> dict[str, list[float]]:
    """``train.reference_grid`` as {optimizer: [lr, ...]}; a one-line error for anything else."""
    from orchestrator.errors import ConfigError
    from orchestrator.execution.optim import OPTIMIZERS

    if dataclasses.is_dataclass(grid):
        grid = dataclasses.asdict(grid)  # type: ignore[arg-type]
    out: dict[str, list[float]] = {}
    for name, lrs in dict(grid or {}).items():
        if name not in OPTIMIZERS:
            raise ConfigError(f"train.reference_grid: unknown optimizer {name!r} (accepted: {', '.join(OPTIMIZERS)})")
        try:
            vals = [float(v) for v in lrs]
        except (TypeError, ValueError):
            raise ConfigError(f"train.reference_grid.{name}={lrs!r} must be a list of learning rates") from None
        if not all(math.isfinite(v) and v > 0 for v in vals):
            raise ConfigError(f"train.reference_grid.{name}={vals!r} needs learning rates > 0")
        if vals:
            out[str(name)] = vals
    return out


def median_time(times) -> float | None:
    """The median of per-seed times to target, a missed target counting as infinitely slow."""
    m = statistics.median(math.inf if t is None else t for t in times)
    return None if math.isinf(m) else float(m)


def cells(settings: TrainSettings, method: str, grid: dict[str, list[float]]) -> list[tuple[str, float]]:
    """The (optimizer, lr) candidates: the grid (the trial's own pair first: its time is the untuned
    comparison), or only the trial's own."""
    own = (settings.optimizer, float(settings.lr))
    if method == "same":
        return [own]
    rest = [(o, float(lr)) for o, lrs in grid.items() for lr in lrs if (o, float(lr)) != own]
    # the most promising first (the own optimizer, nearest lr first), so that the pruning cuts an optimizer's
    # other cells short; the order cannot change the result, only its cost
    rest.sort(key=lambda c: (c[0] != own[0], abs(math.log(c[1] / own[1])) if own[1] > 0 else 0.0))
    return [own] + rest


def key(settings: TrainSettings, method: str, grid: dict[str, list[float]], base: Any, model: str, data: str,
        extend: int = 0) -> str:
    """A hash of everything the reference depends on (the cache key)."""
    s = dataclasses.replace(settings, optimizer="", lr=0.0, stop="target")  # the grid decides these
    # tuned: the grid's cells only, not the trial's own (optimizer, lr): trials of an lr sweep share one
    # reference (the own cell, needed for the untuned comparison, is measured on top of a cached one)
    own = [(settings.optimizer, float(settings.lr))] if method == "same" else []
    grid_cells = sorted((o, float(lr)) for o, lrs in grid.items() for lr in lrs) if method == "tuned" else []
    parts: list[Any] = [dataclasses.asdict(s), method, own + grid_cells, repr(base), model, data]
    if extend and method == "tuned":
        parts.append({"extend": extend})
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


_CACHE: dict[str, Reference] = {}


def edge_step(times: dict[float, float | None]) -> float | None:
    """The next learning rate past the edge of a tuned list, or None: x2 when the best median so far is
    the largest lr tried, /2 when it is the smallest (of at least two), otherwise (an interior optimum,
    or every cell missed) none. ``times`` maps each lr tried to its median (None: missed)."""
    done = {lr: t for lr, t in times.items() if t is not None}
    if not done or len(times) < 2:
        return None
    best = min(done, key=lambda lr: done[lr])
    if best == max(times):
        return best * 2
    if best == min(times):
        return best / 2
    return None


def extend_past_edge(times: dict[float, float | None], run: Callable[[float], float | None], steps: int) -> None:
    """Go on past an edge of a tuned lr list (``edge_step``) while it improves, at most ``steps`` cells;
    ``run(lr)`` measures one cell and returns its median, which is added to ``times``."""
    for _ in range(steps):
        nxt = edge_step(times)
        if nxt is None or nxt in times:
            return
        times[nxt] = run(nxt)


class _Tuning:
    """The cells of one reference search, each timed over the trial's seeds on one speed-1.0 worker:
    the grid's medians so far and the best cell (median, optimizer, lr, per-seed times)."""

    def __init__(self, opts, ctx, base, seeds: tuple[int, ...], found: Reference | None):
        self.ctx, self.base, self.seeds = ctx, base, seeds
        self.runtimes = {seed: _runtime(ctx, seed) for seed in seeds}
        self.ropts = reference_options(opts)
        self.best: tuple[float, str, float, tuple] | None = None
        self.table: dict[str, float | None] = {}
        self.seed_times: dict[str, tuple] = {}        # the cells timed here, each seed's time
        self.per_opt: dict[str, dict[float, float | None]] = {}
        if found is not None:
            self.table.update(found.grid)

    def run_cell(self, optimizer: str, lr: float, grid: bool = True) -> float | None:
        """One cell's median time to target; its seed runs stop past the best median so far of the grid's cells of
        the same optimizer (``PRUNE``): each optimizer's list is searched as if unpruned, so the edge rule
        (``extend_past_edge``) sees where its best lr is, whichever optimizer ran first (a pruned optimizer showed no
        edge, and a trial's own optimizer decided the reference). ``grid``: a cell of the grid or past its edge (the
        trial's own cell, when it is not one, is timed but not part of the search)."""
        from orchestrator.sync.strategy import SingleWorker
        from orchestrator.sync.virtual import VirtualRun

        s = self.ctx.settings
        done = [t for t in self.per_opt.get(optimizer, {}).values() if t is not None]
        times = []
        for seed in self.seeds:
            rt, theta0 = self.runtimes[seed]
            rt.set_flat(theta0)
            limit = min(done) * PRUNE if done else None
            budget = limit if s.budget_s is None or limit is None else min(limit, s.budget_s)
            rs = dataclasses.replace(s, optimizer=optimizer, lr=lr, seed=seed, stop="target", seeds=1, budget_s=budget)
            times.append(VirtualRun(SingleWorker(), self.ropts, rs, rt, self.ctx.dataset, self.base,
                                    NullSink()).run()[0].time_to_target_s)
        med = median_time(times)
        self.table[f"{optimizer} lr={lr:g}"] = med
        self.seed_times[f"{optimizer} lr={lr:g}"] = tuple(times)
        if grid:         # the trial's own cell off the grid: its untuned comparison only, never the reference (the
            self.enter(optimizer, lr)   # trials of a sweep over lr would each get their own, and would not compare)
        return med

    def enter(self, optimizer: str, lr: float) -> None:
        """A timed cell into the search: its optimizer's list and the best so far."""
        label = f"{optimizer} lr={lr:g}"
        med = self.table[label]
        self.per_opt.setdefault(optimizer, {})[lr] = med
        if med is not None and (self.best is None or med < self.best[0]):
            self.best = (med, optimizer, lr, self.seed_times[label])

    def run_all(self, todo: list[tuple[str, float]], own_in_grid: bool = True) -> None:
        """The cells in order; the first is the trial's own (``own_in_grid``: also a cell of the grid)."""
        from orchestrator.progress import Bar

        bar = Bar(bool(getattr(self.ctx, "show_progress", False)), len(todo), "reference: one speed-1.0 worker, tuning",
                  "cell")
        try:
            for i, (optimizer, lr) in enumerate(todo):
                bar.update(0, cell=f"{optimizer} lr={lr:g}")
                self.run_cell(optimizer, lr, grid=i > 0 or own_in_grid)
                best = self.best
                bar.update(1, best="-" if best is None else f"{best[1]} lr={best[2]:g} {best[0]:.3g} s")
        finally:
            bar.close()

    def extend(self, grid: dict[str, list[float]], steps: int) -> None:
        """Past the edge of each optimizer's lr list (``extend_past_edge``)."""
        for optimizer in grid:
            def step(lr: float, optimizer: str = optimizer) -> float | None:
                if f"{optimizer} lr={lr:g}" in self.seed_times:   # the trial's own cell, timed already: now on the grid
                    self.enter(optimizer, lr)
                    return self.table[f"{optimizer} lr={lr:g}"]
                print(f"reference: {optimizer}'s best lr is at the edge of the grid; trying lr={lr:g}", flush=True)
                return self.run_cell(optimizer, lr)

            extend_past_edge(self.per_opt.setdefault(optimizer, {}), step, steps)

    def merged(self, found: Reference) -> Reference:
        """The cached reference, its grid's times now with this trial's own cell (which does not change it)."""
        return dataclasses.replace(found, grid=self.table)

    def result(self, own: tuple[str, float], method: str) -> Reference:
        best, s = self.best, self.ctx.settings
        own_time = self.table.get(f"{own[0]} lr={own[1]:g}")
        if best is None and own_time is not None and method == "tuned":   # no cell of the grid reached the target
            print("reference: no cell of train.reference_grid reached the target; the trial's own optimizer and lr "
                  "is the reference (widen the grid)", flush=True)
            return Reference(own_time, own[0], own[1], s.batch_size, self.seeds, (), "same", self.table)
        if best is None:
            return Reference(None, own[0], own[1], s.batch_size, self.seeds, (), method, self.table)
        return Reference(best[0], best[1], best[2], s.batch_size, self.seeds, best[3], method, self.table)


def reference(opts, ctx, base, grid: dict[str, list[float]] | None, method: str = "tuned",
              extend: int = 0) -> Reference:
    """The reference of the trial ``ctx`` (its settings, model, data) with the compute model ``base``;
    ``opts`` is the trial's ``SyncOptions`` (the reference keeps only its network-free, W=1 part)."""
    s = ctx.settings
    grid = check_grid(grid)
    ds = ctx.dataset
    data = f"{getattr(ds, 'source', '?')}:{len(ds.y_train)}:{len(ds.y_test)}"
    k = key(s, method, grid, base, str(getattr(ctx.model, "name", "?")), data, extend)
    found = dataclasses.replace(_CACHE[k], source="process cache") if k in _CACHE else _from_store(ctx.sink, k)
    seeds = tuple(s.seed + i for i in range(s.seeds))
    todo = cells(s, method, grid)
    if found is not None:
        _CACHE.setdefault(k, found)
        if f"{todo[0][0]} lr={todo[0][1]:g}" in found.grid:
            _record(ctx.sink, k, found)
            return found
        todo = todo[:1]          # the cached grid lacks this trial's own cell: measure that one only
    elif method == "tuned":
        print(f"reference: one speed-1.0 worker, tuning {len(todo)} (optimizer, lr) cells x {len(seeds)} seed(s) "
              "(cached in the tracking store for the next trial)", flush=True)
    tuning = _Tuning(opts, ctx, base, seeds, found)
    # the own cell is the reference under train.reference=same; under tuned, only where it is a cell of the grid
    tuning.run_all(todo, own_in_grid=method == "same" or todo[0] in {(o, float(lr)) for o, lrs in grid.items() for lr in lrs})
    if found is not None:
        ref = tuning.merged(found)
    else:
        if method == "tuned":
            tuning.extend(grid, extend)
        ref = tuning.result(todo[0], method)
    _CACHE[k] = ref
    _record(ctx.sink, k, ref)
    return ref


def reference_options(opts: SyncOptions) -> SyncOptions:
    """One worker of speed 1.0, no stragglers: the single-worker baseline for speedups."""
    from orchestrator.config.hardware import Stragglers
    from orchestrator.sync.strategy import SingleWorker

    return dataclasses.replace(opts, name=SingleWorker.name, speeds=[1.0], staleness=0.0, network=None,
                               sync=dataclasses.replace(opts.sync, balance="none"),
                               train=dataclasses.replace(opts.train, batch_policy="per_worker"),
                               hardware=dataclasses.replace(opts.hardware, stragglers=Stragglers(), speed_changes=()))


def for_trial(opts: SyncOptions, ctx, base):
    """The trial's reference with the compute model ``base``: tuned over ``train.reference_grid``
    unless ``train.reference=same`` (the run's validated ``train`` group, ``opts.train``)."""
    train = opts.train
    return reference(opts, ctx, base, train.reference_grid, train.reference, train.reference_extend)


def same_settings_time(ref: Reference, settings: TrainSettings) -> float | None:
    """The untuned comparison's reference time, read from the grid (the trial's own cell is always in it)."""
    return ref.grid.get(f"{settings.optimizer} lr={float(settings.lr):g}")


def _runtime(ctx, seed: int):
    from orchestrator.execution.runtime import ModelRuntime

    rt = ModelRuntime(ctx.model, seed=seed, lr=ctx.settings.lr)
    return rt, rt.get_flat()


def _from_store(sink, k: str) -> Reference | None:
    """A reference an earlier trial of this experiment computed with the same key, or None."""
    client, exp = getattr(sink, "client", None), getattr(sink, "experiment_id", None)
    if client is None or exp is None:
        return None
    try:
        runs = client.search_runs([exp], filter_string=f"tags.`train.reference_key` = '{k}'", max_results=1)
    except Exception:  # the cache is an optimisation: a store that cannot answer means computing it
        return None
    if not runs:
        return None
    try:
        return Reference.from_tags(runs[0].data.tags, f"store (run {runs[0].info.run_id})")
    except (KeyError, ValueError):
        return None


def _record(sink, k: str, ref: Reference) -> None:
    """The reference on the trial's run (what a later trial's ``_from_store`` reads); the key last, so
    that a run that carries it carries the whole reference."""
    sink.set_tags(ref.tags())
    sink.set_tags({"train.reference_key": k})
