"""How far a plan's figure can be trusted (orchestrator/planning/trust.py; docs/plans.md, "How far a plan can be
trusted"): the shape of a plan against the measured plans, the error measured on the nearest ones, simulator
disagreement judged by that error, and the all-reduce term the measured plans support."""

import json
import math
import statistics
from pathlib import Path

import pytest

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Pipeline, Plan, Replica, Stage
from orchestrator.planning import trust
from orchestrator.planning.phase import PlanningPhase
from orchestrator.planning.sailor import SailorSimulator
from orchestrator.planning.simulator import Calibration, ProjectSimulator

from conftest import run_inprocess, store_runs

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
pytestmark = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")
MEASURED = SAILOR / "measured" / "gh200-opt-350"


def _measured(name: str) -> tuple[Plan, dict]:
    doc = json.loads((MEASURED / f"plan_config_{name}.json").read_text())
    return Plan.from_sailor(doc), doc


def _two_pipelines() -> Plan:
    """16 V100-16 + 16 A100-40 (machines of 4), TP 1: two pipelines, four replicas of a stage per machine."""
    v, a = Replica("V100-16", 1, 4), Replica("A100-40", 1, 4)
    pipe = Pipeline((Stage(tuple(range(7)), (v,) * 8), Stage(tuple(range(7, 26)), (a,) * 8)))
    return Plan([pipe, pipe], 1)


def test_a_measured_plans_own_shape_names_it_nearest_with_its_error():
    plan, doc = _measured("N8_D2")
    judged = trust.assess(plan, doc["gbs"], "project", ("sailor",), (SAILOR,))
    (first, d0), _ = judged.nearest
    assert first.name == "gh200-opt-350/N8_D2" and d0 == 0.0 and not judged.outside
    cluster, profile = GpuCluster.from_directory(SAILOR), LayeredProfile.from_directory(SAILOR, "OPT-350")
    own = ProjectSimulator().estimate(plan, profile, cluster, doc["gbs"]).iteration_s / doc["real"] - 1
    line = judged.line()
    assert line.startswith("trust: shape 1 pipeline x 4 stages, DP 2, TP 4") and "(N8_D2, " in line
    assert f"within {100 * abs(own):.1f}% / " in line and "inside the measured range" in line
    assert judged.errors["project"] >= abs(own) and judged.metrics()["plan.trust_distance"] == 0.0
    sailor_own = SailorSimulator().estimate(plan, profile, cluster, doc["gbs"]).iteration_s / doc["real"] - 1
    assert judged.errors["sailor"] >= abs(sailor_own)        # each simulator's own error, simulated here


def test_a_shape_far_from_every_measured_plan_is_flagged_outside_the_range():
    judged = trust.assess(_two_pipelines(), 256, "project", ("sailor",), (SAILOR,))
    s = judged.shape
    assert (s.pipelines, s.stages, s.dp, s.tp) == (2, 2, 16, 1)
    assert s.dp_across_pipelines and s.dp_shares_machine and s.stages_across_types and not s.dp_across_types
    for what in ("DP across pipelines", "several DP replicas on one machine", "pipelines 2 (measured: 1)",
                 "GPU types A100-40, V100-16 (measured: GH-96)"):
        assert what in judged.outside
    assert "outside the measured range: " in judged.line() and judged.distance > 4
    assert judged.tags()["plan.trust_outside"].count(";") == len(judged.outside) - 1
    near = trust.assess(*_measured("N16_D8")[:1], 1024, "project", roots=(SAILOR,))   # a measured shape: closer
    assert near.distance < judged.distance


def test_a_model_no_measured_plan_trained_is_outside_the_range():
    """The nearest plans' errors were measured on OPT-350M's layers: for another model the line says so."""
    plan, doc = _measured("N8_D2")
    assert not trust.assess(plan, doc["gbs"], "project", roots=(SAILOR,), model="OPT-350").outside
    judged = trust.assess(plan, doc["gbs"], "project", roots=(SAILOR,), model="resnet50")
    assert judged.outside == ["model resnet50 (measured: OPT-350)"] and judged.distance == 0.0


def test_no_measured_plans_means_an_unknown_error(tmp_path):
    judged = trust.assess(_two_pipelines(), 256, "project", roots=(tmp_path,))
    assert not judged.nearest and not judged.errors and "the error of this figure is unknown" in judged.line()


