"""docs/plugins.md, followed word by word for the placer: its files, pip install, a trial, its own test."""

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from conftest import QUICK, pip_installed, run_cli, store_runs

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(r"```\w*\n# file: (?P<path>\S+)\n(?P<body>.*?)```", re.S)


def placer_files() -> dict[str, str]:
    text = DOC.read_text()
    section = text.split("## A placer, as a package", 1)[1].split("\n## ", 1)[0]
    return {m["path"]: m["body"] for m in BLOCK.finditer(section)}


def test_the_placer_section_is_a_whole_package():
    files = placer_files()
    assert {"orchestrator-fastest-device/pyproject.toml", "orchestrator-fastest-device/src/orch_fastest_device/placer.py",
            "orchestrator-fastest-device/src/orch_fastest_device/conf/placer/fastest_device.yaml"} <= set(files)


@pytest.fixture
def docs_placer(tmp_path):
    for rel, body in placer_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    pkg = tmp_path / "orchestrator-fastest-device"
    with pip_installed(pkg) as env:
        yield pkg, env


@pytest.mark.slow
def test_documented_placer_installs_and_runs(workdir, docs_placer):
    pkg, env = docs_placer
    listing = run_cli(workdir, module="orchestrator.plugins", timeout=120, env=env)
    assert "fastest_device" in listing.stdout, listing.stdout + listing.stderr
    out = run_cli(workdir, "+placer=fastest_device", *QUICK, timeout=600, env={**env, "MLFLOW_TRACKING_URI": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = store_runs(workdir)
    assert run.info.status == "FINISHED" and run.data.tags["placer"] == "fastest_device"
    assert run.data.metrics["placement.devices_used"] == 1
    # The plugin's own documented test, through the fixture this project exports (pytest11 entry
    # point; named explicitly only where the installed metadata predates it, as in conftest.py).
    load = [] if any(ep.value == "orchestrator.testing" for ep in entry_points(group="pytest11")) else \
        ["-p", "orchestrator.testing"]
    own = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *load, "tests"], cwd=pkg,
                         capture_output=True, text=True, timeout=900, env={**os.environ, **env})
    assert own.returncode == 0 and "1 passed" in own.stdout, own.stdout[-3000:] + own.stderr[-2000:]


def section_files(title: str) -> dict[str, str]:
    text = DOC.read_text()
    section = text.split(f"## {title}, as a package", 1)[1].split("\n## ", 1)[0]
    return {m["path"]: m["body"] for m in BLOCK.finditer(section)}


@pytest.fixture
def docs_package(tmp_path, request):
    """Write one documented package's files and pip install them into a folder of its own; yields its environment."""
    files = section_files(request.param)
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    (name,) = {rel.split("/", 1)[0] for rel in files}
    with pip_installed(tmp_path / name) as env:
        yield env


def test_the_sync_section_is_the_example_package_word_by_word():
    """The documented sync strategy is examples/orchestrator-example-sync (installed and trained on both
    runtimes by tests/test_sync_plugin.py): every block is one of its files, and every file is shown."""
    example = DOC.parents[1] / "examples"
    files = section_files("A sync strategy")
    shown = {rel: (example / rel).read_text() for rel in files}
    assert files == shown
    package = example / "orchestrator-example-sync"
    sources = [package / "pyproject.toml", *(package / "src").rglob("*")]   # not pip's build/ or egg-info
    wanted = {str(f.relative_to(example)) for f in sources if f.is_file() and f.suffix in (".py", ".toml", ".yaml")}
    assert set(files) == wanted


@pytest.mark.slow
@pytest.mark.parametrize("docs_package", ["A hardware adapter"], indirect=True)
def test_documented_hardware_adapter_installs_and_runs(workdir, docs_package):
    out = run_cli(workdir, "hardware=local4", "+placer=greedy", "placer.reward=measured", *QUICK, timeout=600,
                  env={**docs_package, "MLFLOW_TRACKING_URI": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = store_runs(workdir)
    assert run.info.status == "FINISHED" and run.data.tags["hardware"] == "local4"
    import json

    placement = json.loads(next(Path(workdir).rglob("placement.json")).read_text())
    assert placement["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
