"""hetero-orchestrator: experiments on parallel training of neural networks on heterogeneous hardware.

Importing this package is cheap on purpose: TensorFlow, MLflow and MPI are imported only by the
code paths that use them, so that `--help`, config errors and plugin listings answer at once.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("hetero-orchestrator")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
