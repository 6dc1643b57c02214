"""Profilers: ``python -m orchestrator.profile layers`` measures a model's layers on this machine's TensorFlow
devices, ``python -m orchestrator.profile links`` the links between MPI ranks; both write a directory laid out
like ``shared/workloads/sailor`` that ``model=llm model.data=DIR hardware.data=DIR`` plans with
(docs/profiling.md)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from orchestrator.profile.cli import main as cli_main

    return cli_main(argv)
