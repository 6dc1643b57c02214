"""The placement problem as arrays (``problem``) and what searches or bounds it: lower bounds
(``bounds``), greedy list scheduling (``greedy``), iterated local search (``local_search``), the
exact contiguous DP (``contiguous``), the MILP (``milp``) and the configuration-LP bound
(``config_bound``). Imports ``graph`` and ``simulate``; judges are passed in, never imported."""
