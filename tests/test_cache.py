"""The results cache (orchestrator.cache): a bound computed once serves the next trial on the same cluster, and
says so; other inputs, other code, a broken file or ORCHESTRATOR_CACHE=off compute it again."""

from pathlib import Path

import pytest

import orchestrator.cache as cache

from conftest import run_inprocess, store_runs

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_memo", {})
    return tmp_path / "cache"


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}
    return calls, compute


def test_a_result_is_computed_once_per_inputs_and_code(folder, monkeypatch):
    calls, compute = _counting()
    assert cache.cached("t", (1, "a"), compute) == ({"value": 1}, False)
    monkeypatch.setattr(cache, "_memo", {})                       # another process: from the file
    assert cache.cached("t", (1, "a"), compute) == ({"value": 1}, True) and len(calls) == 1
    assert cache.cached("t", (2, "a"), compute) == ({"value": 2}, False)          # other inputs
    assert cache.cached("u", (1, "a"), compute) == ({"value": 3}, False)          # another kind
    monkeypatch.setattr(cache, "_memo", {})
    monkeypatch.setattr(cache, "code_version", lambda: "other code")
    assert cache.cached("t", (1, "a"), compute) == ({"value": 4}, False)
    assert len(list(folder.glob("*.pkl"))) == 4 and not list(folder.glob(".*"))   # no temporary file left


def test_a_broken_file_is_computed_again_and_off_stores_nothing(folder, monkeypatch):
    calls, compute = _counting()
    cache.cached("t", "x", compute)
    (path,) = folder.glob("*.pkl")
    path.write_bytes(path.read_bytes()[:5])                        # truncated
    monkeypatch.setattr(cache, "_memo", {})
    assert cache.cached("t", "x", compute) == ({"value": 2}, False)
    monkeypatch.setattr(cache, "_memo", {})
    assert cache.cached("t", "x", compute) == ({"value": 2}, True)          # replaced whole
    monkeypatch.setenv("ORCHESTRATOR_CACHE", "off")
    monkeypatch.setattr(cache, "_memo", {})
    assert cache.cache_dir() is None and cache.cached("t", "y", compute) == ({"value": 3}, False)
    assert cache.cached("t", (lambda: 0), compute) == ({"value": 4}, False)      # inputs that do not pickle


@pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")
def test_the_second_planner_on_a_cluster_reads_the_bound_and_says_so(tmp_path, folder):
    args = ["model=llm", "model.name=OPT-350", f"model.data={SAILOR}", "hardware=gpu_cluster", f"hardware.data={SAILOR}",
            "hardware.gpus={A100-40: 8, V100-16: 16}", "planner.simulator=sailor"]
    figures = []
    for planner in ("metis", "amp"):
        (tmp_path / planner).mkdir()
        out = run_inprocess(tmp_path / planner, f"+planner={planner}", *args)
        assert out.returncode == 0, out.stdout + out.stderr
        run = store_runs(tmp_path / planner)[0]
        figures.append((run.data.metrics["plan.bound_iteration_s"], run.data.tags.get("plan.bound_cached"), out.stdout))
    (first, cached_first, _), (second, cached_second, printed) = figures
    assert first == second and cached_first is None and cached_second == "true"
    assert "(cached from an earlier trial)" in printed
