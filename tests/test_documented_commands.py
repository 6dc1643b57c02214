"""A newcomer's script (issue 30): every ``python -m orchestrator...`` command of README.md and
docs/recipes.md runs as written from the repository root, with small budgets put in place of the
long ones. A command that stops working, or a path that is only valid elsewhere (README's bert24
example pointed under tests/data without saying so), fails here.

The commands run in a copy of the repository root made of links (``../shared`` resolves as from the
root), so that their stores and outputs land in the test's directory."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import NO_CONTEXT, QUICK, run_inprocess, store_runs

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", ROOT / "docs" / "recipes.md")
PLACEHOLDER = re.compile(r"\b(WORKLOAD|EXPERT|NAME|RUN_ID|URI|PATH)\b")
FASHION = Path("/usr/share/datasets/fashion-mnist")


def documented_commands(path: Path) -> list[list[str]]:
    """The ``python -m orchestrator...`` commands of a markdown file's bash blocks, as argv lists
    (continuation lines joined, comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip().startswith("python -m orchestrator"):
                out.append(shlex.split(line, comments=True))
    return out


def _small(argv: list[str]) -> list[str] | None:
    """The command with small budgets (None: not runnable here as a unit test, with the reason
    covered by another test: root network namespaces, placeholders)."""
    module, args = argv[2], argv[3:]
    if module == "orchestrator" and tuple(args) in COVERED:
        return None                                   # run with these budgets by the test COVERED names
    if module == "orchestrator.netlab" or any(a.startswith("hardware.netlab=") for a in args):
        return None                                   # root + namespaces: tests/test_netlab.py
    if any(PLACEHOLDER.search(a) for a in args):
        return None                                   # a template line; the next README line is concrete
    if module == "orchestrator.pretrain":
        return [module, *args, "--models", "nmt-2", "--workloads", "none", "--synthetic", "0", "--imitate", "2",
                "--teacher-budget", "50", "--updates", "4", "--eval-every", "2", "--no-heldout"]
    if module != "orchestrator":
        return [module, *args]
    budgets = dict(a.split("=", 1) for a in QUICK)
    if any(a.startswith("+placer=rl") for a in args):
        budgets["placer.budget_evaluations"] = "200"
    if "placer.reward=measured" in args:
        budgets["placer.budget_s"] = "5"
    if any(a.startswith("+planner=") for a in args):
        # the search's budget, and the certified bound's: cut at 3 s it is still certified, only looser
        # (tests/test_plan_space.py::test_a_time_limit_cuts_the_sailor_bound_to_a_looser_certified_one)
        budgets.update({"planner.budget_s": "2", "planner.bound_time_limit_s": "3"})
    if "hydra/sweeper=optuna" in args:
        budgets["hydra.sweeper.n_trials"] = "2"
    if "sync.runtime=mpi" in args or ("-m" in args and not any(a.startswith("+planner=") for a in args)):
        # the ranks, or a sweep's trials, are under test here; the context has its own (the headline's)
        budgets.update(a.split("=", 1) for a in NO_CONTEXT)
    kept = [a for a in args if a.split("=", 1)[0] not in budgets]
    return [module, *kept, *(f"{k}={v}" for k, v in budgets.items())]


# Commands another test runs as written, with the budgets it names (the headline has a test of its own summary; the
# measured reward's test checks what the search measured), keyed by the document's arguments.
COVERED = {("+placer=rl", "+sync=delay"): "tests/test_trial_integration.py::test_the_mission_command_runs_on_the_defaults",
           ("+placer=rl", "hardware=local", "placer.reward=measured", "placer.budget_s=60"):
               "tests/test_measured_rewards.py::test_measured_reward_search_on_two_logical_cpus"}
# Budget keys a covering test may give a value of its own (a smaller budget than the document's).
BUDGET_KEYS = {"placer.budget_s", "placer.budget_evaluations"}

CASES = []
# A command that reads a directory an earlier command of its document writes (`--out DIR`; the plan on
# `python -m orchestrator.profile`'s output) runs those writers first where DIR is not there yet: on pytest-xdist
# the commands of one document are spread over the workers, each with its own copy of the repository.
# A report reads the store an earlier command wrote: `--experiment NAME` the recipe's (`+experiment=NAME`), a plain
# report any trial's (the document's first); where this worker has not run it, it runs first, likewise.
WRITERS: dict[tuple[str, str], list[list[str]]] = {}
STORE_WRITERS: dict[tuple[str, str | None], list[str]] = {}
# A report of a recipe (`--experiment NAME`) runs in the recipe's test, right after it: as separate tests on
# different workers the report ran the recipe again.
FOLLOWERS: dict[tuple[str, str], list[list[str]]] = {}


def _experiment(small: list[str]) -> str | None:
    return next((a.split("=", 1)[1] for a in small if a.startswith("+experiment=")), None)


def _option(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``argv`` (None: not given)."""
    return argv[argv.index(flag) + 1] if flag in argv else None


for doc in DOCS:
    smalls = [(argv, small) for argv in documented_commands(doc) if (small := _small(argv)) is not None]
    recipes = {_experiment(s) for _, s in smalls if s[0] == "orchestrator"} - {None}
    reported = {_option(s, "--experiment") for _, s in smalls if s[0] == "orchestrator.report"}
    for argv, small in smalls:
        if small[0] == "orchestrator.report" and (name := _option(small, "--experiment")) in recipes:
            FOLLOWERS.setdefault((doc.name, name), []).append(small)
            continue
        if (out := _option(small, "--out")) is not None:
            WRITERS.setdefault((doc.name, out), []).append(small)
        if small[0] == "orchestrator" and "-m" not in small:
            STORE_WRITERS.setdefault((doc.name, None), small)
        for a in small:
            if a.startswith("+experiment="):
                STORE_WRITERS[doc.name, a.split("=", 1)[1]] = small
        marks = [pytest.mark.slow]
        if "sync.runtime=mpi" in small:
            marks.append(pytest.mark.mpi)
        then = " (then its report)" if (_experiment(small) or "") in reported else ""
        CASES.append(pytest.param(small, id=f"{doc.name}: {' '.join(argv[2:])[:90]}{then}", marks=marks))


def test_the_docs_hold_the_commands_this_test_runs():
    ids = [c.id for c in CASES]
    documented = [a[3:] for doc in DOCS for a in documented_commands(doc)]
    assert ["+placer=rl", "+sync=delay"] in documented and any("+planner=joint" in i for i in ids), ids
    for strategy in ("delay", "allreduce"):          # the only trials of these strategies on MPI ranks in pass one
        assert any(f"+sync={strategy} sync.runtime=mpi" in i for i in ids), ids
    assert len(CASES) >= 15, ids
    assert ("recipes.md", "placement_rl_vs_expert") in FOLLOWERS       # the recipe's report runs after it
    for args, where in COVERED.items():                                 # the covering test runs these arguments
        path, name = where.split("::")
        body = (ROOT / path).read_text().split(f"def {name}(", 1)[1].split("\ndef ", 1)[0]
        assert all(f'"{a}"' in body or (a.split("=", 1)[0] in BUDGET_KEYS and f'"{a.split("=", 1)[0]}=' in body)
                   for a in args), (where, args)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """One directory per document that looks like the repository root (links to its entries) beside a
    ``shared`` link: a newcomer runs a document's commands in order, in one place (the report reads
    what the recipe before it stored)."""
    made: dict[str, Path] = {}

    def repo(doc: str) -> Path:
        if doc not in made:
            base = tmp_path_factory.mktemp(doc.replace(".", "_"))
            (base / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
            made[doc] = base / "repo"
            made[doc].mkdir()
            for entry in ROOT.iterdir():
                if entry.name not in {"mlflow.db", "mlruns", "outputs", "multirun", ".venv", ".git"}:
                    (made[doc] / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        return made[doc]

    return repo


RAN: set[tuple[str, tuple[str, ...]]] = set()     # (document, command) run in this worker's copy of the repository


def _ran_recipe(doc: str, name: str | None) -> bool:
    return any(d == doc and f"+experiment={name}" in cmd for d, cmd in RAN)


def _store_written(repo: Path, doc: str, argv: list[str]) -> None:
    """Before a report, the command that writes what it reads, unless this worker ran it (see STORE_WRITERS)."""
    if argv[0] != "orchestrator.report":
        return
    name = _option(argv, "--experiment")
    if _ran_recipe(doc, name) or (name is None and (repo / "mlflow.db").exists()):
        return
    writer = STORE_WRITERS.get((doc, name))
    assert writer is not None, f"{doc}: no command writes what {' '.join(argv)} reads"
    got = run_inprocess(repo, *writer[1:], module=writer[0])
    assert got.returncode == 0, f"{' '.join(writer)} (run first: {' '.join(argv)} reads its store)\n{got.stderr[-3000:]}"
    RAN.add((doc, tuple(writer)))


@pytest.mark.parametrize("argv", CASES)
def test_a_documented_command_runs_as_written(repos, request, argv):
    if any("dataset=fashion_mnist" == a for a in argv) and not FASHION.exists():
        pytest.skip(f"Fashion-MNIST is not installed at {FASHION} (.ci/system-deps installs it)")
    doc = request.node.callspec.id.split(":", 1)[0]
    module, args = argv[0], argv[1:]
    for (wdoc, target), writers in WRITERS.items():
        if wdoc == doc and argv not in writers and any(a.split("=", 1)[-1] == target for a in args):
            for w in writers:              # each writer this worker has not run (the folder may hold another's part)
                if (doc, tuple(w)) not in RAN:
                    got = run_inprocess(repos(doc), *w[1:], module=w[0])
                    assert got.returncode == 0, f"{' '.join(w)} (run first: {target})\n{got.stderr[-3000:]}"
                    RAN.add((doc, tuple(w)))
    _store_written(repos(doc), doc, argv)
    out = run_inprocess(repos(doc), *args, module=module)
    assert out.returncode == 0, f"{' '.join(argv)}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    RAN.add((doc, tuple(argv)))
    for report in FOLLOWERS.get((doc, _experiment(argv) or ""), []):
        got = run_inprocess(repos(doc), *report[1:], module=report[0])
        assert got.returncode == 0, f"{' '.join(report)} (after {' '.join(argv)})\n{got.stderr[-3000:]}"
    for a in args if "-m" not in args else ():
        if a.startswith("dataset="):   # the data the document names is what trained (the only Fashion-MNIST trial)
            assert store_runs(repos(doc))[0].data.params["dataset.name"] == a.split("=", 1)[1]
    if "sync.runtime=mpi" in args:
        # README's MPI commands (delay; allreduce on unequal workers) are this suite's trials of each on real ranks:
        # the run says so, on the wall clock, and it trained
        run = store_runs(repos(doc))[0]
        assert run.data.tags["runtime"] == "mpi" and run.data.tags["train.clock"] == "wall", run.data.tags
        assert run.data.metrics["train.final_test_accuracy"] >= 0.8 and "train.test_accuracy" in run.data.metrics
