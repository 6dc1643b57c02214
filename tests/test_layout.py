"""The package layout: no oversized module, no import circle anywhere under ``orchestrator/``, the
core never imports the built-in plugins, and the layers import one way (the table below)."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graph", "placement", "phases", "sync", "hardware", "execution", "tracking", "plan", "planning",
            "partition")

# the op-graph model (OpGraph, Node, Edge, Placement, array types): the lowest layer, importable from every
# package; it imports nothing of ours but the core
GRAPH = {"graph"}
# placement/ is cut by layer: each imports only the layers before it (and hardware, execution, models, graph)
LAYERS = ("graph", "simulate", "solve", "evaluate", "learn")
BELOW = {"hardware", "execution", "models", "partition"} | GRAPH
MAY_IMPORT = {
    "graph": set(),
    **{f"placement.{layer}": {f"placement.{x}" for x in LAYERS[:i + 1]} | BELOW for i, layer in enumerate(LAYERS)},
    "placement": GRAPH,                      # the package itself re-exports the model's names
    # the trial's phases: placement, training (sync strategies), its MLflow run (tracking)
    "phases": {"phases", "hardware", "execution", "models", "data", "sync", "tracking"}
    | {f"placement.{x}" for x in LAYERS} | GRAPH,
    "hardware": {"hardware"} | GRAPH,
    "execution": {"execution", "hardware", "models", "data"} | GRAPH,
    "tracking": {"tracking"},
    "sync": {"sync", "hardware", "execution", "models", "data"} | GRAPH,
    # plans for GPU clusters: the data model (layered profile, plan) sits above hardware/ (the GPU cluster and catalog);
    # its simulator, planners and trial phase above it, a sibling of placement/ (a plan spans model
    # and data parallelism), reusing placement's Gantt and graph layers
    "plan": {"plan", "hardware"} | GRAPH | {"placement.simulate"},
    "planning": {"planning", "plan", "hardware", "partition"} | GRAPH | {"placement.simulate"},
    # the partitioning engine and its bounds (arrays and callbacks): below placement/ and planning/
    "partition": {"partition", "hardware"} | GRAPH,
}
# importable from every layer: "" is the orchestrator package itself; "api" (the plugin contract) and
# "config" (the typed config schema) too, as long as no circle results (test_no_import_circle)
CORE = {"errors", "progress", "hookspecs", "plugins", "paths", "api", "config", "schedules", "cache", ""}


def _modules() -> dict[str, Path]:
    """Every module under orchestrator/ by its dotted name (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _nearest(name: str) -> str | None:
    """The longest prefix of ``name`` that is a module of ours (``a.b.C`` -> ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The modules of ours that ``module`` imports, anywhere in the file (lazy imports inside functions
    included): ``from a.x import y`` is ``a.x.y`` when y is a submodule, else ``a.x``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(_nearest(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                                   # relative: from the module's own package
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else _nearest(base))
    return out - {None, module}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of a directed graph (node -> successors)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > 400}
    long.update({str(p.relative_to(ROOT)): n for p in (ROOT / "plugins").rglob("*.py")
                 if (n := len(p.read_text().splitlines())) > 400})
    assert not long, long


def test_the_scc_finder_finds_a_circle():
    """The detector itself: a circle through lazy imports is one component of three."""
    comps = strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()})
    assert sorted(map(len, comps)) == [1, 3]


def test_lazy_and_submodule_imports_are_resolved():
    got = imports_of("orchestrator.phases.placement")           # lazy imports inside methods
    assert "orchestrator.placement.evaluate.evaluator" in got and "orchestrator.plugins" in got
    assert "orchestrator.graph.placement" in imports_of("orchestrator.placement")


def test_no_import_circle():
    graph = {m: imports_of(m) for m in MODULES}
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not circles, f"modules that import each other in a circle: {circles}"


def _package(module: str) -> str:
    """The package of a module: its first component under orchestrator/ (a top module is its own)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph() -> dict[str, set[str]]:
    """Package -> the packages it imports (lazy imports inside functions included)."""
    out: dict[str, set[str]] = {}
    for module in MODULES:
        own = _package(module)
        out.setdefault(own, set()).update(p for p in map(_package, imports_of(module)) if p not in (own, ""))
    return out


def test_no_package_level_circle():
    """No circle among orchestrator's packages either (config -> execution -> config was one, through
    a lazy import): a package imports only the packages below it."""
    circles = [c for c in strongly_connected(package_graph()) if len(c) > 1]
    assert not circles, f"packages that import each other in a circle: {circles}"


def test_config_imports_no_layer_above_it():
    """The typed config is the lowest layer but the core's errors: the choices it validates
    (optimizers, balance modes) live in config/ and the code above imports them from there."""
    above = {"execution", "sync", "placement", "models", "data", "planning", "phases"}
    bad = {m: sorted(p for p in map(_package, imports_of(m)) if p in above)
           for m in MODULES if _package(m) == "config"}
    assert not {m: v for m, v in bad.items() if v}, bad


def test_the_package_graph_sees_lazy_imports():
    """The package graph has the edges only lazy imports make (app imports trial inside functions), and a
    top module is a package of its own."""
    graph = package_graph()
    assert "trial" in graph["app"] and "config" not in graph["config"]
    assert _package("orchestrator.sync.core") == "sync" and _package("orchestrator.errors") == "errors"


def test_the_core_never_imports_the_builtin_plugins():
    bad = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "orchestrator_plugins" for n in names):
                bad.setdefault(module, []).append(node.lineno)
    assert not bad, f"the core imports orchestrator_plugins (move the code into the core): {bad}"


