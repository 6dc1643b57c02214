"""GPU types nobody profiled (issue 43 items 3-5): the catalog reader's errors, the derivation held against a measured
type left out of its fit, and a planning trial that mixes measured and derived types and says which are derived."""

import json
import re
import statistics
from pathlib import Path

import pytest

import orchestrator.plan.derive as derive
import orchestrator.plan.fill as fill
from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.catalog import CATALOG_FILE, default_catalog, derived_link, read_catalog
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile

from conftest import run_inprocess, store_runs

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
needs_data = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")
LLM = ["model=llm", "model.name=OPT-350", f"model.data={SAILOR}", "hardware=gpu_cluster", f"hardware.data={SAILOR}"]


def _catalog_with(tmp_path, change) -> Path:
    doc = json.loads(CATALOG_FILE.read_text())
    change(doc)
    p = tmp_path / "cat.json"
    p.write_text(json.dumps(doc))
    return p


def test_the_catalog_has_the_types_of_the_issue_with_a_source_for_every_figure():
    cat = read_catalog()
    for name in ("H100", "H100-PCIe", "H200", "B200", "A100-40", "A100-80", "V100-16", "L4", "L40S", "A10G",
                 "RTX-3090", "RTX-4090", "MI250X", "MI300X", "GH-96"):
        spec = cat.get(name)
        assert all(spec.sources[k] for k in spec.sources) and "usd_per_gpu_hour" in spec.sources
    assert cat.get("GH200").name == "GH-96" and cat.get("h100 sxm").name == "H100" and cat.get("A100").name == "A100-40"
    assert cat.get("H100").matmul_flops() == 494.5e12 and cat.get("V100-16").matmul_flops() == 15.7e12


def test_the_catalogs_memory_is_in_gib_as_the_measured_cluster_files():
    """A GPU's "80 GB" is 80 GiB of HBM: the catalog's memory_GB agrees with Sailor's measured cluster file within 2% on
    every type both name (A100-80, V100-16, RTX-2080 to the byte; A100-40's file has the 39.4 GiB a process gets); until
    2026-12-06 the catalog read 10^9 bytes, 5.5-7.4% short."""
    basic = json.loads((SAILOR / "cluster" / "basic_cluster_config.json").read_text())
    both = [t for t in ("A100-40", "A100-80", "V100-16", "RTX-2080") if t in basic]
    assert both
    for t in both:
        assert default_catalog().get(t).memory_bytes == pytest.approx(basic[t]["mem_per_gpu"], rel=0.02), t
    # and the H200 measured (139.8 GiB visible to PyTorch) against its "141 GB", in the catalog and the datasheet profile
    from orchestrator.hardware.cost import GiB
    from orchestrator.hardware.profiles import PROFILES

    measured = PROFILES["H200 (measured)"].memory_bytes
    assert measured == pytest.approx(139.8 * GiB)
    for kind in (default_catalog().get("H200"), PROFILES["H200 (datasheet)"]):
        assert kind.memory_bytes == pytest.approx(measured, rel=0.015), kind.name


@pytest.mark.parametrize("change, message", [
    (lambda d: d["types"]["H100"]["fp32_tflops"].__setitem__(1, "nowhere"), "H100.fp32_tflops: figure without a known source"),
    (lambda d: d["types"]["L4"].__setitem__("memory_GBps", [float("nan"), "nv-l4"]), "L4.memory_GBps=nan: must be a finite number > 0"),
    (lambda d: d["types"]["B200"].__setitem__("intra_GBps", [-900, "nv-dgx-b200"]), "B200.intra_GBps=-900: must be"),
    (lambda d: d["types"]["A10G"].pop("network_Gbps"), "A10G: figure network_Gbps is missing"),
    (lambda d: d["types"]["L40S"].__setitem__("usd_per_gpu_hour", [None, "nope"]), "L40S.usd_per_gpu_hour: figure without"),
])
def test_a_bad_figure_is_one_line_naming_it(tmp_path, change, message):
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(".", r"\.")) as err:
        read_catalog(_catalog_with(tmp_path, change))
    assert "\n" not in str(err.value)


