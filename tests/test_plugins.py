import re
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


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """Install a third-party plugin module (its source given) through an entry point, as pip would."""
    import importlib

    def install(source: str, name: str = "probe_plug") -> None:
        info = tmp_path / f"{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[orchestrator]\n{name} = {name}_mod\n")
        (tmp_path / f"{name}_mod.py").write_text("import pluggy\nhookimpl = pluggy.HookimplMarker('orchestrator')\n" + source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, f"{name}_mod", raising=False)     # another test's module of the name
        importlib.invalidate_caches()
        plugins.get_plugin_manager.cache_clear()

    yield install
    plugins.get_plugin_manager.cache_clear()


@pytest.mark.parametrize("source, words", [
    ("@hookimpl\ndef orchestrator_placer():\n    return {}\n", "unknown hook 'orchestrator_placer'"),        # misspelt
    ("@hookimpl\ndef orchestrator_placers(x):\n    return {}\n", "plugin 'probe_plug' (probe_plug_mod)"),     # signature
    ("@hookimpl\ndef orchestrator_placers():\n    return [('a', 'b:C')]\n", "returned [('a', 'b:C')], not a dict"),
])
def test_a_broken_registration_is_one_line_naming_it(third_party, source, words):
    third_party(source)
    with pytest.raises(PluginError, match=re.escape(words)):
        plugins.entries()


def test_a_missing_class_is_one_line_and_a_third_party_name_overrides_the_builtin(third_party, capsys):
    third_party("@hookimpl\ndef orchestrator_placers():\n    return {'greedy': 'probe_plug_mod:Nope', 'mine': 'probe_plug_mod:hookimpl'}\n")
    with pytest.raises(PluginError, match="placer 'greedy' is registered as 'probe_plug_mod:Nope', but probe_plug_mod has no 'Nope'"):
        plugins.load("placer", "greedy")           # the third party's, not the built-in (which ran, before)
    assert "note: placer 'greedy' is probe_plug's" in capsys.readouterr().err
    assert plugins.load("placer", "mine") is not None
