"""Import the msr-dnn-partitioning workload format (Tarnawski et al., NeurIPS 2020) into an
``OpGraph`` plus the file's own hardware, and its human-expert split files into a ``Placement``.

Semantics (kept exact so the authors' evaluator numbers are reproduced by ``orchestrator.placement.simulate.simulator``):
- hardware: ``maxFPGAs`` accelerators ``acc:i`` (kind "accelerator", ``maxSizePerFPGA`` bytes each) and
  ``maxCPUs`` CPU cores ``cpu:j`` (kind "cpu") sharing host memory (unbounded unless given);
- node costs ``fpgaLatency`` / ``cpuLatency`` go to ``Node.cost`` under "accelerator" / "cpu";
  ``supportedOnFpga`` 0 -> ``cpu_only``; ``colorClass`` -> ``Node.group``; ``size`` -> ``param_bytes``;
- an edge's ``cost`` is one move between an accelerator and host memory: every accelerator has one
  link to host memory and the simulator charges a fixed cost per hop, so CPU->CPU is free,
  accelerator<->CPU pays it once and accelerator->accelerator twice; once per (source node,
  destination device);
- training files: where the file has no forward->backward edge, each forward node gets an edge to
  its backward twins (same colorClass) and every forward sink one to every backward source;
- time unit: milliseconds unless ``time_unit`` says otherwise;
- objective: files under a ``throughput-inputs`` folder were published for pipelined training
  (``meta["objective"] = "pipeline"``, the default ``placement.objective`` for them), others for
  one-pass latency (``step``).

``model=workload model.path=FILE`` is ``model_spec``: the built-in model registry
(``orchestrator.models.BUILTIN``) names it, so that models/ never imports placement/.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from orchestrator.errors import WorkloadError
from orchestrator.graph.opgraph import Edge, Node, OpGraph
from orchestrator.graph.placement import Placement
from orchestrator.hardware.cluster import Cluster, Device, Worker, host_memory
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.models import ModelSpec
from orchestrator.paths import read_json

_P = ParamSpec("_P")
_R = TypeVar("_R")

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
NODE_FIELDS = ("id", "supportedOnFpga", "cpuLatency", "fpgaLatency")
EDGE_FIELDS = ("sourceId", "destId", "cost")


@dataclass
class Workload:
    graph: OpGraph
    cluster: Cluster

    @property
    def worker(self) -> Worker:
        return self.cluster.workers[0]


MAX_DEVICES = 10_000         # per kind: a file asking for more is malformed, not a machine
MAX_FILE_BYTES = 1 << 30     # 1 GiB: the largest published workload is a few MB


def _read_json(path: Path) -> object:
    """``paths.read_json`` with a size limit first (a workload file is a few MB)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0                                     # missing or unreadable: the reader names it
    if size > MAX_FILE_BYTES:
        raise WorkloadError(f"{path}: {size} bytes, larger than any workload ({MAX_FILE_BYTES} max)")
    return read_json(path, f"{path}: no such file")


