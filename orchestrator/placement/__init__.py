"""Model parallelism: the op graph of a training step (extracted from Keras or read from a profiled
workload), the simulator that times a placement on a worker, the evaluators (simulated or measured),
the search machinery placers share, and the rl policy.

``Placement`` and ``PlacementContext`` (what a placer returns and receives) are importable from here.
"""

from orchestrator.placement.base import Placement, PlacementContext

__all__ = ["Placement", "PlacementContext"]
