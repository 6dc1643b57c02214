"""Schemas of the built-in sync strategies (``+sync=allreduce|async|delay|backup|async_cutoff``), extending the engine's
``SyncConfig`` / ``ServerSyncConfig``; registered by ``orchestrator_config_schemas`` in ``__init__``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config.choices import BALANCE_MODES
from orchestrator.config.fields import option
from orchestrator.config.sync import ServerSyncConfig, SyncConfig


@dataclass
class AllReduceConfig(SyncConfig):
    name: str = option("allreduce", "bulk synchronous: every step averages all workers' gradients (Horovod under MPI)")


@dataclass
class AsyncConfig(ServerSyncConfig):
    name: str = option("async", "asynchronous parameter server: each push applied at once, nobody waits")


@dataclass
class DelaySyncConfig(ServerSyncConfig):
    name: str = option("delay", "delay-sync (stale-synchronous parameter server)")
    staleness: Any = option(2.0, "s: worker i starts an iteration only while c_i - min_j c_j <= s; 0 = lockstep "
                            "(equals allreduce), inf = async", choices=("inf",), number=True, min=0)
    balance: str = option("online", "batch split: none (equal) | static (by nominal speed) | online (re-derived from "
                          "measured speeds)", choices=BALANCE_MODES)
    dynamic_staleness: bool = option(False, "adapt s to the observed speed spread (ceil(slowest/fastest) - 1), "
                                     "DSSP-like")
    max_staleness: float = option(8.0, "upper end of the dynamic bound", min=0)


@dataclass
class BackupWorkersConfig(SyncConfig):
    name: str = option("backup", "synchronous with backup workers (Chen et al. 2016): a round closes at the first "
                       "W - b gradients, the late ones are dropped")
    backup_workers: int = option(1, "b: late workers whose gradients a round does not wait for (0 = allreduce; "
                                 "at most W - 1)", min=0)
    balance: str = option("static", "batch split: none (equal) | static (by nominal speed) | online (re-derived from "
                          "measured speeds)", choices=BALANCE_MODES)


@dataclass
class AsyncCutoffConfig(ServerSyncConfig):
    name: str = option("async_cutoff", "asynchronous parameter server that drops a gradient older than max_delay "
                       "updates (a staleness cut-off, Ringmaster ASGD)")
    max_delay: int = option(16, "R: a push computed on parameters more than R applied updates old is dropped "
                            "(R >= W - 1 keeps every push of equal workers)", min=0)


@dataclass
class AutoSyncConfig(SyncConfig):
    name: str = option("auto", "the strategy the measured regime map says wins on this hardware "
                       "(orchestrator/sync/regimes.py; docs/sync.md); balanced allreduce where no measured regime is near")
    lr: str = option("tuned", "tuned: train.lr is the map cell's tuned lr for the chosen strategy (unless train.lr is "
                     "given on the command line) | keep: train.lr as configured", choices=("tuned", "keep"))