SUBPACKAGES = {m.split(".")[2] for m, p in MODULES.items() if m.startswith("orchestrator.placement.") and p.name == "__init__.py"}


def _key(module: str) -> str:
    """The layer of a module: the sub-package of placement (``placement.solve``), else the package."""
    parts = module.split(".")[1:]
    if len(parts) > 1 and parts[0] == "placement" and parts[1] in SUBPACKAGES:
        return f"placement.{parts[1]}"
    return parts[0] if parts else ""


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_imports_go_one_way(layer):
    bad = {}
    for module in MODULES:
        if _key(module) != layer:
            continue
        wrong = {_key(m) for m in imports_of(module)} - MAY_IMPORT[layer] - CORE - {layer}
        if wrong:
            bad[module] = sorted(wrong)
    assert not bad, f"{layer} imports outside its layer: {bad}"


def test_every_placement_layer_is_in_the_table():
    """A new sub-package of placement must be placed in ``LAYERS`` (and so in ``MAY_IMPORT``)."""
    assert SUBPACKAGES == set(LAYERS), SUBPACKAGES ^ set(LAYERS)


def test_store_and_report_do_not_import_each_other():
    store = imports_of("orchestrator.tracking.store")
    # the one tracking module the store uses is the template of a new store, a leaf (no tracking module of its own)
    assert {m for m in store if m.startswith("orchestrator.tracking")} <= {"orchestrator.tracking.template"}, store
    assert not {m for m in imports_of("orchestrator.tracking.template") if m.startswith("orchestrator.tracking")}
    assert {_key(m) for m in store} <= {"tracking", "errors"}
    assert "orchestrator.tracking.sweep" not in imports_of("orchestrator.tracking.report")


def test_every_package_is_installed():
    """pyproject lists every package (a wheel, not only an editable install, has them all) and the
    shipped policy checkpoint as package data."""
    text = (ROOT / "pyproject.toml").read_text()
    packages = [m for m, p in MODULES.items() if p.name == "__init__.py"]
    missing = [p for p in packages if f'"{p}"' not in text]
    assert not missing, f"not in [tool.setuptools] packages: {missing}"
    plugins = [".".join(("orchestrator_plugins",) + p.parent.relative_to(ROOT / "plugins").parts)
               for p in (ROOT / "plugins").rglob("__init__.py")]
    assert not [p for p in plugins if f'"{p}"' not in text], plugins
    assert '"orchestrator.placement.learn" = ["checkpoints/*.npz"]' in text
    assert (ROOT / "orchestrator/placement/learn/checkpoints/graph_policy.npz").exists()
    for pkg in PACKAGES:
        importlib.import_module(f"orchestrator.{pkg}")


def test_no_module_imports_another_modules_private_name():
    """What two modules share is public in the one that owns it (``from x import _y`` reaches into x)."""
    hits = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orchestrator"):
                hits += [f"{module}: from {node.module} import {a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
    assert not hits, "\n".join(hits)
