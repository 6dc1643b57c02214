"""The planners of issue 28: joint against the baselines and the published plans on the anchor's metric, the
certified bound, the cost and budget objectives, a comparison sweep."""

import json
import math
from pathlib import Path

import pytest

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Plan
from orchestrator.planning.bound import lower_bound
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective, simulator
from orchestrator_plugins.planners.baselines import AMPPlanner, MetisPlanner
from orchestrator_plugins.planners.joint import JointPlanner

from conftest import run_inprocess, store_runs

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
pytestmark = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")


@pytest.fixture(scope="module")
def profile():
    return LayeredProfile.from_directory(SAILOR, "OPT-350")


def _cluster(gpus):
    return GpuCluster.from_directory(SAILOR).with_gpus(gpus)


THROUGHPUT = PlanObjective()


def _run(cls, profile, cluster, objective=THROUGHPUT, judge="sailor", **cfg):
    ev = PlanEvaluator(simulator(judge), profile, cluster, 1024)
    plan = cls(cfg).plan(profile, cluster, objective, ev)
    ev.check(plan)
    return plan, ev.evaluate(plan)


@pytest.mark.slow
def test_joint_beats_the_baselines_and_the_published_plan_on_the_anchors_metric(profile):
    cluster = _cluster({"A100-40": 32, "V100-16": 96})
    _, joint = _run(JointPlanner, profile, cluster, budget_s=20.0)
    published = json.loads((SAILOR / "planner-plans" / "sailor_a32_v96.json").read_text())["sailor_simulator_iteration_s"]
    assert joint.fits
    for cls in (AMPPlanner, MetisPlanner):
        assert joint.iteration_s < _run(cls, profile, cluster)[1].iteration_s
    assert joint.iteration_s < published


def test_the_bound_is_below_every_plan_on_both_simulators(profile):
    for f in sorted((SAILOR / "planner-plans").glob("*.json")):
        doc = json.loads(f.read_text())
        cluster = _cluster(doc["cluster"])
        bound = lower_bound(profile, cluster, doc["gbs"])
        plan = Plan.from_sailor(doc)
        for judge in ("sailor", "project"):
            assert bound <= simulator(judge).estimate(plan, profile, cluster, doc["gbs"]).iteration_s, (f.name, judge)
    cluster = _cluster({"GH-96": 16})
    _, est = _run(JointPlanner, profile, cluster, judge="project", budget_s=10.0)
    assert lower_bound(profile, cluster, 1024) <= est.iteration_s <= 1.15 * lower_bound(profile, cluster, 1024)


def test_an_objective_refuses_the_other_objectives_constraint_and_names_its_own(profile):
    from orchestrator.errors import InfeasiblePlanError

    assert PlanObjective("throughput", min_samples_per_s=5).ignored() == [
        "planner.min_samples_per_s=5 is read by planner.objective=cost only; planner.objective=throughput ignores it"]
    assert PlanObjective("cost", 5, 9).ignored() == [
        "planner.max_usd_per_hour=9 is read by planner.objective=budget only; planner.objective=cost ignores it"]
    assert PlanObjective("cost", min_samples_per_s=5).ignored() == []
    unreachable = PlanObjective("cost", min_samples_per_s=1e9)
    with pytest.raises(InfeasiblePlanError, match=r"no plan fits in memory and meets planner.objective=cost with "
                                                  r"planner.min_samples_per_s=1e\+09"):
        _run(JointPlanner, profile, _cluster({"A100-40": 8}), unreachable, budget_s=2.0)


@pytest.mark.slow
def test_cost_and_budget_objectives(profile):
    cluster = _cluster({"A100-40": 32, "V100-16": 96})
    _, fast = _run(JointPlanner, profile, cluster, budget_s=10.0)
    floor = 0.5 * fast.samples_per_s
    _, cheap = _run(JointPlanner, profile, cluster, PlanObjective("cost", min_samples_per_s=floor), budget_s=10.0)
    assert cheap.samples_per_s >= floor and cheap.usd_per_iteration < fast.usd_per_iteration
    cap = 200.0
    plan, capped = _run(JointPlanner, profile, cluster, PlanObjective("budget", max_usd_per_hour=cap), budget_s=10.0)
    assert capped.usd_per_iteration * 3600 / capped.iteration_s <= cap + 1e-6 and capped.fits


