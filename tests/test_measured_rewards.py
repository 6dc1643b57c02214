"""placer.reward=measured|mixed (orchestrator.placement.evaluate.measured): caching, the failure -> inf rule,
the measuring budget, the re-calibration of the simulator, the config keys; fast tests with a fake
measure function (no TensorFlow), and one slow CLI run on 2 logical CPUs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.graph import Edge, Node, OpGraph, PlacementContext
from orchestrator.hardware.cluster import Device, Worker, host_memory
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.evaluate.measured import MeasuredRewardEvaluator, RewardSettings, resolve_reward
from orchestrator.placement.evaluate.measured_fit import fit_with_prior, median_rel_error
from orchestrator_plugins.placers.greedy import GreedyPlacer
from orchestrator_plugins.placers.random import RandomPlacer
from orchestrator_plugins.placers.rl import RLPlacer


def worker(n=2) -> Worker:
    mem = host_memory("host0")
    devs = [Device(f"gpu:{i}", "gpu", peak_flops=1e12) for i in range(n)]
    return Worker("w", devs, Topology({k: ConstantLink(1e9, 1e-5) for d in devs for k in ((d.name, mem), (mem, d.name))}))


def graph() -> OpGraph:
    """A fork-join of 6 nodes: the simulator likes spreading the branches over the devices."""
    flops = [1e9, 4e9, 4e9, 4e9, 4e9, 1e9]
    edges = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 5), (2, 5), (3, 5), (4, 5)]
    nodes = [Node(f"n{i}", flops=f) for i, f in enumerate(flops)]
    return OpGraph("fork", nodes, [Edge(f"n{a}", f"n{b}", 1e6) for a, b in edges]).validate()


class SerialMachine:
    """A fake 'real machine' whose devices share one processor: a step costs the sum of all work
    (device 1 is 1.5x slower) plus 2 ms per tensor between devices; records every call."""

    def __init__(self, g, w, fail=None, seconds=0.5):
        from orchestrator.placement.simulate.simulator import Simulator

        self.sim, self.fail, self.seconds, self.calls = Simulator(g, w), fail, seconds, []
        self.now = 0.0

    def clock(self):
        return self.now

    def __call__(self, placement, steps):
        a = self.sim.assignment(placement)
        self.calls.append(tuple(a))
        self.now += self.seconds
        if self.fail is not None and self.fail(a):
            raise RuntimeError("OOM when allocating tensor\nmore lines")
        return self.true_time(a)

    def true_time(self, a):
        a = np.asarray(a, dtype=np.int64)
        work = self.sim.cost[np.arange(len(a)), a] * np.where(a == 1, 1.5, 1.0)
        src = np.repeat(np.arange(len(a)), np.diff(self.sim.succ_ptr))
        cuts = int((a[src] != a[self.sim.succ_idx]).sum())
        return float(work.sum() + 2e-3 * cuts)


def evaluator(reward="measured", budget=None, fail=None, within=0.1, seconds=0.5):
    g, w = graph(), worker()
    machine = SerialMachine(g, w, fail, seconds)
    ev = MeasuredRewardEvaluator(g, w, RewardSettings(reward, budget, 3, within), machine, clock=machine.clock,
                                 log=lambda line: None)
    return ev, machine


def test_repeated_placements_are_measured_once():
    ev, machine = evaluator()
    a = np.array([0, 1, 0, 1, 0, 0])
    t = ev.objective_value(a)
    assert ev.objective_value(a.copy()) == t == machine.true_time(a)
    assert ev.evaluate(ev.placement_of(a)).step_time_s == t          # evaluate during the search: cached too
    assert len(machine.calls) == 1 and ev.cache_hits == 2
    m = ev.end_search()
    assert m["placement.measured_placements"] == 1 and m["placement.measure_s"] == 0.5
    ev.evaluate(ev.placement_of(a))                                   # the final verdict: a fresh measurement
    assert len(machine.calls) == 2


def test_a_lucky_new_best_is_judged_on_a_second_measurement():
    ev, machine = evaluator()
    slow, fast = np.zeros(6, int), np.array([0, 1, 0, 1, 0, 0])
    true = machine.true_time
    lucky = iter([0.5])                                               # fast's first draw is half its time
    machine.true_time = lambda a: next(lucky, 1.0) * true(a) if tuple(a) == tuple(fast) else true(a)
    ev.objective_value(slow)
    assert ev.objective_value(fast) == true(fast)                           # the second, unbiased value
    assert machine.calls == [tuple(slow), tuple(fast), tuple(fast)]
    assert ev.end_search()["placement.confirmations"] == 1 and ev.measured == 2


def test_nodes_the_measurement_ignores_share_a_cache_entry():
    g, w = graph(), worker()
    machine = SerialMachine(g, w)
    machine.nodes = {"n0", "n1", "n2", "n3", "n4"}                   # where n5 runs does not matter to it
    ev = MeasuredRewardEvaluator(g, w, RewardSettings("measured", None, 3), machine, clock=machine.clock)
    ev.objective_value(np.array([0, 1, 0, 1, 0, 0]))
    ev.objective_value(np.array([0, 1, 0, 1, 0, 1]))
    ev.objective_value(np.array([0, 1, 1, 1, 0, 1]))
    assert len(machine.calls) == 2 and ev.cache_hits == 1


def test_a_failing_candidate_scores_inf_and_the_search_goes_on():
    uses_dev1 = lambda a: bool((a == 1).any())                       # anything on device 1 "runs out of memory"
    ev, machine = evaluator(fail=uses_dev1)
    assert ev.objective_value(np.array([0, 1, 0, 0, 0, 0])) == math.inf
    RandomPlacer({"samples": 30}).place(ev.graph, ev.worker, ev, PlacementContext(seed=1))   # goes on
    p = GreedyPlacer().place(ev.graph, ev.worker, ev)            # heft and topo spread (fail), single fits
    assert set(p.assignment.values()) == {"gpu:0"}
    m = ev.end_search()
    assert m["placement.failed_placements"] >= 10 and m["placement.measured_placements"] == 1


def test_the_budget_ends_measuring_and_the_answer_was_measured():
    ev, machine = evaluator(budget=1.2)                              # 0.5 s per measurement: 3 of them
    p = RandomPlacer({"samples": 40}).place(ev.graph, ev.worker, ev, PlacementContext(seed=0))
    assert len(machine.calls) == 3
    a = tuple(ev.assignment(p))
    assert a in machine.calls                                       # the answer is a measured placement
    m = ev.end_search()
    assert m["placement.budget_spent"] == 1 and m["placement.unmeasured_after_budget"] > 0
    assert ev.objective_value(np.array(machine.calls[0])) < math.inf      # cached values survive the budget


def test_fit_recovers_a_linear_machine():
    rng = np.random.default_rng(0)
    F = np.column_stack([rng.uniform(1, 2, 30), rng.uniform(0, 1, 30), rng.uniform(0, 1, 30), np.ones(30)])
    true = np.array([0.0, 2.0, 3.0, 0.1])
    theta = fit_with_prior(F, F @ true, np.array([1.0, 0, 0, 0]), prior_weight=1e-6)
    assert np.allclose(theta, true, atol=1e-3)
    # no data: the prior (the plain simulator); a never-seen column keeps its prior value
    assert fit_with_prior(F[:0], np.array([]), np.array([1.0, 0, 0, 0]), 0.1).tolist() == [1, 0, 0, 0]
    G = F.copy()
    G[:, 2] = 0
    assert fit_with_prior(G, G @ true, np.array([1.0, 0, 0.5, 0]), 1e-6)[2] == 0.5
    assert median_rel_error([1.0, 3.0], [2.0, 2.0]) == 0.5


def test_recalibration_beats_the_raw_simulator_on_a_serial_machine():
    ev, machine = evaluator()
    fit = ev.fit
    rng = np.random.default_rng(1)
    for _ in range(25):
        ev.objective_value(rng.integers(0, 2, 6))
    assert fit.raw_error > 0.2                                       # the simulator assumes parallel devices
    assert fit.calibrated_error < fit.raw_error / 3                   # prequential: estimates before measuring
    c = fit.coefficients()
    assert c["busy.gpu:1"] > c["busy.gpu:0"] > 0                     # device 1 found slower
    assert abs(fit.predict(fit.features(np.zeros(6, int), ev.simulator.step_time(np.zeros(6, int))))
               - machine.true_time(np.zeros(6))) / machine.true_time(np.zeros(6)) < 0.1


def test_mixed_measures_only_the_promising():
    ev, machine = evaluator(reward="mixed")
    GreedyPlacer().place(ev.graph, ev.worker, ev)
    p = RLPlacer({"budget_evaluations": 300, "batch": 8, "hidden": 8}).place(ev.graph, ev.worker, ev, PlacementContext(seed=0))
    m = ev.end_search()
    assert m["placement.screened_placements"] > 0
    assert 0 < m["placement.measured_placements"] < ev.evaluations - m["placement.cache_hits"]
    assert "placement.sim_error" in m and "placement.sim_error_calibrated" in m
    best = min(machine.true_time(a) for a in machine.calls)
    assert machine.true_time(ev.assignment(p)) == best               # rl keeps the best measured


def test_reward_keys_and_their_checks():

    class Search:
        pass

    class Manual:
        auto_evaluator = "measured"

    assert resolve_reward({"reward": "auto"}, False, Search, "local") == "simulated"
    assert resolve_reward({"reward": "auto"}, False, Manual, "local") == "measured"
    assert resolve_reward({"reward": "auto"}, True, Manual, "sim") == "simulated"
    assert resolve_reward({"reward": "mixed", "budget_s": 5}, False, Search, "local") == "mixed"
    for cfg, hw_sim, text in [({"reward": "fast"}, False, "placer.reward='fast'"),
                              ({"reward": "measured"}, True, "needs real devices"),
                              ({"reward": "measured", "budget_s": 0}, False, "placer.budget_s=0"),
                              ({"reward": "mixed", "measure_steps": 0}, False, "placer.measure_steps=0"),
                              ({"reward": "mixed", "measure_within": "x"}, False, "placer.measure_within='x'")]:
        with pytest.raises(ConfigError, match=text.replace("(", r"\(")):
            resolve_reward(cfg, hw_sim, Search, "local")


@pytest.mark.slow
def test_measured_reward_search_on_two_logical_cpus(workdir):
    """README's measured-reward command (tests/test_documented_commands.py leaves it to this test), with a budget of
    seconds instead of a minute: each candidate placement ran for real, and the search says how far it strayed from
    the simulated reward's choice."""
    from conftest import QUICK, run_inprocess, store_runs

    out = run_inprocess(workdir, "+placer=rl", "hardware=local", "hardware.logical_cpus=2", "placer.reward=measured",
                        "placer.budget_s=6", "placer.measure_steps=3", "placer.budget_evaluations=200",
                        "placer.compare_simulated=true", *QUICK)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = store_runs(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["placement.reward"] == "measured" and tags["evaluator"] == "measured"
    assert m["placement.measured_placements"] > 0 and m["placement.measure_s"] > 0
    assert "placement.sim_error" in m and m["placement.step_time_s"] > 0
    assert m["placement.vs_simulated_reward"] == m["placement.simulated_reward_step_time_s"] / m["placement.step_time_s"]


def test_the_old_evaluator_key_of_an_untyped_placer_names_its_replacement():
    """A plugin placer's YAML with 'evaluator: auto' (the plugin docs' example had it) was read by nothing."""
    import pytest

    from orchestrator.errors import ConfigError
    from orchestrator.placement.evaluate.measured import resolve_reward

    with pytest.raises(ConfigError, match=r"placer.evaluator is placer.reward now \(auto \| simulated \| measured \| mixed\)"):
        resolve_reward({"name": "mine", "evaluator": "measured"}, False, object, "local")
    assert resolve_reward({"name": "mine", "reward": "auto"}, True, object, "sim_1cpu_4gpu") == "simulated"
