"""``python -m orchestrator.profile``: see ``orchestrator.profile.cli``."""

from orchestrator.profile import main

if __name__ == "__main__":
    raise SystemExit(main())