def test_simulators_apart_beyond_the_error_on_the_nearest_plans_warn():
    judged = trust.assess(_two_pipelines(), 256, "project", ("sailor",), (SAILOR,))
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 16, "V100-16": 16})
    profile = LayeredProfile.from_directory(SAILOR, "OPT-350")
    m = {f"plan.iteration_s.{name}": sim.estimate(_two_pipelines(), profile, cluster, 256).iteration_s
         for name, sim in (("project", ProjectSimulator()), ("sailor", SailorSimulator()))}
    tags: dict[str, str] = {}
    PlanningPhase.disagreement("project", m, tags, judged)
    nearest = ", ".join(n for n, _ in ((x.name, d) for x, d in judged.nearest))
    assert "trust neither figure" in tags["plan.simulators_disagree"] and nearest in tags["plan.simulators_disagree"]
    # the threshold is the measured error, not a fixed 16%: 10% apart warns where the nearest errors are 2% and 5%
    e = {"project": 0.02, "sailor": 0.05}
    assert trust.disagreements("project", {"project": 1.0, "sailor": 1.1}, e, "on them")
    assert not trust.disagreements("project", {"project": 1.0, "sailor": 1.05}, e, "on them")
    assert not trust.disagreements("project", {"project": 1.0, "sailor": 1.1}, {"project": 0.06, "sailor": 0.05}, "")


def test_a_planning_trial_logs_its_trust(tmp_path):
    path = MEASURED / "plan_config_N4_D2.json"
    out = run_inprocess(tmp_path, "+planner=file", f"planner.path={path}", "model=llm", "model.name=OPT-350",
                        f"model.data={SAILOR}", "hardware=gpu_cluster", f"hardware.data={SAILOR}")
    assert out.returncode == 0, out.stderr
    run = store_runs(tmp_path)[0]
    assert "nearest measured plans (N4_D2, " in run.data.tags["plan.trust"]
    assert run.data.tags["plan.trust_nearest"].startswith("gh200-opt-350/N4_D2")
    assert run.data.metrics["plan.trust_distance"] == 0.0
    assert run.data.metrics["plan.nearest_error_pct"] >= 100 * abs(run.data.metrics["plan.simulated_error"]) - 1e-9
    trust_line = [ln for ln in out.stdout.splitlines() if ln.startswith("  trust:    ")]   # the summary prints it
    assert len(trust_line) == 1 and "nearest measured plans (N4_D2, " in trust_line[0]


def test_the_allreduce_term_moves_the_plans_toward_their_measured_allreduce():
    """The measured all-reduce (red_grads) of every shared plan with data parallelism exceeds the ring on the
    link fits; the term must raise those plans' all-reduce, its factor is the median measured / simulated ratio
    (not typed in by hand), and the iteration time's error over the 15 plans must not grow."""
    cluster, profile = GpuCluster.from_directory(SAILOR), LayeredProfile.from_directory(SAILOR, "OPT-350")
    before, after = ProjectSimulator(Calibration(allreduce_factor=1.0)), ProjectSimulator()
    ratios, err_before, err_after, off_b, off_a = [], [], [], [], []
    for f in sorted(MEASURED.glob("plan_config_*.json")):
        doc = json.loads(f.read_text())
        plan = Plan.from_sailor(doc)
        b, a = (s.estimate(plan, profile, cluster, doc["gbs"]) for s in (before, after))
        ar_b, ar_a = max(x.allreduce_s for x in b.stages), max(x.allreduce_s for x in a.stages)
        if ar_b > 0:
            assert doc["red_grads"] > ar_b and ar_a > ar_b, f.name          # measured above, the term raises it
            ratios.append(doc["red_grads"] / ar_b)
            off_b.append(abs(math.log(doc["red_grads"] / ar_b)))
            off_a.append(abs(math.log(doc["red_grads"] / ar_a)))
        err_before.append(abs(b.iteration_s / doc["real"] - 1))
        err_after.append(abs(a.iteration_s / doc["real"] - 1))
    assert len(ratios) == 11 and statistics.median(off_a) < statistics.median(off_b) / 2    # closer to measured
    assert Calibration().allreduce_factor == pytest.approx(statistics.median(ratios), abs=0.005)
    assert statistics.median(err_after) < statistics.median(err_before) and max(err_after) <= max(err_before)
