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

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from orchestrator.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = ROOT.parent / "shared" / "workloads" / "msr-dnn-partitioning"
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


def workers():
    """Four simulated single-host workers: the reference study's 1 CPU + 4 K80 (two per switch),
    1 CPU + 2 V100 (NVLink), 1 CPU + 2 A100 (NVLink), 1 CPU + 2 K80."""
    from orchestrator.hardware.cluster import Worker
    from orchestrator.hardware.presets import make_host, sim_1cpu_4gpu

    out = {"sim_1cpu_4gpu": sim_1cpu_4gpu().workers[0]}
    for gpu in ("V100", "A100", "K80"):
        devs, links = make_host("host0", "Xeon Platinum 8380 (datasheet)", f"{gpu} (datasheet)", 2)
        out[f"1cpu_2{gpu.lower()}"] = Worker(f"1cpu-2{gpu.lower()}", devs, links, host="host0")
    return out


def extracted_graph(key: str):
    from orchestrator.models import builtin
    from orchestrator.placement.extract import extract

    name, cfg = EXTRACTED[key]
    return extract(builtin(name, cfg), BATCH, profile=None)


def msr_file(workloads: Path, rel: str) -> Path | None:
    for base in (workloads, ROOT / "tests" / "data" / "msr-dnn-partitioning"):
        if (base / rel).exists():
            return base / rel
    return None


def training_cases(workloads: Path, models=TRAIN_MODELS, msr=TRAIN_MSR, notes: list | None = None,
                   pipeline=TRAIN_PIPELINE, synthetic: int = SYNTHETIC):
    """(label, graph, worker[, objective]) of the pre-training set: one-step objective, and the
    throughput workloads in ``pipeline`` also with the pipeline objective; missing workload files
    are skipped (noted)."""
    from orchestrator.placement.workload import load_msr_workload

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


def synthetic_graph(seed: int):
    """A random layered DAG (Placeto and GDP also pre-train on synthetic graphs): 12-40 levels of
    1-6 nodes, each fed by 1-2 nodes of the level before (all of them, for a level of one node),
    forward flops log-uniform in [1e9, 3e11], activations log-uniform in [1e5, 1e8] bytes, weights
    log-uniform in [1e5, 1e8] bytes. Costs come from the devices' roofline, as for extracted models."""
    from orchestrator.placement.graph import OpGraph

    rng = np.random.default_rng(1000 + seed)
    levels = [[f"n{lv}_{i}" for i in range(int(rng.integers(1, 7)))] for lv in range(int(rng.integers(12, 41)))]
    lu = lambda lo, hi: float(10 ** rng.uniform(np.log10(lo), np.log10(hi)))
    nodes, edges = [], []
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

    def __init__(self, label, graph, worker, objective: str = "step"):
        from orchestrator.placement.evaluator import SimulatedEvaluator
        from orchestrator.placement.graph_policy import graph_inputs
        from orchestrator.placement.search import PlacementProblem
        from orchestrator_plugins.placers.greedy import best_greedy

        self.label, self.objective = label, objective
        self.prob = PlacementProblem(graph, worker, SimulatedEvaluator(graph, worker, objective))
        self.prob.check_feasible()
        self.gi = graph_inputs(self.prob)
        self.start, variant, times = best_greedy(self.prob)
        self.greedy = times[variant]
        if objective == "pipeline":
            from orchestrator.placement.contiguous import best_contiguous

            dp = best_contiguous(self.prob, self.prob.evaluator.pipeline, time_limit_s=30.0)
            if dp.assign is not None and self.prob.step_time(dp.assign) < self.greedy:
                self.start, self.greedy = dp.assign.copy(), self.prob.step_time(dp.assign)
        self.cap = float(self.prob.pool_cap[np.isfinite(self.prob.pool_cap)].sum() or 1.0)
        self.baseline = None

    def teacher(self, budget: int, seed: int = 0) -> np.ndarray:
        """The imitation target: greedy improved by ``budget`` evaluations of rl's local search, per
        atom, with identical devices renumbered in order of the depth position of their atoms."""
        from orchestrator_plugins.placers.rl import local_search

        assign, self.teacher_t = local_search(self.prob, self.start, budget, seed)
        atoms = self.prob.atoms_of(assign)
        pos = self.gi.x[:, 6]                                  # depth fraction
        devs = self.prob.worker.devices
        same: dict = {}
        for d, dev in enumerate(devs):
            same.setdefault((dev.kind, dev.profile, float(dev.peak_flops), float(dev.memory_bytes)), []).append(d)
        perm = np.arange(len(devs))
        for ix in same.values():
            used = sorted(ix, key=lambda d: (pos[atoms == d].mean() if (atoms == d).any() else 2.0, d))
            perm[used] = ix                                    # the k-th used (by depth) -> the k-th device
        out = perm[atoms]
        t2 = self.score(out)[0]
        return out if t2 <= self.teacher_t * (1 + 1e-6) else atoms   # renumbering must not hurt (links)

    def score(self, atom_assign: np.ndarray) -> tuple[float, float]:
        a = self.prob.expand(atom_assign)
        over = self.prob.overflow(a)
        if over:
            return math.inf, -(2.0 + 10.0 * over / self.cap)
        t = self.prob.step_time(a)
        return t, -math.sqrt(t / self.greedy)


def decode_ratio(policy, cases) -> float:
    r = [c.score(policy.decode(c.gi))[0] / c.greedy for c in cases]
    return float(np.exp(np.mean(np.log(np.minimum(r, 10.0)))))


