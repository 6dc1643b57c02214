"""Placement at op-graph scale (issue 22): the compiled graph passes give the placements the
per-node Python loops gave, and a 20,000-op graph goes through a whole greedy trial in seconds."""

from __future__ import annotations

import heapq
import math
import time
from pathlib import Path

import numpy as np
import pytest

from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
from orchestrator.placement.graph.kernels import predecessors_csr, upward_rank
from orchestrator.placement.graph.synthetic import layered_workload, write_layered_workload
from orchestrator.placement.graph.workload import load_msr_workload
from orchestrator.placement.solve.greedy import heft_rank, list_schedule
from orchestrator.placement.solve.problem import PlacementProblem

from conftest import run_inprocess, store_runs


def _problem(tmp_path, n, seed, objective="step"):
    wl = load_msr_workload(write_layered_workload(tmp_path / "latency-inputs" / f"g{n}-{seed}.json", n, seed=seed))
    ev = SimulatedEvaluator(wl.graph, wl.worker, objective, 0.1 if objective == "pipeline" else 0.0)
    return PlacementProblem(wl.graph, wl.worker, ev)


def _reference_schedule(prob, priority):
    """The list schedule as the plain Python loop it was before the kernel (per node: a heap entry,
    candidate devices by memory, earliest finish time with channels booked hop by hop)."""
    s, n, nd = prob.sim, prob.n, prob.nd
    preds = [[] for _ in range(n)]
    for u in range(n):
        for k in range(s.succ_ptr[u], s.succ_ptr[u + 1]):
            preds[s.succ_idx[k]].append((u, k))
    route = [[[(int(s.link_chan[l]), float(s.link_lat[l]), 1.0 / float(s.link_bw[l]))
               for l in s.route_link[s.route_ptr[a * nd + b]:s.route_ptr[a * nd + b + 1]]] for b in range(nd)]
             for a in range(nd)]
    pending, dev = s.npred.copy(), np.full(n, -1)
    ready = [(-priority[i], i) for i in range(n) if pending[i] == 0]
    heapq.heapify(ready)
    atom_dev, finish, avail = np.full(prob.n_atoms, -1), np.zeros(n), np.zeros(nd)
    used, tmax, chan, sent = np.zeros(len(prob.pool_cap)), np.zeros(len(prob.pool_cap)), {}, {}

    def arrival(u, d, commit):
        free, arrive = (chan if commit else dict(chan)), 0.0
        for p, k in preds[u]:
            at = sent.get((p, d), finish[p])
            if (p, d) not in sent:
                for ch, lat, inv_bw in route[dev[p]][d]:
                    at = max(at, free.get(ch, 0.0)) + (s.succ_fixed[k] if s.succ_fixed[k] >= 0 else lat + s.succ_bytes[k] * inv_bw)
                    free[ch] = at
                if commit and dev[p] != d:
                    sent[p, d] = at
            arrive = max(arrive, at)
        return arrive

    while ready:
        _, u = heapq.heappop(ready)
        a, pool = prob.atom_of[u], prob.pool_of
        if atom_dev[a] >= 0:
            cands = [atom_dev[a]]
        else:
            ok = prob.allowed[a] & (used[pool] + prob.atom_resident[a] + np.maximum(tmax[pool], prob.atom_temp[a])
                                    <= prob.pool_cap[pool])
            if not ok.any():
                free = np.where(prob.allowed[a], prob.pool_cap[pool] - used[pool], -np.inf)
                ok = free == free.max()
            cands = list(np.flatnonzero(ok))
        d = min((max(avail[c], arrival(u, c, False)) + s.cost[u, c], c) for c in cands)[1]
        if atom_dev[a] < 0:
            atom_dev[a] = d
            used[pool[d]] += prob.atom_resident[a]
            tmax[pool[d]] = max(tmax[pool[d]], prob.atom_temp[a])
        finish[u] = max(avail[d], arrival(u, d, True)) + s.cost[u, d]
        dev[u], avail[d] = d, finish[u]
        for k in range(s.succ_ptr[u], s.succ_ptr[u + 1]):
            pending[s.succ_idx[k]] -= 1
            if pending[s.succ_idx[k]] == 0:
                heapq.heappush(ready, (-priority[s.succ_idx[k]], s.succ_idx[k]))
    return dev


@pytest.mark.parametrize("n,seed,objective", [(200, 0, "step"), (400, 1, "pipeline"), (300, 2, "step")])
def test_compiled_list_schedule_places_as_the_python_loop(tmp_path, n, seed, objective):
    prob = _problem(tmp_path, n, seed, objective)
    for priority in (heft_rank(prob), -prob.topo_pos.astype(float)):
        assert np.array_equal(list_schedule(prob, priority), _reference_schedule(prob, priority))


def test_ranks_and_predecessors_match_the_per_node_loops(tmp_path):
    prob = _problem(tmp_path, 500, 3)
    s = prob.sim
    ref = np.zeros(prob.n)
    for u in reversed(prob.graph.topological_order()):
        nxt = s.succ_idx[s.succ_ptr[u]:s.succ_ptr[u + 1]]
        ref[u] = s.fastest[u] + (ref[nxt].max() if len(nxt) else 0.0)
    assert np.array_equal(upward_rank(prob.graph.topological_order(), s.succ_ptr, s.succ_idx, s.fastest), ref)
    assert np.array_equal(s.rank, ref)
    ptr, src, edge = predecessors_csr(prob.n, s.succ_ptr, s.succ_idx)
    for v in (0, 37, 250, 499):
        want = [(u, k) for u in range(prob.n) for k in range(s.succ_ptr[u], s.succ_ptr[u + 1]) if s.succ_idx[k] == v]
        assert list(zip(src[ptr[v]:ptr[v + 1]], edge[ptr[v]:ptr[v + 1]])) == want


