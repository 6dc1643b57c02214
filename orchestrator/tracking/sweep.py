"""One parent MLflow run per Hydra multirun / Optuna sweep; the trials become its children, and the
sweep ends with its comparison table and plots."""

from __future__ import annotations

import os
import sys
from typing import Any

from hydra.experimental.callback import Callback

from orchestrator.tracking.store import PARENT_ENV, _experiment_id, _mlflow, tracking_uri


class SweepCallback(Callback):
    """Makes one parent MLflow run per Hydra multirun; trials become its children."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.uri: str | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self.uri = tracking_uri(config)
        _mlflow(self.uri)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        exp_id = _experiment_id(client, config)
        sweeper = config.hydra.sweeper.get("_target_", "basic").rsplit(".", 1)[-1]
        overrides = " ".join(config.hydra.overrides.task)
        run = client.create_run(exp_id, run_name=f"sweep: {overrides}"[:250] or "sweep",
                                tags={"orchestrator.kind": "sweep", "orchestrator.sweeper": sweeper,
                                      "orchestrator.sweep_dir": str(config.hydra.sweep.dir)})
        self.parent_run_id = run.info.run_id
        os.environ[PARENT_ENV] = self.parent_run_id

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self.parent_run_id is None:
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        children = client.search_runs(
            [client.get_run(self.parent_run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
        )
        statuses = [c.info.status for c in children]
        client.log_metric(self.parent_run_id, "sweep.trials", len(children))
        client.log_metric(self.parent_run_id, "sweep.failed_trials", statuses.count("FAILED"))
        # A sweep none of whose trials finished has failed as a whole.
        sweep_status = "FINISHED" if "FINISHED" in statuses else "FAILED"
        try:  # the figures are a convenience: a plotting failure must not fail the sweep
            from orchestrator.tracking.plots import log_sweep_plots

            log_sweep_plots(client, self.parent_run_id)
        except Exception as exc:
            print(f"sweep plots not logged: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            client.set_tag(self.parent_run_id, "orchestrator.plots_error", f"{type(exc).__name__}: {exc}"[:5000])
        try:  # end the sweep with its comparison, as `python -m orchestrator.report --parent` prints it
            from orchestrator.tracking import report, runs

            print(f"\nsweep {self.parent_run_id} ({len(children)} trials):\n"
                  + report.table(report.rows(runs.load(client, parent_run_id=self.parent_run_id))), flush=True)
        except Exception as exc:
            print(f"sweep comparison not printed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        client.set_terminated(self.parent_run_id, status=sweep_status)
        os.environ.pop(PARENT_ENV, None)
