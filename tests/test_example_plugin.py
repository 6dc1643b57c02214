"""A third-party placer package, installed with pip, adds `+placer=round_robin` with no change here."""

from pathlib import Path

import pytest

from conftest import QUICK, run_cli, store_runs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "orchestrator-example-placer"


@pytest.fixture
def example_installed():
    from conftest import pip_installed

    with pip_installed(EXAMPLE) as env:
        yield env


@pytest.mark.slow
def test_installed_plugin_runs_a_trial(workdir, example_installed):
    listing = run_cli(workdir, module="orchestrator.plugins", timeout=120, env=example_installed)
    assert "round_robin" in listing.stdout and "orchestrator-example-placer" in listing.stdout
    out = run_cli(workdir, "+placer=round_robin", *QUICK, timeout=600, env=example_installed)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = store_runs(workdir)
    assert run.info.status == "FINISHED" and run.data.tags["placer"] == "round_robin"
    assert "placement.speedup" in run.data.metrics
