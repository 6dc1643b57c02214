"""``python -m orchestrator.report``: the comparison report (lives in ``orchestrator.tracking.report``)."""

from orchestrator.tracking.report import main

if __name__ == "__main__":
    raise SystemExit(main())
