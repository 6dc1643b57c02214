"""``python -m orchestrator.pretrain``: pre-train the graph placement policy across graphs and workers.

The command line only: arguments, checks (one-line errors, exit 2) and the MLflow run; the training
set and the training are ``orchestrator.placement.learn.pretrain`` (its docstring says what it does)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.placement.learn import pretrain as pt


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):                     # one line, exit 2 (argparse prints its usage too)
        print(f"error: python -m orchestrator.pretrain: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    ap = _Parser(prog="python -m orchestrator.pretrain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="graph_policy.npz", help="checkpoint to write (.npz)")
    ap.add_argument("--workloads", default=str(pt.DEFAULT_WORKLOADS), help="msr-dnn-partitioning folder")
    ap.add_argument("--models", default=",".join(pt.TRAIN_MODELS), help=f"extracted models to train on (of {', '.join(pt.EXTRACTED)})")
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
    ap.add_argument("--synthetic", type=int, default=pt.SYNTHETIC, help="random layered DAGs in the training set")
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
    bad = [m for m in models if m not in pt.EXTRACTED]
    if bad:
        raise ConfigError(f"--models: unknown model {bad[0]!r} (one of {', '.join(pt.EXTRACTED)})")
    leak = [m for m in models if m in pt.HELD_OUT]
    if leak:
        raise ConfigError(f"--models: {leak[0]!r} is held out of pre-training (orchestrator.placement.learn.pretrain.HELD_OUT)")
    if not str(args.out).endswith(".npz"):
        raise ConfigError(f"--out={args.out}: expected a .npz path")
    workloads = Path(args.workloads)
    t0 = time.perf_counter()
    notes: list[str] = []
    cases = [pt.Case(*c) for c in pt.training_cases(workloads, models, pt.TRAIN_MSR, notes, () if args.no_pipeline else pt.TRAIN_PIPELINE,
                                              args.synthetic)]
    if not cases:
        raise ConfigError("no training cases (check --models and --workloads)")
    held = [] if args.no_heldout else [pt.Case(*c) for c in pt.held_out_cases(workloads)]
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
        policy, best, curve = pt.pretrain(cases, held, args.updates, args.batch, args.lr, args.entropy, args.seed,
                                       args.eval_every, args.hidden, sink, imitate=args.imitate,
                                       teacher_budget=args.teacher_budget, rl_lr=args.rl_lr)
        meta = {"cases": [c.label for c in cases], "held_out": list(pt.HELD_OUT), "updates": args.updates,
                "best_update": best[1], "decode_vs_greedy": best[0], "seed": args.seed,
                "command": "python -m orchestrator.pretrain " + " ".join(sys.argv[1:])}
        policy.save(out, meta)
        sink.log_metrics({"pretrain.best_decode_vs_greedy": best[0], "pretrain.seconds": time.perf_counter() - t0})
        sink.log_artifact(out)
    print(f"saved {out} ({best[1]}, decode / greedy {best[0]:.3f} on the training cases, "
          f"{time.perf_counter() - t0:.0f} s); use it with placer.policy={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
