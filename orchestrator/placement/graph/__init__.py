"""The graph layer: extraction of a training step's op graph from Keras (``extract``,
``extract_ops``, ``flops``), profiled public workloads (``workload``), seeded synthetic graphs
(``synthetic``) and compiled graph passes (``kernels``). Imports nothing else of placement.

The model itself (``OpGraph``, ``Node``, ``Edge``, ``Placement``) is ``orchestrator.graph``."""
