"""The package layout: one home per concept, imports one way, no oversized module, the 0.1 import
paths still resolving to the moved modules."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placement", "sync", "hardware", "execution", "tracking")
# which package may import which (core -> engines -> execution -> hardware / graph)
# (the graph layer, OpGraph and Placement, is importable from everywhere below the core)
GRAPH = {"placement", "placement.graph", "placement.base"}
MAY_IMPORT = {
    "hardware": {"hardware"} | GRAPH,
    "execution": {"execution", "hardware", "models", "data"} | GRAPH,
    "tracking": {"tracking"},
    "placement": {"hardware", "execution", "models"} | GRAPH,
    "sync": {"sync", "hardware", "execution", "models", "data"} | GRAPH,
}


def _modules():
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        yield path, ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p, _ in _modules()
            if (n := len(p.read_text().splitlines())) > 400}
    long.update({str(p.relative_to(ROOT)): n for p in (ROOT / "plugins").rglob("*.py")
                 if (n := len(p.read_text().splitlines())) > 400})
    assert not long, long


def _key(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return ".".join(parts[1:3]) if parts[1] == "placement" else parts[1]


def _imports(path: Path) -> set[str]:
    """What a module imports from orchestrator (anywhere in the file, lazily or not): the subpackage,
    or for placement the module (the graph layer is importable from below, the rest is not)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "orchestrator":
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(_key(node.module))
        elif isinstance(node, ast.Import):
            out.update(_key(a.name) for a in node.names)
    return out - {None}


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_one_way(package):
    core = {"errors", "progress", "hookspecs", "plugins", "moved", "__version__", "config"}  # config: the schemas
    bad = {}
    for path, name in _modules():
        if name.split(".")[1:2] != [package]:
            continue
        allowed = MAY_IMPORT[package] | core
        wrong = {p for p in _imports(path) if p not in allowed and p.split(".")[0] != package}
        if wrong:
            bad[name] = sorted(wrong)
    assert not bad, f"{package} imports outside its layer: {bad}"


def test_store_and_report_do_not_import_each_other():
    store = _imports(ROOT / "orchestrator" / "tracking" / "store.py")
    tree = ast.parse((ROOT / "orchestrator" / "tracking" / "store.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in mods if m.startswith("orchestrator.tracking")}, mods
    assert store <= {"tracking", "errors"}
    report = {n.module for n in ast.walk(ast.parse((ROOT / "orchestrator/tracking/report.py").read_text()))
              if isinstance(n, ast.ImportFrom) and n.module}
    assert "orchestrator.tracking.sweep" not in report


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_old_import_paths_resolve_to_the_new_modules(old, new):
    code = (f"import warnings; warnings.simplefilter('ignore')\n"
            f"import orchestrator.{old} as a, orchestrator.{new} as b, sys\n"
            f"assert a is b, (a, b)\n"
            f"print('TF' if 'tensorflow' in sys.modules else 'noTF')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_old_import_path_warns():
    code = ("import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n    from orchestrator.cluster import Cluster\n"
            "assert any('orchestrator.hardware.cluster' in str(x.message) for x in w), [str(x.message) for x in w]\n"
            "from orchestrator.hardware.cluster import Cluster as C2\nassert Cluster is C2\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]


def test_every_package_is_installed():
    """pyproject lists every subpackage, so a wheel (not only an editable install) has them all."""
    text = (ROOT / "pyproject.toml").read_text()
    for pkg in PACKAGES + ("models", "data"):
        assert f'"orchestrator.{pkg}"' in text, pkg
    for pkg in PACKAGES:
        importlib.import_module(f"orchestrator.{pkg}")
