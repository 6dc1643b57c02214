"""Start-up of the processes that only run TensorFlow (an MPI rank, a TF server process): Keras, which TensorFlow
imports, also imports scikit-learn and pandas when they are installed (MLflow installs them), for its scikit-learn
wrappers and its pandas data adapters, which such a process never uses: 1.7 s of a 5.5 s import here, paid by
every rank of every trial. ``import_tensorflow`` imports TensorFlow with the two marked absent, then unmarks them:
code that imports them later (a plugin's) gets them as usual."""

from __future__ import annotations

import sys
from types import ModuleType

OPTIONAL = ("sklearn", "pandas")    # imported by Keras only inside ``try: ... except ImportError``


def import_tensorflow() -> ModuleType:
    """``import tensorflow``, without Keras' optional imports (a no-op where TensorFlow is imported already)."""
    blocked = [name for name in OPTIONAL if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]   # "import name" raises ImportError
    try:
        import tensorflow
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return tensorflow
