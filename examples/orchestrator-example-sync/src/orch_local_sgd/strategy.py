"""Local SGD (Lin, Stich, Patel, Jaggi 2020, "Don't use large mini-batches, use local SGD"; Stich 2019).

Each round, every worker k takes ``H = sync.local_steps`` SGD steps on its own copy of the parameters,
starting from the common ``theta``, then the copies are averaged, weighted by the samples each worker
saw (``b_k`` per step, the same H for all)::

    theta_k <- theta;   repeat H times:  theta_k <- opt_k(theta_k, grad_k(theta_k), lr(b_k))
    theta   <- sum_k (b_k / G) * theta_k                                    (G = sum_k b_k)

One all-reduce per H local steps instead of one per step: H times less communication for the same
number of gradient evaluations. ``opt_k`` is worker k's own copy of the trial's update rule
(``train.optimizer``; plain SGD by default), its state kept across rounds (local momentum). With H = 1 it is mini-batch SGD over the global batch at the
single-batch learning rate (``train.lr_scaling`` applied to ``b_k``, not to G).

Written only against ``orchestrator.api``: the virtual and the MPI runtime run it as they run the
built-in allreduce, as a ``CollectiveStrategy`` whose three rules are overridden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.api import CollectiveStrategy, Optimizer, Round, SyncConfig, option


@dataclass
class LocalSGDConfig(SyncConfig):
    """``sync.*`` of ``+sync=local_sgd``: every key of a collective, plus ``local_steps``."""

    name: str = option("local_sgd", "local SGD: H local steps on each worker, then the models are averaged")
    local_steps: int = option(4, "H: local SGD steps between two averages (1 = mini-batch SGD at the single-batch "
                              "lr)", min=1)


class LocalSGD(CollectiveStrategy):
    name = "local_sgd"
    Config = LocalSGDConfig

    def __init__(self, cfg_sync=None):
        super().__init__(cfg_sync)          # reads and checks self.config (a LocalSGDConfig)
        self.h = self.config.local_steps
        self.local_rules: dict[int, Optimizer] = {}     # worker -> its update rule's state

    def local_steps(self) -> int:
        return self.h

    def local(self, worker: int, theta: np.ndarray, grad, rnd: Round) -> np.ndarray:
        lr = rnd.lr(rnd.batches[worker])
        rule = self.local_rules.setdefault(worker, Optimizer(rnd.optimizer.s))
        params = theta.copy()
        for _ in range(self.h):
            rule.step(params, grad(params), lr)
        return params                                   # this worker's parameters after H local steps

    def weights(self, rnd: Round) -> list[float]:
        return [b / rnd.total for b in rnd.batches]     # samples-weighted model average

    def apply(self, theta: np.ndarray, reduced: np.ndarray, rnd: Round) -> np.ndarray:
        return reduced                                  # the average is the new model

    def metrics(self, result, stats) -> dict[str, float]:
        return {**super().metrics(result, stats), "sync.local_steps": float(self.h)}
