"""The terms of the derivation of GPU types nobody profiled (plan/derive.py; docs/plans.md, "GPU types nobody
profiled"): each recovered from synthetic profiles made with a known value, and the attention matmuls' roofline."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import orchestrator.plan.derive as derive
from orchestrator.hardware.catalog import default_catalog
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
# Known coefficients (COLUMNS: fixed s, 1/eta matmul, 1/eta memory, s per TP call, s per ring step, ring weight); the
# matmul's at its prior, so that the prior row agrees with the data.
KNOWN = np.array([1e-4, 1.0 / derive.MATMUL_PRIOR, 2.0, 3e-4, 0.0, 0.5])


@pytest.fixture(scope="module")
def measured():
    if not SAILOR.is_dir():
        pytest.skip("needs ../shared/workloads/sailor")
    return LayeredProfile.from_directory(SAILOR, "OPT-350"), GpuCluster.from_directory(SAILOR)


def _synthetic(profile, cluster, floor):
    """``profile`` with every measured type's fwd and bwd seconds made by ``KNOWN`` and the ``floor`` of each (phase,
    kind): ``max(floor, KNOWN . features)``; the update as measured."""
    shape, cat, link_for = derive.Shape.of(profile), default_catalog(), cluster.topology.intra_link
    times = {}
    for gpu in derive.measured_types(profile):
        spec = cat.get(gpu)
        times[gpu] = {mbs: {tp: tuple(
            tuple(max(floor.get((ph, derive.kind(profile, i)), 0.0), float(KNOWN @ derive.features(
                profile, shape, spec, derive.tp_link(link_for, gpu, tp), i, ph, mbs, tp))) for ph in derive.PHASES)
            + (row[2],) for i, row in enumerate(rows)) for tp, rows in per.items()}
            for mbs, per in profile.times[gpu].items()}
    return dataclasses.replace(profile, times=times)


def test_the_fixed_cost_tp_call_latency_and_host_floor_are_recovered(measured):
    """A profile made with a known fixed cost, TP call latency and a floor on the blocks' forward: the fit finds
    them (the floor among the measured times, the rest by least squares on the rows above it)."""
    profile, cluster = measured
    floor = {("fwd", "block"): 1.2e-3}
    model = derive.fit(_synthetic(profile, cluster, floor), derive.measured_types(profile), cluster.topology.intra_link)
    assert model.floor[("fwd", "block")] == pytest.approx(1.2e-3, rel=1e-9)
    # the columns a kind has: the embedding no matmul, the head no TP all-reduce
    has = {"embedding": [0, 2, 3, 4, 5], "block": list(range(len(KNOWN))), "head": [0, 1, 2]}
    for key, coef in model.coef.items():
        cols = has[key[1]]
        assert coef[cols] == pytest.approx(KNOWN[cols], rel=1e-3, abs=1e-9), key
        if key != ("fwd", "block"):
            assert model.floor[key] == 0.0, key       # no floor where the data have none


def test_a_derived_entry_is_never_below_the_floor(measured):
    profile, cluster = measured
    floor = {("fwd", "block"): 1.2e-3, ("bwd", "head"): 2e-3}
    model = derive.fit(_synthetic(profile, cluster, floor), derive.measured_types(profile), cluster.topology.intra_link)
    table = derive.derive_times(model, profile, default_catalog().get("B200"), cluster.topology.intra_link, [1, 64], [1, 8])
    blocks = [table[m][tp][5][0] for m in (1, 64) for tp in (1, 8)]
    assert min(blocks) == pytest.approx(1.2e-3) and max(blocks) > 1.2e-3       # at the floor small, above it large
    assert min(table[m][tp][-1][1] for m in (1, 64) for tp in (1, 8)) == pytest.approx(2e-3)


def test_the_attention_matmuls_are_memory_bound_on_tensor_cores_and_compute_bound_on_plain_fp32(measured):
    """QK^T and PV of OPT-350M (s 2048, h 1024, 16 heads) have about 30 FLOP per byte in fp32: below an A100's TF32
    ridge P/W (100), above a V100's fp32 one (17)."""
    profile, _ = measured
    shape = derive.Shape.of(profile)
    w = derive.work(shape, "block", "fwd", 1)
    assert w.att_flops == pytest.approx(4.0 * 2048**2 * 1024) and 25 < w.att_flops / w.att_bytes < 35
    for gpu, bound in (("A100-40", "memory"), ("V100-16", "compute")):
        spec = default_catalog().get(gpu)
        p, bw = spec.matmul_flops("fp32"), spec.mem_bandwidth
        att = w.att_bytes / bw if bound == "memory" else w.att_flops / p
        assert max(w.att_flops / p, w.att_bytes / bw) == att
        mm = derive.features(profile, shape, spec, None, 5, "fwd", 2, 1)[derive.COLUMNS.index("matmul")]
        assert mm == pytest.approx(2 * (w.flops / p + att))
    # at bf16 the scores are 2 bytes: half the memory-bound seconds on the A100
    spec = default_catalog().get("A100-40")
    bf16 = derive.features(profile, shape, spec, None, 5, "fwd", 1, 1, "bf16")[1]
    assert bf16 == pytest.approx(w.flops / spec.flops["bf16"] + 0.5 * w.att_bytes / spec.mem_bandwidth)
