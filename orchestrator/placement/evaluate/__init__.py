"""The judges of placements: simulated and measured (``evaluator``), the measured and mixed search
rewards (``measured``) and the re-fit of the simulator to measurements (``measured_fit``).
Imports ``graph``, ``simulate`` and ``solve`` (the certified bounds it reports)."""
