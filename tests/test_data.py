import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from orchestrator.data import load_mnist, packaged_mnist_dir
from orchestrator.errors import ConfigError


def test_packaged_split_is_seeded_and_disjoint():
    a, b = load_mnist(seed=3), load_mnist(seed=3)
    assert a.x_train.shape == (8000, 28, 28, 1) and a.x_test.shape == (2000, 28, 28, 1)
    assert np.array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.y_train, load_mnist(seed=4).y_train)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    assert sorted(np.bincount(np.concatenate([a.y_train, a.y_test]))) == sorted([980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])


def _write_idx(path, magic, arr):
    with gzip.open(path, "wb") as fh:
        fh.write(struct.pack(">I", magic) + struct.pack(">" + "I" * arr.ndim, *arr.shape) + arr.tobytes())


def test_standard_splits_are_used_as_they_are(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 30), ("t10k", 10)):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", 2051, rng.integers(0, 255, (n, 28, 28), dtype=np.uint8))
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", 2049, rng.integers(0, 10, n, dtype=np.uint8))
    d = load_mnist(tmp_path)
    assert len(d.x_train) == 30 and len(d.x_test) == 10


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="not a directory"):
        load_mnist(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no MNIST IDX files"):
        load_mnist(tmp_path)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 2049, np.zeros((2, 28, 28), np.uint8))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 2049, np.zeros(2, np.uint8))
    with pytest.raises(ConfigError, match="magic 2049, expected 2051"):
        load_mnist(tmp_path)
    assert (packaged_mnist_dir() / "t10k-images-idx3-ubyte.gz").exists()


FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not FASHION.is_dir(), reason="Fashion-MNIST absent (apt-get install dataset-fashion-mnist)")
def test_fashion_mnist_loads_its_standard_splits():
    from orchestrator.data import load_mnist

    ds = load_mnist(FASHION)
    assert (len(ds.y_train), len(ds.y_test)) == (60_000, 10_000) and ds.x_train.shape[1:] == (28, 28, 1)
    assert sorted(set(ds.y_test.tolist())) == list(range(10)) and "standard train/test splits" in ds.source


def test_a_missing_fashion_mnist_says_how_to_get_it(monkeypatch):
    import orchestrator.data as data
    from orchestrator.errors import ConfigError

    monkeypatch.setattr(data, "FASHION_MNIST_DIR", "/nonexistent/fashion-mnist")
    with pytest.raises(ConfigError, match=r"^dataset=fashion_mnist: /nonexistent/fashion-mnist is absent; install it "
                                          r"with apt-get install dataset-fashion-mnist"):
        data.load_mnist("/nonexistent/fashion-mnist")
