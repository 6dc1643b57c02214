"""The statistical limit of synchronous data parallelism on a trial's cluster (issue 30; issue 44 item 6).

**The statistical limit** (Shallue et al. 2019; McCandlish et al. 2018): a global batch G needs S(G)
updates to the target (bulk-synchronous SGD at G: G/B equal workers of batch B, with the strategies' lr schedule,
``train.lr_scaling`` from lr at B to G after a warm-up of ``train.warmup_updates``, on the trial's seeds and
evaluation cadence in samples; tried with the optimizer and lr of every configuration the limit is set beside:
the tuned reference's, the trial's own and the comparison's, each x {1, 2, 1/2}, the smaller one skipped
when the larger won, a cell two of them share run once; S(64) is the reference itself; each run stops once it
cannot beat the best S(G) x T so far; the best cell is then run again on ``LIMIT_SEEDS`` = 3 seeds at least, and
its median is the limit, its fastest and slowest seed the spread: a minimum over a grid of one-seed cells is
biased low, and a figure beside the limit that beats its fastest seed is reported as the limit being wrong
by that much, ``limit.beaten_by_*``), and one synchronous step of
G on the k fastest workers takes T_k(G) = max_i t(b_i, v_i) + allreduce(model bytes, k) with b split so
that they finish together (``costmodel.balanced_batches``). The limit is
``min over (G, k) of S(G) x T_k(G)``, G = 64, 128, ... up to min(512, W x train.batch_size): the best
time to target synchronous data parallelism reaches on this cluster at any of these batches. A
strategy past it got there with fewer updates than S(G) says.

Cached like the comparison (``sync.figures``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from orchestrator.execution.training import NullSink
from orchestrator.sync.figures import Figure, cluster_key, key_hash, lookup, record
from orchestrator.sync.reference import PRUNE, median_time, reference_options
from orchestrator.sync.strategy import CollectiveStrategy

MAX_LIMIT_BATCH = 512
LIMIT_SEEDS = 3      # the limit's best cell is measured on at least this many seeds (its spread)


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


@dataclass(frozen=True)
class Candidate:
    """An optimizer and learning rate (at ``train.batch_size``) that the limit's S(G) tries at every G: the
    tuned worker's, the trial's own, the comparison's (the configurations the limit is set beside)."""

    optimizer: str
    lr: float
    who: str


def candidates(ref: Any, ctx: Any, strategy_name: str, compared: tuple[str, Any] | None) -> list[Candidate]:
    """The tuned worker's, the trial's and the comparison's (``compared``: its name and settings) (optimizer, lr),
    each once."""
    out = [Candidate(ref.optimizer, float(ref.lr), "the tuned worker"),
           Candidate(ctx.settings.optimizer, float(ctx.settings.lr), strategy_name)]
    if compared is not None:
        out.append(Candidate(compared[1].optimizer, float(compared[1].lr), compared[0]))
    seen: dict[tuple[str, float], Candidate] = {}
    for c in out:
        seen.setdefault((c.optimizer, c.lr), c)
    return list(seen.values())


def _lr_grid(c: Candidate) -> list[float]:
    """The lrs (at batch B; the run scales them to G by ``train.lr_scaling``) tried for a candidate."""
    return [c.lr, c.lr * 2, c.lr / 2]


def statistical_limit(opts: Any, ctx: Any, ref: Any, cm: Any, cands: list[Candidate] | None = None) -> Figure | None:
    """The limit of synchronous data parallelism on the trial's cluster (the module's doc), S(G) tried with
    every candidate's optimizer and its lr scaled to G (x 1, 2, 1/2), on the trial's seeds; its spread is
    the best cell's fastest and slowest seed. None without a reference time."""
    from orchestrator.sync.costmodel import ComputeModel

    if ref is None or ref.time_to_target_s is None or not isinstance(cm, ComputeModel):
        return None
    s = ctx.settings
    cands = cands or [Candidate(ref.optimizer, float(ref.lr), "the tuned worker")]
    Gs = batches(opts.workers, s.batch_size)
    k = key_hash(["limit", cluster_key(opts, ctx), dataclasses.asdict(dataclasses.replace(s, lr=0.0, optimizer="")),
               ref.optimizer, ref.lr, ref.time_to_target_s, repr(cm), Gs]
              + [[c.optimizer, c.lr] for c in cands] + [LIMIT_SEEDS, "synchronous-S(G)"]
              + ([["jitter", opts.hardware.jitter_sigma]] if opts.hardware.jitter_sigma else []))  # its label names it
    found = lookup(ctx.sink, "limit", k)
    if found is not None:
        record(ctx.sink, "limit", k, found)
        return found
    print(f"limit: S(G) for G = {', '.join(str(g) for g in Gs[1:])} (G = {Gs[0]}: the tuned worker's own) with "
          f"{', '.join(f'{c.optimizer} lr={c.lr:g} ({c.who})' for c in cands)} x 1, 2, 1/2 "
          "(cached in the tracking store)", flush=True)
    fig = _SGrid(opts, ctx, ref, cm).search(Gs, cands)
    record(ctx.sink, "limit", k, fig)
    return fig


