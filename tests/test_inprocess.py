"""The test harness itself: conftest loads no TensorFlow yet configures it on first import, and the
in-process CLI runner answers as a child process would and leaves this process as it found it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import run_cli, run_inprocess

TESTS = Path(__file__).resolve().parent


def test_conftest_imports_no_tensorflow_and_configures_it_on_first_import():
    # Keras first: the hard case, TensorFlow's import starts inside another package's import.
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import conftest\n"
            "assert 'tensorflow' not in sys.modules, 'conftest imported TensorFlow'\n"
            "import keras, tensorflow as tf\n"
            "print(len(tf.config.list_logical_devices('CPU')), tf.config.threading.get_intra_op_parallelism_threads(),"
            " tf.config.threading.get_inter_op_parallelism_threads())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["2", "2", "2"], out.stdout


def test_inprocess_answers_as_a_child_process(workdir):
    child = run_cli(workdir, "+sync=delay", "sync.staleness=abc", timeout=300)
    here = run_inprocess(workdir, "+sync=delay", "sync.staleness=abc")
    assert (here.returncode, here.stderr, here.stdout) == (child.returncode, child.stderr, child.stdout) == (
        2, "error: sync.staleness='abc' (accepted: inf or a number)\n", "")


def test_inprocess_leaves_this_process_as_it_found_it(workdir):
    from hydra.core.global_hydra import GlobalHydra

    before = (os.getcwd(), sys.argv[:], dict(os.environ), signal.getsignal(signal.SIGINT),
              signal.getsignal(signal.SIGTERM), sys.stdout, sys.stderr)
    assert run_inprocess(workdir, "--help").returncode == 0
    assert run_inprocess(workdir, "seed=1.5").returncode == 2
    after = (os.getcwd(), sys.argv[:], dict(os.environ), signal.getsignal(signal.SIGINT),
             signal.getsignal(signal.SIGTERM), sys.stdout, sys.stderr)
    assert after == before
    assert not GlobalHydra.instance().is_initialized()


def test_inprocess_reports_exit_codes_and_uncaught_errors(workdir):
    listing = run_inprocess(workdir, "--kind", "placer", module="orchestrator.plugins")
    assert listing.returncode == 0 and "greedy" in listing.stdout and "hardware" not in listing.stdout
    bad = run_inprocess(workdir, "--kind", "nope", module="orchestrator.plugins")   # argparse: SystemExit(2)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr
