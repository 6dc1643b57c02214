"""A new SQLite store as a copy of an empty one: MLflow builds a new database by running its schema migrations
(alembic: 0.7-0.9 s per store in a warm process here, more in a new one), the same for every store of one MLflow version. The first new
store made with a results cache (``orchestrator.cache``) has MLflow create an empty database there, once per MLflow
version (``mlflow-<version>-empty.db``); each later new store is that file copied, with the two things MLflow
writes per store put back as MLflow would write them here: the Default experiment's (id 0) artifact location,
from this process's working directory (``./mlruns`` resolved, or ``$_MLFLOW_SERVER_ARTIFACT_ROOT``), and its
creation time. MLflow then opens it as any store of its schema (it checks the schema version, as on every open).
Without a cache, or if anything fails, MLflow creates the store itself; a damaged template is removed and made
again by the next new store."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

SERVER_ROOT_ENV = "_MLFLOW_SERVER_ARTIFACT_ROOT"   # MLflow's: the artifact root a store process inherits


def default_experiment_location() -> str:
    """Where MLflow puts experiment 0's artifacts for a store created by this process."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

    root = os.environ.get(SERVER_ROOT_ENV, DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    return str(append_to_uri_path(resolve_uri_if_local(root), "0"))


def _template(folder: Path) -> Path:
    """The empty store of this MLflow version in ``folder``, made by MLflow on first use (written whole: a
    temporary file renamed, so parallel processes never read half of one)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    path = folder / f"mlflow-{mlflow.__version__}-empty.db"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".db")
        os.close(fd)
        os.unlink(tmp)                                   # MLflow creates the file itself
        try:
            MlflowClient(f"sqlite:///{tmp}").search_experiments(max_results=1)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return path


def create_from_template(db: Path) -> bool:
    """Make the new store ``db`` (which must not exist; the caller holds its lock) from the template: True when
    made, False when MLflow should create it (no cache, or the template could not be used)."""
    from orchestrator.cache import cache_dir

    folder = cache_dir()
    if folder is None or db.exists():
        return False
    tmp = db.with_name(f".{db.name}.new")
    template = None
    try:
        template = _template(folder)
        shutil.copyfile(template, tmp)
        now = int(time.time() * 1000)
        with sqlite3.connect(tmp) as con:
            done = con.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                               "WHERE experiment_id = 0", (default_experiment_location(), now, now)).rowcount
        con.close()
        if done != 1:
            raise sqlite3.DatabaseError("the template has no Default experiment")
        os.link(tmp, db)                                 # never over a store that appeared meanwhile
        return True
    except sqlite3.DatabaseError:                        # a damaged template (truncated, foreign): made again next time
        if template is not None:
            template.unlink(missing_ok=True)
        return False
    except Exception:
        return False
    finally:
        tmp.unlink(missing_ok=True)
