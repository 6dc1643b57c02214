"""``python -m orchestrator.pretrain``: pre-train the graph placement policy across graphs and workers.

Training set (``training_cases``): the Keras models a trial extracts (layer level, batch 64, analytic
roofline costs) on four simulated workers, and the msr-dnn-partitioning workloads found under
``--workloads`` on their own hardware; every figure is **simulated** (one-step objective). Held out
(``HELD_OUT``, never trained on): Inception-V3 and NMT-4 (extracted), and the msr workloads
``throughput bert24_training``, ``throughput resnet50_training`` and ``latency inceptionv3_inference``.

First (``--imitate`` epochs) behaviour cloning: each case's teacher placement (greedy improved by
``--teacher-budget`` evaluations of rl's local search) is imitated (cross-entropy, one Adam step per case
per epoch). Then per update one case (round robin) draws ``--batch`` placements; reward -sqrt(step / greedy step) of that
case (infeasible: -(2 + 10 x overflow / capacity)), a moving-average baseline per case, batch-normalised
advantages, entropy bonus ``--entropy`` decaying to 0; Adam (``--lr``). Every ``--eval-every`` updates the
greedy decode of every case is scored; the checkpoint kept is the one with the best geometric mean of
decode / greedy over the *training* cases. One MLflow run (experiment ``pretrain``) records the curves
(``pretrain.sample_vs_greedy``, ``pretrain.decode_vs_greedy``, ``pretrain.heldout_decode_vs_greedy``,
the latter for monitoring only) and the checkpoint as an artifact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from orchestrator.graph.arrays import IntArray
from orchestrator.paths import msr_workloads, repo_root

if TYPE_CHECKING:
    from orchestrator.execution.training import MetricsSink
    from orchestrator.graph.opgraph import OpGraph
    from orchestrator.hardware.cluster import Worker
    from orchestrator.placement.learn.graph_policy import GraphPolicy

DEFAULT_WORKLOADS = msr_workloads()
EXTRACTED = {"resnet50": ("resnet50", {"input_size": 224}), "nmt-2": ("nmt", {"layers": 2}),
             "nmt-8": ("nmt", {"layers": 8}), "transformer": ("transformer", {}),
             "inception_v3": ("inception_v3", {"input_size": 299}), "nmt-4": ("nmt", {"layers": 4})}
TRAIN_MODELS = ("resnet50", "nmt-2", "nmt-8", "transformer")
TRAIN_MSR = ("latency-inputs/LayerGraphs/bert24_inference.json", "latency-inputs/LayerGraphs/resnet50_inference.json",
             "throughput-inputs/LayerGraphs/bert24_inference.json", "throughput-inputs/LayerGraphs/resnet50_inference.json",
             "latency-inputs/OperatorGraphs/bert_l-3_inference.json")
TRAIN_PIPELINE = ("throughput-inputs/LayerGraphs/bert24_inference.json", "throughput-inputs/LayerGraphs/resnet50_inference.json")
SYNTHETIC = 8
HELD_OUT_MODELS = ("inception_v3", "nmt-4")
HELD_OUT_MSR = ("throughput-inputs/LayerGraphs/bert24_training.json", "throughput-inputs/LayerGraphs/resnet50_training.json",
                "latency-inputs/LayerGraphs/inceptionv3_inference.json")
HELD_OUT = HELD_OUT_MODELS + HELD_OUT_MSR
BATCH = 64

# (label, graph, worker[, objective]): the arguments of ``Case``
CaseSpec = tuple[str, "OpGraph", "Worker"] | tuple[str, "OpGraph", "Worker", str]


def workers() -> dict[str, Worker]:
    """Four simulated single-host workers: the reference study's 1 CPU + 4 K80 (two per switch),
    1 CPU + 2 V100 (NVLink), 1 CPU + 2 A100 (NVLink), 1 CPU + 2 K80."""
    from orchestrator.hardware.cluster import Worker
    from orchestrator.hardware.presets import make_host, sim_1cpu_4gpu

    out = {"sim_1cpu_4gpu": sim_1cpu_4gpu().workers[0]}
    for gpu in ("V100", "A100", "K80"):
        devs, topo = make_host("host0", "Xeon Platinum 8380 (datasheet)", f"{gpu} (datasheet)", 2)
        out[f"1cpu_2{gpu.lower()}"] = Worker(f"1cpu-2{gpu.lower()}", devs, topo, host="host0")
    return out


def extracted_graph(key: str) -> OpGraph:
    from orchestrator.models import builtin
    from orchestrator.placement.graph.extract import extract

    name, cfg = EXTRACTED[key]
    return extract(builtin(name, cfg), BATCH, profile=None)


def msr_file(workloads: Path, rel: str) -> Path | None:
    for base in (workloads, repo_root() / "tests" / "data" / "msr-dnn-partitioning"):
        if (base / rel).exists():
            return base / rel
    return None


def training_cases(workloads: Path, models: Iterable[str] = TRAIN_MODELS, msr: Iterable[str] = TRAIN_MSR,
                   notes: list[str] | None = None, pipeline: Iterable[str] = TRAIN_PIPELINE,
                   synthetic: int = SYNTHETIC) -> Iterator[CaseSpec]:
    """(label, graph, worker[, objective]) of the pre-training set: one-step objective, and the
    throughput workloads in ``pipeline`` also with the pipeline objective; missing workload files
    are skipped (noted)."""
    from orchestrator.placement.graph.workload import load_msr_workload

    ws = workers()
    for m in models:
        g = extracted_graph(m)
        for wname, w in ws.items():
            yield f"{m} on {wname}", g, w
    for k in range(synthetic):                        # each random graph on one of the workers, in turn
        wname = list(ws)[k % len(ws)]
        yield f"synthetic-{k} on {wname}", synthetic_graph(k), ws[wname]
    for rel in msr:
        path = msr_file(workloads, rel)
        if path is None:
            if notes is not None:
                notes.append(f"{rel}: not found under {workloads} (skipped)")
            continue
        wl = load_msr_workload(path)
        yield "msr " + rel.split("-inputs/")[0] + " " + Path(rel).stem, wl.graph, wl.worker
    for rel in pipeline:
        path = msr_file(workloads, rel)
        if path is not None:
            wl = load_msr_workload(path)
            yield "msr " + rel.split("-inputs/")[0] + " " + Path(rel).stem + " (pipeline)", wl.graph, wl.worker, "pipeline"


def synthetic_graph(seed: int) -> OpGraph:
    """A random layered DAG (Placeto and GDP also pre-train on synthetic graphs): 12-40 levels of
    1-6 nodes, each fed by 1-2 nodes of the level before (all of them, for a level of one node),
    forward flops log-uniform in [1e9, 3e11], activations log-uniform in [1e5, 1e8] bytes, weights
    log-uniform in [1e5, 1e8] bytes. Costs come from the devices' roofline, as for extracted models."""
    from orchestrator.graph.opgraph import OpGraph

    rng = np.random.default_rng(1000 + seed)
    levels = [[f"n{lv}_{i}" for i in range(int(rng.integers(1, 7)))] for lv in range(int(rng.integers(12, 41)))]
    def lu(lo: float, hi: float) -> float:       # log-uniform in [lo, hi]
        return float(10 ** rng.uniform(np.log10(lo), np.log10(hi)))

    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for lv, names in enumerate(levels):
        for n in names:
            out = lu(1e5, 1e8)
            nodes.append({"name": n, "flops": lu(1e9, 3e11), "output_bytes": out, "activation_bytes": out,
                          "param_bytes": lu(1e5, 1e8)})
            if lv:
                prev = levels[lv - 1]
                srcs = prev if len(names) == 1 else rng.choice(prev, size=min(len(prev), int(rng.integers(1, 3))), replace=False)
                edges += [{"src": str(s), "dst": n, "bytes": next(x["output_bytes"] for x in nodes if x["name"] == s)} for s in srcs]
    return OpGraph.from_dict({"schema": "orchestrator.opgraph/1", "name": f"synthetic-{seed}", "nodes": nodes, "edges": edges})


