"""The base schemas of the sync strategies (``+sync=NAME``). ``SyncConfig`` holds what every strategy's
runtime reads (the virtual clock's compute model, the MPI launch); ``ServerSyncConfig`` adds what a
parameter server reads. Each strategy extends one of them (the built-ins in
``orchestrator_plugins.sync.config``; ``orchestrator.api`` exports both) and registers it with the
``orchestrator_config_schemas`` hook as ``"sync/NAME"``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.choices import BALANCE_MODES, DC_MODES, PUSH_LR
from orchestrator.config.fields import option


@dataclass
class SyncConfig(Schema):
    group = "sync"

    name: str = option("", "the sync strategy plugin that runs (sync.name)")
    runtime: str = option("virtual", "virtual: W emulated workers on a virtual clock (real gradients) | mpi: real ranks "
                          "under mpiexec", choices=("virtual", "mpi"))
    balance: str = option("none", "batch split: none (equal) | static (by nominal speed) | online (re-derived from "
                          "measured speeds, LB-BSP-like)", choices=BALANCE_MODES)
    balance_every: int = option(10, "online: re-derive the split every k iterations per worker", min=1)
    base_time_s: float | None = option(None, "virtual: seconds of one speed-1.0 iteration at train.batch_size, linear "
                                       "model (null: fit t0, t1)", gt=0)
    step_overhead_s: float | None = option(None, "virtual: t0 of the compute model (t0 + b*t1)/speed (with "
                                           "per_sample_s; null: measured fit)", min=0)
    per_sample_s: float | None = option(None, "virtual: t1 of the compute model, seconds per sample", gt=0)
    overlap: bool = option(False, "virtual: overlap communication with compute (a round lasts max(compute, "
                           "all-reduce))")
    fp16: bool = option(False, "virtual: messages of 16-bit floats, 2 bytes a parameter instead of 4 (the default "
                        "message size, SyncStrategy.dense_bytes)")
    timeout_s: float = option(600.0, "mpi: the trial fails (WorkerFailedError) after this many seconds", gt=0)
    hostfile: str | None = option(None, "mpi: an Open MPI hostfile (null: all ranks on this host)")
    oversubscribe: bool = option(False, "mpi: allow more ranks than the hostfile's slots (or 4 x this machine's cores)")


@dataclass
class ServerSyncConfig(SyncConfig):
    push_lr: Any = option("scaled", "push weight: scaled (a round of W pushes = one step of the global batch at "
                          "train.lr_scaling's lr) | lr (each push a step of its own) | lr/staleness (lr damped by "
                          "staleness) | a multiplier of train.lr", choices=PUSH_LR, number=True, gt=0)
    shards: Any = option("auto", "parameter-server shards: an integer (each shard with its own link, "
                         "hardware.network.server) | colocated (one shard on each worker, its traffic on the workers' "
                         "links, BytePS-style; virtual runtime) | auto (colocated on the virtual runtime, the one server "
                         "rank under MPI)", choices=("auto", "colocated"), number=True, integer=True, min=1)
    delay_compensation: float = option(0.0, "DC-ASGD (Zheng et al. 2017): lambda of g + lambda g*g*(w - w_pulled); "
                                       "0 = off", min=0, finite=True)
    delay_compensation_mode: str = option("constant", "constant (DC-ASGD-c) | adaptive (DC-ASGD-a: lambda / "
                                          "sqrt(mean square of g))", choices=DC_MODES)
