"""Errors a user can cause. The entry point prints them as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (config, files, plugin names); printed without traceback, on one line: a
    line break a message quotes from the input (a key of a file, a value) reads as ``\\n``."""

    exit_code = 2

    def __str__(self) -> str:
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")


class ConfigError(UserError):
    """A malformed or unknown config value."""


class PluginError(UserError):
    """An unknown, broken or incompatible plugin."""


class WorkloadError(UserError):
    """A workload or graph file that cannot be read."""


class InfeasiblePlacementError(UserError):
    """A placement (or every placement) exceeds some device's memory."""


class InfeasiblePlanError(UserError):
    """No plan of a planner fits the cluster (memory, the objective's constraint): one line, exit 2."""


class WorkerFailedError(Exception):
    """A worker process of a distributed run died or timed out."""

    exit_code = 3


def number(value, key: str, typ: type = float, minimum: float | None = None, maximum: float | None = None):
    """``typ(value)`` for the config key ``key``, or a ``ConfigError`` naming the key and the value
    (wrong type, NaN, or outside ``[minimum, maximum]``). ``None`` passes through."""
    import math

    if value is None:
        return None
    if isinstance(value, bool) or (typ is int and isinstance(value, float) and not value.is_integer()):
        raise ConfigError(f"{key}={value!r} is not {'an integer' if typ is int else 'a number'}")
    try:
        out = typ(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key}={value!r} is not {'an integer' if typ is int else 'a number'}") from None
    if isinstance(out, float) and math.isnan(out):
        raise ConfigError(f"{key}={value!r} is not a number")
    if minimum is not None and out < minimum:
        raise ConfigError(f"{key}={value!r} must be >= {minimum}")
    if maximum is not None and out > maximum:
        raise ConfigError(f"{key}={value!r} must be <= {maximum}")
    return out


class Interrupt:
    """The signal (SIGINT, SIGTERM) that is ending this process, recorded by the handler that turns it
    into ``KeyboardInterrupt``: a phase that catches the interrupt to keep its best result so far (a
    placer's search) cannot make an interrupted trial look finished."""

    signal: int | None = None
    # Code that a KeyboardInterrupt must not cut in the middle: a SQLite statement or commit cut there
    # leaves this process's own connection holding the file's lock, and every write that follows (the
    # run's KILLED status, the study's FAIL) then waits on "database is locked" for ever.
    # (SQL stores only: an HTTP store's call is cut safely, and deferring it could outlast its retries.)
    ATOMIC = ("sqlalchemy.", "sqlite3", "alembic.", "mlflow.store.db.", "mlflow.store.tracking.sqlalchemy_store",
              "optuna.storages._rdb")
    RETRY_S = 0.05
    pending: int | None = None

    @classmethod
    def handle(cls, signum, frame=None):
        if cls.pending is not None:  # the deferred signal, delivered again (as SIGINT, see below)
            signum, cls.pending = cls.pending, None
        cls.signal = signum
        if cls.in_atomic(frame):  # raise it once the store call has returned
            import _thread
            import signal as signals
            import threading

            cls.pending = signum
            # as SIGINT: a Slurm job ignores a second SIGTERM (tracking.slurm), and SIGINT is ours too
            timer = threading.Timer(cls.RETRY_S, _thread.interrupt_main, (signals.SIGINT,))
            timer.daemon = True
            timer.start()
            return
        raise KeyboardInterrupt(f"signal {signum}")

    @classmethod
    def in_atomic(cls, frame) -> bool:
        """Whether ``frame`` (where the signal found the main thread) is inside a store's database call."""
        while frame is not None:
            if str(frame.f_globals.get("__name__", "")).startswith(cls.ATOMIC):
                return True
            frame = frame.f_back
        return False

    @classmethod
    def check(cls, exc: BaseException) -> None:
        """Once a signal was received, raise the interrupt (from ``exc``) in place of ``exc``: a signal that cut into a
        library's code can come out as another error (OmegaConf's while Hydra composes, TensorFlow's in
        ``nest.flatten``). Without a signal it returns, and ``exc`` is the caller's to handle."""
        if cls.signal is not None and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt(f"signal {cls.signal}") from exc

    @classmethod
    def exit_code(cls) -> int:
        return 128 + (cls.signal or 2)  # 130 for Ctrl-C (SIGINT), 143 for SIGTERM