def test_a_truncated_catalog_is_one_line(tmp_path):
    p = tmp_path / "cat.json"
    p.write_text(CATALOG_FILE.read_text()[:500])
    with pytest.raises(WorkloadError, match="malformed or truncated JSON"):
        read_catalog(p)


@needs_data
def test_an_unknown_type_lists_the_clusters_and_the_catalogs():
    with pytest.raises(ConfigError) as err:
        GpuCluster.from_directory(SAILOR).with_gpus({"H900": 8})
    msg = str(err.value)
    assert "unknown GPU type 'H900'" in msg and "the cluster knows: A100-40, A100-80" in msg
    assert "the GPU catalog has: " in msg and "MI300X" in msg and "H100" in msg and "\n" not in msg


@needs_data
def test_a_catalog_type_joins_a_measured_cluster_with_links_and_a_label():
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"H100": 16, "GH200": 4, "A100-40": 8})
    assert cluster.gpus == {("H100", "us-central1-a"): 16, ("GH-96", "us-central1-a"): 4, ("A100-40", "us-central1-a"): 8}
    assert set(cluster.derived) == {"H100"} and "derived from datasheet" in cluster.derived["H100"]
    # probe F: "1.63 of its network bandwidth" read as a link above the datasheet; it is over a GPU's share of the NIC
    _, net = cluster.link_efficiencies()
    assert f"{net:.2f}x its per-GPU share of the machine's network" in cluster.derived["H100"]
    assert cluster.gpu_type("H100").gpus_per_node == 8 and cluster.gpu_type("H100").usd_per_gpu_hour == 11.06
    intra, _ = cluster.link_efficiencies()
    assert cluster.topology.intra_link("H100", 8) == derived_link(450e9, intra)
    # between machines no faster than the fastest measured link of the zone (the site's network)
    fastest = max(lk.max_bandwidth for (a, b), lk in cluster.topology.links.items()
                  if a[0] == b[0] == "us-central1-a" and "H100" not in (a[1], b[1]))
    assert cluster.topology.inter_link("us-central1-a", "H100", 1, "us-central1-a", "A100-40", 1).bandwidth <= fastest


@pytest.fixture(scope="module")
def measured():
    if not SAILOR.is_dir():
        pytest.skip("needs ../shared/workloads/sailor")
    return LayeredProfile.from_directory(SAILOR, "OPT-350"), GpuCluster.from_directory(SAILOR)


def _left_out_errors(profile, cluster, out):
    rest = [t for t in derive.measured_types(profile) if t != out]
    own = derived_link(default_catalog().get(out).peer_link_bandwidth, 0.69)

    def link_for(gpu, tp):
        return own if gpu == out else cluster.topology.intra_link(gpu, tp)
    model = derive.fit(profile, rest, link_for)
    errs = []
    for mbs in profile.micro_batches(out):
        got = derive.derive_times(model, profile, default_catalog().get(out), link_for, [mbs], profile.tp_degrees(out, mbs))
        for tp, rows in got[mbs].items():
            meas = profile.layer_times(out, mbs, tp)
            errs += [abs(rows[i][j] / meas[i][j] - 1.0) for i in range(1, profile.num_layers) for j in (0, 1)]
    return errs


@pytest.mark.parametrize("out, tolerance", [("A100-80", 0.06), ("V100-16", 0.12), ("A100-40", 0.15), ("GH-96", 0.17)])
def test_the_derivation_reproduces_a_measured_type_left_out_of_its_fit(measured, out, tolerance):
    """Median |error| of the decoder blocks' and head's forward and backward on a type the fit never saw (here 4.0%,
    8.7%, 13.4% and 15.4%: the GH-96 misses the issue's 15%, docs/benchmarks/derived_profiles.md)."""
    profile, cluster = measured
    errs = _left_out_errors(profile, cluster, out)
    assert statistics.median(errs) <= tolerance, statistics.median(errs)


