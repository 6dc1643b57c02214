"""Data parallelism: the staleness rule and the parameter server (``core``, one piece of code for both
runtimes), the virtual-clock runtime (``virtual``), the MPI launcher and rank program (``mpi``,
``mpi_worker``), and the ``sync.*`` metrics and artifacts (``report``)."""
