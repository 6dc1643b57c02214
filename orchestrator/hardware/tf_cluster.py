"""Devices of other processes through TensorFlow's gRPC runtime: ``LocalTFCluster(n)`` starts n
``tf.distribute.Server`` child processes on free local ports (stand-in hosts) and connects this
program to them, so ``tf.device("/job:worker/replica:0/task:1/device:CPU:0")`` runs there;
``connect(addresses)`` connects to servers a user started. Children are terminated on ``close()``,
at exit, and exit by themselves when this process dies."""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import subprocess
import sys
import time

from orchestrator.errors import WorkerFailedError


def _connect(spec: dict[str, list[str]]) -> None:
    import tensorflow as tf

    client = client_address(next(iter(spec.values())))
    if client is None:  # every server is on this host: TF's own local job will do
        tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(spec))
        return
    # Servers on other hosts fetch tensors from this process, so it joins the cluster at an address
    # they can reach (TF's default local job is "localhost:PORT", which on their host is themselves).
    tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec({**spec, "client": [client]}), job_name="client")


def client_address(addresses: list[str]) -> str | None:
    """``IP:PORT`` at which the servers reach this process: the local address of the route towards the
    first remote server (None when every server is on loopback)."""
    hosts = [a.rpartition(":")[0].strip("[]") for a in addresses]
    remote = [h for h in hosts if h not in ("localhost", "::1") and not h.startswith("127.")]
    if not remote:
        return None
    import portpicker

    port = int(addresses[hosts.index(remote[0])].rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:   # no packet is sent: only the route
        try:
            s.connect((remote[0], port))
        except OSError as exc:
            raise WorkerFailedError(f"tf server {remote[0]}:{port} is unreachable from this host: {exc}") from None
        ip = s.getsockname()[0]
    return f"{ip}:{portpicker.pick_unused_port()}"


def connect(addresses: list[str], job: str = "worker") -> list[str]:
    """Connect to running servers ``host:port`` (task i = addresses[i]); returns their CPU devices."""
    _connect({job: list(addresses)})
    return [f"/job:{job}/replica:0/task:{i}/device:CPU:0" for i in range(len(addresses))]


class LocalTFCluster:
    """``with LocalTFCluster(2) as c: c.devices`` -> the tasks' CPU device strings."""

    def __init__(self, n: int, job: str = "worker", threads: int | None = 1, start_timeout_s: float = 60.0,
                 quiet: bool = True):
        self.n, self.job, self.threads, self.timeout, self.quiet = int(n), job, threads, start_timeout_s, quiet
        self.procs: list[subprocess.Popen] = []
        self.addresses: list[str] = []

    @property
    def devices(self) -> list[str]:
        return [f"/job:{self.job}/replica:0/task:{i}/device:CPU:0" for i in range(self.n)]

    def start(self) -> LocalTFCluster:
        import portpicker

        self.addresses = [f"localhost:{portpicker.pick_unused_port()}" for _ in range(self.n)]
        spec = json.dumps({self.job: self.addresses})
        atexit.register(self.close)
        try:
            for i in range(self.n):
                cmd = [sys.executable, "-m", "orchestrator.hardware.tf_cluster", spec, self.job, str(i), str(self.threads or 0), str(os.getpid())]
                env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}
                self.procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env,
                                                   stderr=subprocess.DEVNULL if self.quiet else None))
            deadline = time.monotonic() + self.timeout
            for i, p in enumerate(self.procs):
                ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
                line = p.stdout.readline() if ready else ""
                if not line.startswith("ready"):
                    raise WorkerFailedError(f"tf server task {i} did not start (exit code {p.poll()})")
            _connect({self.job: self.addresses})
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        atexit.unregister(self.close)

    def __enter__(self) -> LocalTFCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def serve(spec: str, job: str, task: int, threads: int, parent: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from orchestrator.hardware.lean import import_tensorflow

    tf = import_tensorflow()

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads) if threads else None
    tf.distribute.Server(tf.train.ClusterSpec(json.loads(spec)), job_name=job, task_index=task, config=config, start=True)
    print("ready", flush=True)
    while not parent or os.getppid() == parent:  # a child of a driver exits when the driver is gone
        time.sleep(0.5)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