class Case:
    """A graph on a worker and an objective, ready for policy steps: inputs, greedy reference (for
    ``pipeline`` the better of greedy and the contiguous DP, rl's incumbent), per-case baseline."""

    teacher_t: float       # the teacher's value, set by ``teacher``

    def __init__(self, label: str, graph: OpGraph, worker: Worker, objective: str = "step") -> None:
        from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
        from orchestrator.placement.learn.graph_policy import graph_inputs
        from orchestrator.placement.solve.greedy import best_greedy
        from orchestrator.placement.solve.problem import PlacementProblem

        self.label, self.objective = label, objective
        self.prob = PlacementProblem(graph, worker, SimulatedEvaluator(graph, worker, objective))
        self.prob.check_feasible()
        self.gi = graph_inputs(self.prob)
        self.start, variant, times = best_greedy(self.prob)
        self.greedy = times[variant]
        if objective == "pipeline":
            from orchestrator.placement.solve.contiguous import best_contiguous

            dp = best_contiguous(self.prob, self.prob.evaluator.load_model, time_limit_s=30.0)
            if dp.assign is not None and self.prob.objective_value(dp.assign) < self.greedy:
                self.start, self.greedy = dp.assign.copy(), self.prob.objective_value(dp.assign)
        self.cap = float(self.prob.pool_cap[np.isfinite(self.prob.pool_cap)].sum() or 1.0)
        self.baseline: float | None = None

    def teacher(self, budget: int, seed: int = 0) -> IntArray:
        """The imitation target: greedy improved by ``budget`` evaluations of rl's local search, per
        atom, with identical devices renumbered in order of the depth position of their atoms."""
        from orchestrator.placement.solve.local_search import local_search

        assign, self.teacher_t = local_search(self.prob, self.start, budget, seed)
        atoms = self.prob.atoms_of(assign)
        pos = self.gi.x[:, 6]                                  # depth fraction
        devs = self.prob.worker.devices
        same: dict[tuple[str, str, float, float], list[int]] = {}
        for d, dev in enumerate(devs):
            same.setdefault((dev.kind, dev.profile, float(dev.peak_flops), float(dev.memory_bytes)), []).append(d)
        perm = np.arange(len(devs))
        for ix in same.values():
            used = sorted(ix, key=lambda d: (pos[atoms == d].mean() if (atoms == d).any() else 2.0, d))
            perm[used] = ix                                    # the k-th used (by depth) -> the k-th device
        out = perm[atoms]
        t2 = self.score(out)[0]
        return out if t2 <= self.teacher_t * (1 + 1e-6) else atoms   # renumbering must not hurt (links)

    def score(self, atom_assign: IntArray) -> tuple[float, float]:
        a = self.prob.expand(atom_assign)
        over = self.prob.overflow(a)
        if over:
            return math.inf, -(2.0 + 10.0 * over / self.cap)
        t = self.prob.objective_value(a)
        return t, -math.sqrt(t / self.greedy)


