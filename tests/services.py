"""Services the multi-host tests start and stop themselves: the emulated hosts (netlab), a PostgreSQL
server (Debian's, run as the ``postgres`` user from a temporary data directory) and an MLflow tracking
server on that database. Each is a context manager that leaves nothing running when it exits."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql")


def require_netlab() -> None:
    """Skip, with the one-line reason, where this machine does not allow the namespaces (on a machine
    that allows them, CI included, the tests run)."""
    from orchestrator.hardware.netlab import NetlabUnavailable, check_allowed

    try:
        check_allowed()
    except NetlabUnavailable as exc:
        pytest.skip(str(exc))


@contextlib.contextmanager
def netlab(tmp_path: Path, hosts: int, bandwidth: str, slots: int = 1, **kw):
    from orchestrator.hardware import netlab as nl

    require_netlab()
    lab = nl.up(hosts, bandwidth, slots=slots, state_dir=tmp_path / "netlab", **kw)
    try:
        yield lab
    finally:
        nl.down(tmp_path / "netlab")


def _pg_bindir() -> Path | None:
    versions = sorted(PG_BIN.glob("*/bin/pg_ctl")) if PG_BIN.exists() else []
    return versions[-1].parent if versions else None


def free_port() -> int:
    import portpicker

    return portpicker.pick_unused_port()


@contextlib.contextmanager
def postgres(tmp_path: Path, listen: list[str], databases: list[str]):
    """A PostgreSQL server for this test; yields its port. Trust authentication for the listed
    addresses' /24 networks and loopback only."""
    bindir = _pg_bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but PostgreSQL is not installed (.ci/system-deps installs it)")
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    data = Path(tempfile.mkdtemp(prefix="orch-pg-"))   # under /tmp: the postgres user must reach it
    shutil.chown(data, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    hba = "".join(f"host all all {a.rsplit('.', 1)[0]}.0/24 trust\n" for a in listen if a != "127.0.0.1")
    with open(data / "pg_hba.conf", "a") as f:
        f.write(hba)
    port = free_port()
    opts = f"-p {port} -k {data} -h {','.join(listen)}"
    subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(data / "log"), "-w", "start"],
                   check=True, capture_output=True)
    try:
        for db in databases:
            subprocess.run(as_pg + [str(bindir / "createdb"), "-h", str(data), "-p", str(port), "-U", "postgres", db],
                           check=True, capture_output=True)
        yield port
    finally:
        subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(tmp_path: Path, backend_uri: str, host: str):
    """``mlflow server`` on ``host``; yields its URI (a new SQLite store made as a trial makes one)."""
    if backend_uri.startswith("sqlite:///"):
        from orchestrator.tracking.store import init_store

        init_store(backend_uri)
    port = free_port()
    log = open(tmp_path / "mlflow-server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
                             "--artifacts-destination", str(tmp_path / "artifacts"), "--host", host,
                             "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    uri = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mlflow server did not start: "
                                       + (tmp_path / "mlflow-server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
