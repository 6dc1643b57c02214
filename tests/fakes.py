"""A numpy stand-in for ModelRuntime (a quadratic model) so that sync logic can be tested fast."""

from dataclasses import dataclass

import numpy as np


@dataclass
class FakeData:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str = "fake"


def fake_data(n: int = 200, d: int = 8, seed: int = 0) -> FakeData:
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 1.0, size=(n, d)).astype(np.float32)
    return FakeData(x, np.zeros(n, np.int32), x[:20], np.zeros(20, np.int32))


class FakeRuntime:
    """loss = 0.5 * mean ||theta - x||^2; records every gradient it hands out."""

    def __init__(self, d: int = 8):
        self.theta = np.zeros(d, np.float32)
        self.handed_out: list[np.ndarray] = []

    def get_flat(self):
        return self.theta.copy()

    def set_flat(self, flat):
        self.theta = np.array(flat, np.float32)

    def gradient(self, x, y):
        g = (self.theta - x.mean(axis=0)).astype(np.float32)
        self.handed_out.append(g)
        return float(0.5 * np.sum(g * g)), g

    def evaluate(self, x, y):
        dist = float(np.linalg.norm(self.theta - x.mean(axis=0)))
        return dist, 1.0 / (1.0 + dist)


def strategy(cfg_sync):
    """The installed sync strategy named by ``cfg_sync`` (a name, or a ``sync`` node with ``name``)."""
    from orchestrator import plugins

    node = {"name": cfg_sync} if isinstance(cfg_sync, str) else dict(cfg_sync)
    return plugins.load("sync", node["name"])(node)


def sync_options(cfg_sync, cfg):
    """``SyncOptions`` of the strategy ``cfg_sync`` names, read from the trial config ``cfg``."""
    return strategy(cfg_sync).options(cfg)
