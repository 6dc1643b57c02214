"""How far a plan's simulated figure can be trusted (docs/plans.md, "How far a plan can be trusted").

A simulator is judged by its error on measured plans; that error says something about a new plan only as far
as the new plan looks like those measured ones. This module gives a plan's **shape** (pipelines, stages,
data-parallel degree, micro-batches, global batch, TP degree, and whether a data-parallel group spans machines,
shares a machine, or mixes GPU types, whether a TP group spans machines, whether a pipeline mixes GPU types),
its **distance** to each measured plan the simulators were checked on (``measured/*/plan_config_*.json`` of
the shared Sailor data, and of the trial's own data directory where it has one), the features outside the
measured range, and each simulator's **error on the nearest measured plans**: computed by simulating those
plans with the same simulator (once per process: ``reference``), never copied from a table.

Distance: Euclidean over ``log2`` of the six counts (one doubling = 1) and the seven yes/no features
(``BOOL_WEIGHT`` each, a difference like a factor of 4 in a count). Two simulators disagree when no iteration
time lies within both figures' measured error (``disagreements``): figure ``a`` with error ``e`` allows a
true time ``T`` with ``|a / T - 1| <= e``.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.paths import shared_dir
from orchestrator.plan import LayeredProfile, Plan, Replica

COUNTS = ("pipelines", "stages", "dp", "tp", "micro_batches", "global_batch")
FLAGS = ("dp_across_machines", "dp_shares_machine", "dp_across_types", "dp_across_pipelines",
         "tp_across_machines", "stages_across_types", "unequal_pipelines")
BOOL_WEIGHT = 2.0
NEAREST = 2                  # measured plans whose error a plan is given
FLAG_TEXT = {"dp_across_machines": "DP across machines", "dp_shares_machine": "several DP replicas on one machine",
             "dp_across_types": "DP across GPU types", "dp_across_pipelines": "DP across pipelines",
             "tp_across_machines": "TP across machines", "stages_across_types": "stages on different GPU types",
             "unequal_pipelines": "unequal pipelines"}
COUNT_TEXT = {"pipelines": "pipelines", "stages": "stages", "dp": "DP degree", "tp": "TP degree",
              "micro_batches": "micro-batches", "global_batch": "global batch"}


@dataclass(frozen=True)
class Shape:
    """What a plan looks like to a simulator's error (each count the largest over the plan's stages)."""

    pipelines: int
    stages: int
    dp: int                  # replicas holding one layer, over all pipelines
    tp: int
    micro_batches: int       # per replica and iteration
    global_batch: int
    gpu_types: tuple[str, ...]
    dp_across_machines: bool
    dp_shares_machine: bool
    dp_across_types: bool
    dp_across_pipelines: bool
    tp_across_machines: bool
    stages_across_types: bool
    unequal_pipelines: bool

    def describe(self) -> str:
        flags = ", ".join(FLAG_TEXT[f] for f in FLAGS if getattr(self, f))
        return (f"{self.pipelines} pipeline{'s' if self.pipelines != 1 else ''} x {self.stages} stage"
                f"{'s' if self.stages != 1 else ''}, DP {self.dp}, TP {self.tp}, {self.micro_batches} micro-batch"
                f"{'es' if self.micro_batches != 1 else ''} of "
                f"batch {self.global_batch} on {'+'.join(self.gpu_types)}" + (f"; {flags}" if flags else ""))


def _machines(replicas: list[Replica]) -> tuple[int, bool]:
    """(machines a group of same-type replicas occupies, whether two of them share one), replicas packed
    ``node_gpus // tp`` to a machine (a TP group across machines occupies its own)."""
    r = replicas[0]
    per_node = max(1, r.node_gpus // max(1, r.tp)) if r.machines == 1 and r.tp <= r.node_gpus else 1
    machines = math.ceil(len(replicas) / per_node) * max(1, r.machines)
    return machines, per_node > 1 and len(replicas) > 1


def plan_shape(plan: Plan, global_batch: int) -> Shape:
    """The plan's shape at ``global_batch``."""
    per_layer: dict[int, list[tuple[Replica, ...]]] = {}
    stages_across_types = tp_across = False
    micro = 1
    for p, batch in zip(plan.pipelines, plan.batches(global_batch)):
        types: set[str] = set()
        for s in p.stages:
            types.update(r.gpu for r in s.replicas)
            tp_across |= any(r.machines > 1 or r.tp > r.node_gpus for r in s.replicas)
            micro = max(micro, math.ceil(batch / (s.dp * plan.mbs)))
            for layer in s.layers:
                per_layer.setdefault(layer, []).append(s.replicas)
        stages_across_types |= len(types) > 1
    across_m = shares = across_t = across_p = False
    dp = 1
    for groups in per_layer.values():
        members = [r for g in groups for r in g]
        dp = max(dp, len(members))
        across_p |= len(groups) > 1
        by_type: dict[tuple[str, str, int, int], list[Replica]] = {}
        for r in members:
            by_type.setdefault((r.gpu, r.zone, r.node_gpus, r.tp), []).append(r)
        across_t |= len({r.gpu for r in members}) > 1
        machines = 0
        for same in by_type.values():
            n, shared = _machines(same)
            machines += n
            shares |= shared
        across_m |= machines > 1
    sizes = [(len(p.stages), tuple(s.layers for s in p.stages), b) for p, b in zip(plan.pipelines, plan.batches(global_batch))]
    return Shape(len(plan.pipelines), max(len(p.stages) for p in plan.pipelines), dp,
                 max(r.tp for p in plan.pipelines for s in p.stages for r in s.replicas), micro, int(global_batch),
                 tuple(sorted({g for g, _ in plan.gpus_used()})), bool(across_m), bool(shares), bool(across_t),
                 bool(across_p), bool(tp_across), stages_across_types, len(set(sizes)) > 1)


def distance(a: Shape, b: Shape) -> float:
    """Euclidean over log2 of the counts and ``BOOL_WEIGHT`` per yes/no feature that differs."""
    d = sum((math.log2(max(1, getattr(a, c))) - math.log2(max(1, getattr(b, c)))) ** 2 for c in COUNTS)
    d += sum(BOOL_WEIGHT ** 2 for f in FLAGS if getattr(a, f) != getattr(b, f))
    return math.sqrt(d)


@dataclass(frozen=True)
class Measured:
    """One measured plan, its shape, and each simulator's figure of it (``None``: that simulator cannot)."""

    name: str                 # <set>/<plan>, e.g. gh200-opt-350/N8_D2
    shape: Shape
    real_s: float
    simulated_s: dict[str, float | None] = field(default_factory=dict)
    model: str = ""           # the model the plan trained

    def error(self, sim: str) -> float | None:
        t = self.simulated_s.get(sim)
        return None if t is None else float(t / self.real_s - 1.0)


def default_roots() -> tuple[Path, ...]:
    """The measured plans the simulators were checked on: the shared Sailor data."""
    return (shared_dir() / "workloads" / "sailor",)


def _model(root: Path, doc: dict[str, Any]) -> str:
    if "model" in doc:
        return str(doc["model"])
    for p in sorted((root / "cluster").glob("training_config_*.json")):
        return str(json.loads(p.read_text())["model"])
    return "OPT-350"


def _read_set(root: Path) -> list[tuple[str, Plan, dict[str, Any], LayeredProfile, GpuCluster]]:
    out: list[tuple[str, Plan, dict[str, Any], LayeredProfile, GpuCluster]] = []
    files = sorted(root.glob("measured/*/plan_config_*.json"))
    if not files:
        return out
    cluster = GpuCluster.from_directory(root)
    profiles: dict[str, LayeredProfile] = {}
    for f in files:
        try:
            doc = json.loads(f.read_text())
            if not doc.get("real") or not doc.get("gbs"):
                continue
            model = _model(root, doc)
            if model not in profiles:
                profiles[model] = LayeredProfile.from_directory(root, model)
            plan = Plan.from_sailor(doc, str(f))
            plan.check(profiles[model].num_layers)
        except (UserError, ValueError, KeyError, TypeError):
            continue                                   # a malformed measured plan is no reference
        out.append((f"{f.parent.name}/{f.stem.removeprefix('plan_config_')}", plan, doc, profiles[model], cluster))
    return out


@functools.lru_cache(maxsize=8)
def reference(roots: tuple[str, ...], sims: tuple[str, ...]) -> tuple[Measured, ...]:
    """Every measured plan under ``roots`` with its shape and each of ``sims``' figure of it: simulated once
    per process (a few tens of milliseconds for the 15 shared plans; docs/benchmarks/plans.md, "Trust")."""
    from orchestrator.planning.simulators import simulator

    engines = {name: simulator(name) for name in sims}
    out = []
    for root in roots:
        for name, plan, doc, profile, cluster in _read_set(Path(root)):
            figures: dict[str, float | None] = {}
            for sim, engine in engines.items():
                try:
                    figures[sim] = float(engine.estimate(plan, profile, cluster, int(doc["gbs"])).iteration_s)
                except (UserError, NotImplementedError, KeyError, ValueError):
                    figures[sim] = None            # a simulator that cannot judge this measured plan: no error
            out.append(Measured(name, plan_shape(plan, int(doc["gbs"])), float(doc["real"]), figures, profile.model))
    return tuple(out)


def measured_errors(sims: tuple[str, ...], roots: tuple[Path, ...] | None = None) -> dict[str, float]:
    """Each simulator's largest |error| over every measured plan (no plan given: the whole measured range)."""
    refs = reference(tuple(str(r) for r in roots or default_roots()), tuple(sims))
    out = {}
    for sim in sims:
        errs = [abs(e) for m in refs if (e := m.error(sim)) is not None]
        if errs:
            out[sim] = max(errs)
    return out


@dataclass
class Trust:
    """A plan's shape against the measured plans: the nearest ones and each simulator's error on them."""

    shape: Shape
    sim: str
    nearest: list[tuple[Measured, float]]            # (measured plan, distance), nearest first
    outside: list[str]                                 # features outside the measured range, in words
    errors: dict[str, float]                           # per simulator: its largest |error| on the nearest plans
    roots: tuple[Path, ...] = ()

    @property
    def distance(self) -> float:
        return self.nearest[0][1] if self.nearest else math.inf

    def line(self) -> str:
        """The summary's line."""
        head = f"trust: shape {self.shape.describe()}"
        if not self.nearest:
            return (f"{head}; no measured plan found under {', '.join(map(str, self.roots)) or '-'}: the error of "
                    f"this figure is unknown")
        names = ", ".join(m.name.rpartition("/")[2] for m, _ in self.nearest)
        errs = " / ".join(f"{100 * abs(e):.1f}%" if (e := m.error(self.sim)) is not None else "?" for m, _ in self.nearest)
        types = "+".join(sorted({g for m, _ in self.nearest for g in m.shape.gpu_types}))
        text = (f"{head}; nearest measured plans ({names}, distance {self.distance:.2f}) simulated within {errs} by the "
                f"{self.sim} simulator (measured on {types})")
        return text + ("; outside the measured range: " + ", ".join(self.outside) if self.outside
                       else "; inside the measured range")

    def metrics(self) -> dict[str, float]:
        out = {"plan.trust_distance": self.distance if self.nearest else -1.0,
               "plan.trust_outside": float(len(self.outside))}
        for sim, e in self.errors.items():
            key = "plan.nearest_error_pct" if sim == self.sim else f"plan.nearest_error_pct.{sim}"
            out[key] = 100.0 * e
        return out

    def tags(self) -> dict[str, str]:
        return {"plan.trust": self.line()[:4900],
                "plan.trust_nearest": ", ".join(m.name for m, _ in self.nearest) or "none",
                "plan.trust_outside": "; ".join(self.outside)[:4900] or "none"}


def outside_range(shape: Shape, refs: tuple[Measured, ...] | list[Measured]) -> list[str]:
    """The plan's features no measured plan has: a count beyond the measured ones' range, a yes/no feature
    no measured plan has, GPU types none was measured on."""
    if not refs:
        return []
    out = []
    for f in FLAGS:
        if getattr(shape, f) and not any(getattr(m.shape, f) for m in refs):
            out.append(FLAG_TEXT[f])
    for c in COUNTS:
        lo, hi = min(getattr(m.shape, c) for m in refs), max(getattr(m.shape, c) for m in refs)
        v = getattr(shape, c)
        if not lo <= v <= hi:
            out.append(f"{COUNT_TEXT[c]} {v} (measured: {lo}" + (f"-{hi})" if hi != lo else ")"))
    measured_types = sorted({g for m in refs for g in m.shape.gpu_types})
    new = [g for g in shape.gpu_types if g not in measured_types]
    if new:
        out.append(f"GPU type{'s' if len(new) > 1 else ''} {', '.join(new)} (measured: {', '.join(measured_types)})")
    return out


def assess(plan: Plan, global_batch: int, sim: str, others: tuple[str, ...] = (),
           roots: tuple[Path, ...] | None = None, exclude: str | None = None, precision: str = "fp32",
           model: str | None = None) -> Trust:
    """The plan's shape against the measured plans under ``roots`` (default: ``default_roots``), the nearest
    ``NEAREST`` of them (``exclude``: one left out, by name) and the errors of ``sim`` and ``others`` on them;
    a training ``precision`` other than the measured plans' (fp32), or a ``model`` none of them trained, is outside
    their range (their errors were measured on another model's layers)."""
    roots = tuple(roots or default_roots())
    sims = tuple(dict.fromkeys((sim, *others)))
    refs = [m for m in reference(tuple(str(r) for r in roots), sims) if m.name != exclude]
    shape = plan_shape(plan, global_batch)
    ranked = sorted(((m, distance(shape, m.shape)) for m in refs), key=lambda md: (md[1], md[0].name))
    nearest = [(m, d) for m, d in ranked if m.error(sim) is not None][:NEAREST]
    errors = {}
    for s in sims:
        errs = [abs(e) for m, _ in nearest if (e := m.error(s)) is not None]
        if errs:
            errors[s] = max(errs)
    outside = outside_range(shape, refs) + ([f"precision {precision} (measured: fp32)"] if precision != "fp32" else [])
    models = sorted({m.model for m in refs})
    if model is not None and refs and model not in models:
        outside.append(f"model {model} (measured: {', '.join(models)})")
    return Trust(shape, sim, nearest, outside, errors, roots)


def compare_simulators(est: Any, plan: Plan, profile: LayeredProfile, cluster: GpuCluster, batch: int,
                       metrics: dict[str, float], tags: dict[str, str]) -> None:
    """The plan's figure on every other registered simulator (``plan.iteration_s.NAME``), and where one of them
    finds it over memory while the trial's (``est``) does not, or the other way round, ``plan.fits_disagree``:
    each simulator has its own memory rule, and a plan 'fits' only as far as the rule that judged it."""
    from orchestrator.planning.simulators import simulator, simulator_names

    for other in simulator_names():
        if other == est.simulator:
            continue
        try:
            theirs = simulator(other).estimate(plan, profile, cluster, batch)
        except UserError as exc:
            tags[f"plan.iteration_s.{other}"] = f"not available: {exc}"[:400]
            continue
        metrics[f"plan.iteration_s.{other}"] = theirs.iteration_s
        if theirs.fits != est.fits:
            over = theirs if not theirs.fits else est
            tags["plan.fits_disagree"] = (f"the {est.simulator} simulator finds the plan {'fits' if est.fits else 'does not fit'} "
                                          f"in memory, the {other} simulator that it {'fits' if theirs.fits else 'does not'}: "
                                          f"{over.simulator}: {'; '.join(over.violations)}")[:1000]


def disagreements(sim: str, figures: dict[str, float], errors: dict[str, float], where: str) -> list[str]:
    """One sentence per other simulator whose figure and ``sim``'s cannot both be within their measured error
    (``errors``: |error| per simulator; ``where``: on which measured plans it was measured)."""
    mine, notes = figures.get(sim), list[str]()
    if mine is None or mine <= 0 or sim not in errors:
        return notes
    for other, theirs in sorted(figures.items()):
        if other == sim or other not in errors or not theirs > 0:
            continue
        e1, e2 = errors[sim], errors[other]
        lo = max(mine / (1 + e1), theirs / (1 + e2))
        hi = min(mine / (1 - e1) if e1 < 1 else math.inf, theirs / (1 - e2) if e2 < 1 else math.inf)
        if lo > hi:
            ratio = max(mine, theirs) / min(mine, theirs)
            notes.append(f"the {sim} simulator gives {mine:.4g} s, the {other} simulator {theirs:.4g} s: {ratio:.2f}x "
                         f"apart, beyond their measured error (within {e1:.1%} and {e2:.1%} {where}); trust neither figure")
    return notes
