"""Cost models of a placed graph: the one-step simulator (``simulator`` + ``sim_kernel``), the
steady-state load objective (``load``), micro-batched GPipe / 1F1B schedules (``microbatch``), the
activations of micro-batches in flight (``inflight``) and Gantt charts (``gantt``). Imports ``graph``."""