def _malformed(path: Path, what: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Turn a wrong-typed field deep in a file into one line naming the file (a decorator)."""
    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        def inner(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(*args, **kwargs)
            except WorkloadError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError, IndexError) as exc:
                raise WorkloadError(f"{path}: malformed {what} ({type(exc).__name__}: {str(exc)[:200]})") from None
        return inner
    return wrap


def _count(data: dict[str, Any], key: str, path: Path) -> int:
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 0:
        raise WorkloadError(f"{path}: {key}={v!r} must be a whole number >= 0")
    if v > MAX_DEVICES:
        raise WorkloadError(f"{path}: {key}={v!r} is more than {MAX_DEVICES} devices")
    return int(v)


def _cost(rec: dict[str, Any], key: str, where: str, path: Path, default: float | None = None) -> float:
    v: Any = rec.get(key, default)  # float(None) is the TypeError reported below
    try:
        out = float(v)
    except (TypeError, ValueError):
        raise WorkloadError(f"{path}: {where} field {key!r}={v!r} is not a number") from None
    if not math.isfinite(out) or out < 0:
        raise WorkloadError(f"{path}: {where} field {key!r}={v!r} must be a finite number >= 0")
    return out


def _need(rec: object, fields: tuple[str, ...], where: str, path: Path) -> None:
    if not isinstance(rec, dict):
        raise WorkloadError(f"{path}: {where} is not an object")
    for f in fields:
        if f not in rec:
            raise WorkloadError(f"{path}: {where} misses field {f!r}")


def msr_worker(n_acc: int, n_cpu: int, acc_memory: float, host_memory_bytes: float = math.inf) -> Worker:
    """The file's hardware as one worker; links carry the edges' fixed costs (bandwidth unused)."""
    mem = host_memory("host0")
    devs = [Device(f"acc:{i}", "accelerator", memory_bytes=acc_memory, profile="msr accelerator") for i in range(n_acc)]
    devs += [Device(f"cpu:{j}", "cpu", memory_bytes=host_memory_bytes, profile="msr cpu core", memory_pool=mem)
             for j in range(n_cpu)]
    ends = [e for i in range(n_acc) for e in ((f"acc:{i}", mem), (mem, f"acc:{i}"))]
    return Worker("msr", devs, Topology(dict.fromkeys(ends, ConstantLink(math.inf, 0.0)), kinds=dict.fromkeys(ends, "pcie")))


def load_msr_workload(path: str | Path, *, time_unit: str = "ms", host_memory_bytes: float = math.inf) -> Workload:
    """Read any file of the format; ``WorkloadError`` (one line, naming the file) on any problem."""
    path = Path(path)
    if time_unit not in TIME_UNITS:
        raise WorkloadError(f"{path}: unknown time_unit {time_unit!r} (one of {', '.join(TIME_UNITS)})")
    data = _read_json(path)
    return _malformed(path, "workload")(_parse_workload)(path, data, time_unit, host_memory_bytes)


def _parse_workload(path: Path, data: Any, time_unit: str, host_memory_bytes: float) -> Workload:
    _need(data, ("maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges"), "the top level", path)
    for key in ("nodes", "edges"):
        if not isinstance(data[key], list):
            raise WorkloadError(f"{path}: {key!r} is not a list")
    if not data["nodes"]:
        raise WorkloadError(f"{path}: the workload has no nodes")
    n_acc, n_cpu = _count(data, "maxFPGAs", path), _count(data, "maxCPUs", path)
    if n_acc + n_cpu == 0:
        raise WorkloadError(f"{path}: maxFPGAs and maxCPUs are both 0: no device to place on")
    acc_memory = _cost(data, "maxSizePerFPGA", "the top level", path)
    if n_acc and not acc_memory > 0:
        raise WorkloadError(f"{path}: maxSizePerFPGA={acc_memory:g}: {n_acc} accelerators of no memory (give bytes > 0, "
                            "or maxFPGAs: 0)")
    nodes: list[Node] = []
    backward: dict[str, bool] = {}
    for i, rec in enumerate(data["nodes"]):
        _need(rec, NODE_FIELDS, f"node #{i}", path)
        name = str(rec["id"])
        backward[name] = bool(rec.get("isBackwardNode", False))
        cc = rec.get("colorClass")
        nodes.append(Node(name, op=str(rec.get("name", "layer")), role="backward" if backward[name] else "forward",
                          cost={"accelerator": _cost(rec, "fpgaLatency", f"node #{i}", path),
                                "cpu": _cost(rec, "cpuLatency", f"node #{i}", path)},
                          param_bytes=_cost(rec, "size", f"node #{i}", path, 0.0), group=None if cc is None else f"c{cc}",
                          cpu_only=not rec["supportedOnFpga"], layer=str(rec["layerId"]) if "layerId" in rec else None))
    edges: list[Edge] = []
    for i, rec in enumerate(data["edges"]):
        _need(rec, EDGE_FIELDS, f"edge #{i}", path)
        edges.append(Edge(str(rec["sourceId"]), str(rec["destId"]), _cost(rec, "size", f"edge #{i}", path, 0.0),
                          _cost(rec, "cost", f"edge #{i}", path)))
    if n_cpu == 0 and (cpu_only := [n.name for n in nodes if n.cpu_only]):
        raise WorkloadError(f"{path}: maxCPUs=0, but {len(cpu_only)} node(s) run on a CPU only (supportedOnFpga false; "
                            f"node {cpu_only[0]!r} first)")
    training = any(backward.values())
    # The format publishes throughput inputs (pipelined training, judged by time per sample) and
    # latency inputs (one pass): a file under a ``throughput-inputs`` folder is the former.
    objective = "pipeline" if any("throughput" in part.lower() for part in path.resolve().parts[:-1]) else "step"
    g = OpGraph(path.stem, nodes, edges, "layer", TIME_UNITS[time_unit],
                {"format": "msr-dnn-partitioning", "source": str(path), "training": training, "objective": objective})
    g.validate(str(path))        # duplicate ids, edges to unknown nodes, cycles
    if training:
        _connect_training_step(g)
        g.validate(str(path))
    for e in g.edges:            # output size of a node = its largest outgoing tensor
        n = g.node(e.src)
        n.output_bytes = max(n.output_bytes, e.bytes)
    worker = msr_worker(n_acc, n_cpu, acc_memory, host_memory_bytes)
    return Workload(g, Cluster(f"msr:{path.stem}", [worker], simulated=True, description="the workload file's hardware"))


def _connect_training_step(g: OpGraph) -> None:
    """Forward -> loss -> backward as one step, when the file leaves the two passes unconnected."""
    bwd = {n.name for n in g.nodes if n.role == "backward"}
    if any(e.src not in bwd and e.dst in bwd for e in g.edges):
        return
    out_cost = {e.src: (e.cost, e.bytes) for e in g.edges}
    succ, pred = {n.name: 0 for n in g.nodes}, {n.name: 0 for n in g.nodes}
    for e in g.edges:
        succ[e.src] += 1
        pred[e.dst] += 1
    existing = {(e.src, e.dst) for e in g.edges}
    added: list[Edge] = []

    def add(a: str, b: str) -> None:
        if (a, b) not in existing:
            existing.add((a, b))
            cost, nbytes = out_cost.get(a, (0.0, 0.0))
            added.append(Edge(a, b, nbytes, cost))

    twins: dict[str, list[str]] = {}
    for n in g.nodes:
        if n.name in bwd and n.group is not None:
            twins.setdefault(n.group, []).append(n.name)
    for n in g.nodes:
        if n.name not in bwd and n.group is not None:
            for b in twins.get(n.group, []):
                add(n.name, b)
    sinks = [n.name for n in g.nodes if n.name not in bwd and succ[n.name] == 0]
    sources = [n.name for n in g.nodes if n.name in bwd and pred[n.name] == 0]
    for a in sinks:
        for b in sources:
            add(a, b)
    g.edges.extend(added)
    g.meta["added_training_edges"] = len(added)


def load_msr_split(path: str | Path, workload: Workload) -> Placement:
    """A human-expert split: ``fpgas[i]`` -> ``acc:i``, ``cpus[j]`` -> ``cpu:j``. Nodes it leaves out
    follow their colorClass (so a forward-only split covers a training graph); any node still
    unplaced is an error."""
    path = Path(path)
    data = _read_json(path)
    return _malformed(path, "split file")(_parse_split)(path, data, workload)


def _parse_split(path: Path, data: Any, workload: Workload) -> Placement:
    _need(data, ("cpus", "fpgas"), "the top level", path)
    for key in ("cpus", "fpgas"):
        if not isinstance(data[key], list):
            raise WorkloadError(f"{path}: {key!r} is not a list")
    worker, g = workload.worker, workload.graph
    n_acc = sum(d.kind == "accelerator" for d in worker.devices)
    n_cpu = sum(d.kind == "cpu" for d in worker.devices)
    if len(data["fpgas"]) > n_acc or len(data["cpus"]) > n_cpu:
        raise WorkloadError(f"{path}: uses {len(data['fpgas'])} accelerators and {len(data['cpus'])} CPUs, "
                            f"the workload has {n_acc} and {n_cpu}")
    assignment: dict[str, str] = {}
    for kind, prefix in (("fpgas", "acc"), ("cpus", "cpu")):
        for i, machine in enumerate(data[kind]):
            _need(machine, ("nodes",), f"{kind}[{i}]", path)
            if not isinstance(machine["nodes"], list):
                raise WorkloadError(f"{path}: {kind}[{i}].nodes is not a list")
            for nid in machine["nodes"]:
                name = str(nid)
                if name not in g._index:
                    raise WorkloadError(f"{path}: {kind}[{i}] names unknown node {name!r}")
                if name in assignment:
                    raise WorkloadError(f"{path}: node {name!r} is placed twice")
                assignment[name] = f"{prefix}:{i}"
    by_group: dict[str, str] = {}
    for n in g.nodes:
        if n.name in assignment and n.group is not None:
            by_group.setdefault(n.group, assignment[n.name])
    for n in g.nodes:
        if n.name not in assignment and n.group in by_group:
            assignment[n.name] = by_group[n.group]
    missing = [n.name for n in g.nodes if n.name not in assignment]
    if missing:
        raise WorkloadError(f"{path}: {len(missing)} nodes unplaced even through colorClass (first: {missing[0]!r})")
    return Placement(worker.device_names, assignment, {"source": str(path)})


def load_split(path: str | Path, graph: OpGraph, worker: Worker) -> Placement:
    """``load_msr_split`` for a graph and worker already loaded (the manual placer's ``split``)."""
    return load_msr_split(path, Workload(graph, Cluster(worker.name, [worker], simulated=True)))


def model_spec(cfg: Any) -> ModelSpec:
    """``model=workload model.path=FILE``: a profiled cost graph in this format (placement only: there is
    nothing to train), with its own hardware (``hardware=auto``) and optional expert split (``model.split``)."""
    from orchestrator.config import from_node
    from orchestrator.config.model import WorkloadModelConfig
    from orchestrator.errors import ConfigError

    c = from_node(WorkloadModelConfig, cfg, "model")
    if not c.path:
        raise ConfigError("model=workload needs model.path=FILE (a workload in the msr-dnn-partitioning format)")
    host_mem = c.host_memory_bytes
    wl = load_msr_workload(c.path, time_unit=c.time_unit,
                           host_memory_bytes=math.inf if host_mem is None else float(host_mem))
    return ModelSpec(
        name=wl.graph.name, build=None, input_shape=(), num_classes=0, trainable_on_mnist=False,
        graph=wl.graph, hardware=wl.cluster, expert_split=load_msr_split(c.split, wl) if c.split else None,
    )
