"""A new SQLite store copied from the empty one MLflow made once (orchestrator.tracking.template) is the store MLflow
would have made: the same schema and migration head, the Default experiment where MLflow puts it, usable at once."""

import sqlite3

import pytest

from orchestrator.tracking.store import _READY, init_store
from orchestrator.tracking.template import create_from_template, default_experiment_location


def _schema(db):
    with sqlite3.connect(db) as con:
        tables = sorted(con.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        head = con.execute("SELECT version_num FROM alembic_version").fetchall()
        exp0 = con.execute("SELECT name, artifact_location, lifecycle_stage FROM experiments").fetchall()
    return tables, head, exp0


def test_a_store_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    MlflowClient(f"sqlite:///{tmp_path / 'by_mlflow.db'}").search_experiments()
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    assert create_from_template(first) and create_from_template(second)      # the template made, then reused
    assert len(list((tmp_path / "cache").glob("mlflow-*-empty.db"))) == 1
    assert _schema(first) == _schema(second) == _schema(tmp_path / "by_mlflow.db")
    assert _schema(first)[2] == [("Default", default_experiment_location(), "active")]
    assert default_experiment_location() == str(tmp_path / "mlruns" / "0")
    client = MlflowClient(f"sqlite:///{first}")
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "m", 1.0)
    client.set_terminated(run.info.run_id)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}


def test_an_existing_store_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not a template")
    assert not create_from_template(db) and db.read_bytes() == b"not a template"


@pytest.mark.parametrize("cache", ["off", "folder"])
def test_init_store_makes_a_working_store_with_or_without_a_cache(tmp_path, monkeypatch, cache):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("ORCHESTRATOR_CACHE", "off" if cache == "off" else str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path / 'sub' / 'mlflow.db'}"
    init_store(uri)
    _READY.discard(uri)
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]
    assert (tmp_path / "cache").exists() == (cache == "folder")


def test_a_damaged_template_falls_back_to_mlflow_and_is_made_again(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    assert create_from_template(tmp_path / "a.db")
    (template,) = (tmp_path / "cache").glob("mlflow-*-empty.db")
    template.write_bytes(template.read_bytes()[:1000])                        # truncated
    assert not create_from_template(tmp_path / "b.db") and not template.exists() and not (tmp_path / "b.db").exists()
    uri = f"sqlite:///{tmp_path / 'b.db'}"
    init_store(uri)                                                            # made again, then copied
    _READY.discard(uri)
    assert template.exists() and [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]


def test_a_new_experiment_keeps_its_artifacts_beside_its_store_not_in_the_working_directory(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.store import experiment_id, open_store

    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    open_store(uri)
    client = MlflowClient(uri)
    exp = client.get_experiment(experiment_id(client, {"tracking": {"experiment": "my runs/1"}}))
    assert exp.artifact_location == (store / "mlruns" / "my%20runs%2F1").as_uri()
    run = client.create_run(exp.experiment_id)
    (tmp_path / "a.txt").write_text("x")
    client.log_artifact(run.info.run_id, str(tmp_path / "a.txt"))
    assert list(store.glob("mlruns/*/*/artifacts/a.txt")) and not (elsewhere / "mlruns").exists()
