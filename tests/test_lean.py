"""The TensorFlow-only processes (MPI ranks, TF server processes) import TensorFlow without Keras' optional
scikit-learn and pandas (orchestrator.hardware.lean), and leave both importable afterwards."""

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_tensorflow_imports_without_keras_optional_modules_which_stay_importable():
    code = ("import sys; from orchestrator.hardware.lean import import_tensorflow; tf = import_tensorflow(); "
            "print(tf.constant(2).numpy(), 'sklearn' in sys.modules, 'pandas' in sys.modules); "
            "import pandas, sklearn; print(pandas.__name__, sklearn.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "False", "False", "pandas", "sklearn"], out.stdout
