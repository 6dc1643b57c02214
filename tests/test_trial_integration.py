"""Trials that combine the pieces: workloads, simulated hardware, placers x sync strategies, real remote devices."""

import json
from pathlib import Path

import pytest

from conftest import NO_CONTEXT, QUICK, run_cli, run_inprocess, store_runs

DATA = Path(__file__).resolve().parent / "data" / "msr-dnn-partitioning"
INCEPTION = DATA / "latency-inputs" / "LayerGraphs" / "inceptionv3_inference.json"


def _only_run(workdir):
    (run,) = store_runs(workdir)
    return run


@pytest.mark.slow  # bert24 with its bound: ~25 s
def test_workload_with_expert_split_is_simulated(workdir):
    bert = DATA / "throughput-inputs/LayerGraphs/bert24_training.json"
    out = run_inprocess(workdir, "+placer=greedy", "model=workload", "hardware=auto", f"model.path={bert}",
                        f"model.split={DATA / 'human-experts/bert24_training_expert.json'}", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run = _only_run(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["evaluator"] == "simulated" and tags["placement.baseline"] == "expert split (model.split)" and tags["placement.objective"] == "pipeline"
    assert m["placement.lower_bound_s"] <= m["placement.step_time_s"] + 1e-12
    assert m["speedup"] == m["placement.speedup"] and "train.loss" not in m


def test_memory_infeasible_graph_fails_before_search(workdir):
    wl = json.loads(INCEPTION.read_text())
    wl["maxSizePerFPGA"] = 1  # no accelerator can hold anything
    wl["maxFPGAs"], wl["maxCPUs"] = 2, 0
    path = workdir / "tiny.json"
    path.write_text(json.dumps(wl))
    out = run_inprocess(workdir, "+placer=rl", "model=workload", "hardware=auto", f"model.path={path}")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len([ln for ln in out.stderr.splitlines() if ln.startswith("error:")]) == 1, out.stderr
    run = _only_run(workdir)
    assert run.info.status == "FAILED" and "placement.evaluations" not in run.data.metrics


@pytest.mark.slow  # placement, then training on a virtual heterogeneous cluster
def test_placer_and_sync_on_a_heterogeneous_simulated_cluster(workdir):
    out = run_inprocess(workdir, "+placer=greedy", "+sync=delay", "hardware=sim_hetero_cluster", *QUICK, *NO_CONTEXT,
                        timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    run = _only_run(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["runtime"] == "virtual" and tags["evaluator"] == "simulated" and tags["train.clock"] == "virtual"
    speeds = {k: v for k, v in m.items() if k.startswith("hardware.speed.")}
    assert len(speeds) == 3 and len(set(round(v, 6) for v in speeds.values())) == 3  # V100, A100, K80 hosts differ
    assert {"train.speedup", "placement.speedup", "sync.staleness_max", "sync.pushes_applied"} <= set(m)


@pytest.mark.slow  # whole trials that train; the fast tier trains delay-sync in the mission command's test
@pytest.mark.parametrize("strategy", ["allreduce", "async", "delay"])
def test_sync_strategies_run_virtually(workdir, strategy):
    out = run_inprocess(workdir, f"+sync={strategy}", *QUICK, *NO_CONTEXT, timeout=600)   # the context: the mission's test
    assert out.returncode == 0, out.stderr[-2000:]
    run = _only_run(workdir)
    assert run.data.tags["sync"] == strategy and run.data.tags["runtime"] == "virtual"
    assert run.data.metrics["train.final_test_accuracy"] >= 0.8 and "train.speedup" in run.data.metrics


# On MPI ranks: README's commands, with the same checks (tests/test_documented_commands.py).


# An RL search on tf_cluster is the two paths tested apart: searched on the simulator and measured on the devices
# (test_the_mission_command_runs_on_the_defaults), a placement measured and trained on two TF server processes (below).
@pytest.mark.slow
def test_placed_cnn_trains_on_two_tf_server_processes(workdir):
    out = run_cli(workdir, "+placer=manual", "hardware=tf_cluster", *QUICK, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    run = _only_run(workdir)
    assert run.data.metrics["placement.devices_used"] == 2 and run.data.tags["evaluator"] == "measured"
    placement = json.loads(next(Path(workdir).rglob("placement.json")).read_text())
    assert set(placement["assignment"].values()) == {"cpu:0", "cpu:1"}


def test_the_mission_command_runs_on_the_defaults(workdir):
    """`python -m orchestrator +placer=rl +sync=delay`, with small budgets."""
    out = run_inprocess(workdir, "+placer=rl", "+sync=delay", "placer.budget_evaluations=300", *QUICK, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    run = _only_run(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["placer"] == "rl" and tags["sync"] == "delay" and tags["hardware"] == "local"
    assert tags["evaluator"] == "simulated" and tags["runtime"] == "virtual"
    # the placement was judged by the simulator and also measured on the real devices
    assert {"placement.step_time_s", "placement.measured_step_time_s", "rl.best_step_time_s"} <= set(m)
    assert "(placed" in tags["sync.base_time"]
    assert m["speedup"] == m["train.speedup"]
    # the reference study's setting by default: unequal workers; the result in context (issue 30)
    assert m["hardware.capacity"] == pytest.approx(2.75) and m["workers"] == 4
    assert tags["compare.label"].startswith("allreduce, sync.balance=static") and m["compare.time_to_target_s"] > 0
    assert m["compare.speedup_over_it"] == pytest.approx(m["compare.time_to_target_s"] / m["train.time_to_target_s"])
    assert m["limit.time_to_target_s"] > 0 and m["train.fraction_of_limit"] > 0
    # the limit is its best cell's median over 3 seeds, stated with their range (issue 44 item 6)
    assert m["limit.fastest_seed_s"] <= m["limit.time_to_target_s"] <= m["limit.slowest_seed_s"]
    assert "median of 3 seeds" in tags["limit.label"] and "adam lr=0.004" in tags["limit.label"]  # delay's own lr tried
    assert "nominal speeds" not in tags["limit.label"]          # no stragglers or jitter here: nothing left out
    for line in ("  versus:   allreduce", "  limits:   capacity 2.75", "  verdict:  ", "  measured: step time "):
        assert line in out.stdout, out.stdout


def test_an_expert_split_that_breaks_memory_is_no_baseline(workdir):
    """The inceptionv3 expert split overflows its accelerators: the trial says so instead of a speedup of inf."""
    split = DATA / "human-experts" / "inceptionv3_inference_expert.json"
    out = run_inprocess(workdir, "+placer=greedy", "model=workload", "hardware=auto", f"model.path={INCEPTION}",
                        f"model.split={split}")
    assert out.returncode == 0, out.stderr[-2000:]
    run = _only_run(workdir)
    assert "placement.speedup" not in run.data.metrics and "speedup" not in run.data.metrics
    assert "infeasible" in run.data.tags["placement.baseline"]
    assert run.data.metrics["placement.step_time_s"] < float("inf")
    assert "(baseline -: expert split (model.split): infeasible (acc:0 by " in out.stdout     # the summary says why


@pytest.mark.slow
def test_a_measured_placement_s_speedup_is_the_ratio_of_the_times_it_prints(workdir):
    """On real devices both sides are estimated alike (updates to target x each placement's measured step time):
    the times line shows that estimate beside the measured wall time, and the speedup is their ratio."""
    out = run_inprocess(workdir, "+placer=manual", "train.target_accuracy=0.5", "train.budget_updates=40")
    assert out.returncode == 0, out.stderr[-3000:]
    m = _only_run(workdir).data.metrics
    assert m["speedup"] == pytest.approx(m["train.reference_time_to_target_s"] / m["train.estimated_time_to_target_s"])
    assert "to target estimated alike (measured " in out.stdout
