"""A new communication term is one file (issue 42's target): a per-message software overhead written
into ``orchestrator/hardware/cost.py`` alone, in a copy of the package, moves the placement simulator's
step, the sync cost model's collectives and the plan simulator's iteration alike. The walk-through is in
CONTRIBUTING.md ("Adding a communication term"); these are the same edits."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAILOR = ROOT.parent / "shared" / "workloads" / "sailor"
OVERHEAD = 1e-3   # seconds per message per link: large enough to see in every figure

# (old, new) in cost.py: every place a message's per-link latency is counted
EDITS = [
    ("GiB = 2 ** 30", f"GiB = 2 ** 30\nMESSAGE_OVERHEAD_S = {OVERHEAD!r}"),
    ("return latency + nbytes / bandwidth", "return latency + MESSAGE_OVERHEAD_S + nbytes / bandwidth"),
    ("else latency + nbytes / bandwidth", "else latency + MESSAGE_OVERHEAD_S + nbytes / bandwidth"),
    ("np.where(f >= 0, f, lat + b / bw)", "np.where(f >= 0, f, lat + MESSAGE_OVERHEAD_S + b / bw)"),
    ("lat[a, b] += link_lat[l]", "lat[a, b] += link_lat[l] + MESSAGE_OVERHEAD_S"),
    ("return self.free_at + self.latency_s", "return self.free_at + self.latency_s + MESSAGE_OVERHEAD_S"),
]

PROBE = r"""
import json, sys
from pathlib import Path
from orchestrator.graph import Edge, Node, OpGraph, Placement
from orchestrator.hardware.cluster import Device, Worker
from orchestrator.hardware.links import ConstantLink
from orchestrator.placement.simulate.simulator import simulate
from orchestrator.placement.solve.problem import PlacementProblem
from orchestrator.sync.costmodel import allgather_s, allreduce_s
from orchestrator.hardware.topology import Topology

out = {}
g = OpGraph("t", [Node("a", cost={"gpu": 1.0}), Node("b", cost={"gpu": 1.0})], [Edge("a", "b", 1e8)]).validate()
devs = [Device(f"gpu:{i}", "gpu") for i in range(2)]
w = Worker("w", devs, Topology({(x.name, y.name): ConstantLink(1e9, 1e-5) for x in devs for y in devs if x is not y}))
out["placement_step_s"] = simulate(g, w, Placement(w.device_names, {"a": "gpu:0", "b": "gpu:1"})).step_time_s
net = Topology.uniform(4)
out["sync_allreduce_s"] = allreduce_s(1e8, net)
out["sync_allgather_s"] = allgather_s(1e6, net)
sailor = Path(sys.argv[1])
if sailor.is_dir():
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan import LayeredProfile, Plan
    from orchestrator.planning.evaluator import simulator
    doc = json.loads(sorted((sailor / "measured" / "gh200-opt-350").glob("plan_config_*.json"))[0].read_text())
    cluster, profile = GpuCluster.from_directory(sailor), LayeredProfile.from_directory(sailor, "OPT-350")
    out["plan_iteration_s"] = simulator("project").estimate(Plan.from_sailor(doc), profile, cluster, doc["gbs"]).iteration_s
print(json.dumps(out))
"""


def _figures(src: Path, tmp: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "NUMBA_CACHE_DIR": str(tmp / "numba")}
    out = subprocess.run([sys.executable, "-c", PROBE, str(SAILOR)], cwd=tmp, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_per_message_overhead_in_cost_py_reaches_placement_sync_and_plans(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "orchestrator", copy / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    cost = copy / "orchestrator" / "hardware" / "cost.py"
    text = cost.read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, f"cost.py no longer has {old!r} exactly once: update CONTRIBUTING and this test"
        text = text.replace(old, new)
    (tmp_path / "base").mkdir()
    (tmp_path / "term").mkdir()
    shutil.copytree(ROOT / "orchestrator", tmp_path / "plain" / "orchestrator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    base = _figures(tmp_path / "plain", tmp_path / "base")
    cost.write_text(text)
    term = _figures(copy, tmp_path / "term")
    assert base.keys() == term.keys()
    # one message on one link: exactly one overhead more
    assert term["placement_step_s"] == pytest.approx(base["placement_step_s"] + OVERHEAD, rel=1e-9)
    # a ring all-reduce over 4 workers: 2 (k - 1) = 6 messages in sequence; an all-gather: k - 1 = 3
    assert term["sync_allreduce_s"] == pytest.approx(base["sync_allreduce_s"] + 6 * OVERHEAD, rel=1e-9)
    assert term["sync_allgather_s"] == pytest.approx(base["sync_allgather_s"] + 3 * OVERHEAD, rel=1e-9)
    if "plan_iteration_s" in base:
        assert term["plan_iteration_s"] > base["plan_iteration_s"] + OVERHEAD
