"""docs/plugins.md's planner section, followed as written: its files as a package (registered with the
plugin manager as its entry point would be), a planning trial with the plugin's own key and a base key
written without '+', and its errors as one line."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from conftest import run_inprocess, store_runs

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
BLOCK = re.compile(r"```\w*\n# file: (?P<path>\S+)\n(?P<body>.*?)```", re.S)
pytestmark = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")


@pytest.fixture
def two_stages(tmp_path, monkeypatch):
    from orchestrator import plugins

    section = DOC.read_text().split("## A planner (plans for clusters of mixed GPUs)", 1)[1].split("\n## ", 1)[0]
    files = {m["path"]: m["body"] for m in BLOCK.finditer(section)}
    assert {"orchestrator-two-stages/src/orch_two_stages/__init__.py", "orchestrator-two-stages/src/orch_two_stages/planner.py",
            "orchestrator-two-stages/src/orch_two_stages/conf/planner/two_stages.yaml"} <= set(files)
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path / "orchestrator-two-stages" / "src"))
    module = importlib.import_module("orch_two_stages")
    pm = plugins.get_plugin_manager()
    pm.register(module, name="two_stages")
    yield tmp_path
    pm.unregister(name="two_stages")
    for name in [m for m in sys.modules if m.startswith("orch_two_stages")]:
        del sys.modules[name]


def test_the_documented_planner_plans_with_its_keys_and_fails_in_one_line(two_stages):
    work = two_stages / "work"
    work.mkdir()
    base = ["+planner=two_stages", "model=llm", "model.name=OPT-350", f"model.data={SAILOR}", "hardware=gpu_cluster",
            f"hardware.data={SAILOR}", "hardware.gpus={GH-96: 8}"]
    out = run_inprocess(work, *base, "planner.replicas=2", "planner.simulator=sailor")
    assert out.returncode == 0, out.stderr
    run = store_runs(work)[0]
    assert run.info.status == "FINISHED" and run.data.tags["plan.simulator"] == "sailor"
    assert run.data.metrics["plan.iteration_s"] > 0
    bad = run_inprocess(work, *base, "planner.replicas=0")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "planner.replicas" in bad.stderr
    # a plan the objective refuses (over the spending ceiling): the planner's InfeasiblePlanError, one line
    poor = run_inprocess(work, *base, "planner.replicas=2", "planner.objective=budget", "planner.max_usd_per_hour=0.01")
    lines = poor.stderr.strip().splitlines()
    assert poor.returncode == 2 and lines == ["error: planner=two_stages: two stages of 2 do not fit"], poor.stderr
    assert all(r.info.status != "RUNNING" for r in store_runs(work))


def test_a_simulator_missing_a_rule_is_one_line_naming_it(monkeypatch):
    import types

    from orchestrator import api, plugins
    from orchestrator.errors import ConfigError
    from orchestrator.planning.simulators import simulator

    class OnlyEstimate(api.PlanSimulator):
        def estimate(self, plan, profile, cluster, global_batch, timeline=False):
            raise AssertionError("never built")

    class Registers:
        @api.hookimpl
        def orchestrator_simulators(self):
            return {"partial": "partial_sim:OnlyEstimate"}

    monkeypatch.setitem(sys.modules, "partial_sim", types.SimpleNamespace(OnlyEstimate=OnlyEstimate))
    pm = plugins.get_plugin_manager()
    pm.register(Registers(), name="partial-simulator")
    try:
        with pytest.raises(ConfigError, match=r"planner.simulator='partial': OnlyEstimate does not implement "
                                              r"boundary_time, .*stage_memory"):
            simulator("partial")
    finally:
        pm.unregister(name="partial-simulator")
