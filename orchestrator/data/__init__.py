"""MNIST in the standard IDX format, from any directory (the full 60k set where a user has it, the
packaged 10k test split otherwise), with a fixed seeded train/test split."""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from orchestrator.config.model import FASHION_MNIST_DIR
from orchestrator.errors import ConfigError

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
_CANDIDATES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray  # float32 [N, 28, 28, 1] in [0, 1]
    y_train: np.ndarray  # int32 [N]
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    @property
    def num_classes(self) -> int:
        return 10


def packaged_mnist_dir() -> Path:
    return Path(str(resources.files("orchestrator.data") / "mnist"))


def _open(path: Path):
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.exists():
            return gzip.open(candidate, "rb") if candidate.suffix == ".gz" else open(candidate, "rb")
    return None


MAX_IDX_BYTES = 1 << 31   # 2 GiB: the full MNIST training images are 47 MB


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An unsigned-byte IDX array; any malformed file (binary junk, truncated, wrong magic, a header
    that disagrees with the data, a bad gzip stream) is a one-line ``ConfigError`` naming it."""
    fh = _open(path)
    if fh is None:
        raise ConfigError(f"dataset file {path}(.gz) not found")
    try:
        with fh:
            data = fh.read(MAX_IDX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None
    if len(data) > MAX_IDX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_IDX_BYTES} bytes, not an MNIST IDX file")
    return parse_idx(data, magic, str(path))


def parse_idx(data: bytes, magic: int, name: str = "IDX data") -> np.ndarray:
    if len(data) < 4:
        raise ConfigError(f"{name}: not an IDX file ({len(data)} bytes, shorter than the 4-byte magic)")
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        raise ConfigError(f"{name}: IDX magic {got}, expected {magic}")
    ndim = data[3]
    offset = 4 + 4 * ndim
    if len(data) < offset:
        raise ConfigError(f"{name}: truncated IDX header ({len(data)} bytes, a {ndim}-D header needs {offset})")
    dims = struct.unpack(">" + "I" * ndim, data[4:offset])
    expected = math.prod(dims)
    if len(data) - offset != expected:
        raise ConfigError(f"{name}: {len(data) - offset} bytes of data, header says {expected}")
    if magic == IMAGE_MAGIC and tuple(dims[1:]) != (28, 28):
        raise ConfigError(f"{name}: images of {'x'.join(map(str, dims[1:]))} pixels, MNIST's are 28x28")
    out = np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)
    if magic == LABEL_MAGIC and out.size and int(out.max()) > 9:
        raise ConfigError(f"{name}: label {int(out.max())} outside MNIST's classes 0-9")
    return out


def _load_split(directory: Path, split: str) -> tuple[np.ndarray, np.ndarray] | None:
    img_name, lbl_name = _CANDIDATES[split]
    if _open(directory / img_name) is None:
        return None
    images = read_idx(directory / img_name, IMAGE_MAGIC)
    labels = read_idx(directory / lbl_name, LABEL_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise ConfigError(f"{directory}: {images.shape[0]} images but {labels.shape[0]} labels ({split} split)")
    return images, labels


def load_mnist(path: str | Path | None = None, *, seed: int = 0, test_fraction: float = 0.2,
               limit: int | None = None) -> Dataset:
    """Load MNIST from ``path`` (default: the packaged test split).

    With both standard splits present, they are used as they are. With only the 10k test split
    (as packaged), a seeded shuffle splits it into train/test by ``test_fraction``.
    """
    directory = Path(path) if path else packaged_mnist_dir()
    if not directory.is_dir():
        if str(directory) == FASHION_MNIST_DIR:
            raise ConfigError(f"dataset=fashion_mnist: {FASHION_MNIST_DIR} is absent; install it with apt-get install "
                              "dataset-fashion-mnist (Debian) or give dataset.path=DIR holding its four IDX files")
        raise ConfigError(f"dataset.path {str(directory)!r} is not a directory")
    train = _load_split(directory, "train")
    test = _load_split(directory, "test")
    if test is None and train is None:
        raise ConfigError(f"dataset.path {str(directory)!r} holds no MNIST IDX files "
                          "(t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])")
    rng = np.random.default_rng(seed)
    if train is not None and test is not None:
        (xtr, ytr), (xte, yte) = train, test
        source = f"{directory} (standard train/test splits)"
    else:
        x, y = train if train is not None else test
        order = rng.permutation(len(x))
        n_test = int(round(len(x) * test_fraction))
        xte, yte = x[order[:n_test]], y[order[:n_test]]
        xtr, ytr = x[order[n_test:]], y[order[n_test:]]
        source = f"{directory} (seeded {len(xtr)}/{len(xte)} split, seed {seed})"
    if limit:
        xtr, ytr = xtr[:limit], ytr[:limit]
    if len(xtr) == 0 or len(xte) == 0:
        raise ConfigError(f"dataset.path {str(directory)!r}: {len(xtr)} training and {len(xte)} test images; "
                          "both splits need at least one (check dataset.test_fraction and dataset.limit)")

    def prep(a: np.ndarray) -> np.ndarray:
        return (a.astype(np.float32) / 255.0)[..., None]

    return Dataset(prep(xtr), ytr.astype(np.int32), prep(xte), yte.astype(np.int32), source)
