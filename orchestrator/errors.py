"""Errors a user can cause. The entry point prints them as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (config, files, plugin names); printed without traceback."""

    exit_code = 2


class ConfigError(UserError):
    """A malformed or unknown config value."""


class PluginError(UserError):
    """An unknown, broken or incompatible plugin."""


class WorkloadError(UserError):
    """A workload or graph file that cannot be read."""


class InfeasiblePlacementError(UserError):
    """A placement (or every placement) exceeds some device's memory."""


class WorkerFailedError(Exception):
    """A worker process of a distributed run died or timed out."""

    exit_code = 3