def test_synthetic_workloads_are_seeded_and_shaped():
    a, b = layered_workload(600, seed=4), layered_workload(600, seed=4)
    assert a == b and a != layered_workload(600, seed=5)
    assert len(a["nodes"]) == 600 and all(e["sourceId"] < e["destId"] for e in a["edges"])
    assert any("colorClass" in n for n in a["nodes"]) and any(n["supportedOnFpga"] == 0 for n in a["nodes"])


@pytest.mark.slow  # a 20,000-op graph, the whole greedy trial: about 10 s on 2 shared cores
def test_greedy_trial_on_20000_ops(workdir):
    path = write_layered_workload(workdir / "latency-inputs" / "layered-20000.json", 20000, seed=0)
    t0 = time.perf_counter()
    out = run_inprocess(workdir, "+placer=greedy", "model=workload", f"model.path={path}")
    took = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    (run,) = store_runs(workdir)
    m = run.data.metrics
    assert math.isfinite(m["placement.step_time_s"]) and m["placement.step_time_s"] >= m["placement.lower_bound_s"]
    assert m["placement.devices_used"] >= 2
    assert took < 40, f"the 20,000-op greedy trial took {took:.1f} s (target 10 s; 66 s before issue 22)"


DATA = Path(__file__).resolve().parent / "data" / "msr-dnn-partitioning"


@pytest.mark.parametrize("graph,objective", [("latency-inputs/LayerGraphs/inceptionv3_inference.json", "step"),
                                             ("throughput-inputs/LayerGraphs/bert24_training.json", "pipeline"),
                                             ("synthetic-300", "step"), ("synthetic-300", "pipeline")])
def test_compiled_decode_decides_as_the_numpy_decode(tmp_path, graph, objective):
    """The pre-trained policy decoded by the compiled loop and by the numpy one: the same greedy
    placement, the same 16 samples for each of two seeds, the same recorded features (teacher-forced too)."""
    from orchestrator.placement.learn.graph_policy import SHIPPED, GraphPolicy, graph_inputs
    from orchestrator.placement.learn.policy_decode import rollout, rollout_numpy

    path = write_layered_workload(tmp_path / "latency-inputs" / "g.json", 300, seed=7) if graph == "synthetic-300" \
        else DATA / graph
    wl = load_msr_workload(path)
    ev = SimulatedEvaluator(wl.graph, wl.worker, objective, 0.1 if objective == "pipeline" else 0.0)
    prob = PlacementProblem(wl.graph, wl.worker, ev)
    pol = GraphPolicy.load(SHIPPED)
    gi, head = graph_inputs(prob), pol._head()
    s, zr = pol.static(gi)
    runs = [{"n": 1, "greedy": True}] + [{"n": 16, "draws": np.random.default_rng(seed).random((16, prob.n_atoms))}
                                         for seed in (0, 1)]
    for kw in runs:
        fast, ref = rollout(gi, s, zr, head, **kw), rollout_numpy(gi, s, zr, head, **kw)
        assert np.array_equal(fast.actions, ref.actions)
        assert np.array_equal(fast.feasible, ref.feasible) and np.array_equal(fast.feats, ref.feats)
    forced = ref.actions[::-1].copy()
    fast, ref = rollout(gi, s, zr, head, 16, forced=forced), rollout_numpy(gi, s, zr, head, 16, forced=forced)
    assert np.array_equal(fast.actions, forced) and np.array_equal(fast.feats, ref.feats)
    assert len(set(map(tuple, ref.actions))) > 1          # the samples differ: the draws are used


def test_admissible_agrees_with_the_memory_and_violation_reports(tmp_path):
    """The fast check in front of every evaluation says what the two reports say, on random
    placements that break memory, colocation and cpu_only in every mix (and on legal ones)."""
    path = write_layered_workload(tmp_path / "latency-inputs" / "g.json", 300, seed=8, memory_share=0.3)
    wl = load_msr_workload(path)
    sim = SimulatedEvaluator(wl.graph, wl.worker).simulator
    rng = np.random.default_rng(0)
    nd = len(wl.worker.devices)
    seen = set()
    for i in range(300):
        a = rng.integers(0, nd, len(wl.graph.nodes)) if i % 3 else np.full(len(wl.graph.nodes), i % nd)
        if i % 5 == 0:          # one device, cpu_only ops on the CPU (the last device): memory alone decides
            a = np.where([n.cpu_only for n in wl.graph.nodes], nd - 1, i % (nd - 1))
        want = not sim.memory(a)[1] and not sim.violations(a)
        assert sim.admissible(a) == want
        assert (sim.step_time(a) < math.inf) == want
        seen.add((bool(sim.memory(a)[1]), bool(sim.violations(a))))
    assert len(seen) >= 3


def test_gantt_merges_only_what_a_chart_cannot_show(tmp_path):
    from orchestrator.placement.simulate.gantt import _merged, gantt_events

    assert _merged([(2.0, 1.0), (0.0, 1.0), (1.0005, 0.5), (5.0, 1.0)], 0.001) == [(0.0, 1.5005), (2.0, 1.0), (5.0, 1.0)]
    events = [{"kind": "node", "row": "d0", "start": i * 1e-3, "end": (i + 1) * 1e-3} for i in range(5000)]
    assert gantt_events(events, tmp_path / "g.png", "5,000 back to back").stat().st_size > 0
