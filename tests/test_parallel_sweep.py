"""Beyond one process: a sweep's trials run in parallel (Hydra's joblib launcher) into one shared
MLflow tracking server on a free local port, as they would on a cluster with a database-backed server."""

import pytest

from conftest import QUICK, run_cli
from services import mlflow_server as start_mlflow_server


@pytest.fixture
def mlflow_server(tmp_path):
    with start_mlflow_server(tmp_path, f"sqlite:///{tmp_path / 'server.db'}", "127.0.0.1") as uri:
        yield uri


@pytest.mark.slow
def test_parallel_trials_into_one_tracking_server(tmp_path, mlflow_server):
    work = tmp_path / "trials"
    work.mkdir()
    out = run_cli(work, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "train.lr=0.05,0.1", *QUICK,
                  env={"MLFLOW_TRACKING_URI": mlflow_server}, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (work / "mlflow.db").exists()  # everything went to the server
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if r.data.tags.get("orchestrator.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    a, b = sorted(children, key=lambda r: r.info.start_time)
    assert b.info.start_time < a.info.end_time, "the two trials did not run at the same time"
    assert {a.data.params["train.lr"], b.data.params["train.lr"]} == {"0.05", "0.1"}
