"""The profilers' failures and signals: statistics of a difference that are ordered, the link fit's warnings,
a hostfile checked before mpiexec starts, an MPI job that fails or times out as one line and exit 3 naming its
log, and SIGTERM as Ctrl-C (exit 143, the run KILLED, no MPI process left)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import run_inprocess, store_runs


def profile(cwd: Path, *args: str):
    return run_inprocess(cwd, *args, module="orchestrator.profile")


def test_the_statistics_of_a_difference_are_ordered():
    from orchestrator.profile.timing import difference

    a = np.array([10.0, 10.0, 10.0, 10.0])
    b = np.array([9.0, 9.0, 9.0, 1.0])          # one fast round of b: min(a) - min(b) = 9, above every other difference
    s = difference(a, b)
    assert s.low <= s.q1 <= s.median <= s.q3 <= s.high
    assert (s.low, s.median, s.high) == (1.0, 1.0, 9.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        s = difference(rng.exponential(1.0, 7), rng.exponential(1.0, 7))
        assert s.low <= s.q1 <= s.median <= s.q3 <= s.high


def test_a_poor_fit_or_sizes_under_a_megabyte_warn(capsys):
    from orchestrator.profile.links import fit_warnings, print_links

    result = {"sizes": [1, 2, 3], "hosts": ["h"], "ranks": 2, "fit_error": [0.01, -0.23, 1.0],
              "held_out_error": [], "p2p": [{"median_s": 1e-6}] * 3, "allreduce_s": [{"median_s": 2e-6}] * 3,
              "allreduce_predicted_s": [2e-6] * 3, "allreduce_error": [0.0] * 3, "fit": [[0.0, 0.0, 1.0], 1e9],
              "bandwidth_at_largest_Bps": 1e9}
    print_links("CPU", "intra", result, Path("prof"), "1 s")
    out, err = capsys.readouterr()
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("WARNING: ") for w in warnings), err
    assert "+100% at 3 bytes" in warnings[0] and "under 1 MB" in warnings[1]
    header = out.splitlines()[1].split()
    assert len(header) == len(set(header)) and "fit_err" in header and "ring_err" in header
    good = {**result, "sizes": [10**5, 10**6, 10**7], "fit_error": [0.01, -0.2, 0.1]}
    assert fit_warnings(good) == []


@pytest.mark.parametrize("content, message", [
    (b"", "names no host"),
    (b"# a comment\n\n", "names no host"),
    (b"\x00\x01\xff\xfe", "not a text file"),
    (b"\x00\x00node1\n", "not a text file"),
])
def test_an_empty_or_binary_hostfile_is_refused_before_mpiexec(tmp_path, content, message):
    (tmp_path / "hosts").write_bytes(content)
    out = profile(tmp_path, "links", "--out", "prof", "--hostfile", "hosts")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: --hostfile='hosts': ") and message in line and line.isprintable()
    assert not (tmp_path / "prof").exists()


def stderr_lines(out) -> list[str]:
    """stderr's lines, less MLflow's note that it made the tests' first store in this process."""
    return [ln for ln in out.stderr.strip().splitlines() if " INFO mlflow.store.db.utils: " not in ln]


def kept_log(line: str) -> Path:
    """The log an MPI failure names (removed here: a test leaves nothing in /tmp)."""
    found = re.search(r"\(its log: (\S+mpiexec\.log)\)$", line)
    assert found and Path(found[1]).is_file(), line
    return Path(found[1])


@pytest.mark.mpi
def test_an_mpi_job_past_its_timeout_is_one_line_and_exit_3(tmp_path):
    import shutil

    out = profile(tmp_path, "links", "--out", "prof", "--timeout", "1", "--repeats", "100000", "--sizes", "1e3,1e4,1e5")
    assert out.returncode == 3, out.stderr[-2000:]
    (line,) = stderr_lines(out)
    assert line.startswith("error: the link profile's MPI job ran past --timeout=1 s")
    shutil.rmtree(kept_log(line).parent)