def pretrain(cases, held, updates: int, batch: int, lr: float, entropy: float, seed: int, eval_every: int,
             hidden: int, sink=None, log=print, imitate: int = 0, teacher_budget: int = 2000, rl_lr: float | None = None):
    from orchestrator.placement.graph_policy import GraphPolicy

    rng = np.random.default_rng(seed)
    policy = GraphPolicy(hidden, seed=seed, lr=lr)
    curve = []
    best = (decode_ratio(policy, cases), "the list-scheduling prior (no training)", {k: v.numpy() for k, v in policy.vars.items()})
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
        times, rewards = zip(*(c.score(a) for a in ro.actions))
        rewards = np.array(rewards)
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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):                     # one line, exit 2 (argparse prints its usage too)
        print(f"error: python -m orchestrator.pretrain: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    ap = _Parser(prog="python -m orchestrator.pretrain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="graph_policy.npz", help="checkpoint to write (.npz)")
    ap.add_argument("--workloads", default=str(DEFAULT_WORKLOADS), help="msr-dnn-partitioning folder")
    ap.add_argument("--models", default=",".join(TRAIN_MODELS), help=f"extracted models to train on (of {', '.join(EXTRACTED)})")
    ap.add_argument("--imitate", type=int, default=100, help="epochs of behaviour cloning of the search teacher (0 = none)")
    ap.add_argument("--teacher-budget", type=int, default=1500, help="local-search evaluations of the teacher per case")
    ap.add_argument("--updates", type=int, default=400, help="REINFORCE updates after imitation")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.003, help="Adam step of the imitation epochs")
    ap.add_argument("--rl-lr", type=float, default=0.0003, help="Adam step of the REINFORCE updates")
    ap.add_argument("--entropy", type=float, default=0.003)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    ap.add_argument("--no-heldout", action="store_true", help="do not score the held-out graphs while training")
    ap.add_argument("--synthetic", type=int, default=SYNTHETIC, help="random layered DAGs in the training set")
    ap.add_argument("--no-pipeline", action="store_true", help="no pipeline-objective cases (one-step objective only)")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from omegaconf import OmegaConf

    from orchestrator.errors import ConfigError
    from orchestrator.tracking.store import trial_run

    zero_ok = ("imitate", "updates", "synthetic")
    for key in ("updates", "batch", "hidden", "eval_every", "imitate", "teacher_budget", "synthetic"):
        if getattr(args, key) < (0 if key in zero_ok else 1):
            raise ConfigError(f"--{key.replace('_', '-')}={getattr(args, key)}: must be >= {0 if key in zero_ok else 1}")
    for key in ("lr", "rl_lr"):
        if not getattr(args, key) > 0:
            raise ConfigError(f"--{key.replace('_', '-')}={getattr(args, key)}: must be > 0")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in EXTRACTED]
    if bad:
        raise ConfigError(f"--models: unknown model {bad[0]!r} (one of {', '.join(EXTRACTED)})")
    leak = [m for m in models if m in HELD_OUT]
    if leak:
        raise ConfigError(f"--models: {leak[0]!r} is held out of pre-training (orchestrator.pretrain.HELD_OUT)")
    if not str(args.out).endswith(".npz"):
        raise ConfigError(f"--out={args.out}: expected a .npz path")
    workloads = Path(args.workloads)
    t0 = time.perf_counter()
    notes: list[str] = []
    cases = [Case(*c) for c in training_cases(workloads, models, TRAIN_MSR, notes, () if args.no_pipeline else TRAIN_PIPELINE,
                                              args.synthetic)]
    if not cases:
        raise ConfigError("no training cases (check --models and --workloads)")
    held = [] if args.no_heldout else [Case(*c) for c in held_out_cases(workloads)]
    for n in notes:
        print(f"note: {n}")
    print(f"pre-training on {len(cases)} cases ({time.perf_counter() - t0:.0f} s to build): " + "; ".join(c.label for c in cases))
    cfg = OmegaConf.create({"tracking": {"uri": args.tracking_uri, "experiment": "pretrain"},
                            "pretrain": {k: v for k, v in vars(args).items() if k != "tracking_uri"}})
    out = Path(args.out)
    objectives = ",".join(sorted({c.objective for c in cases}))
    with trial_run(cfg, run_name="pretrain", tags={"evaluator": "simulated", "placement.objective": objectives,
                                                   "pretrain.cases": "; ".join(c.label for c in cases)[:5000]},
                   config_yaml=OmegaConf.to_yaml(cfg), output_dir=Path(tempfile.mkdtemp(prefix="pretrain-"))) as sink:
        policy, best, curve = pretrain(cases, held, args.updates, args.batch, args.lr, args.entropy, args.seed,
                                       args.eval_every, args.hidden, sink, imitate=args.imitate,
                                       teacher_budget=args.teacher_budget, rl_lr=args.rl_lr)
        meta = {"cases": [c.label for c in cases], "held_out": list(HELD_OUT), "updates": args.updates,
                "best_update": best[1], "decode_vs_greedy": best[0], "seed": args.seed,
                "command": "python -m orchestrator.pretrain " + " ".join(sys.argv[1:])}
        policy.save(out, meta)
        sink.log_metrics({"pretrain.best_decode_vs_greedy": best[0], "pretrain.seconds": time.perf_counter() - t0})
        sink.log_artifact(out)
    print(f"saved {out} ({best[1]}, decode / greedy {best[0]:.3f} on the training cases, "
          f"{time.perf_counter() - t0:.0f} s); use it with placer.policy={out}")
    return 0


def held_out_cases(workloads: Path):
    from orchestrator.placement.workload import load_msr_workload

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


if __name__ == "__main__":
    sys.exit(main())
