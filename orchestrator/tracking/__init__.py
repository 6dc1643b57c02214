"""Tracking: the MLflow store and a trial's run (``store``), the sweep's parent run (``sweep``), reading
runs back (``runs``), the comparison report (``report``) and its plots (``plots``).

Imports go one way: ``sweep`` and ``report`` use ``store`` and ``runs``; ``store`` imports neither."""