def test_derived_entries_leave_the_measured_ones_unchanged(measured):
    profile, _ = measured
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"H100": 8, "A100-40": 4})
    extended = fill.derive_for_cluster(profile, cluster)
    assert extended.times["A100-40"] is profile.times["A100-40"] and "H100" not in profile.times
    assert extended.extra["derived_types"] == {"H100": "roofline fitted on A100-40, A100-80, GH-96, V100-16"}
    assert sorted(extended.tp_degrees("H100", 4)) == [1, 2, 4, 8]
    f1, b1, _ = extended.layer_times("H100", 4, 1)[5]
    f2, _, _ = extended.layer_times("H100", 8, 1)[5]
    a100 = profile.layer_times("A100-40", 4, 1)[5]
    assert 0 < f1 < a100[0] and 0 < b1 < a100[1] and f1 < f2 < 2.5 * f1        # faster than an A100, more with the batch


@needs_data
@pytest.mark.parametrize("gpus", [
    "hardware.gpus={H100: 4, A100-40: 4}",
    pytest.param("hardware.gpus={H100: 16, A100-40: 16}", marks=pytest.mark.slow),      # the issue's (10-40 s)
])
def test_a_trial_mixing_measured_and_derived_types_says_which_are_derived(tmp_path, gpus):
    out = run_inprocess(tmp_path, "+planner=joint", "planner.budget_s=2", *LLM, gpus)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "derived:  derived from datasheet: H100 (roofline fitted on A100-40, A100-80, GH-96, V100-16" in out.stdout
    assert "layers derived from datasheets (not measured)" in out.stdout
    tags = store_runs(tmp_path)[0].data.tags
    assert tags["plan.derived_types"].startswith("H100 (roofline fitted on") and tags["plan.profile"] == "measured+derived"


# -- precision as a plan choice (issue 43 item 3) ---------------------------------------------------------------------
def test_bf16_carries_each_entry_by_the_rooflines_ratio_and_keeps_the_update(measured):
    profile, _ = measured
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"H100": 8, "A100-40": 8})
    fp32 = fill.derive_for_cluster(profile, cluster)
    assert derive.at_precision(fp32, cluster, "fp32") is fp32
    bf16 = derive.at_precision(fp32, cluster, "bf16")
    assert (bf16.precision, bf16.act_float_bytes, bf16.float_bytes, fp32.act_float_bytes) == ("bf16", 2, 4, 4)
    for gpu in ("H100", "A100-40"):          # the measured A100-40 is carried too, and labelled derived
        assert bf16.extra["derived_types"][gpu].startswith("bf16: its fp32 entries x the bf16/fp32 ratio")
        for mbs in fp32.micro_batches(gpu):
            for tp in fp32.tp_degrees(gpu, mbs):
                old, new = fp32.layer_times(gpu, mbs, tp), bf16.layer_times(gpu, mbs, tp)
                assert all(n[2] == o[2] for n, o in zip(new, old))                       # the update: fp32 Adam
                # every block no slower; faster unless it sits on the host floor (a host-bound layer stays so)
                assert all(n[0] <= o[0] and n[1] <= o[1] for n, o in zip(new[1:-1], old[1:-1]))
            big = max(fp32.micro_batches(gpu))
            new, old = bf16.layer_times(gpu, big, 1), fp32.layer_times(gpu, big, 1)
            assert all(n[0] < o[0] and n[1] < o[1] for n, o in zip(new[1:-1], old[1:-1]))
    # the ratio of one block: the model's own at bf16 over fp32, applied to the measured entry
    spec, link_for = default_catalog().get("A100-40"), cluster.topology.intra_link
    model = derive.fit(profile, derive.measured_types(profile), link_for)
    r32, r16 = (derive.derive_times(model, profile, spec, link_for, [4], [1], p)[4][1][5][0] for p in ("fp32", "bf16"))
    assert bf16.layer_times("A100-40", 4, 1)[5][0] == pytest.approx(profile.layer_times("A100-40", 4, 1)[5][0] * r16 / r32)


