"""The CLI's entry points called in this process, for the fast tier: the same ``returncode``, ``stdout``
and ``stderr`` a child process would give, without a Python start-up and import per test (several
seconds each on two cores).

What a fresh process would have, and this one must restore between calls: Hydra's global state, the
current directory, ``sys.argv``, the environment, the signal handlers ``orchestrator.app.main``
installs, warning filters, the logging set-up Hydra configures, and the module-level caches that key
on a relative store URI (``sqlite:///mlflow.db`` means another file in another directory). Use it for
what ends before a trial trains (config errors, ``--help``, plugin listing, reports); keep
``run_cli`` where the process boundary is under test (signals, a killed process, MPI, launchers).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import signal
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns, for the fields tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _exit_code(exc: SystemExit, err: io.StringIO) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)  # as the interpreter does for sys.exit("message")
    return 1


def _reset_caches() -> None:
    """Forget what an earlier call cached about stores and sweeps (a new process starts without it)."""
    if "hydra" in sys.modules:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
    if "orchestrator.tracking.store" in sys.modules:
        sys.modules["orchestrator.tracking.store"]._REAPED.clear()
    if "orchestrator.tracking.sweep" in sys.modules:
        sys.modules["orchestrator.tracking.sweep"].OUTCOME.clear()
    if "orchestrator.app" in sys.modules:
        sys.modules["orchestrator.app"]._STUDY.clear()
    if "orchestrator.errors" in sys.modules:       # no signal received yet, as in a new process
        sys.modules["orchestrator.errors"].Interrupt.signal = sys.modules["orchestrator.errors"].Interrupt.pending = None
    if "mlflow" in sys.modules:
        import mlflow
        from mlflow.tracking._tracking_service.registry import TrackingStoreRegistry

        while mlflow.active_run() is not None:
            mlflow.end_run("FAILED")
        TrackingStoreRegistry._get_store_with_resolved_uri.cache_clear()


@contextlib.contextmanager
def _isolated(cwd: Path, argv: list[str], env: dict[str, str]):
    saved_cwd, saved_argv, saved_env = os.getcwd(), sys.argv[:], dict(os.environ)
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    saved_logging = [(lg, lg.level, lg.handlers[:], lg.propagate, lg.disabled) for lg in loggers]
    # Hydra's dictConfig closes every handler logging knows of; absl's (TensorFlow's) then closes its
    # stream, pytest's capture file. Hidden from it, the handlers that exist now survive the call.
    saved_handlers = logging._handlerList[:], dict(logging._handlers)
    logging._handlerList[:] = []
    _reset_caches()
    os.chdir(cwd)
    sys.argv = argv
    os.environ.update(env)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        for ref in logging._handlerList:  # the call's own log files (Hydra's job log): closed, as at exit
            handler = ref()
            if isinstance(handler, logging.FileHandler):
                handler.close()
        _reset_caches()
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        for sig, action in saved_signals.items():
            signal.signal(sig, action)
        for lg in logging.Logger.manager.loggerDict.values():  # loggers the call created: detach their handlers
            if isinstance(lg, logging.Logger) and lg not in loggers:
                lg.handlers.clear()
        for lg, level, handlers, propagate, disabled in saved_logging:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
        logging._handlerList[:] = saved_handlers[0] + logging._handlerList
        logging._handlers.update(saved_handlers[1])


def run_inprocess(cwd: Path, *args: str, module: str = "orchestrator", env: dict | None = None,
                  timeout: float | None = None) -> Result:
    """``python -m MODULE ARGS`` run in ``cwd``, in this process. ``module`` is ``orchestrator`` (the
    Hydra entry point, which reads ``sys.argv``) or a module with ``main(argv) -> int``. ``timeout``
    is accepted for the signature of ``run_cli`` and not enforced. Without ``MLFLOW_TRACKING_URI``
    (in ``env`` or the environment, or set empty) the default store is named absolutely as ``cwd/mlflow.db``: the
    same file a child process in ``cwd`` would use, but a key MLflow's per-process caches cannot
    confuse with another directory's."""
    env = {k: str(v) for k, v in (env or {}).items()}
    if not env.get("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI")):
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(cwd).resolve() / 'mlflow.db'}"
    out, err = io.StringIO(), io.StringIO()
    argv = [module, *args]
    with _isolated(Path(cwd), argv, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if module == "orchestrator":
                from orchestrator.app import main

                main()
                code = 0
            else:
                code = importlib.import_module(module).main(list(args)) or 0
        except SystemExit as exc:
            code = _exit_code(exc, err)
        except KeyboardInterrupt:
            raise
        except BaseException:  # an uncaught exception: the interpreter's traceback and exit 1
            traceback.print_exc(file=err)
            code = 1
        sys.stdout.flush()
    return Result(argv, code, out.getvalue(), err.getvalue())
