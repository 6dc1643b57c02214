"""The figure tables of docs/benchmarks reproduce from the code (issue 42, "Done when"):
benchmarks/check_figures.py reruns a benchmark and compares its tables with the committed ones. The slow
test runs its two cheapest checks (plan fidelity and plan quality on three clusters, about 15 s); the
others here check the comparison itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import check_figures as cf

ROOT = Path(__file__).resolve().parents[1]
SAILOR = ROOT.parent / "shared" / "workloads" / "sailor"

DOC = """# Doc

## Section A

| graph | hardware | value | search s |
|---|---|---|---|
| g1 | hw | 1.00 | 3.1 |
| g2 | hw | 2.00 | 4.2 |

## Section B

| graph | hardware | value | search s |
|---|---|---|---|
| g1 | hw | 9.00 | 1.0 |
"""


def test_tables_are_read_per_section_without_the_rule():
    a = cf.tables(cf.section(DOC, "Section A"))
    assert a == [[["graph", "hardware", "value", "search s"], ["g1", "hw", "1.00", "3.1"], ["g2", "hw", "2.00", "4.2"]]]
    assert cf.tables(cf.section(DOC, "Section B"))[0][1][2] == "9.00"
    with pytest.raises(KeyError):
        cf.section(DOC, "Section C")


def test_a_changed_figure_differs_and_wall_time_is_not_compared():
    doc = cf.tables(cf.section(DOC, "Section A"))[0]
    same = [r[:3] + ["99.9"] for r in doc]                  # only the measured column changed
    same[0][3] = "search s"
    assert cf.compare(doc, same, ("search s",), subset=False, key=1) is None
    changed = [list(r) for r in doc]
    changed[2][2] = "2.01"
    out = cf.compare(doc, changed, ("search s",), subset=False, key=1)
    assert out is not None and "1 of 2 rows differ" in out and "g2 | hw | 2.00" in out and "g2 | hw | 2.01" in out
    assert cf.compare(doc, changed, (), subset=False, key=1) is not None
    assert "rows committed" in cf.compare(doc, doc[:2], (), subset=False, key=1)


def test_a_subset_run_matches_its_rows_by_key():
    doc = cf.tables(cf.section(DOC, "Section A"))[0]
    assert cf.compare(doc, [doc[0], doc[2]], (), subset=True, key=2) is None
    assert "not in the committed table" in cf.compare(doc, [doc[0], ["g3", "hw", "1.00", "3.1"]], (), True, 2)


def test_every_doc_of_docs_benchmarks_with_a_table_has_a_check():
    docs = {p.name for p in cf.DOCS.glob("*.md") if cf.tables(p.read_text())}
    assert docs <= {c.doc for c in cf.CHECKS}
    for c in cf.CHECKS:
        assert (cf.DOCS / c.doc).exists() and (c.skip or c.argv)
        if c.section:
            cf.section((cf.DOCS / c.doc).read_text(), c.section)


@pytest.mark.slow
@pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")
def test_the_cheapest_figure_tables_reproduce():
    out = subprocess.run([sys.executable, "benchmarks/check_figures.py", "--only", "plans: ", "--max-seconds", "30"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.stdout.splitlines()
    reproduced = [line for line in lines if line.startswith("reproduced: plans: fidelity, the 15 shared plans")
                  or line.startswith("reproduced: plans: plan quality (clusters")]
    fidelity = [line for line in reproduced if "fidelity" in line]
    assert out.returncode == 0 and len(fidelity) >= 2 and len(reproduced) > len(fidelity), out.stdout + out.stderr
    assert not any(line.startswith("differs") for line in lines)


def test_regenerating_one_recipes_table_keeps_the_others():
    from benchmarks import recipe_tables as rt

    old = ("old intro\n\n### `placement_rl_vs_expert` (2026-12-03)\n\n| a |\n\n`verdict: x`\n\n"
           "### `hybrid` (2026-12-03)\n\n| old |\n\n`verdict: old`\n")
    new = rt.merge(old, {"hybrid": "### `hybrid` (2026-12-07)\n\n| new |\n", "tune_delay": "### `tune_delay` (t)\n"})
    assert new.startswith(rt.INTRO) and "old intro" not in new
    assert "### `placement_rl_vs_expert` (2026-12-03)\n\n| a |\n\n`verdict: x`" in new     # kept whole
    assert "| old |" not in new and "| new |" in new
    assert new.index("placement_rl_vs_expert") < new.index("`hybrid`") < new.index("tune_delay")   # RECIPES order
