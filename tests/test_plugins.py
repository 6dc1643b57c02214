import subprocess
import sys
import types

import pytest

from orchestrator import hookspecs, plugins
from orchestrator.errors import PluginError


def test_builtins_come_through_entry_points():
    rows = plugins.entries()
    kinds = {(e.kind, e.name) for e in rows}
    assert ("placer", "manual") in kinds and ("hardware", "local") in kinds and ("model", "cnn") in kinds
    assert {e.distribution for e in rows if e.name == "manual"} == {"hetero-orchestrator"}


def test_listing_imports_no_tensorflow():
    code = "import sys, orchestrator.plugins as p; p.main([]); assert 'tensorflow' not in sys.modules, 'TF imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "manual" in out.stdout and "hetero-orchestrator" in out.stdout


def test_unknown_name_lists_what_is_available():
    with pytest.raises(PluginError, match=r"unknown placer 'nope' \(available: .*manual"):
        plugins.load("placer", "nope")


def test_hook_contract_version_is_checked():
    mod = types.ModuleType("old_plugin")
    mod.ORCHESTRATOR_HOOKSPEC = "0"
    with pytest.raises(PluginError, match="needs hook contract 0"):
        plugins._check_version(mod, "old_plugin")
    mod.ORCHESTRATOR_HOOKSPEC = hookspecs.HOOKSPEC_VERSION.split(".")[0]
    plugins._check_version(mod, "old_plugin")
