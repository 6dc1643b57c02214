"""MPI with emulated device speed against the virtual clock's prediction, per update rule (issue 20):
measured wall-time speedup of W ranks over one rank, next to the speedup the virtual clock predicts for
the same settings and ``hardware.emulated_step_s``. Measured (MPI rows: real ranks, real gradients,
Horovod/MPI messages, sleeps that set each rank's speed) vs emulated (virtual clock).

    PYTHONPATH=. python benchmarks/sync_mpi_check.py              # W = 4; each sync option with its own
                                                                  # defaults (conf/sync/*.yaml; ~4 min here)
    ... --workers 2,4 --rules 'nesterov:0.05:hybrid'              # these rules, crossed with every strategy
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def default_rule(name: str) -> str:
    """``optimizer:lr:batch_policy`` of ``+sync=NAME``'s training defaults (conf/sync/NAME.yaml)."""
    import yaml

    train = yaml.safe_load((ROOT / "conf" / "sync" / f"{name}.yaml").read_text())["train"]
    return f"{train['optimizer']}:{train['lr']}:{train['batch_policy']}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="4")
    p.add_argument("--rules", default=None,
                   help="optimizer:lr:batch_policy, comma-separated (hybrid: G <= 256), each run with every strategy "
                        "(default: each strategy with its own +sync defaults, conf/sync/NAME.yaml)")
    p.add_argument("--emulated-step-s", type=float, default=0.2)
    p.add_argument("--strategies", default="allreduce,delay,async")
    p.add_argument("--write", type=Path, default=None)
    a = p.parse_args(argv)
    os.environ["TF_NUM_INTRAOP_THREADS"] = "1"
    from orchestrator.execution.runtime import configure_threads

    configure_threads(1, 1)
    import sync_speedup as sp

    from orchestrator.data import load_mnist
    from orchestrator.sync.costmodel import ComputeModel

    data = load_mnist()
    hw = {"emulated_step_s": a.emulated_step_s}
    lines = [f"MPI (measured wall time) vs the virtual clock (emulated), emulated_step_s={a.emulated_step_s}, MNIST to "
             "97% on the whole test split (evaluated every 1,024 samples; MPI: evaluation time subtracted), equal "
             "speed-1.0 ranks; baseline: one rank (MPI) / one worker (virtual) with the same rule. "
             f"`python benchmarks/sync_mpi_check.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             "| rule | strategy | W | measured t97 (s) | predicted t97 (s) | measured speedup | predicted speedup | error |",
             "|---|---|---|---|---|---|---|---|"]
    t_start = time.perf_counter()
    strategies = {"allreduce": sp.ALLREDUCE, "delay": sp.DELAY, "async": sp.ASYNC}
    names = a.strategies.split(",")
    unknown = [n for n in names if n not in strategies]
    if unknown:
        p.error(f"--strategies: unknown {', '.join(unknown)} (accepted: {', '.join(strategies)})")
    by_rule: dict[str, list[str]] = {}   # rule -> the strategies run with it (sharing its W=1 runs)
    if a.rules:
        by_rule = {rule: names for rule in a.rules.split(",")}
    else:   # each option with its own defaults
        for name in names:
            by_rule.setdefault(default_rule(name), []).append(name)
    for rule, rule_names in by_rule.items():
        opt, lr, policy = rule.split(":")
        train = {"optimizer": opt, "lr": float(lr), "batch_policy": policy, "global_batch_max": 256, "eval_samples": None,
                 "eval_every": 16, "budget_s": 400}
        b = sp.Bench(data, ComputeModel(0.0009, 0.000195), 1)
        r1 = b.run(sp.ALLREDUCE, "equal", 1, runtime="mpi", hw=hw, train=train)
        v1 = b.run(sp.ALLREDUCE, "equal", 1, hw=hw, train=train, label="prediction")
        for w in (int(x) for x in a.workers.split(",")):
            for name in rule_names:
                st = strategies[name]
                r = b.run(st, "equal", w, runtime="mpi", hw=hw, train=train)
                v = b.run(st, "equal", w, hw=hw, train=train, label="prediction")
                ms, ps = sp.ratio(r1["tt"], r["tt"]), sp.ratio(v1["tt"], v["tt"])
                err = f"{abs(ms / ps - 1):.0%}" if ms and ps else "-"
                lines.append(f"| {opt} lr {lr}, {policy} | {name} | {w} | {sp.fmt(r['tt'])} | {sp.fmt(v['tt'])} | "
                             f"{sp.fmt(ms)} | {sp.fmt(ps)} | {err} |")
                print(lines[-1], flush=True)
    lines += ["", f"One rank: the rule's W=1 MPI run; this run: {(time.perf_counter() - t_start) / 60:.1f} min."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        a.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
