"""Trials across emulated hosts (network namespaces on this machine): the lab itself, MPI ranks on
several hosts (Horovod and the parameter server), a host that dies, TensorFlow servers on other hosts,
and two sweep processes on two hosts sharing one PostgreSQL-backed Optuna study and MLflow server.
Skipped where namespaces are not allowed, except under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.testing import NO_CONTEXT, QUICK

from conftest import run_inprocess
from services import mlflow_server, netlab, postgres, require_netlab

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests/data/msr-dnn-partitioning/throughput-inputs/LayerGraphs/bert24_training.json"
SUBNET, PREFIX = "10.78.0", "ortest"     # apart from a user's lab (10.77.0, orch-)


def lab_of(tmp_path, hosts, bandwidth):
    return netlab(tmp_path, hosts, bandwidth, subnet=SUBNET, prefix=PREFIX)


def cli(cwd: Path, *args: str, prefix: list[str] | None = None, timeout: float = 600, env=None):
    cmd = (prefix or []) + [sys.executable, "-m", "orchestrator", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _runs(uri: str):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    return c.search_runs([e.experiment_id for e in c.search_experiments()])


def _no_process_on(lab):
    from orchestrator.hardware.netlab import pids

    return {h.name: pids(h.name) for h in lab.hosts if pids(h.name)}


@pytest.mark.netns
def test_lab_up_is_idempotent_and_down_removes_everything(tmp_path):
    from orchestrator.hardware import netlab as nl

    require_netlab()
    state = tmp_path / "netlab"
    lab = nl.up(2, "1gbit,100mbit", state_dir=state, subnet=SUBNET, prefix=PREFIX)
    try:
        assert lab.hostfile.read_text() == f"{SUBNET}.10 slots=1\n{SUBNET}.11 slots=1\n"
        again = nl.up(2, "1gbit,100mbit", state_dir=state, subnet=SUBNET, prefix=PREFIX)
        assert again == lab
        out = subprocess.run(lab.exec_prefix(lab.hosts[1]) + ["hostname"], capture_output=True, text=True)
        assert out.stdout.strip() == f"{PREFIX}-h1"                       # its own host name
        qdisc = subprocess.run(["tc", "-n", f"{PREFIX}-h1", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "100Mbit" in qdisc
        listed = subprocess.run([sys.executable, "-m", "orchestrator.netlab", "--dir", str(state), "status"],
                                capture_output=True, text=True).stdout
        assert f"{PREFIX}-h1" in listed and "100mbit" in listed
    finally:
        nl.down(state)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}-h" not in names and not Path(f"/sys/class/net/{PREFIX}br0").exists()
    assert not lab.hostfile.exists()


@pytest.mark.netns
def test_a_namespace_that_outlives_down_does_not_block_the_next_lab(tmp_path):
    """``ip netns del`` only drops a namespace's name: the kernel destroys it (and with it the veth pair)
    later, and not while anything holds it. Here an open handle holds host 0's namespace past ``down``, as
    a slow teardown did in CI; the next ``up`` of the same prefix must still create its veths."""
    from orchestrator.hardware import netlab as nl

    require_netlab()
    state = tmp_path / "netlab"
    nl.up(2, "1gbit", state_dir=state, subnet=SUBNET, prefix=PREFIX)
    held = os.open(f"/run/netns/{PREFIX}-h0", os.O_RDONLY)   # a reference the namespace's name does not count
    try:
        nl.down(state)
        assert not Path(f"/sys/class/net/{PREFIX}v0").exists()
        lab = nl.up(2, "100mbit", state_dir=state, subnet=SUBNET, prefix=PREFIX)
        assert Path(f"/sys/class/net/{PREFIX}v0/master").resolve().name == lab.bridge
        out = subprocess.run(["tc", "-n", lab.hosts[0].name, "qdisc", "show", "dev", "eth0"], capture_output=True, text=True)
        assert "100Mbit" in out.stdout, out.stdout + out.stderr
    finally:
        os.close(held)
        nl.down(state)
    assert not list(Path("/sys/class/net").glob(f"{PREFIX}v*"))


def test_bad_lab_requests_are_one_line_errors(tmp_path):
    out = run_inprocess(tmp_path, "--dir", str(tmp_path), "up", "--hosts", "3", "--bandwidth", "1gbit,fast,1gbit",
                        module="orchestrator.netlab")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "'fast'" in out.stderr


@pytest.mark.netns
def test_bandwidth_is_shaped(tmp_path):
    """100 Mbit/s host link: bulk TCP between two hosts does not exceed it (unshaped, veth carries GB/s)."""
    with lab_of(tmp_path, 2, "1gbit,100mbit") as lab:
        # the receiver times the transfer (the sender's socket buffer would flatter it)
        server = subprocess.Popen(lab.exec_prefix(lab.hosts[1]) + [sys.executable, "-c", (
            "import socket, time\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{lab.hosts[1].address}', 5599)); s.listen(1); print('ok', flush=True); c,_=s.accept()\n"
            "n = len(c.recv(1<<20)); t = time.perf_counter()\n"
            "while (d := c.recv(1<<20)): n += len(d)\n"
            "print(n / (time.perf_counter() - t), flush=True)\n")], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "ok"
            from orchestrator.hardware.netlab import occupied

            # the host watch's one-pass look agrees with ip netns pids
            assert occupied([h.name for h in lab.hosts]) == {lab.hosts[1].name}
            send = (f"import socket\ns=socket.create_connection(('{lab.hosts[1].address}',5599)); b=b'x'*(1<<20)\n"
                    "for _ in range(8): s.sendall(b)\ns.close()")
            subprocess.run(lab.exec_prefix(lab.hosts[0]) + [sys.executable, "-c", send], timeout=60, check=True)
            rate = float(server.stdout.readline())
        finally:
            server.kill()
            server.wait()
        assert 0 < rate <= 1.15 * lab.hosts[1].bandwidth_Bps, rate


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.mpi
@pytest.mark.parametrize("strategy,where", [("allreduce", "sync.hostfile"), ("delay", "hardware.netlab")])
def test_mpi_ranks_run_one_per_host(tmp_path, strategy, where):
    with lab_of(tmp_path, 3, "1gbit") as lab:
        lab_arg = f"sync.hostfile={lab.hostfile}" if where == "sync.hostfile" else f"hardware.netlab={lab.dir}"
        # delay's server rank shares the first host with worker 0: one rank more than the slots
        out = cli(tmp_path, f"+sync={strategy}", "sync.runtime=mpi", lab_arg, "sync.oversubscribe=true",
                  "hardware.workers=3", "sync.timeout_s=300", *QUICK, *NO_CONTEXT)
        assert out.returncode == 0, out.stderr[-3000:]
        (run_dir,) = list(tmp_path.glob("outputs/*/*/mpi-*"))
        hosts = {int(p.stem[4:]): p.read_text().split()[0] for p in run_dir.glob("rank*.host")}   # "host pid"
        workers = [hosts[r] for r in sorted(hosts)][-3:]        # rank 0 is the server for delay
        assert sorted(workers) == sorted(h.name for h in lab.hosts), hosts
        assert not _no_process_on(lab)


def test_the_host_watch_names_the_host_that_emptied_strictly_first():
    from orchestrator.sync.mpi import _HostWatch

    assert _HostWatch.first_gone({"h2": 3, "h0": 5, "h1": 5}) == "h2"
    assert _HostWatch.first_gone({"h2": 4, "h0": 4}) is None        # emptied in one look: no telling which
    assert _HostWatch.first_gone({}) is None


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.mpi
def test_a_dead_host_fails_the_trial_and_leaves_nothing_behind(tmp_path):
    from orchestrator.hardware.netlab import kill_host

    with lab_of(tmp_path, 3, "1gbit") as lab:
        victim = lab.hosts[2]

        def kill_when_training():
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if list(tmp_path.glob("outputs/*/*/mpi-*/rank3.host")):
                    time.sleep(8)
                    kill_host(victim.name)
                    return
                time.sleep(0.5)

        killer = threading.Thread(target=kill_when_training, daemon=True)
        killer.start()
        t0 = time.monotonic()
        out = cli(tmp_path, "+sync=delay", "sync.runtime=mpi", f"sync.hostfile={lab.hostfile}", "hardware.workers=3",
                  "sync.oversubscribe=true",
                  "sync.timeout_s=60", "train.budget_updates=100000", "train.target_accuracy=0.999", *NO_CONTEXT,
                  timeout=400)
        killer.join(timeout=5)
        assert out.returncode != 0
        err = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        assert len(err) == 1 and victim.name in err[0], out.stderr[-2000:]
        assert time.monotonic() - t0 < 300
        assert not _no_process_on(lab)
        leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
        assert not [p for p in leftovers if int(p) != os.getpid()], leftovers
        (run,) = _runs(f"sqlite:///{tmp_path}/mlflow.db")
        assert run.info.status == "FAILED" and victim.name in run.data.tags["orchestrator.error"]


@pytest.mark.slow
@pytest.mark.netns
def test_a_placed_model_trains_across_two_hosts_tf_servers(tmp_path):
    with lab_of(tmp_path, 2, "1gbit") as lab:
        addresses = [f"{h.address}:{2222}" for h in lab.hosts]
        servers = [subprocess.Popen(lab.exec_prefix(h) + [sys.executable, "-m", "orchestrator.tf_server", "--cluster",
                                                          ",".join(addresses), "--task", str(i), "--threads", "1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                   for i, h in enumerate(lab.hosts)]
        try:
            for s in servers:
                assert s.stdout.readline().strip() == "ready"
            out = cli(tmp_path, "hardware=tf_cluster", f"hardware.addresses=[{','.join(addresses)}]", "+placer=greedy",
                      f"hardware.netlab={lab.dir}", *QUICK)
            assert out.returncode == 0, out.stderr[-3000:]
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=20)
        (run,) = _runs(f"sqlite:///{tmp_path}/mlflow.db")
        m = run.data.metrics
        assert run.info.status == "FINISHED"
        assert m["placement.measured_step_time_s"] > 0 and m["placement.step_time_s"] > 0
        assert not _no_process_on(lab)


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.postgres
def test_two_hosts_sweep_one_postgres_study(tmp_path):
    """Two sweep processes on two emulated hosts work on one Optuna study in PostgreSQL and log into
    one MLflow server on the same database server: 8 distinct trials, 8 child runs, 2 parents."""
    with lab_of(tmp_path, 2, "1gbit") as lab, \
            postgres(tmp_path, [lab.head, "127.0.0.1"], ["optuna", "mlflow"]) as port, \
            mlflow_server(tmp_path, f"postgresql://postgres@{lab.head}:{port}/mlflow", lab.head) as uri:
        storage = f"postgresql://postgres@{lab.head}:{port}/optuna"
        import optuna

        # Created once before the workers start (as `optuna create-study` does on a real cluster): two
        # processes creating the schema at the same moment race in PostgreSQL's catalog.
        optuna.create_study(study_name="shared", storage=storage, direction="minimize")
        args = ["-m", "hydra/sweeper=optuna", f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=shared",
                "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=1", "hydra.sweeper.direction=minimize",
                f"tracking.uri={uri}", "tracking.experiment=cluster-sweep",
                "objective.metric=placement.step_time_s", "objective.direction=minimize",
                "model=workload", f"model.path={WORKLOAD}", "hardware=auto", "+placer=random",
                "placer.samples=range(5,400)", "placement.bound_time_limit_s=0"]   # no MILP bound: the sweep is tested
        procs = []
        for i, h in enumerate(lab.hosts):
            d = tmp_path / h.name
            d.mkdir()
            procs.append(subprocess.Popen(lab.exec_prefix(h) + [sys.executable, "-m", "orchestrator", *args,
                                                                 f"hydra.sweeper.sampler.seed={i}"],
                                          cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=900) for p in procs]
        for p, (_, e) in zip(procs, outs):
            assert p.returncode == 0, e[-3000:]
        study = optuna.load_study(study_name="shared", storage=storage)
        assert len(study.trials) == 8 and len({t.number for t in study.trials}) == 8
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
        runs = _runs(uri)
        parents = [r for r in runs if r.data.tags.get("orchestrator.kind") == "sweep"]
        children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(parents) == 2 and len(children) == 8
        assert {c.data.tags["mlflow.parentRunId"] for c in children} == {p.info.run_id for p in parents}
        assert all(c.info.status == "FINISHED" for c in children)
        samples = sorted(int(c.data.params["placer.samples"]) for c in children)
        trials = sorted(int(t.params["placer.samples"]) for t in study.trials)
        assert samples == trials                                   # each study trial ran once, none lost


def test_rank_mapping_and_the_network_it_gives_the_cost_model():
    from orchestrator.hardware.netlab import TCP_PAYLOAD_SHARE, Host, Lab, network_config, rank_hosts

    lab = Lab([Host(f"h{i}", f"10.9.0.{10 + i}", bw, 1) for i, bw in enumerate(["1gbit", "1gbit", "1gbit", "100mbit"])],
              "10.9.0", "10.9.0.1", "/nonexistent")
    assert [h.name for h in rank_hosts(lab, 4)] == ["h0", "h1", "h2", "h3"]
    assert [h.name for h in rank_hosts(lab, 5)] == ["h0", "h0", "h1", "h2", "h3"]    # as Open MPI maps them
    assert [h.name for h in rank_hosts(lab, 9)] == ["h0", "h0", "h0", "h1", "h1", "h2", "h2", "h3", "h3"]
    net = network_config(lab, 4, server=True)        # rank 0 server on h0, workers = ranks 1..4
    assert net["server"]["bandwidth_Gbps"] == pytest.approx(1.0 * TCP_PAYLOAD_SHARE)
    assert net["workers"][0]["bandwidth_Gbps"] == 100.0                          # beside the server
    assert net["workers"][3]["bandwidth_Gbps"] == pytest.approx(0.1 * TCP_PAYLOAD_SHARE)
    ring = network_config(lab, 4, server=False)
    assert "server" not in ring and ring["workers"][3]["bandwidth_Gbps"] == pytest.approx(0.1 * TCP_PAYLOAD_SHARE)