@pytest.mark.mpi
def test_a_hostfile_of_unknown_hosts_is_one_line_and_exit_3(tmp_path):
    import shutil

    (tmp_path / "hosts").write_text("no-such-host-anywhere.invalid slots=1\n")
    out = profile(tmp_path, "links", "--out", "prof", "--hostfile", "hosts", "--sizes", "1e3,1e4,1e5", "--timeout", "60")
    assert out.returncode == 3, out.stderr[-2000:]
    (line,) = stderr_lines(out)
    assert line.startswith("error: mpiexec exited with code ") and line.isprintable()
    shutil.rmtree(kept_log(line).parent)


def descendants(pid: int) -> dict[int, str]:
    """The processes under ``pid`` (children, theirs, ...), with their command lines."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child in (c for c, pp in parent.items() if pp == p):
            out[child] = alive(child)
            todo.append(child)
    return out


def alive(pid: int) -> str:
    """The command line of ``pid``, "" once it is gone (or a zombie)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def sigterm_after(tmp_path: Path, argv: list[str], started) -> tuple[subprocess.Popen, str, dict[int, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.profile", *argv], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not started(proc):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.time() < deadline, "it never started measuring"
            time.sleep(0.2)
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, err, children


def ranks_started(proc: subprocess.Popen) -> bool:
    """Both ranks of the link profile run (somewhere under ``proc``: mpiexec's, or a netlab host's daemon's)."""
    rank = f"{sys.executable}\0-m\0orchestrator.profile.link_rank"
    return sum(c.startswith(rank) for c in descendants(proc.pid).values()) >= 2


def assert_killed_and_gone(tmp_path: Path, proc: subprocess.Popen, err: str, children: dict[int, str]) -> None:
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1:] == ["interrupted: the profile was not written"], err[-2000:]
    assert [r.info.status for r in store_runs(tmp_path)] == ["KILLED"]
    assert len(children) >= 3                              # mpiexec and its two ranks at least
    deadline = time.time() + 10
    while any(alive(pid) for pid in children) and time.time() < deadline:
        time.sleep(0.2)
    assert not {pid: alive(pid) for pid in children if alive(pid)}
    assert not (tmp_path / "prof").exists()


@pytest.mark.mpi
def test_sigterm_stops_the_link_profile_and_its_mpi_job(tmp_path):
    argv = ["links", "--out", "prof", "--sizes", "1e3,1e4,1e5", "--repeats", "1000000", "--progress", "false"]
    assert_killed_and_gone(tmp_path, *sigterm_after(tmp_path, argv, ranks_started))


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.netns
def test_sigterm_takes_the_emulated_hosts_down(tmp_path):
    from services import require_netlab

    require_netlab()
    argv = ["links", "--out", "prof", "--netlab", "1gbit", "--sizes", "1e3,1e4,1e5", "--repeats", "1000000",
            "--progress", "false"]
    proc, err, children = sigterm_after(tmp_path, argv, ranks_started)
    assert_killed_and_gone(tmp_path, proc, err, children)
    prefix = f"prof{proc.pid % 1000}"                      # links.netlab_prefix() of that process
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert not [n for n in names if n.startswith(f"{prefix}-h")]
    assert f"{prefix}br0" not in links and f" {prefix}v" not in links


@pytest.mark.slow
def test_sigterm_ends_a_layer_profile_killed(tmp_path):
    def measuring(_proc) -> bool:
        if not (tmp_path / "mlflow.db").exists():
            return False
        return any(r.info.status == "RUNNING" for r in store_runs(tmp_path))

    argv = ["layers", "--out", "prof", "--layers", "1", "--hidden", "32", "--heads", "2", "--sequence", "16", "--vocab",
            "64", "--mbs", "1", "--tp", "1", "--repeats", "100000", "--progress", "false"]
    proc, err, _ = sigterm_after(tmp_path, argv, measuring)
    assert proc.returncode == 143, err[-2000:]
    assert [r.info.status for r in store_runs(tmp_path)] == ["KILLED"]
    assert not (tmp_path / "prof").exists()
