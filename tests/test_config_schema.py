"""The typed config (orchestrator.config): one schema per option, checked in one place, extensible by
plugins. In-process: composition and validation only, nothing runs."""

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from orchestrator import plugins
from orchestrator.config import from_node, option, validate
from orchestrator.config.placer import RLPlacerConfig
from orchestrator.config.store import schemas
from orchestrator.errors import ConfigError

EXAMPLE_SRC = Path(__file__).resolve().parents[1] / "examples" / "orchestrator-example-placer" / "src"


def composed(*overrides: str):
    with initialize_config_module("orchestrator_conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_an_override_of_a_schema_key_composes_typed():
    cfg = composed("+placer=rl", "placer.budget_evaluations=100")
    validate(cfg)
    assert cfg.placer.budget_evaluations == 100 and cfg.placer.batch == 16        # the schema's default
    assert OmegaConf.get_type(cfg.placer) is RLPlacerConfig and cfg.train.lr == 0.1


@pytest.mark.parametrize("overrides, message", [
    (["+placer=rl", "placer.budget_evaluations=-5"], "placer.budget_evaluations=-5 must be an integer >= 1"),
    (["+placer=rl", "placer.mode=fast"], "placer.mode='fast' (accepted: zero_shot, finetune, scratch)"),
    (["+placer=rl", "+placer.typo=1"], "unknown key placer.typo (placer accepts: name, "),
    (["+placer=greedy", "placer.variants=[heft,best]"], "placer.variants[1]='best' (accepted: heft, topo, single)"),
    (["+placer=rl", "placer.local_fraction=2"], "placer.local_fraction=2 must be a number >= 0 and <= 1"),
    (["hardware.core_sharing=0"], "hardware.core_sharing=0 must be a number > 0 (or auto, model, none)"),
    (["hardware=sim_1cpu_4gpu", "hardware.preset=tpu"], "hardware.preset='tpu' (accepted: sim_1cpu_4gpu, sim_hetero_cluster)"),
    (["placement.memory_headroom=1"], "placement.memory_headroom=1 must be a number >= 0 and < 1 (or auto)"),
    (["progress=sometimes"], "progress='sometimes' (accepted: auto, true, false)"),
    (["seed=-1"], "seed=-1 must be an integer >= 0 and <= 4294967295"),          # numpy's range, not its traceback
    (["train.seed=99999999999999999999"], "train.seed=99999999999999999999 must be an integer >= 0 and <= 4294967295"),
])
def test_a_bad_value_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as exc:
        validate(composed(*overrides))
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_a_wrong_type_is_refused_while_composing():
    from orchestrator.config import describe

    with pytest.raises(Exception) as exc:
        composed("+placer=rl", "placer.budget_evaluations=abc")
    assert describe(exc.value) == "placer.budget_evaluations='abc' is not an integer"


def test_plugins_read_the_schema_defaults_once():
    from orchestrator_plugins.placers.rl import RLPlacer

    p = RLPlacer({"budget_evaluations": 200})
    assert (p.budget, p.batch, p.mode, p.init_bias) == (200, 16, "finetune", None)
    assert RLPlacer(composed("+placer=rl").placer).budget == RLPlacerConfig().budget_evaluations == 12000
    with pytest.raises(ConfigError, match=r"^placer.batch=0 must be an integer >= 1$"):
        RLPlacer({"batch": 0})
    with pytest.raises(ConfigError, match=r"^unknown key placer.bogus "):
        from_node(RLPlacerConfig, {"bogus": 1}, "placer")


def test_every_builtin_option_extends_its_schema():
    conf = Path(__file__).resolve().parents[1] / "conf"
    for group in ("placer", "hardware", "model", "dataset"):
        for path in sorted((conf / group).glob("*.yaml")):
            plus = "+" if group == "placer" else ""
            node = composed(f"{plus}{group}={path.stem}")[group]
            assert OmegaConf.get_type(node) is schemas()[f"{group}/{node.get('plugin') or node.name}"], path


@dataclass
class ToyConfig:
    name: str = option("toy", "a third-party placer")
    spread: int = option(2, "devices to use", min=1)


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A plugin with a typed option (placer=toy, its schema through the hook) and one without
    (the example package's round_robin, untyped YAML), on the config search path."""
    (tmp_path / "placer").mkdir()
    (tmp_path / "placer" / "toy.yaml").write_text("defaults:\n  - /schema/placer@_here_: toy\n  - _self_\n\nname: toy\n")
    mod = types.ModuleType("toy_plugin")
    exec("from orchestrator.hookspecs import hookimpl\n"
         "@hookimpl\ndef orchestrator_config_schemas():\n    return {'placer/toy': 'test_config_schema:ToyConfig'}\n"
         "@hookimpl\ndef orchestrator_placers():\n    return {'round_robin': 'orch_example_placer.placer:RoundRobinPlacer'}\n"
         f"@hookimpl\ndef orchestrator_config_searchpath():\n    return ['file://{tmp_path}', 'pkg://orch_example_placer.conf']\n",
         mod.__dict__)
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    original = plugins.get_plugin_manager

    managers = []

    def with_toy():
        pm = original()
        if pm.get_plugin("toy_plugin") is None:
            pm.register(mod, name="toy_plugin")
            managers.append(pm)
        return pm

    monkeypatch.setattr(plugins, "get_plugin_manager", with_toy)
    yield
    for pm in managers:            # a cached manager must not keep the toy plugin for other tests
        pm.unregister(mod)
    sys.modules.pop("orch_example_placer", None)


def test_a_plugin_ships_its_schema_and_an_untyped_plugin_still_works(third_party):
    cfg = composed("+placer=toy", "placer.spread=3")
    validate(cfg)
    assert OmegaConf.get_type(cfg.placer) is ToyConfig and cfg.placer.spread == 3
    with pytest.raises(ConfigError, match=r"^placer.spread=0 must be an integer >= 1$"):
        validate(composed("+placer=toy", "placer.spread=0"))
    untyped = composed("+placer=round_robin", "+placer.anything=1")       # its YAML is its schema
    validate(untyped)
    assert untyped.placer.name == "round_robin" and OmegaConf.get_type(untyped.placer) is dict
    from orchestrator.trial import Trial

    assert Trial(untyped, Path(".")).placer.devices == []
