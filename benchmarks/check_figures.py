"""Do the figure tables of docs/benchmarks reproduce from the code? Each check reruns a benchmark with the
command that made a committed table (or a named subset of its rows, where the whole run takes longer than
``--max-seconds``), reads the markdown tables it prints or writes, and compares each with the committed table
of the same header in the same section of the doc: cell for cell, exactly (simulated figures are printed with
fixed digits), except the columns of measured wall time, which are left out and named. Tables that only a
long training run, a measurement or data outside the repository can make are skipped, saying why.

One line per table: ``reproduced``, ``differs`` (with the first differing row, committed then now) or
``skipped`` (why); exit status 1 when a table differs.

    PYTHONPATH=. python benchmarks/check_figures.py                  # every check under 2 minutes
    PYTHONPATH=. python benchmarks/check_figures.py --only plans     # the checks whose name contains 'plans'
    PYTHONPATH=. python benchmarks/check_figures.py --max-seconds 900    # the slower ones too
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks"
MEASURED = "measured wall time"


@dataclass(frozen=True)
class Check:
    """One benchmark command and the committed tables it reproduces.

    ``argv``: the script and its arguments (``{tmp}``: a scratch directory; ``{docs}``: docs/benchmarks);
    ``writes``: the file under ``{tmp}`` it writes its tables to (None: they are printed); ``section``: the
    heading (a substring) of the doc section whose tables are compared (None: the whole doc); ``ignore``:
    columns not compared (measured wall time); ``subset``: the run makes only some rows of the committed
    table (matched by their first ``key`` cells); ``copy``: committed files the command reads and may write,
    copied to ``{tmp}`` first (a run cache); ``seconds``: about how long it takes here; ``skip``: why it is
    not run at all."""

    name: str
    doc: str
    argv: tuple[str, ...] = ()
    writes: str | None = None
    section: str | None = None
    ignore: tuple[str, ...] = ()
    subset: bool = False
    key: int = 1
    copy: tuple[str, ...] = ()
    seconds: float = 10.0
    skip: str = ""
    tables: int = 1                # tables the doc section must have that the run reproduces (at least)
    needs: str = ""                # a path the run needs that is not in the repository (skipped without it)
    env: dict = field(default_factory=dict)


PLAN_CLUSTERS = ("32 A100-40", "16 GH-96", "32 A100-80")
REGIMES_CMD = ("benchmarks/sync_regimes.py", "--seeds", "3", "--jobs", "2", "--cache", "{tmp}/sync_regimes_runs.json",
               "--write", "{tmp}/out.md")
FASHION_CMD = ("benchmarks/sync_regimes.py", "--dataset", "fashion_mnist", "--seeds", "3", "--regimes", "0,1,2,3,4,5",
               "--strategies", "allreduce,backup b=2,async cut-off,local SGD H=4",
               "--cache", "{tmp}/sync_regimes_fashion_runs.json", "--write", "{tmp}/out.md")
ADAPTIVE_CMD = ("benchmarks/adaptive_batch.py", "--datasets", "fashion_mnist", "--clusters", "8eq,16mixed",
                "--fixed", "256,128,512", "--grid", "nesterov:0.05,nesterov:0.025", "--seeds", "3",
                "--results", "{tmp}/adaptive_batch_fmnist_runs.json", "--write", "{tmp}/out.md")

CHECKS = [
    Check("plans: fidelity, the 15 shared plans", "plans.md", ("benchmarks/plan_fidelity.py",),
          section="The 15 shared plans", tables=2, seconds=2),
    Check("plans: fidelity, held-out plans", "plans.md", skip="the held-out plans' data is not in the repository "
          "(Sailor's other validation runs, `--data DIR`)"),
    Check("plans: plan quality (clusters 32 A100-40, 16 GH-96, 32 A100-80 of 7)", "plans.md",
          ("benchmarks/plan_quality.py", "--clusters", *PLAN_CLUSTERS), section="Plan quality: planners x clusters",
          ignore=("search s",), subset=True, key=2, seconds=10),
    Check("plans: plan quality, the whole table and --decompose", "plans.md",
          ("benchmarks/plan_quality.py", "--decompose"), section="Plan quality: planners x clusters",
          ignore=("search s",), tables=2, seconds=300),
    Check("plans: judged by the project's simulator", "plans.md",
          ("benchmarks/plan_quality.py", "--judge", "project", "--clusters", "32 A100-40 + 96 V100-16",
           "128 A100-40 + 384 V100-16"), section="Plan quality: planners x clusters", ignore=("search s",),
          seconds=90),
    Check("plans: the bound on Sailor's metric per form of plan", "plans.md", ("benchmarks/sailor_bound_forms.py",),
          section="The bound per form of plan", seconds=240, needs="../shared/workloads/sailor"),
    Check("plans: clusters and GPU types not in the repository", "plans.md", skip="`--gpus` runs of 3 minutes "
          "each whose tables were assembled by hand (columns from two runs and earlier bounds)"),
    Check("derived GPU profiles: leave one out", "derived_profiles.md", ("benchmarks/derived_profiles.py",),
          section="Results", tables=8, seconds=5, needs="../shared/workloads/sailor"),
    Check("derived GPU profiles: which GPUs to rent", "derived_profiles.md", skip="the joint planner's search "
          "budget is wall time (benchmarks/gpu_offer.py --budget-s), so its rows depend on the machine's load"),
    Check("placement: step objective, msr layer graphs (5 of 25 rows)", "placement.md",
          ("benchmarks/check_figures.py", "--placement-rows", "msr latency layer bert24_inference",
           "msr throughput layer resnet50_inference", "msr throughput layer bert24_inference",
           "msr throughput layer bert24_training", "msr throughput layer resnet50_training"),
          section="Placement quality", ignore=("rl search s (evals)",), subset=True, key=2, seconds=90),
    Check("placement: step objective, every row", "placement.md", ("benchmarks/check_figures.py", "--placement-rows"),
          section="Placement quality", ignore=("rl search s (evals)",), subset=True, key=2, seconds=700),
    Check("placement: pipeline objective", "placement.md", skip="the MILP's time limit is wall time (the doc says "
          "so: under load it proves less), so its rows depend on the machine's load"),
    Check("placer ablation", "placer_ablation.md", ("benchmarks/placer_ablation.py", "--budget", "3000",
                                                     "--out", "{tmp}/out.md"),
          writes="out.md", ignore=("zero-shot (policy alone; s)",), seconds=240),
    Check("sync regimes: MNIST map (from its committed run cache: the runs are not redone, so a cost-model change does not show here)", "sync_regimes.md", REGIMES_CMD, writes="out.md",
          copy=("sync_regimes_runs.json",), tables=3, seconds=30),
    Check("sync regimes: +sync=auto between the cells", "sync_regimes.md", skip="training on the virtual clock, about "
          "10 minutes (benchmarks/sync_auto.py): not reproduced here"),
    Check("sync regimes: Fashion-MNIST map (from its committed run cache: the runs are not redone, so a cost-model change does not show here)", "sync_regimes_fashion_mnist.md",
          FASHION_CMD, writes="out.md", copy=("sync_regimes_fashion_runs.json",), tables=3, seconds=30),
    Check("adaptive batch: Fashion-MNIST (from its committed run cache: the runs are not redone, so a cost-model change does not show here)", "adaptive_batch.md", ADAPTIVE_CMD,
          writes="out.md", copy=("adaptive_batch_fmnist_runs.json",), section="Fashion-MNIST with nesterov",
          needs="/usr/share/datasets/fashion-mnist", seconds=60),
    Check("adaptive batch: MNIST", "adaptive_batch.md", skip="its run cache (`--results sgd.json`) is not "
          "committed: training on the virtual clock, about an hour"),
    Check("sync limit: Fashion-MNIST on the rows' footing (from its committed cache)", "sync_tuned.md",
          ("benchmarks/sync_limit.py", "--dataset", "fashion_mnist", "--grid", "adam:0.002,0.003,0.004", "--batches",
           "64,128,256,512", "--rows", "6,4", "--cache", "{docs}/sync_limit_fashion_mnist", "--join"),
          section="Fashion-MNIST on the rows' footing", needs="/usr/share/datasets/fashion-mnist", seconds=20),
    Check("sync tuned (S(G), limits, measured rows)", "sync_tuned.md", skip="training on the virtual clock "
          "(about 50 min for MNIST); its caches (`--curve-cache`, `--results-cache`) are not committed"),
    Check("sync speedup", "sync.md", skip="training runs; the compute model is measured on this machine"),
    Check("sync shards", "sync_shards.md", skip="training on the virtual clock, 3 seeds per row (tens of minutes)"),
    Check("sync regimes under MPI", "sync_regimes_mpi.md", skip=f"{MEASURED} (MPI runs)"),
    Check("adaptive batch under MPI", "adaptive_batch_mpi.md", skip=f"{MEASURED} (MPI runs)"),
    Check("extraction and calibration", "extraction.md", skip=f"{MEASURED} (extraction speed, measured steps)"),
    Check("simulator speed", "simulator.md", skip=MEASURED),
    Check("placement speed", "placement_speed.md", skip=MEASURED),
    Check("profilers (layers vs a step, links vs tc)", "profiling.md", skip=f"{MEASURED} (layer and link profiles)"),
]


# -- markdown tables ---------------------------------------------------------------------------------------
def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of ``text``: each a list of rows of cells, the header first, the rule left out."""
    out: list[list[list[str]]] = []
    cur: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            row = cells(line)
            if not all(set(c) <= set("-:") and c for c in row):
                cur.append(row)
        elif cur:
            out.append(cur)
            cur = []
    return out


