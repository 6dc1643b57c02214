"""Plan figures that hold (issue 44 items 1-3): no GPU of the user's cluster dropped without a word, a bound
called certified only for the cluster given, every figure of a plan trial saying what it is, and a planner
comparison as one table, one verdict and one plot."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator.errors import ConfigError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Pipeline, Plan, Replica, Stage
from orchestrator.plan.plan import replicas_text
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective, simulator
from orchestrator.planning.phase import PlanningPhase, check_covered, cost_lower_bound
from orchestrator.summary import plan_lines

from conftest import run_inprocess, store_runs

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
pytestmark = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")
LLM = ["model=llm", "model.name=OPT-350", f"model.data={SAILOR}", "hardware=gpu_cluster"]


@pytest.fixture(scope="module")
def data():
    return GpuCluster.from_directory(SAILOR), LayeredProfile.from_directory(SAILOR, "OPT-350")


def _plan(stages: int, gpu: str = "A100-40", dp: int = 2, tp: int = 1, mbs: int = 2) -> Plan:
    cuts = [round(26 * i / stages) for i in range(stages + 1)]
    return Plan([Pipeline(tuple(Stage(tuple(range(cuts[i], cuts[i + 1])), (Replica(gpu, tp, 4),) * dp)
                                for i in range(stages)))], mbs, 1024)


def _phase(tmp_path, **planner) -> PlanningPhase:
    return PlanningPhase(OmegaConf.create({"planner": planner}), None, None, tmp_path)


def _failed_in_one_line(tmp_path, out, *names: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and all(n in errors[0] for n in names), out.stderr
    assert "Traceback" not in out.stderr
    runs = store_runs(tmp_path)
    assert [r.info.status for r in runs] == ["FAILED"]          # recorded, and nothing left RUNNING


# -- 1. nothing dropped silently ------------------------------------------------------------------
def test_listed_gpu_types_without_a_link_between_them_stop_the_trial(tmp_path):
    """RTX-3090 has no OPT-350 profile (it is derived, below) and Sailor's network measured no link between its
    machines and the A100-40's: a plan could use one group only, so the trial stops naming the missing entry (it
    planned on the 8 A100-40 alone, the 16 RTX-3090 idle, before)."""
    out = run_inprocess(tmp_path, "+planner=joint", *LLM, f"hardware.data={SAILOR}",
                        "hardware.gpus={A100-40: 8, RTX-3090: 16}")
    _failed_in_one_line(tmp_path, out, "A100-40 in us-central1-a and RTX-3090 in us-central1-a", "no link fit between",
                        "multizone_bandwidths_het.json")


def test_a_cluster_file_type_without_a_profile_stops_the_trial(tmp_path):
    """A type neither profiled nor in the GPU catalog (H100-80, the catalog's H100 alias, is derived instead)."""
    (tmp_path / "c.yaml").write_text("node_types:\n  A100-40: {gpus_per_node: 4, memory_GB: 40}\n"
                                     "  X9-80: {gpus_per_node: 8, memory_GB: 80}\n"
                                     "gpus: {A100-40: 8, X9-80: 8}\n")
    out = run_inprocess(tmp_path, "+planner=uniform", *LLM, f"hardware.file={tmp_path / 'c.yaml'}")
    _failed_in_one_line(tmp_path, out, "8 X9-80", "no profile on X9-80", "the GPU catalog", "has no X9-80")


def test_a_cluster_without_gpus_is_a_one_line_error(data):
    cluster, _ = data
    for gpus in ({"A100-40": 0}, {}, {"A100-40": {"us-central1-a": 0}}):
        with pytest.raises(ConfigError, match="lists no GPU: give at least one"):
            cluster.with_gpus(gpus)
    assert cluster.with_gpus({"A100-40": 8, "V100-16": 0}).count() == 8


def test_a_type_whose_machine_comes_from_the_catalog_says_so(data):
    """Layer times measured, but the cluster data has no A100-40 machine: its node, price and links come from the
    GPU catalog, which the trial said nowhere (tagged measured, 'fitted links')."""
    import dataclasses

    from orchestrator.plan.fill import derived_tags

    cluster, profile = data
    bare = dataclasses.replace(cluster, types={k: v for k, v in cluster.types.items() if k != "A100-40"})
    given = bare.with_gpus({"A100-40": 8})
    plan = _plan(1, dp=8)
    tags = derived_tags(profile, given, plan)
    assert tags["plan.derived_nodes"].startswith("A100-40 (derived from datasheet: A100 SXM4 40GB (links: ")
    assert "plan.derived_types" not in tags and derived_tags(profile, cluster.with_gpus({"A100-40": 8}), plan) == {}
    text = "\n".join(plan_lines({"metrics": {}, "tags": {**tags, "plan.simulator": "project"}}))
    assert "fitted links, and datasheet links for the types below" in text
    assert "derived:  machines and links not in the cluster data, from the GPU catalog (layer times measured): A100-40" in text
    # a built-in model's layer times are derived from its graph: not "measured" (probe F)
    text = "\n".join(plan_lines({"metrics": {}, "tags": {**tags, "plan.simulator": "project", "plan.profile": "derived"}}))
    assert "from the GPU catalog (layer times derived too): A100-40" in text, text


def test_all_listed_types_are_checked_for_profiles_and_links(data):
    from orchestrator.plan.fill import derive_for_cluster, derived_types, underived

    cluster, profile = data
    with pytest.raises(ConfigError, match="no profile on RTX-3090"):          # not "none of 0 templates"
        check_covered(profile, cluster.with_gpus({"RTX-3090": 16}))
    # a type Sailor's cluster describes (its links measured) and the catalog knows: its layers are derived, and say so
    rtx = cluster.with_gpus({"RTX-3090": 16})
    assert underived(profile, rtx) == ["RTX-3090"] and underived(profile, cluster.with_gpus({"A100-40": 8})) == []
    filled = derive_for_cluster(profile, rtx)
    check_covered(filled, rtx)
    assert set(filled.tp_degrees("RTX-3090", 1)) == {1, 2, 4, 8} and filled.times["A100-40"] == profile.times["A100-40"]
    assert derived_types(filled, rtx)["RTX-3090"].endswith("; its links measured")
    with pytest.raises(ConfigError, match=r"lists A100-40 in us-central1-a and RTX-3090 .* no link fit between their"):
        check_covered(filled, cluster.with_gpus({"A100-40": 8, "RTX-3090": 16}))
    with pytest.raises(ConfigError, match=r"no link fit between two A100-80 machines .*\[A100-80\]\[1\]"):
        check_covered(profile, cluster.with_gpus({"A100-80": 8}))
    check_covered(profile, cluster.with_gpus({"A100-80": 4}))                  # one machine: no link between machines
    check_covered(profile, cluster.with_gpus({"A100-40": 32, "V100-16": {"us-central1-a": 8, "us-west1-b": 8}}))


def test_the_bound_is_certified_only_for_the_cluster_given():
    m = {"plan.fits": 1.0, "plan.iteration_s": 2.0, "plan.bound_iteration_s": 1.5, "plan.optimality_gap": 1 / 3}
    given = "\n".join(plan_lines({"metrics": m, "tags": {"plan.cluster": "8 A100-40", "plan.cluster_source": "given"}}))
    assert "on 8 A100-40 is faster than 1.5 s per iteration (certified lower bound for the cluster given" in given
    own = "\n".join(plan_lines({"metrics": m, "tags": {"plan.cluster_source": "plan"}}))
    assert "certified lower" not in own and "the plan's own GPUs only" in own


def test_a_plan_that_does_not_fit_has_no_gap_to_the_bound():
    """The bound is over plans that fit: a plan file over memory printed 'this plan is -0.6973% above it'."""
    m = {"plan.iteration_s": 1030.0, "plan.bound_iteration_s": 1038.0}
    text = "\n".join(plan_lines({"metrics": m, "tags": {"plan.fits": "false", "plan.cluster_source": "given"}}))
    assert "this plan does not fit in memory, and the bound is over plans that fit" in text and "% above" not in text


def test_an_objective_without_its_constraint_says_so():
    """'against the floor - samples/s' / 'against the ceiling - USD/h' where no constraint was given."""
    for kind, words in (("cost", "with no floor (planner.min_samples_per_s not set"),
                        ("budget", "with no ceiling (planner.max_usd_per_hour not set")):
        text = "\n".join(plan_lines({"metrics": {"plan.samples_per_s": 10.0}, "tags": {"plan.objective": kind}}))
        assert words in text and "floor -" not in text and "ceiling -" not in text


def test_gpus_the_planner_leaves_out_are_named(tmp_path):
    # the planner may find no faster plan with some GPUs: the result line says which, per type
    cluster = {("A100-40", "us-central1-a"): 8, ("V100-16", "us-central1-a"): 16}
    assert _plan(1, dp=8).unused(cluster) == "16 V100-16"
    assert _plan(1, dp=4).unused(cluster) == "4 A100-40 + 16 V100-16"
    assert _plan(1, dp=8).unused({("A100-40", "us-central1-a"): 8}) == ""
    out = run_inprocess(tmp_path, "+planner=uniform", *LLM, f"hardware.data={SAILOR}", "hardware.gpus={A100-40: 8, V100-16: 8}")
    assert out.returncode == 0, out.stderr
    assert "samples/s on 8 GPUs (not in the plan: 8 V100-16 of the cluster)" in out.stdout
    assert store_runs(tmp_path)[0].data.tags["plan.unused"] == "8 V100-16"


def test_a_plan_on_an_unpriced_type_logs_no_price(tmp_path):
    """MI250X has no catalog price: its plan's USD were a partial sum (0 USD/h for a type alone), logged as the plan's."""
    out = run_inprocess(tmp_path, "+planner=uniform", *LLM, f"hardware.data={SAILOR}", "hardware.gpus={MI250X: 8}")
    assert out.returncode == 0, out.stderr
    assert "USD: none, MI250X has no price" in out.stdout, out.stdout
    m = store_runs(tmp_path)[0].data.metrics
    assert "plan.usd_per_hour" not in m and "plan.usd_per_iteration" not in m and m["plan.samples_per_s"] > 0


# -- 2. every figure says what it is --------------------------------------------------------------
def test_a_plan_file_shows_its_measured_time_the_error_and_its_replicas(tmp_path):
    path = SAILOR / "measured" / "gh200-opt-350" / "plan_config_N16_D4.json"
    out = run_inprocess(tmp_path, "+planner=file", f"planner.path={path}", *LLM, f"hardware.data={SAILOR}")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "L0-4: 4 replicas x tp4 = 16 GH-96 |" in text and "4xGH-96" not in text
    assert "measured: 2.726 s per iteration (the plan file's `real`); simulated 2.614 s (project), error -4.1%" in text
    assert "certified" not in text                            # no hardware.gpus: the bound is over the plan's own GPUs
    assert "GH-96 23.5 / 95.6 GiB" in text                     # used / capacity
    m = store_runs(tmp_path)[0].data.metrics
    assert m["plan.measured_iteration_s"] == pytest.approx(2.72578)
    assert m["plan.simulated_error"] == pytest.approx(m["plan.iteration_s"] / 2.72578 - 1)
    search = next(ln for ln in text.splitlines() if ln.startswith("  search:"))
    assert "; bound " in search and "planning phase" in search        # search and bound time apart
    assert m["plan.phase_time_s"] >= m["plan.search_time_s"] + m["plan.bound_time_s"]


def test_a_one_stage_plan_has_no_bubble(data, tmp_path):
    cluster, profile = data
    cluster = cluster.with_gpus({"A100-40": 8})
    ev = PlanEvaluator(simulator("project"), profile, cluster, 1024)
    for stages, has_bubble in ((1, False), (2, True)):
        est = ev.evaluate(_plan(stages))
        m = PlanningPhase.metrics(_plan(stages), est, 0.1, ev)
        assert ("plan.bubble_fraction" in m) is has_bubble
        line = "\n".join(plan_lines({"metrics": m, "tags": {}}))
        assert ("bubble" in line and "no pipeline bubble" not in line) is has_bubble


@pytest.mark.parametrize("objective", ["cost", "budget"])
def test_cost_and_budget_show_their_figure_constraint_and_bound(data, tmp_path, objective):
    cluster, profile = data
    cluster = cluster.with_gpus({"A100-40": 16, "V100-16": 16})
    phase = _phase(tmp_path, objective=objective, min_samples_per_s=20.0, max_usd_per_hour=50.0)
    ev = PlanEvaluator(simulator("project"), profile, cluster, 1024)
    usd_lb = cost_lower_bound(profile, cluster, 1024)
    for plan in (_plan(1), _plan(2, dp=4), _plan(2, "V100-16", dp=2, tp=2, mbs=1), _plan(4, dp=4)):
        est = ev.evaluate(plan)
        assert 0 < usd_lb <= est.usd_per_iteration                            # the cost bound holds
        b = phase.bounds([profile], cluster, 1024, plan, est)
        if objective == "budget" and est.usd_per_iteration * 3600 / est.iteration_s <= 50.0:
            assert b["plan.bound_samples_per_s"] >= est.samples_per_s           # no admissible plan beats it
    m = {**PlanningPhase.metrics(plan, est, 0.1, ev), **b, "plan.min_samples_per_s": 20.0, "plan.max_usd_per_hour": 50.0}
    text = "\n".join(plan_lines({"metrics": m, "tags": {"plan.objective": objective}}))
    if objective == "cost":
        assert "objective: cost:" in text and "against the floor 20 samples/s" in text and "USD per iteration" in text
        assert b["plan.optimality_gap"] == pytest.approx(est.usd_per_iteration / usd_lb - 1)
    else:
        assert "objective: budget:" in text and "USD/h against the ceiling 50 USD/h" in text
    assert "certified lower bound" not in text                # the throughput bound is not the objective's
    # the prices say where they come from (probe F: providers mixed in the catalog, named nowhere)
    from orchestrator.hardware.gpu_cluster import price_source

    assert price_source(cluster.gpu_type("A100-40")) == "Sailor's cost studies"
    text = "\n".join(plan_lines({"metrics": m, "tags": {"plan.objective": objective, "plan.prices": "A100-40 3.67339 (sailor-prices)"}}))
    assert "prices:   USD per GPU-hour A100-40 3.67339 (sailor-prices): on-demand list prices" in text, text


def test_the_memory_headroom_is_respected_and_zero_changes_nothing(data, tmp_path):
    cluster, profile = data
    cluster = cluster.with_gpus({"A100-40": 8})
    assert cluster.with_headroom(0.0) is cluster                              # the default: the same plans
    tight = cluster.with_headroom(0.5)
    assert tight.gpu_type("A100-40").memory_bytes == pytest.approx(0.5 * cluster.gpu_type("A100-40").memory_bytes)
    assert tight.gpu_type("A100-40").capacity == cluster.gpu_type("A100-40").memory_bytes
    plan = _plan(1, dp=8)
    loose_est = PlanEvaluator(simulator("project"), profile, cluster, 1024).evaluate(plan)
    tight_est = PlanEvaluator(simulator("project"), profile, tight, 1024).evaluate(plan)
    peak = loose_est.peak_memory["A100-40"]
    assert loose_est.fits and not tight_est.fits and peak > tight.gpu_type("A100-40").memory_bytes
    from plugins.planners.uniform import UniformPlanner

    planner = UniformPlanner(OmegaConf.create({"name": "uniform", "max_stages": 4}))
    ev = PlanEvaluator(simulator("project"), profile, tight, 1024)
    chosen = ev.evaluate(planner.plan(profile, tight, PlanObjective(), ev))
    assert chosen.fits and max(chosen.peak_memory.values()) <= tight.gpu_type("A100-40").memory_bytes
    m = {"plan.fits": 1.0, "plan.peak_memory_bytes.A100-40": peak, "plan.memory_headroom": 0.5,
         **PlanningPhase.memory_metrics(tight, loose_est)}
    text = "\n".join(plan_lines({"metrics": m, "tags": {}}))
    assert f"A100-40 {peak / 2**30:.1f} / 39.4 GiB (limit 19.7 GiB); headroom 50% kept free" in text


def test_simulators_apart_beyond_their_measured_error_are_a_warning():
    tags: dict[str, str] = {}
    PlanningPhase.disagreement("project", {"plan.iteration_s.project": 1.0, "plan.iteration_s.sailor": 1.1}, tags)
    assert tags == {}                                          # 10%: within the measured error
    m = {"plan.fits": 1.0, "plan.iteration_s.project": 0.0316, "plan.iteration_s.sailor": 0.2433}
    PlanningPhase.disagreement("project", m, tags)
    assert "0.0316 s" in tags["plan.simulators_disagree"] and "0.2433 s" in tags["plan.simulators_disagree"]
    assert "7.70x apart" in tags["plan.simulators_disagree"]
    text = plan_lines({"metrics": m, "tags": {"plan.simulator": "project", **tags}})
    assert any(ln.startswith("  WARNING:") and "7.70x" in ln for ln in text)


def test_replicas_are_written_so_the_gpu_count_reads_right():
    assert replicas_text(4, "GH-96", 4) == "4 replicas x tp4 = 16 GH-96"
    assert replicas_text(1, "A100-40", 2) == "1 replica x tp2 = 2 A100-40"
    assert replicas_text(8, "V100-16", 1) == "8 V100-16"


# -- 3. comparing planners ----------------------------------------------------------------------
def test_a_planner_sweep_ends_with_the_plan_table_a_plan_verdict_and_a_plot(tmp_path):
    out = run_inprocess(tmp_path, "-m", "+planner=joint,uniform", *LLM, f"hardware.data={SAILOR}",
                        "hardware.gpus={A100-40: 4, V100-16: 4}")
    assert out.returncode == 0, out.stderr
    for text in (out.stdout, run_inprocess(tmp_path, module="orchestrator.tracking.report").stdout):
        header = next(ln for ln in text.splitlines() if ln.startswith("run "))
        assert header.split() == ["run", "status", "planner", "cluster", "simulator", "objective", "training", "layer",
                                  "times", "s/iteration",
                                  "(plan)", "samples/s", "USD/h", "gap", "to", "bound", "fits", "GPUs", "(plan)"]
        verdict = next(ln for ln in text.splitlines() if ln.startswith("verdict:"))
        assert "wins on throughput" in verdict and "samples/s" in verdict and "no trial reported" not in verdict
    runs = store_runs(tmp_path)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len({r.info.run_name.split(" #")[0] for r in children}) == 2
    assert all("(4 A100-40 + 4 V100-16)" in r.info.run_name for r in children)     # the cluster in the name
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "plots")] == ["plots/plan_comparison.png"]


