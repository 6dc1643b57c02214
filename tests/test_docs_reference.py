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
    assert "| `train.lr` | `0.1` | number >= 0 | the learning rate of one batch of batch_size (for train.optimizer) |" in page and "## `placer=manual`" in page
    assert "| `placer.budget_evaluations` | `12000` | integer >= 1 |" in page          # from the schema
