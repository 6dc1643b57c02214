"""Ctrl-C or SIGTERM ends the trial's run as KILLED, with no process left behind."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import store_runs


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_marks_run_killed(workdir, sig):
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "train.stop=budget", "train.budget_updates=100000"],
                            cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            runs = [r for r in store_runs(workdir) if r.info.status == "RUNNING"]
            if runs and "train.test_accuracy" in runs[0].data.metrics:
                break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(1)
        else:
            pytest.fail("the trial never started training")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err[-2000:]  # 130 for Ctrl-C, 143 for SIGTERM
    (run,) = store_runs(workdir)
    assert run.info.status == "KILLED"
    # nothing of the trial's process group is left
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
