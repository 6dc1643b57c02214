"""The committed configuration reference matches conf/ (regenerate: python docs/gen_config_reference.py)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_reference_is_up_to_date():
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_config_reference.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert "| `train.lr` | `0.1` | number >= 0 | the learning rate of one batch of batch_size (for train.optimizer) |" in page and "## `+placer=manual`" in page and "Select with `+planner=amp`" in page
    assert "| `placer.budget_evaluations` | `12000` | integer >= 1 |" in page          # from the schema


def test_every_markdown_table_has_its_header_and_no_repeated_row():
    """A table a user must read by hand is a broken one: every block of `|` lines outside code starts with a header
    and its separator, and repeats no row (a benchmark's progress lines pasted above or into a table did both)."""
    import re

    bad = []
    for page in sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]):
        lines, i, code = page.read_text().split("\n"), 0, False
        while i < len(lines):
            code ^= lines[i].startswith("```")
            if code or not lines[i].startswith("|"):
                i += 1
                continue
            j = next((k for k in range(i, len(lines)) if not lines[k].startswith("|")), len(lines))
            rows = lines[i + 2:j]
            if j - i < 2 or not re.match(r"^\|\s*:?-{3,}", lines[i + 1]) or len(rows) != len(set(rows)):
                bad.append(f"{page.relative_to(ROOT)}:{i + 1}: {lines[i][:80]}")
            i = j
    assert not bad, bad