def test_a_precision_a_type_lacks_is_one_line_and_auto_tries_what_every_type_has(measured):
    profile, _ = measured
    mixed = GpuCluster.from_directory(SAILOR).with_gpus({"H100": 8, "V100-16": 8})
    with pytest.raises(ConfigError, match="V100-16 has no bf16 rate in the catalog") as err:
        derive.at_precision(fill.derive_for_cluster(profile, mixed), mixed, "bf16")
    assert "\n" not in str(err.value)
    assert derive.precisions(profile, mixed, "auto") == ["fp32", "fp16"]
    h100 = GpuCluster.from_directory(SAILOR).with_gpus({"H100": 8})
    assert derive.precisions(profile, h100, "auto") == ["fp32", "bf16", "fp16", "fp8"]
    assert derive.precisions(profile, h100, "bf16") == ["bf16"]


def test_half_activations_halve_the_sends_and_activation_memory_not_the_gradients(measured):
    from orchestrator.plan import Pipeline, Plan, Replica, Stage
    from orchestrator.planning.evaluator import simulator

    profile, _ = measured
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 16})
    a2 = Replica("A100-40", 1, 4, cluster.zone)
    plan = Plan([Pipeline((Stage(tuple(range(13)), (a2,) * 8), Stage(tuple(range(13, 26)), (a2,) * 8)))], 2)
    half = derive.at_precision(profile, cluster, "fp16")
    for name in ("project", "sailor"):
        sim = simulator(name)
        e32, e16 = sim.estimate(plan, profile, cluster, 1024), sim.estimate(plan, half, cluster, 1024)
        assert e16.iteration_s < e32.iteration_s, name
        s32, s16 = e32.stages[0], e16.stages[0]
        assert s16.allreduce_s == pytest.approx(s32.allreduce_s), name               # fp32 gradients
        assert 0 < s16.send_s < s32.send_s, name
    acts = [sim.memory(plan, p, 0, 0, a2, 8) for p in (profile, half) for sim in (simulator("project"),)]
    assert acts[1] < acts[0]


@needs_data
def test_a_trial_with_precision_auto_keeps_the_best_and_says_so(tmp_path):
    out = run_inprocess(tmp_path, "+planner=joint", "planner.budget_s=2", "planner.precision=auto", *LLM,
                        "hardware.gpus={H100: 4, V100-16: 8}")
    assert out.returncode == 0, out.stdout + out.stderr
    run = store_runs(tmp_path)[0]
    m, tags = run.data.metrics, run.data.tags
    assert tags["plan.variants_tried"] == "fp32, fp16"
    tried = {p: m[f"plan.variant_iteration_s.{p}"] for p in ("fp32", "fp16")}
    assert tags["plan.precision"] == min(tried, key=tried.get) == "fp16" and tags["plan.recompute"] == "false"
    assert m["plan.bound_iteration_s"] <= m["plan.iteration_s"]               # the bound: over both precisions
    assert "training: fp16 (planner.precision" in out.stdout and "tried fp32 " in out.stdout
    assert "precision fp16 (measured: fp32)" in tags["plan.trust"]
    (tmp_path / "bad").mkdir()
    bad = run_inprocess(tmp_path / "bad", "+planner=joint", "planner.precision=bf16", *LLM,
                        "hardware.gpus={H100: 4, V100-16: 8}")
    assert bad.returncode == 2 and "V100-16 has no bf16 rate in the catalog" in bad.stderr


