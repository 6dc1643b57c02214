"""Micro-batches in flight: which stage of a micro-batched pipeline (GPipe, 1F1B) holds how many
micro-batches' forward activations at once, and the order of the stages. The step simulator charges
this memory (``Simulator.memory``) and the micro-batch scheduler (``microbatch``) reports it, so it
lives below both.

A placement's **stages** are the devices it uses, ordered by the graph's topological flow (mean
position of their nodes, a backward or update node counting at its forward twin's). A node's phase
is ``F`` (forward and loss), ``B`` (backward) or ``U`` (update)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.schedules import SCHEDULES as SCHEDULE_CLASSES
from orchestrator.schedules import B as B
from orchestrator.schedules import F as F
from orchestrator.schedules import U as U
from orchestrator.schedules import schedule

if TYPE_CHECKING:
    from orchestrator.graph.opgraph import OpGraph

SCHEDULES = tuple(SCHEDULE_CLASSES)


@dataclass(frozen=True)
class MicrobatchSpec:
    """A micro-batched pipeline (``placement.micro_batches`` > 1, ``placement.schedule``): part of what
    a placement is judged under, given to the simulator and the evaluator that judge it."""

    micro_batches: int
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        if self.micro_batches < 1 or self.schedule not in SCHEDULES:
            raise ValueError(f"MicrobatchSpec({self.micro_batches}, {self.schedule!r})")


def in_flight(kind: str, micro_batches: int, n_stages: int, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based) holds at once, at most."""
    return schedule(kind).in_flight(micro_batches, n_stages, stage)


def phase_of(graph: OpGraph) -> IntArray:
    return np.array([B if n.role == "backward" else U if n.role == "update" else F for n in graph.nodes], dtype=np.int64)


def flow_position(graph: OpGraph) -> FloatArray:
    """Position of each node in the forward flow: forward nodes in topological order; a backward or
    update node at its group's forward node. Without a forward twin, a backward node comes after every
    forward node, and an update node (an optimizer's step counter, Adam's beta powers) at the latest of
    its predecessors: it runs once per mini-batch and moves nothing between stages, so it must not pull
    its device later in the stage order (tests/test_stage_order.py)."""
    phase = phase_of(graph)
    topo = graph.topological_order()
    pos = np.zeros(len(graph.nodes))
    fwd = [i for i in topo if phase[i] == F]
    at_group: dict[str, float] = {}
    for k, i in enumerate(fwd):
        pos[i] = k
        g = graph.nodes[i].group
        if g is not None:
            at_group.setdefault(g, float(k))
    preds = graph.predecessors()
    for k, i in enumerate(i for i in topo if phase[i] != F):
        g = graph.nodes[i].group
        if g is not None and g in at_group:
            pos[i] = at_group[g]
        elif phase[i] == U and preds[i]:
            pos[i] = max(pos[p] for p in preds[i])
        else:
            pos[i] = len(fwd) + k
    return pos


def stage_order(pos: FloatArray, assign: IntArray, n_devices: int) -> list[int]:
    """Devices used by ``assign``, in flow order (mean flow position of their nodes)."""
    cnt = np.bincount(assign, minlength=n_devices)
    tot = np.bincount(assign, weights=pos, minlength=n_devices)
    used = np.flatnonzero(cnt)
    return sorted(used.tolist(), key=lambda d: (tot[d] / cnt[d], d))


def in_flight_counts(graph: OpGraph, assign: IntArray, n_devices: int, micro_batches: int, kind: str,
                     pos: FloatArray | None = None) -> FloatArray:
    """Micro-batches in flight per device for ``assign`` (the counts ``Simulator.memory`` charges)."""
    pos = flow_position(graph) if pos is None else pos
    out = np.ones(n_devices)
    stages = stage_order(pos, assign, n_devices)
    for s, d in enumerate(stages):
        out[d] = in_flight(kind, micro_batches, len(stages), s)
    return out
