"""Import paths of the flat 0.1 layout (``orchestrator.cluster``, ``orchestrator.runtime``, ...) keep
working: each resolves to the module's new home, so a plugin written against the 0.1 docs does not
break. New code imports the new paths (the README's "Layout" says where each concept lives)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

MOVED = {
    "graph": "placement.graph", "extract": "placement.extract", "extract_ops": "placement.extract_ops",
    "flops": "placement.flops", "workload": "placement.workload", "simulator": "placement.simulator",
    "sim_kernel": "placement.sim_kernel", "evaluator": "placement.evaluator", "placing": "placement.search",
    "rl_policy": "placement.policy", "gantt": "placement.gantt",
    "sync_core": "sync.core", "sync_virtual": "sync.virtual", "sync_mpi": "sync.mpi",
    "mpi_worker": "sync.mpi_worker", "sync_report": "sync.report",
    "cluster": "hardware.cluster", "cluster_presets": "hardware.presets", "hardware_profiles": "hardware.profiles",
    "tf_cluster": "hardware.tf_cluster", "calibration": "hardware.calibration", "workers": "hardware.workers",
    "runtime": "execution.runtime", "functional": "execution.functional", "execute": "execution.execute",
    "training": "execution.training", "single_worker": "execution.single_worker",
    "runs": "tracking.runs", "plots": "tracking.plots",
}
"""old module name under ``orchestrator.`` -> its path under ``orchestrator.`` now"""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.target}; the old path will be removed in 1.0",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # the target module is already executed
        pass


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        pkg, _, name = fullname.partition(".")
        if pkg != "orchestrator" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"orchestrator.{MOVED[name]}"))


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
