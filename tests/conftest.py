"""Lets tests run from this source tree: maps ``orchestrator_plugins`` to its ``plugins`` folder
(also when another checkout is installed in the environment)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _alias_plugins() -> None:
    found = importlib.util.find_spec("orchestrator_plugins")
    if found is not None and Path(found.origin or "").resolve().parent == ROOT / "plugins":
        return
    for name in [m for m in sys.modules if m == "orchestrator_plugins" or m.startswith("orchestrator_plugins.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location("orchestrator_plugins", ROOT / "plugins" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "plugins")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["orchestrator_plugins"] = module
    spec.loader.exec_module(module)


_alias_plugins()