@pytest.mark.slow
def test_the_cost_objective_tries_pipeline_classes_as_the_others_do(profile):
    """The cost recipe's two questions agree: the fastest plan at <= 100 USD/h ran 112.5 samples/s at 0.2239 USD per
    iteration (two pipeline classes), while 'the cheapest at >= 100 samples/s' answered 0.2261 (the cost search
    skipped the pipeline classes)."""
    from orchestrator.plan.fill import derive_for_cluster

    cluster = _cluster({"H100": 16, "A100-40": 16, "V100-16": 32, "L40S": 16})
    filled = derive_for_cluster(profile, cluster)
    ev = PlanEvaluator(simulator("project"), filled, cluster, 1024)
    # a work limit, not a time share: under a time share a loaded CI machine reached the classes' 85% of the budget
    # before they ran (class_plans_judged 0 once in four CI runs); the budget is then only a generous cap
    planner = JointPlanner({"budget_s": 300.0, "work_limit": 300})
    cheap = ev.evaluate(planner.plan(filled, cluster, PlanObjective("cost", min_samples_per_s=100.0), ev))
    assert cheap.samples_per_s >= 100.0 and planner.stats["plan.class_plans_judged"] > 0    # the classes are tried
    assert planner.stats["plan.search_cut"] == 0.0
    # (which plan it ends on depends on the walk's extent; the benchmark's table in docs/benchmarks/derived_profiles.md
    # shows the two answers agreeing)


@pytest.mark.slow
def test_a_comparison_sweep_ends_with_its_table(tmp_path):
    s = str(SAILOR)
    out = run_inprocess(tmp_path, "-m", "+planner=joint,amp", "planner.simulator=sailor", "model=llm", f"model.data={s}",
                        "hardware=gpu_cluster", f"hardware.data={s}", "hardware.gpus={A100-40: 8, V100-16: 16}")
    assert out.returncode == 0, out.stderr      # a planner key given once, without '+', reaches every planner
    assert "sweep: 2 trials, 2 finished" in out.stdout + out.stderr and "s/iteration (plan)" in out.stdout
    runs = [r for r in store_runs(tmp_path) if r.data.tags.get("runtime") == "plan"]
    assert {r.data.tags["planner"] for r in runs} == {"joint", "amp"}
    assert {r.data.tags["plan.simulator"] for r in runs} == {"sailor"}
    assert all(r.data.metrics["plan.bound_iteration_s"] <= r.data.metrics["plan.iteration_s"] for r in runs)


@pytest.mark.parametrize("gpus", [{"A100-40": 8, "V100-16": 16}, {"A100-40": 4, "V100-16": 12}, {"GH-96": 8}])
def test_the_bound_is_below_every_planners_plan_on_both_simulators(profile, gpus):
    from orchestrator_plugins.planners.uniform import UniformPlanner

    cluster = _cluster(gpus)
    bound = lower_bound(profile, cluster, 1024)
    assert 0 < bound < float("inf")
    for judge in ("sailor", "project"):
        for cls, cfg in ((JointPlanner, {"budget_s": 1.0}), (AMPPlanner, {}), (MetisPlanner, {}), (UniformPlanner, {})):
            plan, est = _run(cls, profile, cluster, judge=judge, **cfg)
            assert est.fits
            for sim in ("sailor", "project"):
                assert bound <= simulator(sim).estimate(plan, profile, cluster, 1024).iteration_s, (cls.__name__, judge, sim)


def test_the_bound_charges_what_memory_forces(profile):
    from orchestrator.planning.bound import capacity, min_transfer, per_sample_costs

    cluster = _cluster({"A100-40": 8, "V100-16": 8})
    cap, whole = capacity(profile, cluster, "V100-16", 1, 2)          # 16 GB: not the whole model at TP 1
    assert not whole and 1 <= cap < profile.num_layers
    assert capacity(profile, cluster, "A100-40", 4, 1)[1]             # 4 x 40 GB hold it
    assert min_transfer(profile, cluster, "V100-16", 1, 2) > 0
    names, e = per_sample_costs(profile, cluster, 2)
    t = profile.layer_times("V100-16", 2, 1)
    assert e[5, names.index("V100-16")] > (t[5][0] + t[5][1]) / 2 * 0.999   # a send per micro-batch charged