def section(text: str, heading: str | None) -> str:
    """The part of ``text`` from the heading containing ``heading`` to the next heading of its level or above."""
    if heading is None:
        return text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and heading in line:
            level = len(line) - len(line.lstrip("#"))
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].startswith("#") and len(lines[j]) - len(lines[j].lstrip("#")) <= level), len(lines))
            return "\n".join(lines[i:end])
    raise KeyError(f"no heading containing {heading!r}")


def compare(doc: list[list[str]], now: list[list[str]], ignore: tuple[str, ...], subset: bool, key: int) -> str | None:
    """None when ``now`` reproduces ``doc`` (the header's ``ignore`` columns left out); else the first
    differing row, committed then now."""
    keep = [i for i, h in enumerate(doc[0]) if h not in ignore]

    def strip(row: list[str]) -> list[str]:
        return [row[i] if i < len(row) else "<missing>" for i in keep]

    committed = {tuple(r[:key]): r for r in doc[1:]}
    rows = now[1:]
    if not subset and len(rows) != len(doc) - 1:
        return f"{len(doc) - 1} rows committed, {len(rows)} now"
    first, n = None, 0
    for k, row in enumerate(rows):
        old = committed.get(tuple(row[:key])) if subset else doc[k + 1]
        if old is None:
            return f"row not in the committed table: | {' | '.join(row)} |"
        if strip(old) != strip(row):
            n += 1
            first = first or f"committed | {' | '.join(strip(old))} |  now | {' | '.join(strip(row))} |"
    return None if first is None else f"{n} of {len(rows)} rows differ; the first: {first}"


