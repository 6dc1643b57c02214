"""Update rules on flat float32 parameter vectors, the same code in both runtimes: a collective applies
one to the averaged gradient of a round; a parameter server keeps one (its state lives on the server)
and applies every push through it.

With gradient ``g``, learning rate ``lr`` (the schedule's value for this update), weight decay ``wd``
(L2, added to the gradient: ``g <- g + wd * theta``) and state kept per parameter:

- ``sgd``:       ``theta <- theta - lr * g``
- ``momentum``:  ``v <- mu * v + g``;  ``theta <- theta - lr * v``            (heavy ball, Polyak 1964;
                 the form of PyTorch's SGD and of Shallue et al. 2019)
- ``nesterov``:  ``v <- mu * v + g``;  ``theta <- theta - lr * (g + mu * v)``  (Sutskever et al. 2013)
- ``adam``:      ``m <- b1 m + (1 - b1) g``;  ``s <- b2 s + (1 - b2) g^2``;
                 ``theta <- theta - lr * m_hat / (sqrt(s_hat) + eps)`` with ``m_hat = m / (1 - b1^t)``,
                 ``s_hat = s / (1 - b2^t)`` (Kingma & Ba 2015)

State is allocated on the first update (zeros), so a rule costs nothing until it is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.config.choices import OPTIMIZERS
from orchestrator.errors import ConfigError

__all__ = ["OPTIMIZERS", "Optimizer", "OptimizerSettings"]


@dataclass(frozen=True)
class OptimizerSettings:
    name: str = "sgd"
    momentum: float = 0.9           # mu (momentum, nesterov)
    weight_decay: float = 0.0       # L2
    beta1: float = 0.9              # adam
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"train.optimizer={self.name!r} (accepted: {', '.join(OPTIMIZERS)})")
        for key, value, lo, hi in (("momentum", self.momentum, 0.0, 1.0), ("beta1", self.beta1, 0.0, 1.0),
                                   ("beta2", self.beta2, 0.0, 1.0)):
            if not lo <= value < hi:
                raise ConfigError(f"train.{key}={value!r} must be in [{lo:g}, {hi:g})")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay={self.weight_decay!r} must be >= 0")
        if not self.eps > 0:
            raise ConfigError(f"train.eps={self.eps!r} must be > 0")

    @property
    def is_plain_sgd(self) -> bool:
        return self.name == "sgd" and self.weight_decay == 0.0


class Optimizer:
    """One update rule and its state for one parameter vector."""

    def __init__(self, settings: OptimizerSettings | None = None):
        self.s = settings or OptimizerSettings()
        self.t = 0
        self._v: np.ndarray | None = None
        self._m: np.ndarray | None = None

    def preconditioner(self) -> np.ndarray | None:
        """Adam's ``1 / (sqrt(v_hat) + eps)`` (the bias-corrected second moment) once it has state; None for
        the other rules (and before Adam's first step)."""
        if self.s.name != "adam" or self._v is None or self.t == 0:
            return None
        v_hat = self._v / (1.0 - self.s.beta2 ** self.t)
        return 1.0 / (np.sqrt(v_hat) + self.s.eps)

    def step(self, theta: np.ndarray, grad: np.ndarray, lr: float) -> np.ndarray:
        """Update ``theta`` in place with ``grad`` at learning rate ``lr``; returns ``theta``."""
        s, lr32 = self.s, np.float32(lr)
        self.t += 1
        g = grad + np.float32(s.weight_decay) * theta if s.weight_decay else grad
        if s.name == "sgd":
            theta -= lr32 * g
        elif s.name in ("momentum", "nesterov"):
            mu = np.float32(s.momentum)
            if self._v is None:
                self._v = np.zeros_like(theta)
            self._v *= mu
            self._v += g
            theta -= lr32 * (g + mu * self._v if s.name == "nesterov" else self._v)
        else:  # adam
            b1, b2 = np.float32(s.beta1), np.float32(s.beta2)
            if self._v is None or self._m is None:
                self._m, self._v = np.zeros_like(theta), np.zeros_like(theta)
            self._m *= b1
            self._m += (1 - b1) * g
            self._v *= b2
            self._v += (1 - b2) * g * g
            m_hat = self._m / np.float32(1 - s.beta1 ** self.t)
            v_hat = self._v / np.float32(1 - s.beta2 ** self.t)
            theta -= lr32 * m_hat / (np.sqrt(v_hat) + np.float32(s.eps))
        return theta
