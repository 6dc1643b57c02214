"""Model parallelism, in layers that import one way (each only from the ones above it here):

- ``graph``: the op graph of a training step extracted from Keras or read from a profiled
  workload (the model itself, ``OpGraph`` and the ``Placement`` a placer returns, is the low
  package ``orchestrator.graph``, which every layer imports);
- ``simulate``: cost models of a placed graph: the one-step simulator (+ numba kernel), the
  steady-state load model (``load``), micro-batched GPipe / 1F1B schedules (``microbatch``), the
  memory of micro-batches in flight, Gantt charts;
- ``solve``: the placement problem as arrays and what searches it: bounds, greedy list scheduling,
  local search, the contiguous DP, the MILP and the configuration-LP bound;
- ``evaluate``: the judges of placements (simulated, measured, mixed) and the simulator's re-fit;
- ``learn``: the graph policy of ``placer=rl``, its decoding, checkpoints and pre-training.

The trial's placement phase is ``orchestrator.phases``; the placers are plugins over this core.
``Placement``, ``PlacementContext`` and ``OpGraph`` (what plugin authors use; defined in ``orchestrator.graph``)
are importable from here too.
"""

from orchestrator.graph.opgraph import OpGraph
from orchestrator.graph.placement import Placement, PlacementContext

__all__ = ["OpGraph", "Placement", "PlacementContext"]