def test_recomputation_trades_the_blocks_activations_for_a_second_forward(measured):
    from orchestrator.plan import Pipeline, Plan, Replica, Stage
    from orchestrator.planning.evaluator import simulator

    profile, _ = measured
    rc = derive.with_recompute(profile)
    assert rc.recompute and derive.variant(rc) == "fp32_recompute" and derive.with_recompute(rc) is rc
    for tp, sz in profile.sizes.items():
        new = rc.sizes[tp]
        assert new.act_mem[0] == sz.act_mem[0] and new.act_mem[-1] == sz.act_mem[-1]          # embedding, head kept
        assert new.act_mem[5] == sz.act_output[4] < sz.act_mem[5] and new.transient == max(sz.act_mem[1:-1])
    f, b, u = profile.layer_times("A100-40", 4, 1)[5]
    assert rc.layer_times("A100-40", 4, 1)[5] == (f, b + f, u) and rc.layer_times("A100-40", 4, 1)[0] == \
        profile.layer_times("A100-40", 4, 1)[0]
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 16})
    a1 = Replica("A100-40", 1, 4, cluster.zone)
    plan = Plan([Pipeline((Stage(tuple(range(13)), (a1,) * 8), Stage(tuple(range(13, 26)), (a1,) * 8)))], 4)
    for name in ("project", "sailor"):
        sim = simulator(name)
        e, r = sim.estimate(plan, profile, cluster, 1024), sim.estimate(plan, rc, cluster, 1024)
        assert r.iteration_s > e.iteration_s, name                                   # the second forward
        assert max(s.peak_memory_bytes for s in r.stages) < max(s.peak_memory_bytes for s in e.stages), name


@needs_data
def test_recompute_auto_plans_a_gpu_too_small_without_it(tmp_path):
    """OPT-350M at sequence 2048 on one V100-16: no plan fits without recomputation (one line, exit 2); with ``auto``
    the trial plans both, keeps the one that fits and says the other has none."""
    (tmp_path / "off").mkdir()
    off = run_inprocess(tmp_path / "off", "+planner=joint", "planner.budget_s=2", *LLM, "hardware.gpus={V100-16: 1}")
    assert off.returncode == 2 and "InfeasiblePlan" not in off.stderr and "fits in memory" in off.stderr
    # the figures behind it and the way on (probe F: the error named neither)
    assert re.search(r"weights, gradients and adam state are \d+\.\d GiB in all, the largest GPU holds 1\d\.\d GiB; "
                     r"planner.recompute=auto also tries activation recomputation", off.stderr), off.stderr
    out = run_inprocess(tmp_path, "+planner=joint", "planner.budget_s=2", "planner.recompute=auto", *LLM,
                        "hardware.gpus={V100-16: 1}")
    assert out.returncode == 0, out.stdout + out.stderr
    run = store_runs(tmp_path)[0]
    m, tags = run.data.metrics, run.data.tags
    assert (tags["plan.variants_tried"], tags["plan.variants_refused"], tags["plan.recompute"]) == \
        ("fp32_recompute", "fp32", "true")
    assert m["plan.variant_iteration_s.fp32_recompute"] == m["plan.iteration_s"] and m["plan.fits"] == 1.0
    assert m["plan.bound_iteration_s"] <= m["plan.iteration_s"]
    assert "activation recomputation on (planner.recompute)" in out.stdout and "no plan fits: fp32" in out.stdout


def test_a_profiled_type_without_sailors_price_takes_the_catalogs():
    if not SAILOR.is_dir():
        pytest.skip("needs ../shared/workloads/sailor")
    cluster = GpuCluster.from_directory(SAILOR)
    assert cluster.types["A100-80"].usd_per_gpu_hour == default_catalog().get("A100-80").usd_per_gpu_hour == 5.07
    assert cluster.types["A100-40"].usd_per_gpu_hour == pytest.approx(3.673385)          # Sailor's own price first


# -- a partial profile filled (planner.fill) --------------------------------------------------------------------------
def _one_gpu_profile(profile, gpu, mbs):
    import dataclasses

    return dataclasses.replace(profile, times={**profile.times, gpu: {mbs: {1: profile.times[gpu][mbs][1]}}})


def _block_errors(profile, filled, gpu, skip):
    return [abs(filled.layer_times(gpu, m, tp)[i][j] / profile.layer_times(gpu, m, tp)[i][j] - 1.0)
            for m in profile.micro_batches(gpu) for tp in profile.tp_degrees(gpu, m)
            if (m, tp) != skip and filled.has(gpu, m, tp) for i in range(1, profile.num_layers - 1) for j in (0, 1)]