def test_a_budget_too_small_for_this_machine_still_gives_a_plan_that_fits(profile):
    """planner.budget_s bounds the search, but a budget spent before any template is ranked or judged (a tiny one,
    or a loaded machine: the CI of stop 35 saw "none of 507 templates ... fits" at budget_s=2) goes on until one
    plan fits instead of claiming that none does."""
    cluster = _cluster({"A100-40": 32, "V100-16": 96})
    _, tiny = _run(JointPlanner, profile, cluster, budget_s=0.001)
    _, more = _run(JointPlanner, profile, cluster, budget_s=2.0)
    assert tiny.fits and more.fits and math.isfinite(tiny.iteration_s)


def test_a_search_cut_by_its_budget_says_so_and_a_complete_one_does_not(profile):
    """The joint planner's steps stop at fractions of planner.budget_s: where that ends one before it is complete,
    the plan may differ on a rerun (or another machine), and the stats (and the summary) say so."""
    small = _cluster({"A100-40": 8, "V100-16": 8})
    ev = PlanEvaluator(simulator("project"), profile, small, 1024)
    complete = JointPlanner({"budget_s": 60.0})
    complete.plan(profile, small, THROUGHPUT, ev)
    assert complete.stats["plan.search_cut"] == 0.0 and complete.stats["plan.search_budget_s"] == 60.0
    large = _cluster({"A100-40": 32, "V100-16": 96})
    cut = JointPlanner({"budget_s": 0.001})
    cut.plan(profile, large, THROUGHPUT, PlanEvaluator(simulator("project"), profile, large, 1024))
    assert cut.stats["plan.search_cut"] == 1.0
    from orchestrator.summary import plan_lines

    said = "\n".join(plan_lines({"metrics": cut.stats, "tags": {}}))
    assert "cut by planner.budget_s=0.001 before the search was complete" in said
    assert "cut by" not in "\n".join(plan_lines({"metrics": complete.stats, "tags": {}}))


def test_a_work_limit_gives_the_same_plan_whatever_the_time(profile):
    """planner.work_limit: the walk stops after N steps, not at a share of the budget, so the plan does not move
    with the machine's load (a run of 0.5 s budget share against one of 60 s give the same plan)."""
    cluster = _cluster({"A100-40": 32, "V100-16": 96})
    plans = []
    for budget in (20.0, 60.0):
        ev = PlanEvaluator(simulator("project"), profile, cluster, 1024)
        j = JointPlanner({"budget_s": budget, "work_limit": 150})
        plans.append((j.plan(profile, cluster, THROUGHPUT, ev).describe(), j.stats))
    (a, sa), (b, sb) = plans
    assert a == b and sa["plan.walk_steps"] == sb["plan.walk_steps"] == 150 and sa["plan.work_limit"] == 150
    assert sa["plan.search_cut"] == sb["plan.search_cut"] == 0.0


@pytest.mark.slow
def test_joint_on_512_gpus_within_its_budget_beats_the_published_plans(profile):
    """On 128 A100s + 384 V100s, within a budget of 8 s (issue 28's search target, <= 30 s, is a row of
    docs/benchmarks/plans.md measured at planner.budget_s=30; the best template is found after about 1 s)."""
    import time

    cluster = _cluster({"A100-40": 128, "V100-16": 384})
    t0 = time.perf_counter()
    _, joint = _run(JointPlanner, profile, cluster, budget_s=8.0)
    assert time.perf_counter() - t0 <= 10.0 and joint.fits
    for name in ("sailor", "metis", "amp", "flashflex"):
        doc = json.loads((SAILOR / "planner-plans" / f"{name}_a128_v384.json").read_text())
        assert joint.iteration_s < doc["sailor_simulator_iteration_s"]
    assert joint.iteration_s <= 1.72                      # 0.93 x the grid floor of issue 28 (1.849)