# -- running a check ---------------------------------------------------------------------------------------
def run(check: Check, timeout: float) -> list[str]:
    """Run ``check``; one line per table it compares."""
    tmp = Path(tempfile.mkdtemp(prefix="check-figures-"))
    try:
        for f in check.copy:
            shutil.copy(DOCS / f, tmp / f)
        argv = [a.format(tmp=tmp, docs=DOCS) for a in check.argv]
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2", "MLFLOW_DISABLE_TELEMETRY": "true",
               **check.env}
        t = time.time()
        try:
            p = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return [f"differs: {check.name}: the command ran past {timeout:.0f} s "
                    "(for a cached run: the cache no longer covers it, so it trained)"]
        took = time.time() - t
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
            return [f"differs: {check.name}: the command failed (exit {p.returncode}): {tail[0]}"]
        out = (tmp / check.writes).read_text() if check.writes else p.stdout
        return compare_doc(check, tables(out), took)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare_doc(check: Check, produced: list[list[list[str]]], took: float) -> list[str]:
    doc_tables = tables(section((DOCS / check.doc).read_text(), check.section))
    lines, matched = [], 0
    for now in produced:
        same = [d for d in doc_tables if d[0] == now[0]]
        if not same:
            continue
        matched += 1
        diffs = [compare(d, now, check.ignore, check.subset, check.key) for d in same]
        head = " | ".join(now[0][:3])
        where = f"{check.doc}{f' ({check.section})' if check.section else ''}, table '{head} ...'"
        skipped = [c for c in check.ignore if c in now[0]]
        note = f" (not compared: {', '.join(skipped)}: {MEASURED})" if skipped else ""
        if any(d is None for d in diffs):
            lines.append(f"reproduced: {check.name}: {where}, {len(now) - 1} rows, {took:.0f} s{note}")
        else:
            lines.append(f"differs: {check.name}: {where}: {diffs[0]}")
    if matched < check.tables:
        lines.append(f"differs: {check.name}: {matched} of the {check.tables} committed tables came out of the run")
    return lines


def placement_rows(labels: list[str]) -> int:
    """``--placement-rows``: rows of placement.md's step table, as benchmarks/placement_quality.py computes them
    (its cases, budgets and placers), for the graphs named (every graph when none is)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import placement_quality as pq

    budgets = {"random": 200, "optuna": 100, "rl": pq.rl_default_budget()}
    pq.HEADROOM = 0.0                             # its main()'s without --headroom (the step objective's)
    notes: list[str] = []
    cases = [*pq.extracted_cases(notes), *pq.msr_cases(Path(pq.DEFAULT_WORKLOADS), False, notes),
             *pq.synthetic_cases(False, notes)] if not labels else \
        [c for c in pq.msr_cases(Path(pq.DEFAULT_WORKLOADS), False, notes) if c[0] in labels]
    rows = []
    for case in cases:
        rows.append(pq.run_case(*case, budgets, pq.make_placers(False)))
        pq.judge(rows[-1])
    print(pq.table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="only the checks whose name contains this")
    ap.add_argument("--max-seconds", type=float, default=120, help="skip checks that take longer than this here")
    ap.add_argument("--placement-rows", nargs="*", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.placement_rows is not None:
        return placement_rows(a.placement_rows)
    bad = 0
    for check in CHECKS:
        if a.only not in check.name:
            continue
        if check.skip:
            lines = [f"skipped: {check.name} ({check.doc}): {check.skip}"]
        elif check.needs and not Path(check.needs).exists():
            lines = [f"skipped: {check.name} ({check.doc}): {check.needs} is absent here"]
        elif check.seconds > a.max_seconds:
            lines = [f"skipped: {check.name} ({check.doc}): about {check.seconds:.0f} s here, over --max-seconds "
                     f"{a.max_seconds:g}"]
        else:
            lines = run(check, timeout=max(60.0, 4 * check.seconds))
        for line in lines:
            print(line, flush=True)
            bad += line.startswith("differs")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
