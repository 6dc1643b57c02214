import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from orchestrator.runtime import configure_threads, split_cpu  # noqa: E402

# Two logical CPU devices for placement tests; must happen before TensorFlow initialises.
LOGICAL_CPUS = split_cpu(2)
configure_threads(2)
