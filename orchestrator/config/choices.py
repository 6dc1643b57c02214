"""The words a config key accepts, where code beyond the schema needs them too: the schemas declare
them as ``choices`` and the code that acts on them (``execution.optim``, ``sync.balance``) imports them
from here, so that config never imports the layers above it."""

from __future__ import annotations

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")          # train.optimizer (execution.optim)
BALANCE_MODES = ("none", "static", "online")                   # sync.balance (sync.balance.Balancer)
PUSH_LR = ("scaled", "lr", "lr/staleness")                     # sync.push_lr (or a number)
DC_MODES = ("constant", "adaptive")                            # sync.delay_compensation_mode
JITTER_DISTRIBUTIONS = ("lognormal",)                          # hardware.jitter.distribution
TRAINING_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")          # planner.precision (or auto; plan.derive.at_precision)
# hardware.network's defaults, which the data-parallel topology (hardware.topology) also builds from
DEFAULT_BANDWIDTH_GBPS = 10                                    # hardware.network.bandwidth_Gbps
DEFAULT_LATENCY_US = 50                                        # hardware.network.latency_us