class BulkSynchronous(CollectiveStrategy):
    """The runs of S(G): every round averages the gradients of equal workers, weighted by batch, one step of the
    global batch at ``train.lr_scaling``'s lr (``CollectiveStrategy``'s defaults: what balanced allreduce computes)."""

    name = "bulk-synchronous"


class _SGrid:
    """S(G) x T_k(G) over the batches and candidates on the trial's seeds; then the best cell again on
    ``LIMIT_SEEDS`` seeds at least: the limit is that cell's median, its spread the fastest and slowest seed."""

    def __init__(self, opts: Any, ctx: Any, ref: Any, cm: Any):
        self.opts, self.ctx, self.ref, self.cm, s = opts, ctx, ref, cm, ctx.settings
        self.ropts = reference_options(opts)
        self.seeds = [s.seed + i for i in range(s.seeds)]
        self.rts: dict[int, Any] = {}
        self.theta0: dict[int, Any] = {}
        self.samples_budget = (s.budget_updates or 3000) * s.batch_size
        self.nbytes = 4.0 * int(ctx.model.new_model().count_params())
        self.best_t = ref.time_to_target_s
        # the best cell: (G, optimizer, lr, step time, per-seed updates); the tuned worker's to begin with
        self.best: tuple[int, str, float, float, list[float | None]] = (
            s.batch_size, ref.optimizer, float(ref.lr), cm.time(s.batch_size, 1.0),
            [None if t is None else t / cm.time(s.batch_size, 1.0) for t in ref.times])
        self.where = f"G={s.batch_size} on 1 worker (the tuned worker itself)"

    def runtime(self, seed: int) -> Any:
        if seed not in self.rts:
            from orchestrator.execution.runtime import ModelRuntime

            self.rts[seed] = ModelRuntime(self.ctx.model, seed=seed, lr=self.ref.lr)
            self.theta0[seed] = self.rts[seed].get_flat()
        return self.rts[seed]

    def updates(self, G: int, optimizer: str, lr: float, cap: int, seeds: list[int]) -> list[float | None]:
        """Rounds to the target of bulk-synchronous SGD at global batch G: G / B equal workers of batch B under
        the allreduce rule, so that the lr (``lr`` at B, scaled to G by ``train.lr_scaling``), its warm-up and
        the evaluation cadence are those of the strategies the limit is set beside (one worker at batch G with
        the scaled lr from its first step needs more updates: Adam's early steps want the warm-up)."""
        from orchestrator.sync.virtual import VirtualRun

        s, w = self.ctx.settings, max(1, G // self.ctx.settings.batch_size)
        strat = BulkSynchronous()
        o = dataclasses.replace(self.ropts, name=BulkSynchronous.name, speeds=[1.0] * w)
        ups: list[float | None] = []
        for seed in seeds:
            rt = self.runtime(seed)
            rt.set_flat(self.theta0[seed])
            rs = dataclasses.replace(s, lr=lr, optimizer=optimizer, seed=seed, seeds=1, stop="target", budget_s=None,
                                     budget_updates=cap * w)
            r, _ = VirtualRun(strat, o, rs, rt, self.ctx.dataset, self.cm, NullSink()).run()
            ups.append(r.updates_to_target)
        return ups

    def search(self, Gs: list[int], cands: list[Candidate]) -> Figure:
        s = self.ctx.settings
        for G in Gs[1:]:
            T, kbest = step_time(list(self.opts.speeds), G, self.cm, self.nbytes, self.opts.network)
            done: dict[tuple[str, float], float | None] = {}   # a cell two candidates share runs once
            for c in cands:
                tried: dict[float, float | None] = {}
                lr0, up, down = _lr_grid(c)
                for lr in (lr0, up, down):
                    t_up, t0 = tried.get(up), tried.get(lr0)
                    if lr == down and t_up is not None and (t0 is None or t_up < t0):
                        continue                 # the larger lr won: the smaller is not tried
                    if (c.optimizer, round(lr, 12)) in done:
                        tried[lr] = done[(c.optimizer, round(lr, 12))]
                        continue
                    cap = int(min(self.samples_budget // G, PRUNE * self.best_t / T + 1))
                    if cap < 1:
                        continue
                    ups = self.updates(G, c.optimizer, lr, cap, self.seeds)
                    med = tried[lr] = done[(c.optimizer, round(lr, 12))] = median_time(ups)
                    if med is not None and med * T < self.best_t:
                        self.best_t, self.best = med * T, (G, c.optimizer, lr, T, ups)
                        self.where = (f"G={G} on the {kbest} fastest worker(s), {c.optimizer} lr={lr:.3g} at batch "
                                      f"{s.batch_size}, {self.opts.train.lr_scaling}-scaled")
        spread, n = self.widen()
        names = ", ".join(f"{c.optimizer} lr={c.lr:g}" for c in cands)
        nominal = nominal_note(self.opts.hardware)
        return Figure(self.best_t, f"synchronous, {self.where}; S(G) measured for G = {', '.join(str(g) for g in Gs)} "
                                   f"with {names} x 1, 2, 1/2 (scaled to G as the strategies scale it), the best cell's "
                                   f"median of {n} seeds{nominal}", spread=spread)

    def widen(self) -> tuple[tuple[float, float], int]:
        """The best cell on ``LIMIT_SEEDS`` seeds at least (its median becomes the limit): a one-seed minimum
        over a grid is biased low, and a spread needs more than one seed."""
        G, optimizer, lr, T, ups = self.best
        extra = [self.seeds[-1] + 1 + i for i in range(max(0, LIMIT_SEEDS - len(ups)))]
        if extra:
            ups = ups + self.updates(G, optimizer, lr, max(1, self.samples_budget // G), extra)
        times = [math.inf if u is None else u * T for u in ups]
        med = median_time([None if math.isinf(t) else t for t in times])
        if med is not None:
            self.best_t = med
        return (min(times), max(times)), len(times)


def nominal_note(hw: Any) -> str:
    """What the limit's step time T_k(G) leaves out of the trial's hardware (it takes the nominal speeds): the
    limit is then an upper bound, loose on that cluster; '' where nothing is left out."""
    noisy = [what for what, on in (("stragglers", hw.stragglers.probability > 0 and hw.stragglers.slowdown > 1),
                                   ("jitter", hw.jitter_sigma > 0), ("speed changes", bool(hw.speed_changes))) if on]
    return f"; T_k(G) at the nominal speeds, without the {' and '.join(noisy)}: an upper bound, loose here" if noisy else ""


def limit_metrics(lim: Figure, tt: float, ref_t: float | None, compare_t: float | None) -> dict[str, float]:
    """The limit's figures and, for the trial and the comparison, by how much a time beats the limit's
    fastest seed (``limit.beaten_by_trial`` / ``limit.beaten_by_compare``: limit's fastest seed / time - 1,
    > 0 when the limit is wrong beyond its spread)."""
    assert lim.time_to_target_s
    out = {"limit.time_to_target_s": lim.time_to_target_s, "train.fraction_of_limit": lim.time_to_target_s / tt}
    lo = lim.spread[0] if lim.spread is not None else lim.time_to_target_s
    if lim.spread is not None:
        out["limit.fastest_seed_s"], out["limit.slowest_seed_s"] = lim.spread
    if ref_t:
        out["limit.speedup"] = ref_t / lim.time_to_target_s
    for who, t in (("trial", tt), ("compare", compare_t)):
        if t and math.isfinite(lo) and t < lo:
            out[f"limit.beaten_by_{who}"] = lo / t - 1.0
    return out
