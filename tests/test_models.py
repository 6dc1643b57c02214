import sys
import types

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.models import BUILTIN, builtin, orchestrator_models

SMALL = {
    "cnn": {}, "inception_v3": {"input_size": 75, "classes": 4}, "resnet50": {"input_size": 32, "classes": 4},
    "nmt": {"layers": 4, "vocab": 30, "hidden": 8, "seq_len": 5},
    "transformer": {"seq_len": 6, "d_model": 8, "heads": 2, "ff": 8, "blocks": 2, "vocab": 30, "classes": 3},
}


def test_hook_registers_every_builtin():
    assert set(orchestrator_models()) == set(BUILTIN) >= set(SMALL) | {"keras"}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_builtin_forward_shapes(name):
    spec = builtin(name, SMALL[name])
    x, y = spec.sample(2)
    out = np.asarray(spec.build()(x))
    assert out.shape == (2, *spec.label_shape, spec.num_classes) and np.isfinite(out).all()
    assert y.shape == (2, *spec.label_shape)


def test_nmt_rejects_bad_depth():
    with pytest.raises(ConfigError):
        builtin("nmt", {"layers": 3})


def test_user_factory(monkeypatch):
    mod = types.ModuleType("my_models")

    def make(cfg):
        import keras

        inp = keras.Input((6,))
        return keras.Model(inp, keras.layers.Dense(int(cfg.get("classes", 3)), name="head")(inp)), (6,)

    mod.make = make
    monkeypatch.setitem(sys.modules, "my_models", mod)
    spec = builtin("keras", {"factory": "my_models:make", "classes": 5})
    assert spec.num_classes == 5 and spec.input_shape == (6,)
    x, _ = spec.sample(3)
    assert np.asarray(spec.build()(x)).shape == (3, 5)
    with pytest.raises(ConfigError):
        builtin("keras", {"factory": "my_models"})
