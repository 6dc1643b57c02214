"""The partitioning engine and the bounds beside it, shared by placement/ (op graphs on one worker's devices)
and planning/ (layer chains on a cluster's GPUs): ``ideals`` (the contiguous sets of a DAG), ``split`` (the
contiguous min-max, then least-sum, split over them) and ``bounds`` (the work LP, the configuration LP's column
generation and the column DP). Arrays and callbacks in, figures out: it imports graph, hardware and the core."""