def test_a_plan_trial_that_fails_in_a_sweep_stays_a_plan_trial(tmp_path):
    out = run_inprocess(tmp_path, "-m", "+planner=joint", *LLM, f"hardware.data={SAILOR}", "planner.budget_s=2",
                        "hardware.gpus={A100-40: 4},{Z100: 4}")
    verdicts = [ln for ln in out.stdout.splitlines() if ln.startswith("verdict")]
    assert len(verdicts) == 1 and "wins on throughput" in verdicts[0] and "1 of 2 plan trials" in verdicts[0], out.stdout
    failed = [r for r in store_runs(tmp_path) if r.info.status == "FAILED"]
    assert len(failed) == 1 and failed[0].info.run_name.startswith("plan:joint/gpu_cluster/OPT-350")
    assert failed[0].data.tags["runtime"] == "plan" and "Z100" in failed[0].data.tags["orchestrator.error"]


def test_the_plan_pictures_name_their_colours_and_gpu_types(data, tmp_path, monkeypatch):
    import matplotlib.figure

    from orchestrator.planning.plots import gantt, layer_map

    cluster, profile = data
    cluster = cluster.with_gpus({"A100-40": 8, "V100-16": 8})
    plan = Plan([Pipeline((Stage(tuple(range(13)), (Replica("V100-16", 1, 4),) * 4),
                           Stage(tuple(range(13, 26)), (Replica("A100-40", 1, 4),) * 4)))], 2, 1024)
    est = PlanEvaluator(simulator("project"), profile, cluster, 1024).evaluate(plan, timeline=True)
    figs = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: (figs.append(self), real(self, *a, **k)))
    gantt(est, tmp_path / "g.png", "t")
    ax = figs[-1].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "backward", "sends", "all-reduce", "update"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["pipeline 0 stage 0 (V100-16)", "pipeline 0 stage 1 (A100-40)"]
    layer_map(plan, 26, tmp_path / "l.png", "t")
    fig = figs[-1]
    ax, legend = fig.axes[0], fig.axes[0].get_legend()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1 - 1   # beside the bars
