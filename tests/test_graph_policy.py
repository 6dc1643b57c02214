"""The graph policy of placer=rl: permutation consistency, other graph and worker sizes, checkpoint
round trip, modes, the shipped checkpoint, pre-training's command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.graph import OpGraph, PlacementContext
from orchestrator.hardware.cluster import Worker
from orchestrator.hardware.presets import make_host, sim_1cpu_4gpu
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
from orchestrator.placement.graph.workload import load_msr_workload
from orchestrator.placement.learn.graph_policy import SHIPPED, GraphPolicy, graph_inputs
from orchestrator.placement.solve.problem import PlacementProblem
from orchestrator_plugins.placers.rl import RLPlacer

from conftest import run_inprocess, store_runs

DATA = Path(__file__).resolve().parent / "data" / "msr-dnn-partitioning"
BERT = DATA / "throughput-inputs" / "LayerGraphs" / "bert24_training.json"
INCEPTION = DATA / "latency-inputs" / "LayerGraphs" / "inceptionv3_inference.json"


def permuted(g: OpGraph, seed: int) -> OpGraph:
    d = g.to_dict()
    rng = np.random.default_rng(seed)
    d["nodes"] = [d["nodes"][i] for i in rng.permutation(len(d["nodes"]))]
    d["edges"] = [d["edges"][i] for i in rng.permutation(len(d["edges"]))]
    return OpGraph.from_dict(json.loads(json.dumps(d)))


def decode(policy, g, w) -> dict[str, str]:
    prob = PlacementProblem(g, w, SimulatedEvaluator(g, w))
    atoms = policy.decode(graph_inputs(prob))
    return prob.placement(prob.expand(atoms)).assignment


@pytest.mark.parametrize("path", [BERT, INCEPTION], ids=["bert24_training", "inceptionv3"])
def test_reordering_the_graph_file_does_not_change_the_placement(path):
    wl = load_msr_workload(path)
    policy = GraphPolicy.load(SHIPPED)
    ref = decode(policy, wl.graph, wl.worker)
    assert len(set(ref.values())) >= 1
    for seed in (1, 2):
        assert decode(policy, permuted(wl.graph, seed), wl.worker) == ref
    # also the samples (draws follow the atoms' names) and a whole zero-shot trial
    zs = {"mode": "zero_shot", "refine": "none", "zero_shot_samples": 4}
    a = RLPlacer(zs).place(wl.graph, wl.worker, SimulatedEvaluator(wl.graph, wl.worker), PlacementContext(seed=3))
    g2 = permuted(wl.graph, 5)
    b = RLPlacer(zs).place(g2, wl.worker, SimulatedEvaluator(g2, wl.worker), PlacementContext(seed=3))
    assert a.meta["policy_step_time_s"] == pytest.approx(b.meta["policy_step_time_s"], rel=1e-9)


def test_applies_to_graph_and_worker_sizes_not_trained_on():
    """Pre-training saw workers of 3 and 5 devices and graphs up to 235 atoms; here 1 CPU + 7 GPUs
    and 2 devices, and a 3-node graph."""
    policy = GraphPolicy.load(SHIPPED)
    assert not any("inception" in c for c in policy.meta["cases"])
    wl = load_msr_workload(INCEPTION)                                   # 326 nodes, held out of pre-training
    for n_gpu in (7, 1):
        devs, links = make_host("h", "Xeon Platinum 8380 (datasheet)", "V100 (datasheet)", n_gpu)
        w = Worker("w", devs, links, host="h")
        g = OpGraph.from_dict({**wl.graph.to_dict(), "nodes": [{**n, "cost": {}, "flops": 1e9 * (1 + i % 7)}
                                                                 for i, n in enumerate(wl.graph.to_dict()["nodes"])]})
        p = RLPlacer({"mode": "zero_shot", "refine": "none"}).place(g, w, SimulatedEvaluator(g, w), PlacementContext())
        assert set(p.assignment.values()) <= set(w.device_names) and len(p.assignment) == len(g.nodes)
        assert math.isfinite(p.meta["policy_step_time_s"])
    tiny = OpGraph.from_dict({"schema": "orchestrator.opgraph/1", "name": "t", "nodes": [
        {"name": "a", "flops": 1e9}, {"name": "b", "flops": 2e9}, {"name": "c", "flops": 1e9}],
        "edges": [{"src": "a", "dst": "b", "bytes": 1e6}, {"src": "a", "dst": "c", "bytes": 1e6}]})
    w = sim_1cpu_4gpu().workers[0]
    probs = policy.probs(graph_inputs(PlacementProblem(tiny, w)))
    assert probs.shape == (3, 5) and np.allclose(probs.sum(axis=1), 1)


def test_checkpoint_round_trip(tmp_path):
    wl = load_msr_workload(BERT)
    prob = PlacementProblem(wl.graph, wl.worker)
    gi = graph_inputs(prob)
    pol = GraphPolicy(16, rounds=2, seed=4)
    rng = np.random.default_rng(0)
    acts = pol.sample(gi, 8, rng)
    pol.update(gi, acts, rng.standard_normal(8), 0.01)            # weights no longer at their init
    pol.save(tmp_path / "p.npz", meta={"cases": ["x"]})
    back = GraphPolicy.load(tmp_path / "p.npz")
    assert (back.hidden, back.rounds, back.meta) == (16, 2, {"cases": ["x"]})
    np.testing.assert_array_equal(back.logits(gi), pol.logits(gi))
    assert not np.allclose(GraphPolicy(16, rounds=2, seed=4).logits(gi), pol.logits(gi))
    (tmp_path / "bad.npz").write_bytes(b"not a checkpoint")
    for bad in (tmp_path / "bad.npz", tmp_path / "missing.npz"):
        with pytest.raises(ConfigError, match=r"placer.policy=.*(no such file|not a graph-policy checkpoint)"):
            GraphPolicy.load(bad)


def test_modes_and_their_record():
    wl = load_msr_workload(BERT)
    g, w = wl.graph, wl.worker
    out = {}
    for mode in ("zero_shot", "finetune", "scratch"):
        ev = SimulatedEvaluator(g, w)
        p = RLPlacer({"mode": mode, "refine": "none", "budget_evaluations": 120, "batch": 8}).place(g, w, ev, PlacementContext())
        out[mode] = p.meta
        assert p.meta["mode"] == mode and p.meta["refine"] == "none"
        assert ev.evaluations <= 120
        assert ev.evaluate(p).step_time_s <= p.meta["greedy_step_time_s"] * (1 + 1e-9)
    assert out["zero_shot"]["updates"] == 1
    for mode in ("finetune", "scratch"):   # updates, unless the best is already at the certified bound (optimal)
        assert out[mode]["updates"] > 1 or out[mode]["stopped_at_bound"], out[mode]
    assert out["zero_shot"]["evaluations"] < 40            # greedy (3) + decode + 32 samples
    assert "shipped" in out["zero_shot"]["policy"] and out["scratch"]["policy"] == "random init"
    for key, bad in (("mode", "zeroshot"), ("refine", "global")):
        with pytest.raises(ConfigError, match=f"placer.{key}='{bad}'"):
            RLPlacer({key: bad})
    with pytest.raises(ConfigError, match="placer.policy=.*no such file"):
        RLPlacer({"mode": "zero_shot", "policy": "/nonexistent.npz"}).place(g, w, SimulatedEvaluator(g, w), PlacementContext())


def test_zero_shot_trial_uses_the_shipped_checkpoint(workdir):
    out = run_inprocess(workdir, "+placer=rl", "model=inception_v3", "hardware=sim_1cpu_4gpu", "placer.mode=zero_shot",
                        "placer.refine=none", "tracking.uri=sqlite:///mlflow.db")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "placer.mode=zero_shot" in out.stdout and "shipped checkpoint" in out.stdout
    (run,) = store_runs(workdir)
    tags = run.data.tags
    assert tags["placer.mode"] == "zero_shot" and tags["placer.refine"] == "none" and "shipped" in tags["placer.policy"]
    assert run.data.metrics["placement.evaluations"] < 40


def test_pretrain_bad_input_is_one_line(workdir):
    for args, key in ((["--updates", "-1"], "--updates"), (["--models", "alexnet"], "--models"),
                      (["--models", "inception_v3"], "held out"), (["--out", "x.txt"], "--out"),
                      (["--lr", "fast"], "--lr"), (["--rl-lr", "0"], "--rl-lr"), (["--synthetic", "-1"], "--synthetic"),
                      (["--bogus"], "--bogus")):
        out = run_inprocess(workdir, *args, module="orchestrator.pretrain")
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
        (line,) = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert line.startswith("error:") and key in line


@pytest.mark.slow
def test_pretrain_writes_a_checkpoint_and_an_mlflow_run(workdir):
    out = run_inprocess(workdir, "--models", "nmt-2", "--workloads", str(workdir / "none"), "--synthetic", "0",
                        "--imitate", "2", "--teacher-budget", "50", "--updates", "4", "--eval-every", "2", "--no-heldout",
                        "--out", str(workdir / "p.npz"), "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}",
                        module="orchestrator.pretrain")
    assert out.returncode == 0, out.stderr[-2000:]
    pol = GraphPolicy.load(workdir / "p.npz")
    assert len(pol.meta["cases"]) == 4 and all(c.startswith("nmt-2 on ") for c in pol.meta["cases"])
    (run,) = store_runs(workdir)
    assert run.data.tags["evaluator"] == "simulated" and "pretrain.decode_vs_greedy" in run.data.metrics


def test_sequential_decode_splits_identical_branches_over_identical_devices():
    """Two branches the static network cannot tell apart, on a worker with two identical GPUs: the
    decode is conditioned on what is placed (earliest finish time), so they go to different GPUs
    (an independent per-atom decision gives both the same distribution, so the same device)."""
    nodes = [{"name": "in", "flops": 1e6}] + [{"name": f"{b}{i}", "flops": 4e12} for b in "xy" for i in range(3)] + \
        [{"name": "out", "flops": 1e6}]
    edges = [{"src": "in", "dst": "x0", "bytes": 1e3}, {"src": "in", "dst": "y0", "bytes": 1e3}] + \
        [{"src": f"{b}{i}", "dst": f"{b}{i + 1}", "bytes": 1e3} for b in "xy" for i in range(2)] + \
        [{"src": "x2", "dst": "out", "bytes": 1e3}, {"src": "y2", "dst": "out", "bytes": 1e3}]
    g = OpGraph.from_dict({"schema": "orchestrator.opgraph/1", "name": "fork", "nodes": nodes, "edges": edges})
    devs, links = make_host("h", "Xeon Platinum 8380 (datasheet)", "V100 (datasheet)", 2)
    w = Worker("w", devs, links, host="h")
    for seed in (0, 1, 2):                     # untrained weights: the sequential head's list-scheduling prior
        got = decode(GraphPolicy(seed=seed), g, w)
        assert len({got["x0"], got["x1"], got["x2"]}) == 1 and len({got["y0"], got["y1"], got["y2"]}) == 1
        assert got["x0"] != got["y0"] and "cpu" not in got["x0"] + got["y0"]


def test_recorded_trajectories_give_the_decode_logits_back():
    """Training recomputes each decision's logits in TensorFlow from the recorded features; they
    must be the ones the numpy decode chose with (else REINFORCE would follow another policy)."""
    wl = load_msr_workload(INCEPTION)
    gi = graph_inputs(PlacementProblem(wl.graph, wl.worker))
    pol = GraphPolicy.load(SHIPPED)
    ro = pol.sample(gi, 3, np.random.default_rng(1))
    s, zr = pol.static(gi)
    tf_logits = pol._dynamic(pol.tf.constant(s, pol.tf.float32), pol.tf.constant(zr, pol.tf.float32),
                             pol.tf.constant(ro.feats), pol.tf.constant(ro.feasible)).numpy()
    assert ro.feasible[np.arange(3)[:, None], np.arange(len(gi.mask))[None], ro.actions].all()
    greedy = pol.rollouts(gi, 1, greedy=True)
    g_logits = pol._dynamic(pol.tf.constant(s, pol.tf.float32), pol.tf.constant(zr, pol.tf.float32),
                            pol.tf.constant(greedy.feats), pol.tf.constant(greedy.feasible)).numpy()[0]
    top = np.round(g_logits, 3).max(axis=1)
    chosen = g_logits[np.arange(len(top)), greedy.actions[0]]
    assert (chosen >= top - 2e-3).all()                         # the decode took the largest logit
    assert np.isfinite(tf_logits[ro.feasible]).all() and (tf_logits[~ro.feasible] <= -1e8).all()


@pytest.mark.parametrize("path", [BERT, INCEPTION], ids=["bert24_training", "inceptionv3"])
def test_the_numpy_forward_pass_is_the_tensorflow_one(path):
    """Zero-shot inference runs the policy in numpy (no TensorFlow import, issue 30): the same logits
    to float32 precision and the same greedy decode as the trained TensorFlow policy."""
    from orchestrator.placement.learn.graph_policy import InferencePolicy

    wl = load_msr_workload(path)
    gi = graph_inputs(PlacementProblem(wl.graph, wl.worker, SimulatedEvaluator(wl.graph, wl.worker)))
    tf_pol, np_pol = GraphPolicy.load(SHIPPED), InferencePolicy.load(SHIPPED)
    (s1, z1), (s2, z2) = tf_pol.static(gi), np_pol.static(gi)
    ok = gi.mask
    assert np.allclose(s1[ok], s2[ok], rtol=1e-5, atol=1e-5) and np.allclose(z1, z2, rtol=1e-5, atol=1e-5)
    assert (tf_pol.decode(gi) == np_pol.decode(gi)).all()


def test_a_zero_shot_placement_imports_no_tensorflow(tmp_path):
    """A fresh process places a public cost graph zero-shot: TensorFlow is never imported (it cost
    ~15 s of the reported search time before), and the default refine of zero_shot is none."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from orchestrator.graph import PlacementContext\n"
            "from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator\n"
            "from orchestrator.placement.graph.workload import load_msr_workload\n"
            "from orchestrator_plugins.placers.rl import RLPlacer\n"
            f"wl = load_msr_workload({str(BERT)!r})\n"
            "p = RLPlacer({'mode': 'zero_shot'}).place(wl.graph, wl.worker, SimulatedEvaluator(wl.graph, wl.worker), PlacementContext())\n"
            "print(p.meta['refine'], p.meta['evaluations'], 'tensorflow' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    refine, evaluations, tf_loaded = out.stdout.split()
    assert refine == "none" and int(evaluations) < 100 and tf_loaded == "False", out.stdout


def test_the_search_stops_at_the_certified_bound():
    """A placement at the evaluator's lower bound is optimal: rl spends no more of its budget (the
    headline command's CNN spent 12,000 evaluations after its first one was at the bound)."""
    devs, links = make_host("h", "Xeon Platinum 8380 (datasheet)", "V100 (datasheet)", 1)
    w = Worker("w", devs, links, host="h")
    g = OpGraph.from_dict({"schema": "orchestrator.opgraph/1", "name": "chain", "nodes": [
        {"name": f"n{i}", "flops": 1e9} for i in range(6)], "edges": [
        {"src": f"n{i}", "dst": f"n{i + 1}", "bytes": 1e3} for i in range(5)]})
    ev = SimulatedEvaluator(g, w)
    p = RLPlacer({"budget_evaluations": 5000}).place(g, w, ev, PlacementContext())
    lb = ev.bound_parts()[0]
    assert p.meta["stopped_at_bound"] and ev.evaluate(p).value <= lb * (1 + 1e-9)
    assert p.meta["evaluations"] < 200, p.meta
