"""Filling a profile for a cluster: the types it lacks derived whole from the GPU catalog (``derive_for_cluster``), and
(``planner.fill``) a measured GPU type's missing (micro-batch, TP) entries derived by the roofline of ``plan.derive``
and calibrated on the type's own measured entries. Formulas: docs/plans.md, "Filling a
partial profile"; the error on held-out entries: docs/benchmarks/derived_profiles.md.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from orchestrator.errors import ConfigError
from orchestrator.hardware.catalog import default_catalog
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.hardware.profiles import DeviceKind
from orchestrator.plan import Plan
from orchestrator.plan.derive import (
    DerivationModel,
    LinkFor,
    TimeTable,
    derive_times,
    fit,
    fitted_model,
    kind,
    measured_types,
    planned_types,
    with_derived,
)
from orchestrator.plan.profile import LayeredProfile

Calibration = dict[tuple[int, str, int], float]


def calibration(model: DerivationModel, profile: LayeredProfile, spec: DeviceKind, link_for: LinkFor,
                gpu: str) -> Calibration:
    """How far ``gpu``'s own measured entries are from the model: per (phase 0-2, kind of layer or ``update``, TP
    degree) the median over its measured micro-batches and layers of that kind of measured / derived seconds."""
    ratios: dict[tuple[int, str, int], list[float]] = {}
    for mbs in profile.micro_batches(gpu):
        tps = profile.tp_degrees(gpu, mbs)
        got = derive_times(model, profile, spec, link_for, [mbs], tps)[mbs]
        for tp in tps:
            for layer, row in enumerate(profile.layer_times(gpu, mbs, tp)):
                for j, measured in enumerate(row):
                    if j == 2 and layer > 0:                      # one update figure per (mbs, tp)
                        continue
                    what = "update" if j == 2 else kind(profile, layer)
                    if got[tp][layer][j] > 0 and measured > 0:
                        ratios.setdefault((j, what, tp), []).append(measured / got[tp][layer][j])
    return {key: statistics.median(v) for key, v in ratios.items()}


def calibrated(table: TimeTable, cal: Calibration, profile: LayeredProfile) -> TimeTable:
    """``table`` (``derive_times``) scaled entry by entry by ``cal``: at a TP degree the type was not measured at,
    the nearest measured one's factor (by ratio of degrees; the smaller on a tie)."""
    def factor(j: int, what: str, tp: int) -> float:
        known = sorted(t for (jj, w, t) in cal if (jj, w) == (j, what))
        if not known:
            return 1.0
        return cal[(j, what, min(known, key=lambda t: (abs(math.log(t / tp)), t)))]

    return {mbs: {tp: tuple(tuple(x * factor(j, "update" if j == 2 else kind(profile, layer), tp)
                                  for j, x in enumerate(row)) for layer, row in enumerate(rows))
                  for tp, rows in per_tp.items()} for mbs, per_tp in table.items()}


def fill_measured(profile: LayeredProfile, cluster: GpuCluster, link_for: LinkFor | None = None) -> LayeredProfile:
    """``profile`` with the (micro-batch, TP) entries that the cluster's measured catalog types lack, derived and
    calibrated on each type's own measured entries (``planner.fill``): the roofline fitted on the other measured
    types (on the type itself where it is the only one), scaled per (phase, kind of layer, TP degree) by
    ``calibration``. A one-micro-batch profile of one GPU (``python -m orchestrator.profile``) gives the type every
    micro-batch and TP degree the other types have. The type is then labelled derived; its measured entries stay."""
    catalog = default_catalog()
    link_for = link_for or cluster.topology.intra_link
    measured = measured_types(profile)
    wanted_mbs = sorted({m for t in measured for m in profile.micro_batches(t)})
    tables: dict[str, TimeTable] = {}
    notes: dict[str, str] = {}
    for t in planned_types(cluster):
        if t not in measured and t in profile.times:
            continue                                          # derived already
        if t not in profile.times:
            continue                                          # nothing measured: derive_for_cluster's
        tps = [tp for tp in sorted(profile.sizes) if tp <= cluster.types[t].gpus_per_node]
        lack = {(m, tp) for m in wanted_mbs for tp in tps if not profile.has(t, m, tp)}
        if not lack:
            continue
        spec = catalog.find(t)
        if spec is None:
            raise ConfigError(f"planner.fill=true: GPU type {t} lacks {len(lack)} (micro-batch, TP) entries and is not "
                              "in the GPU catalog, so they cannot be derived (catalog: docs/plans.md)")
        others = [o for o in measured if o != t] or [t]
        model = fit(profile, others, link_for)
        cal = calibration(model, profile, spec, link_for, t)
        full = calibrated(derive_times(model, profile, spec, link_for, sorted({m for m, _ in lack}),
                                       sorted({tp for _, tp in lack})), cal, profile)
        table: TimeTable = {m: dict(per) for m, per in profile.times[t].items()}
        for m, tp in sorted(lack):
            table.setdefault(m, {})[tp] = full[m][tp]
        tables[t] = table
        cells = sum(len(v) for v in profile.times[t].values())
        notes[t] = (f"{cells} measured (micro-batch, TP) entries kept, {len(lack)} derived: {model.describe()}, "
                    "calibrated on its own")
    if not tables:
        return profile
    out = with_derived(profile, tables, "")
    return dataclasses.replace(out, extra={**out.extra, "derived_types": {**out.extra["derived_types"], **notes}})