def test_a_one_gpu_profile_is_filled_and_calibrated_on_its_own_entries(measured):
    """GH-96 measured at one micro-batch on one GPU: planner.fill derives every other micro-batch and TP degree from
    the other types and scales them to its own entry. Its blocks then land closer to the measured GH-96 than the
    datasheet derivation alone (benchmark: 8.4% median over every layer, against 15.8%)."""
    profile, cluster = measured
    part = _one_gpu_profile(profile, "GH-96", 16)
    on = cluster.with_gpus({"GH-96": 8})
    filled = fill.fill_measured(part, on)
    assert filled.times["GH-96"][16][1] is profile.times["GH-96"][16][1]              # the measured entry kept
    assert filled.tp_degrees("GH-96", 4) == [tp for tp in sorted(profile.sizes) if tp <= on.types["GH-96"].gpus_per_node]
    assert filled.micro_batches("GH-96") == sorted({m for t in profile.times for m in part.micro_batches(t)})
    note = filled.extra["derived_types"]["GH-96"]
    assert note.startswith("1 measured (micro-batch, TP) entries kept") and "fitted on A100-40, A100-80, V100-16" in note
    model = derive.fit(profile, ["A100-40", "A100-80", "V100-16"], on.topology.intra_link)
    spec = default_catalog().get("GH-96")
    cells = [(m, tp) for m in profile.micro_batches("GH-96") for tp in profile.tp_degrees("GH-96", m)
             if (m, tp) != (16, 1) and filled.has("GH-96", m, tp)]
    assert len(cells) > 15
    calibrated, plain = [], []
    for m, tp in cells:
        raw = derive.derive_times(model, profile, spec, on.topology.intra_link, [m], [tp])[m][tp]
        meas, got = profile.layer_times("GH-96", m, tp), filled.layer_times("GH-96", m, tp)
        for i in range(1, profile.num_layers - 1):
            for j in (0, 1):
                calibrated.append(abs(got[i][j] / meas[i][j] - 1.0))
                plain.append(abs(raw[i][j] / meas[i][j] - 1.0))
    assert statistics.median(calibrated) < 0.15 and statistics.median(calibrated) < statistics.median(plain)


def test_fill_keeps_every_measured_entry(measured):
    profile, cluster = measured
    filled = fill.fill_measured(profile, cluster.with_gpus({t: 4 for t in profile.times}))
    for t, per in profile.times.items():
        for m, per_tp in per.items():
            for tp, rows in per_tp.items():
                assert filled.times[t][m][tp] is rows


@needs_data
def test_a_trial_with_a_one_gpu_profile_plans_tp_with_fill_and_labels_it(tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(SAILOR, data)
    doc = json.loads((data / "profiles_tmp.json").read_text())
    doc["OPT-350"]["GH-96"] = {"16": {"1": doc["OPT-350"]["GH-96"]["16"]["1"]}}
    (data / "profiles_tmp.json").write_text(json.dumps(doc))
    args = ["+planner=joint", "planner.budget_s=2", "model=llm", "model.name=OPT-350", f"model.data={data}",
            "hardware=gpu_cluster", f"hardware.data={data}", "hardware.gpus={GH-96: 8}", "planner.fill=true"]
    (tmp_path / "run").mkdir()
    out = run_inprocess(tmp_path / "run", *args)
    assert out.returncode == 0, out.stdout + out.stderr
    tags = store_runs(tmp_path / "run")[0].data.tags
    assert tags["plan.derived_types"].startswith("GH-96 (1 measured (micro-batch, TP) entries kept")
    assert tags["plan.derived_used"] == "GH-96" and "derived:" in out.stdout
    (tmp_path / "off").mkdir()                          # without planner.fill: its one measured entry, nothing derived
    off = run_inprocess(tmp_path / "off", *args[:-1])
    assert off.returncode == 0, off.stdout + off.stderr
    assert "plan.derived_types" not in store_runs(tmp_path / "off")[0].data.tags
