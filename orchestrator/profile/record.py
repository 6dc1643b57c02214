"""The MLflow run of a profile and the machine figures both profilers write."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def tracked(args: Any, kind: str, tags: dict[str, str]) -> Iterator[Any]:
    """The MLflow run of one profile: the arguments as params, ``evaluator=measured``. Its scratch directory
    (the config and error files it logs as artifacts) is removed when the run is closed."""
    from omegaconf import OmegaConf

    from orchestrator.tracking.store import trial_run

    settings = {k: v for k, v in vars(args).items() if k not in ("tracking_uri", "experiment", "cmd")}
    cfg = OmegaConf.create({"tracking": {"uri": args.tracking_uri, "experiment": args.experiment},
                            "profile": {"kind": kind, **settings}})
    scratch = Path(tempfile.mkdtemp(prefix="profile-"))
    try:
        with trial_run(cfg, run_name=f"profile-{kind}", tags={"evaluator": "measured", "runtime": "local",
                                                             "profile.kind": kind, **tags},
                       config_yaml=OmegaConf.to_yaml(cfg), output_dir=scratch) as sink:
            yield sink
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def log_directory(sink: Any, out: Path) -> None:
    from orchestrator.tracking.store import retry_locked

    retry_locked(sink.client.log_artifacts, sink.run_id, str(out), "profile")


def machine_memory_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def elapsed(t0: float) -> str:
    return f"{time.perf_counter() - t0:.0f} s"
