"""Layer times of GPU types nobody profiled, derived from their datasheet (``hardware.catalog``) with a roofline whose
efficiencies are fitted on the measured types of a layered profile. Formulas and their sources: docs/plans.md,
"GPU types nobody profiled"; the error on a type left out of the fit: docs/benchmarks/derived_profiles.md.

Per sample, a decoder layer's work is counted from the training config (hidden h, sequence s, heads a, vocab V,
FFN 4h; Megatron-style TP of degree t splits the matmuls, the attention scores and the FFN, not the layer norms,
residuals and dropouts on the hidden state):

- linear matmul FLOPs ``F`` (2 per multiply-add): block forward ``24 s h^2 / t``, backward twice that; head forward
  ``2 s h V / t``, backward twice; embedding none;
- attention matmuls (``Q K^T``, ``P V`` and their gradients), FLOPs ``F_a`` and bytes ``B_a``: forward ``4 s^2 h / t``
  and ``4 (2 a s^2 + 4 s h) / t``, backward ``8 s^2 h / t`` and ``4 (4 a s^2 + 8 s h) / t`` (about 30 FLOP per byte:
  memory-bound on tensor cores, compute-bound on plain fp32, by the type's ``P / W``);
- elementwise bytes ``B`` (fp32, kernel by kernel, unfused: softmax, dropout with its mask, GELU, layer norms,
  residual adds, head permutes): block forward ``4 (4.25 a s^2 / t + 16 s h / t + 14.5 s h)``, backward
  ``4 (5.25 a s^2 / t + 20 s h / t + 16.5 s h)``; head forward ``4 (3 s V / t + 2 s h)``, backward
  ``4 (2 s V / t + 3 s h)``; embedding forward ``4 x 6.25 s h``, backward ``4 x 2 s h``.

Seconds of one micro-batch of ``m`` samples on a type with matmul rate ``P`` (``DeviceKind.matmul_flops``) and memory
bandwidth ``W``, for each (phase, kind of layer):
``t = max(f, c + (F m / P + max(F_a m / P, B_a m / W)) / eta_mm + B m / (eta_mem W) + l n_ar + k n_ar 2 (t-1)
+ n_ar ring(link, 4 m s h, t))``, where ``n_ar`` is the layer's TP all-reduces in that phase
(``LayeredProfile.tp_allreduces``, halved per phase; 0 at TP 1), ``ring`` the ring all-reduce over the type's
intra-node link (``hardware.links.ring_allreduce_time``), ``l`` a latency per all-reduce call, ``f`` the host's floor
(a layer waits at least for the host to issue its kernels), and ``c``, ``1/eta_mm``, ``1/eta_mem``, ``l``, ``k`` >= 0
(and the ring's weight, 1 where no fitted row has TP) are fitted by non-negative least squares on the relative error
over the measured types, ``f`` with them (``_lsq_floored``).
The optimizer step (the same on every layer of one (mbs, TP), as the profiles hold it): ``c_u + 16 N / t / (eta_u W)``
for ``N`` parameters of the model (Adam in fp32: about 16 bytes read and written per parameter).
Memory: a derived type holds the profile's parameter and activation sizes (they do not depend on the GPU) in the
catalog's capacity.
Precision (``at_precision``): at bf16/fp16/fp8, ``P`` is the type's rate at that precision and ``B`` and the ring's
message (and ``B_a``) are scaled by ``ACT_BYTES[precision] / 4``; each entry is carried by the ratio of the model at the precision to
the model at the profile's own.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy.optimize import nnls

from orchestrator.config.choices import TRAINING_PRECISIONS
from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.catalog import GpuCatalog, default_catalog
from orchestrator.hardware.cost import roofline_s
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.links import Link, ring_allreduce_time
from orchestrator.hardware.profiles import DeviceKind
from orchestrator.plan.profile import LayeredProfile

PHASES = ("fwd", "bwd")
# Bytes of an activation element at each training precision: mixed precision (bf16, fp16) keeps activations in 16
# bits; fp8 training (Transformer Engine) casts only the matmuls' inputs to 8 bits and keeps activations in 16.
ACT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
assert tuple(ACT_BYTES) == TRAINING_PRECISIONS
KINDS = ("embedding", "block", "head")
# The matmul efficiency's prior: the fraction of the datasheet rate that a large matmul reached on the measured
# H200 (h200-measured.json: fp32 50.9 of 67, tf32 357.9 of 494.5 TFLOP/s: 0.76, 0.72), weighted as a share of the rows.
MATMUL_PRIOR = 0.74
PRIOR_WEIGHT = 0.3
# The columns of the fit: seconds per layer = sum of coefficient x column (module docstring).
COLUMNS = ("fixed", "matmul", "memory", "tp_call", "ring_step", "ring")
RING = COLUMNS.index("ring")
TimeTable = dict[int, dict[int, tuple[tuple[float, float, float], ...]]]
LinkFor = Callable[[str, int], Link]


@dataclass(frozen=True)
class Shape:
    """What the work counts need of a decoder model (from the profile's training config)."""

    hidden: int
    sequence: int
    heads: int
    vocab: int
    params: float                       # parameters of the whole model at TP 1

    @classmethod
    def of(cls, profile: LayeredProfile) -> Shape:
        train = (profile.extra or {}).get("training_config") or {}
        if not profile.hidden or not profile.sequence:
            raise WorkloadError(f"model {profile.model}: deriving a GPU type needs hidden_size and sequence_length "
                                "(cluster/training_config_*.json)")
        h, s = int(profile.hidden), int(profile.sequence)
        sizes = profile.layer_sizes(1)
        vocab = int(train.get("vocab_size") or round(sizes.params[-1] / h))
        return cls(h, s, int(train.get("heads") or max(1, h // 64)), vocab, float(sum(sizes.params)))


def kind(profile: LayeredProfile, layer: int) -> str:
    return "embedding" if layer == 0 else "head" if layer == profile.num_layers - 1 else "block"


class Work(NamedTuple):
    """What one sample costs in a layer: FLOPs of its linear matmuls, bytes of its elementwise kernels, FLOPs and
    bytes of its attention matmuls (the scores ``Q K^T`` and ``P V``, and their gradients)."""

    flops: float
    nbytes: float
    att_flops: float = 0.0
    att_bytes: float = 0.0


def work(shape: Shape, what: str, phase: str, tp: int) -> Work:
    """The ``Work`` of one sample through a layer of kind ``what`` (module docstring)."""
    h, s, a, v, t = shape.hidden, shape.sequence, shape.heads, shape.vocab, tp
    if what == "embedding":
        return Work(0.0, 4.0 * (6.25 if phase == "fwd" else 2.0) * s * h)
    if what == "head":
        f = 2.0 * s * h * v / t
        return Work(f, 4.0 * (3 * s * v / t + 2 * s * h)) if phase == "fwd" else Work(2 * f, 4.0 * (2 * s * v / t + 3 * s * h))
    f, fa = 24.0 * s * h * h / t, 4.0 * s * s * h / t
    if phase == "fwd":
        return Work(f, 4.0 * (4.25 * a * s * s / t + 16 * s * h / t + 14.5 * s * h), fa, 4.0 * (2 * a * s * s + 4 * s * h) / t)
    return Work(2 * f, 4.0 * (5.25 * a * s * s / t + 20 * s * h / t + 16.5 * s * h), 2 * fa,
                4.0 * (4 * a * s * s + 8 * s * h) / t)


def features(profile: LayeredProfile, shape: Shape, spec: DeviceKind, link: Link | None, layer: int, phase: str,
             mbs: int, tp: int, precision: str = "fp32") -> list[float]:
    """The columns of the fit (``COLUMNS``) for one (layer, phase, mbs, tp) on ``spec``: [1, matmul s, memory s, TP
    calls, ring steps, all-reduce s], at ``precision``: its matmul rate, and activations of ``ACT_BYTES[precision]``
    instead of 4 bytes. The matmul seconds are at 100% of the datasheet through the cost core's roofline: the linear
    matmuls' FLOPs, plus the attention matmuls' roofline (compute- or memory-bound by their arithmetic intensity
    against the type's ``P / W``); the memory seconds are the elementwise kernels' bytes."""
    w = work(shape, kind(profile, layer), phase, tp)
    act = ACT_BYTES[precision] / 4.0
    rate = spec.matmul_flops(precision)
    mm = (roofline_s(w.flops * mbs, 0.0, rate, 1.0)
          + roofline_s(w.att_flops * mbs, w.att_bytes * act * mbs, rate, spec.mem_bandwidth))
    mem = roofline_s(0.0, w.nbytes * act * mbs, 1.0, spec.mem_bandwidth)
    n_ar = profile.tp_allreduces(layer) / 2.0 if tp > 1 else 0.0
    ring = (ring_allreduce_time(link, 4.0 * act * mbs * shape.sequence * shape.hidden, tp)
            if n_ar and link is not None else 0.0)
    return [1.0, mm, mem, n_ar, n_ar * 2.0 * (tp - 1), n_ar * ring]


def tp_link(link_for: LinkFor, gpu: str, tp: int) -> Link | None:
    """The link a TP group of ``tp`` all-reduces over: the type's intra-node link for that group, else for a pair
    (a group larger than a measured machine: its fastest), None without TP or without any."""
    if tp <= 1:
        return None
    for g in (tp, 2):
        try:
            return link_for(gpu, g)
        except WorkloadError:
            continue
    return None


def update_features(shape: Shape, spec: DeviceKind, tp: int) -> list[float]:
    return [1.0, roofline_s(0.0, 16.0 * shape.params / tp, 1.0, spec.mem_bandwidth)]


@dataclass
class DerivationModel:
    """Fitted coefficients per (phase, kind) and of the update, and the types they were fitted on."""

    coef: dict[tuple[str, str], npt.NDArray[np.float64]]
    update: npt.NDArray[np.float64]
    fitted_on: tuple[str, ...]
    shape: Shape
    rows: int = 0
    efficiencies: dict[str, float] = field(default_factory=dict)
    floor: dict[tuple[str, str], float] = field(default_factory=dict)   # (phase, kind) -> seconds, 0: none

    def describe(self) -> str:
        return f"roofline fitted on {', '.join(self.fitted_on)}"


def _lsq_relative(x: list[list[float]], y: list[float], prior: Mapping[int, float] | None = None) -> npt.NDArray[np.float64]:
    """Non-negative least squares of the relative error: min sum ((x b - y) / y)^2 + sum_i w^2 (b_i - p_i)^2,
    b >= 0, with ``prior`` {column i: p_i} weighted as ``PRIOR_WEIGHT`` rows of the data (a column the data do
    not pin down, such as the matmul's where every fitted type is memory-bound, stays near its prior)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    a, b = xa / ya[:, None], np.ones_like(ya)
    for i, p in (prior or {}).items():
        row = np.zeros((1, xa.shape[1]))
        row[0, i] = PRIOR_WEIGHT * math.sqrt(len(ya)) / max(p, 1e-12)
        a, b = np.vstack([a, row]), np.append(b, PRIOR_WEIGHT * math.sqrt(len(ya)))
    coef, _ = nnls(a, b)
    return np.asarray(coef)


def _lsq_floored(x: list[list[float]], y: list[float],
                 prior: Mapping[int, float] | None = None) -> tuple[npt.NDArray[np.float64], float]:
    """``t = max(f, x b)``: a layer takes at least the floor ``f`` (the host's time to issue its kernels, which a fast
    GPU waits on), else the roofline. For each candidate floor (none, or one of the measured times), ``b`` is fitted
    (``_lsq_relative``) on the rows measured above it, and the pair with the least relative error over every row
    kept (the lowest floor of equal error); a floor needs more rows above it than there are columns."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    best: tuple[float, float, npt.NDArray[np.float64]] | None = None
    for f in [0.0, *sorted(set(ya.tolist()))]:
        above = ya > f
        if f > 0 and above.sum() <= xa.shape[1]:
            break
        b = _lsq_relative(xa[above].tolist(), ya[above].tolist(), prior)
        err = float(np.sum((np.maximum(xa @ b, f) / ya - 1.0) ** 2))
        if best is None or err < best[0] - 1e-9:       # a higher floor only where it lowers the error
            best = (err, f, b)
    assert best is not None
    return best[2], best[1]


def _median_row(profile: LayeredProfile, gpu: str, mbs: int, tp: int, layers: list[int], phase: int) -> float:
    return statistics.median(profile.layer_times(gpu, mbs, tp)[i][phase] for i in layers)


def fit(profile: LayeredProfile, types: Iterable[str], link_for: LinkFor,
        catalog: GpuCatalog | None = None) -> DerivationModel:
    """The model fitted on the measured ``types`` of ``profile`` (each must be in the catalog): one row per
    (type, mbs, tp) and kind of layer (the median over the decoder blocks: each block counts once)."""
    catalog = catalog or default_catalog()
    shape = Shape.of(profile)
    names = sorted(types)
    if not names:
        raise ConfigError("deriving a GPU type needs at least one measured type to fit on")
    xs: dict[tuple[str, str], tuple[list[list[float]], list[float]]] = {(p, k): ([], []) for p in PHASES for k in KINDS}
    ux: list[list[float]] = []
    uy: list[float] = []
    groups = {k: [i for i in range(profile.num_layers) if kind(profile, i) == k] for k in KINDS}
    for gpu in names:
        spec = catalog.get(gpu)
        for mbs in profile.micro_batches(gpu):
            for tp in profile.tp_degrees(gpu, mbs):
                link = tp_link(link_for, gpu, tp)
                for k, layers in groups.items():
                    for pi, phase in enumerate(PHASES):
                        x, y = xs[(phase, k)]
                        x.append(features(profile, shape, spec, link, layers[0], phase, mbs, tp))
                        y.append(max(_median_row(profile, gpu, mbs, tp, layers, pi), 1e-7))
        for tp in sorted({t for m in profile.micro_batches(gpu) for t in profile.tp_degrees(gpu, m)}):
            ux.append(update_features(shape, spec, tp))
            uy.append(statistics.median(profile.layer_times(gpu, m, tp)[0][2] for m in profile.micro_batches(gpu)
                                        if tp in profile.tp_degrees(gpu, m)))
    fitted = {key: _lsq_floored(x, y, {1: 1.0 / MATMUL_PRIOR} if key[1] != "embedding" else None)
              for key, (x, y) in xs.items()}
    coef = {key: b for key, (b, _) in fitted.items()}
    for key, (x, _) in xs.items():
        if not any(row[RING] > 0 for row in x):  # no TP all-reduce among the rows (a one-GPU profile): the data say
            coef[key][RING] = 1.0                # nothing of it; charge the ring at the link's speed, not zero
    eff = {f"{p}.{k}.{what}": (1.0 / c[i] if c[i] > 0 else math.inf)
           for (p, k), c in coef.items() for i, what in ((1, "matmul"), (2, "memory"))}
    return DerivationModel(coef, _lsq_relative(ux, uy), tuple(names), shape, sum(len(y) for _, y in xs.values()), eff,
                           {key: f for key, (_, f) in fitted.items()})


def derive_times(model: DerivationModel, profile: LayeredProfile, spec: DeviceKind, link_for: LinkFor,
                 micro_batches: Iterable[int], tp_degrees: Iterable[int], precision: str = "fp32") -> TimeTable:
    """(fwd, bwd, update) seconds per layer on ``spec`` at each micro-batch and TP degree, at ``precision``."""
    out: TimeTable = {}
    for mbs in micro_batches:
        for tp in tp_degrees:
            link = tp_link(link_for, spec.name, tp)
            upd = float(np.dot(model.update, update_features(model.shape, spec, tp)))
            rows = []
            for layer in range(profile.num_layers):
                k = kind(profile, layer)
                f, b = (max(model.floor.get((p, k), 0.0), float(np.dot(
                    model.coef[(p, k)], features(profile, model.shape, spec, link, layer, p, mbs, tp, precision))))
                        for p in PHASES)
                rows.append((f, b, upd))
            out.setdefault(mbs, {})[tp] = tuple(rows)
    return out


def with_derived(profile: LayeredProfile, derived: Mapping[str, TimeTable], note: str) -> LayeredProfile:
    """``profile`` with the time tables of ``derived`` types added (a copy; the measured entries unchanged) and
    ``extra["derived_types"]``: type -> ``note``."""
    times = {**profile.times, **{t: dict(v) for t, v in derived.items()}}
    extra = dict(profile.extra or {})
    extra["derived_types"] = {**extra.get("derived_types", {}), **{t: note for t in derived}}
    return dataclasses.replace(profile, times=times, extra=extra)


def measured_types(profile: LayeredProfile, catalog: GpuCatalog | None = None) -> list[str]:
    """The profile's measured types that the catalog has (the ones a derivation can be fitted on)."""
    catalog = catalog or default_catalog()
    done = (profile.extra or {}).get("derived_types", {})
    return [t for t in profile.gpu_types if t not in done and catalog.find(t) is not None]


def fitted_model(profile: LayeredProfile, cluster: GpuCluster, what: str) -> tuple[list[str], DerivationModel]:
    """The profile's measured catalog types and the model fitted on them (over the cluster's intra-node links); none
    is a one-line error saying ``what`` cannot be done."""
    fit_on = measured_types(profile)
    if not fit_on:
        raise ConfigError(f"model {profile.model}: no measured GPU type of its profile is in the GPU catalog, so "
                          f"{what} (profiled: {', '.join(profile.gpu_types) or 'none'})")
    return fit_on, fit(profile, fit_on, cluster.topology.intra_link)


def at_precision(profile: LayeredProfile, cluster: GpuCluster, precision: str) -> LayeredProfile:
    """``profile`` for training at ``precision`` (fp32 master weights and gradients, activations of
    ``ACT_BYTES[precision]``): every entry of the cluster's GPU types scaled, layer by layer, by the fitted roofline's
    ratio of that type at ``precision`` to the same type at the profile's own precision (docs/plans.md, "Precision");
    the update unchanged (Adam on the fp32 master weights). Every type is then derived, and says so. The profile
    itself when ``precision`` is its own; a one-line error when a type has no ``precision`` rate in the catalog."""
    own = profile.precision
    if precision == own:
        return profile
    if precision not in ACT_BYTES:
        raise ConfigError(f"planner.precision={precision!r} (accepted: {', '.join(TRAINING_PRECISIONS)}, auto)")
    catalog = default_catalog()
    types = sorted(t for t in planned_types(cluster) if t in profile.times)
    specs = {}
    for t in types:
        spec = catalog.find(t)
        if spec is None:
            raise ConfigError(f"planner.precision={precision}: GPU type {t} is not in the GPU catalog, so its {own} "
                              f"profile cannot be carried to {precision} (catalog: docs/plans.md)")
        spec.matmul_flops(precision)                        # a type without that rate: one line, here
        specs[t] = spec
    _, model = fitted_model(profile, cluster, f"its times cannot be carried to {precision}")
    link_for = cluster.topology.intra_link
    tables: dict[str, TimeTable] = {}
    for t in types:
        for mbs, per_tp in profile.times[t].items():
            tps = sorted(per_tp)
            base = derive_times(model, profile, specs[t], link_for, [mbs], tps, own)[mbs]
            new = derive_times(model, profile, specs[t], link_for, [mbs], tps, precision)[mbs]
            tables.setdefault(t, {})[mbs] = {
                tp: tuple((f * _ratio(n[0], b[0]), w * _ratio(n[1], b[1]), u)
                          for (f, w, u), b, n in zip(per_tp[tp], base[tp], new[tp])) for tp in tps}
    out = with_derived(profile, tables, f"{precision}: its {own} entries x the {precision}/{own} ratio of a "
                                        f"{model.describe()}")
    return dataclasses.replace(out, act_bytes=ACT_BYTES[precision], extra={**out.extra, "precision": precision})


def with_recompute(profile: LayeredProfile) -> LayeredProfile:
    """``profile`` under full activation recomputation of the decoder blocks (Megatron's ``full`` granularity; the
    embedding and the head as they are): a block keeps only its input for the backward pass (``act_mem`` = the
    previous layer's ``act_output``) and runs its forward again before its backward (``bwd + fwd``); a stage holds
    one block's activations at a time while it recomputes it (``LayerSizes.transient``: the largest block's
    ``act_mem``, charged once per stage by both simulators' memory rules). Tagged ``extra["recompute"]``."""
    if profile.recompute:
        return profile
    blocks = range(1, profile.num_layers - 1)
    sizes = {tp: dataclasses.replace(
        sz, act_mem=tuple(sz.act_output[i - 1] if i in blocks else m for i, m in enumerate(sz.act_mem)),
        transient=max((sz.act_mem[i] for i in blocks), default=0.0)) for tp, sz in profile.sizes.items()}
    times = {gpu: {mbs: {tp: tuple((f, b + f, u) if i in blocks else (f, b, u) for i, (f, b, u) in enumerate(rows))
                         for tp, rows in per_tp.items()} for mbs, per_tp in per_mbs.items()}
             for gpu, per_mbs in profile.times.items()}
    return dataclasses.replace(profile, times=times, sizes=sizes, extra={**(profile.extra or {}), "recompute": True})


def variant(profile: LayeredProfile) -> str:
    """How a profile trains, in one word: its precision, ``_recompute`` under activation recomputation."""
    return profile.precision + ("_recompute" if profile.recompute else "")


def _ratio(new: float, base: float) -> float:
    return new / base if base > 0 else 1.0


def precisions(profile: LayeredProfile, cluster: GpuCluster, setting: str) -> list[str]:
    """The precisions a planning trial tries: ``setting`` itself, or with ``auto`` the profile's own and every
    other that each GPU type of the cluster has in the catalog (a type outside the catalog: the profile's only)."""
    if setting != "auto":
        return [setting]
    catalog = default_catalog()
    found = [catalog.find(t) for t in planned_types(cluster)]
    specs = [s for s in found if s is not None]
    if len(specs) < len(found):
        return [profile.precision]
    return [profile.precision] + [p for p in TRAINING_PRECISIONS if p != profile.precision and all(
        p == "fp32" or p in s.flops for s in specs)]


def planned_types(cluster: GpuCluster) -> list[str]:
    """The GPU types the cluster has at least one of, sorted."""
    return sorted({t for (t, _), n in cluster.gpus.items() if n > 0})