def underived(profile: LayeredProfile, cluster: GpuCluster) -> list[str]:
    """The types of ``cluster`` whose layer times ``profile`` lacks and the GPU catalog can derive: the catalog's
    own (``cluster.derived``: node and links from the datasheet) and each type the cluster itself describes (a
    cluster file, Sailor's cluster: its links measured) that has GPUs and a catalog entry of its name or alias."""
    catalog = default_catalog()
    listed = {t for (t, _), n in cluster.gpus.items() if n > 0 and catalog.find(t) is not None}
    return sorted(t for t in set(cluster.derived) | listed if t not in profile.times)


def derive_for_cluster(profile: LayeredProfile, cluster: GpuCluster) -> LayeredProfile:
    """``profile`` with entries for every type of ``cluster`` that it lacks and the catalog has (``underived``),
    fitted on its measured types; unchanged when there is none. A type the cluster describes keeps its own name,
    node size and links; the catalog gives its compute and memory figures."""
    missing = underived(profile, cluster)
    if not missing:
        return profile
    catalog = default_catalog()
    fit_on, model = fitted_model(profile, cluster, f"{', '.join(missing)} cannot be derived")
    link_for = cluster.topology.intra_link
    mbs = sorted({m for t in fit_on for m in profile.micro_batches(t)})
    tables = {}
    for t in missing:
        spec = dataclasses.replace(catalog.get(t), name=t)
        per_node = cluster.gpu_type(t).gpus_per_node if t in cluster.types else spec.gpus_per_node
        tps = [tp for tp in sorted(profile.sizes) if tp <= per_node]
        tables[t] = derive_times(model, profile, spec, link_for, mbs, tps)
    return with_derived(profile, tables, model.describe())


def derived_types(profile: LayeredProfile, cluster: GpuCluster, used: set[str] | None = None) -> dict[str, str]:
    """Type -> how its figures were derived, for the types of ``cluster`` (those in ``used`` when given) whose
    layer times the profile derived from the GPU catalog's datasheet ({} when every figure is measured)."""
    notes = (profile.extra or {}).get("derived_types", {})
    return {t: f"{notes[t]}; {cluster.derived.get(t, 'its links measured')}" for t in sorted(notes)
            if t in cluster.types and (used is None or t in used)}


def derived_tags(profile: LayeredProfile, cluster: GpuCluster, plan: Plan) -> dict[str, str]:
    """``plan.derived_types`` (every derived type the cluster lists: 'H100 (roofline fitted on ...)') and
    ``plan.derived_used`` (those the plan uses), absent when no figure is derived; ``plan.derived_nodes``: the types
    whose layer times are measured but whose machines and links the cluster data does not describe (taken from the
    GPU catalog's datasheet)."""
    given = {t for (t, _), n in cluster.gpus.items() if n > 0}
    listed = derived_types(profile, cluster, given)
    used = {r.gpu for p in plan.pipelines for s in p.stages for r in s.replicas}
    out = {}
    nodes = sorted(t for t in given if t in cluster.derived and t not in listed)    # layers measured, machine not
    if nodes:
        out["plan.derived_nodes"] = "; ".join(f"{t} ({cluster.derived[t]})" for t in nodes)[:4900]
    if not listed:
        return out
    fitted = {t: notes.split(";")[0] for t, notes in listed.items()}
    return {**out, "plan.derived_types": "; ".join(f"{t} ({fitted[t]})" for t in listed)[:4900],
            "plan.derived_used": ", ".join(t for t in listed if t in used) or "none",
            "plan.profile": "measured+derived"}
