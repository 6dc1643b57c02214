"""Pipeline schedules as classes: the order in which one stage of a micro-batched pipeline runs its
forward (F) and backward (B) tasks, and how many micro-batches' activations it holds at once. One
definition serves the micro-batch simulator of placements (``placement.simulate.microbatch``), the real
pipelined runtime (``execution.pipelined``, through ``task_order``) and the plan simulator
(``planning.simulator``, through the plan's ``schedule``). A new schedule is a new subclass registered in
``SCHEDULES``; a name is resolved to its class once, where it is read (``schedule(name)``), and the
schedule travels as an object from there.

Stages are 0-based, ``S`` of them; micro-batches 0-based, ``m`` of them::

    GPipe (Huang et al. 2019), S = 3, m = 4        1F1B (PipeDream-Flush, Narayanan et al. 2021)
    stage 0: F0 F1 F2 F3 .. .. B3 B2 B1 B0         stage 0: F0 F1 F2 B0 F3 B1 B2 B3
    stage 1:    F0 F1 F2 F3 B3 B2 B1 B0            stage 1:    F0 F1 B0 F2 B1 F3 B2 B3
    stage 2:       F0 F1 F2 F3 B3 B2 B1 B0         stage 2:       F0 B0 F1 B1 F2 B2 F3 B3
"""

from __future__ import annotations

from abc import ABC, abstractmethod

F, B, U = 0, 1, 2


class PipelineSchedule(ABC):
    name: str = ""

    def __eq__(self, other: object) -> bool:       # stateless: one schedule of a class is any other
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @abstractmethod
    def order(self, micro_batches: int, stages: int, stage: int) -> list[tuple[int, int]]:
        """The (phase F or B, micro-batch) tasks of ``stage`` in the order it runs them."""

    @abstractmethod
    def in_flight(self, micro_batches: int, stages: int, stage: int) -> int:
        """Micro-batches whose activations ``stage`` holds at once, at most."""


class GPipe(PipelineSchedule):
    """All forwards, then all backwards in reverse order; every micro-batch in flight at once."""

    name = "gpipe"

    def order(self, micro_batches: int, stages: int, stage: int) -> list[tuple[int, int]]:  # noqa: ARG002
        return [(F, j) for j in range(micro_batches)] + [(B, j) for j in reversed(range(micro_batches))]

    def in_flight(self, micro_batches: int, stages: int, stage: int) -> int:  # noqa: ARG002
        return micro_batches


class OneFOneB(PipelineSchedule):
    """``w = min(S - 1 - s, m)`` warm-up forwards, then one forward one backward, then ``w`` backwards."""

    name = "1f1b"

    def order(self, micro_batches: int, stages: int, stage: int) -> list[tuple[int, int]]:
        m = micro_batches
        w = min(stages - 1 - stage, m)
        out = [(F, j) for j in range(w)]
        for j in range(m - w):
            out += [(F, w + j), (B, j)]
        return out + [(B, j) for j in range(m - w, m)]

    def in_flight(self, micro_batches: int, stages: int, stage: int) -> int:
        return max(1, min(micro_batches, stages - stage))


SCHEDULES: dict[str, type[PipelineSchedule]] = {cls.name: cls for cls in (GPipe, OneFOneB)}


def schedule(name: str) -> PipelineSchedule:
    """The schedule registered as ``name`` (an unknown name: a one-line ``ConfigError`` naming the known)."""
    try:
        return SCHEDULES[name]()
    except KeyError:
        from orchestrator.errors import ConfigError

        raise ConfigError(f"unknown pipeline schedule {name!r} (known: {', '.join(SCHEDULES)})") from None