def decode_ratio(policy: GraphPolicy, cases: Sequence[Case]) -> float:
    r = [c.score(policy.decode(c.gi))[0] / c.greedy for c in cases]
    return float(np.exp(np.mean(np.log(np.minimum(r, 10.0)))))


def pretrain(cases: Sequence[Case], held: Sequence[Case], updates: int, batch: int, lr: float, entropy: float, seed: int,
             eval_every: int, hidden: int, sink: MetricsSink | None = None, log: Callable[[str], object] = print,
             imitate: int = 0, teacher_budget: int = 2000, rl_lr: float | None = None,
             ) -> tuple[GraphPolicy, tuple[float, str, dict[str, Any]], list[tuple[int, float, float]]]:
    from orchestrator.placement.learn.graph_policy import GraphPolicy

    rng = np.random.default_rng(seed)
    policy = GraphPolicy(hidden, seed=seed, lr=lr)
    curve: list[tuple[int, float, float]] = []
    best: tuple[float, str, dict[str, Any]] = (decode_ratio(policy, cases), "the list-scheduling prior (no training)", {k: v.numpy() for k, v in policy.vars.items()})
    log(f"untrained (list-scheduling prior): decode / greedy training {best[0]:.3f}")
    if imitate:                                   # behaviour cloning of the search teacher first
        targets = [c.teacher(teacher_budget, seed) for c in cases]
        # teacher-forced trajectories: their features depend on the actions only, not on the weights
        forced = [policy.rollouts(c.gi, 1, forced=tgt[None]) for c, tgt in zip(cases, targets)]
        log(f"teacher (greedy + {teacher_budget} evaluations of local search) / greedy, geo-mean: "
            f"{np.exp(np.mean([np.log(c.teacher_t / c.greedy) for c in cases])):.3f}")
        for ep in range(imitate):
            for c, ro in zip(cases, forced):
                policy.update(c.gi, ro, np.ones(1), 0.0)
            if (ep + 1) % max(1, imitate // 4) == 0 or ep + 1 == imitate:
                tr, ho = decode_ratio(policy, cases), decode_ratio(policy, held) if held else math.nan
                log(f"imitation epoch {ep + 1}/{imitate}: decode / greedy training {tr:.3f}, held out {ho:.3f}")
                if tr < best[0]:
                    best = (tr, f"imitation epoch {ep + 1}", {k: v.numpy() for k, v in policy.vars.items()})
                if sink is not None:
                    sink.log_metrics({"pretrain.imitation_decode_vs_greedy": tr,
                                      **({"pretrain.imitation_heldout_decode_vs_greedy": ho} if held else {})}, step=ep + 1)
    if rl_lr is not None:                         # REINFORCE after imitation: its own (smaller) step
        policy.opt.learning_rate.assign(rl_lr)
    for upd in range(updates):
        c = cases[upd % len(cases)]
        ro = policy.sample(c.gi, batch, rng, traced=True)
        times, rewards_t = zip(*(c.score(a) for a in ro.actions))
        rewards = np.array(rewards_t)
        c.baseline = rewards.mean() if c.baseline is None else 0.9 * c.baseline + 0.1 * rewards.mean()
        adv = (rewards - c.baseline) / (rewards.std() + 1e-8)
        policy.update(c.gi, ro, adv, entropy * (1 - upd / updates))
        fin = np.array([t for t in times if math.isfinite(t)])
        if sink is not None:
            sink.log_metrics({"pretrain.sample_vs_greedy": float(fin.mean() / c.greedy) if len(fin) else 10.0}, step=upd)
        if (upd + 1) % eval_every == 0 or upd + 1 == updates:
            tr, ho = decode_ratio(policy, cases), decode_ratio(policy, held) if held else math.nan
            curve.append((upd + 1, tr, ho))
            if sink is not None:
                sink.log_metrics({"pretrain.decode_vs_greedy": tr, **({"pretrain.heldout_decode_vs_greedy": ho} if held else {})},
                                 step=upd + 1)
            log(f"update {upd + 1}/{updates}: decode / greedy (geo-mean) training {tr:.3f}, held out {ho:.3f}")
            if tr < best[0]:
                best = (tr, f"update {upd + 1}", {k: v.numpy() for k, v in policy.vars.items()})
    for k, v in best[2].items():
        policy.vars[k].assign(v)
    policy.updates = imitate * len(cases) + updates
    return policy, best, curve


def held_out_cases(workloads: Path) -> Iterator[CaseSpec]:
    from orchestrator.placement.graph.workload import load_msr_workload

    ws = workers()
    g = extracted_graph("inception_v3")
    yield "inception_v3 on sim_1cpu_4gpu", g, ws["sim_1cpu_4gpu"]
    yield "nmt-4 on sim_1cpu_4gpu", extracted_graph("nmt-4"), ws["sim_1cpu_4gpu"]
    for rel in HELD_OUT_MSR:
        path = msr_file(workloads, rel)
        if path is not None:
            wl = load_msr_workload(path)
            yield "msr " + rel.split("-inputs/")[0] + " " + Path(rel).stem, wl.graph, wl.worker
            if rel.startswith("throughput-"):
                yield "msr throughput " + Path(rel).stem + " (pipeline)", wl.graph, wl.worker, "pipeline"

