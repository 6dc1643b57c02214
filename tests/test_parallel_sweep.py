"""Beyond one process: a sweep's trials run in parallel (Hydra's joblib launcher) into one shared
MLflow tracking server on a free local port, as they would on a cluster with a database-backed server."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import portpicker
import pytest

from conftest import QUICK, run_cli


@pytest.fixture
def mlflow_server(tmp_path):
    port = portpicker.pick_unused_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination",
                               str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not start")
                time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


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
