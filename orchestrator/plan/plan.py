"""A plan: pipelines, each a chain of stages; a stage is a contiguous range of layers run by ``dp``
replicas, each replica a tensor-parallel group of ``tp`` GPUs of one type on machines of ``node_gpus``
GPUs in one zone. The plan also fixes the micro-batch size and each pipeline's share of the global batch.

Two file formats, read and written here (docs/plans.md):

- ``plan.json``, the project's (``{"format": "orchestrator.plan/1", "mbs", "global_batch", "schedule",
  "pipelines": [{"batch", "stages": [{"layers": [first, last], "replicas": [{"gpu", "tp", "node_gpus",
  "zone", "count"}]}]}]}``);
- ``plan_sailor.json``, Sailor's ``plan_config`` (``mbs``, ``pipeline_list`` with ``num_stages``,
  ``layers_per_stage``, ``dp``, ``tmp_per_stage``), so that a plan can be exchanged with the anchor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.paths import read_json
from orchestrator.schedules import SCHEDULES, OneFOneB, PipelineSchedule

FORMAT = "orchestrator.plan/1"


def plan_schedule(name: str) -> PipelineSchedule:
    """The pipeline schedule a plan file names, from the registry (``orchestrator.schedules.SCHEDULES``)."""
    if name not in SCHEDULES:
        raise ConfigError(f"plan: unknown schedule {name!r} (known: {', '.join(SCHEDULES)})")
    return SCHEDULES[name]()


def replicas_text(n: int, gpu: str, tp: int) -> str:
    """``n`` replicas of a TP group of ``tp`` GPUs, written so that the GPU count cannot be misread:
    ``4 replicas x tp4 = 16 GH-96``; without TP, ``4 A100-40`` (one GPU a replica)."""
    if tp <= 1:
        return f"{n} {gpu}"
    return f"{n} replica{'s' if n != 1 else ''} x tp{tp} = {n * tp} {gpu}"


@dataclass(frozen=True)
class Replica:
    """One data-parallel replica of a stage: a TP group of ``tp`` GPUs of type ``gpu`` on machines of
    ``node_gpus`` GPUs in ``zone``."""

    gpu: str
    tp: int = 1
    node_gpus: int = 1
    zone: str = "us-central1-a"
    machines: int = 1                   # machines the TP group spans (Metis' form: a TP group across machines)


@dataclass(frozen=True)
class Stage:
    layers: tuple[int, ...]
    replicas: tuple[Replica, ...]

    @property
    def dp(self) -> int:
        return len(self.replicas)

    @property
    def gpus(self) -> int:
        return sum(r.tp for r in self.replicas)

    def nodes(self) -> int:
        """Machines the stage occupies (replicas packed onto machines of their size)."""
        used: dict[tuple[str, str, int], int] = {}
        for r in self.replicas:
            key = (r.gpu, r.zone, r.node_gpus)
            used[key] = used.get(key, 0) + r.tp
        return sum(math.ceil(g / n) for (_, _, n), g in used.items())


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]
    batch: int | None = None            # samples of the global batch this pipeline runs (None: an even share)

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.stages)


@dataclass
class Plan:
    pipelines: list[Pipeline]
    mbs: int
    global_batch: int | None = None
    schedule: PipelineSchedule = field(default_factory=OneFOneB)   # the order of each stage's tasks
    meta: dict[str, Any] = field(default_factory=dict)   # extra fields of the file it was read from

    # -- derived ----------------------------------------------------------------------------------
    def batches(self, global_batch: int) -> list[int]:
        """Samples per pipeline: the given shares, else an even split (the remainder to the first)."""
        given = [p.batch for p in self.pipelines]
        if all(b is not None for b in given):
            return [int(b) for b in given]  # type: ignore[arg-type]
        n = len(self.pipelines)
        base, rest = divmod(global_batch, n)
        return [base + (1 if i < rest else 0) for i in range(n)]

    def gpus_used(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for p in self.pipelines:
            for s in p.stages:
                for r in s.replicas:
                    out[(r.gpu, r.zone)] = out.get((r.gpu, r.zone), 0) + r.tp
        return out

    @property
    def gpus(self) -> int:
        return sum(self.gpus_used().values())

    def unused(self, available: dict[tuple[str, str], int]) -> str:
        """The GPUs of ``available`` ((type, zone) -> count) this plan leaves out, per type ('64 V100-16'; '' if none)."""
        used, left = self.gpus_used(), {}
        for (gpu, zone), n in available.items():
            left[gpu] = left.get(gpu, 0) + max(0, n - used.get((gpu, zone), 0))
        return " + ".join(f"{n} {gpu}" for gpu, n in sorted(left.items()) if n > 0)

    def describe(self) -> str:
        parts = []
        for i, p in enumerate(self.pipelines):
            stages = []
            for s in p.stages:
                kinds: dict[tuple[str, int], int] = {}
                for r in s.replicas:
                    kinds[(r.gpu, r.tp)] = kinds.get((r.gpu, r.tp), 0) + 1
                who = " + ".join(replicas_text(n, g, t) for (g, t), n in sorted(kinds.items()))
                stages.append(f"L{s.layers[0]}-{s.layers[-1]}: {who}")
            parts.append(f"p{i}[" + " | ".join(stages) + "]")
        return f"mbs {self.mbs}, " + "; ".join(parts)

    def check(self, num_layers: int) -> None:
        """Every pipeline covers layers 0..L-1 in order, each layer in exactly one stage; a stage has a
        replica; every degree is >= 1. A violation is a one-line ``ConfigError``."""
        if self.mbs < 1:
            raise ConfigError(f"plan: micro-batch size {self.mbs} must be >= 1")
        if not self.pipelines:
            raise ConfigError("plan: no pipeline")
        for i, p in enumerate(self.pipelines):
            seen: dict[int, int] = {}
            for j, s in enumerate(p.stages):
                if not s.replicas:
                    raise ConfigError(f"plan: pipeline {i} stage {j} has no replica")
                if not s.layers:
                    raise ConfigError(f"plan: pipeline {i} stage {j} has no layer")
                if list(s.layers) != list(range(s.layers[0], s.layers[0] + len(s.layers))):
                    raise ConfigError(f"plan: pipeline {i} stage {j}: layers {list(s.layers)[:8]} are not a contiguous range")
                for r in s.replicas:
                    if r.tp < 1 or r.node_gpus < 1 or r.machines < 1:
                        raise ConfigError(f"plan: pipeline {i} stage {j}: TP degree {r.tp}, machine size {r.node_gpus} "
                                          f"and machines {r.machines} must be >= 1")
                    if r.tp > r.node_gpus * r.machines:
                        raise ConfigError(f"plan: pipeline {i} stage {j}: a TP group of {r.tp} {r.gpu} GPUs does not fit on "
                                          f"{r.machines} machine(s) of {r.node_gpus}")
                for layer in s.layers:
                    if layer in seen:
                        raise ConfigError(f"plan: pipeline {i}: layer {layer} is in two stages ({seen[layer]} and {j})")
                    seen[layer] = j
            extra = sorted(set(seen) - set(range(num_layers)))
            if extra:
                raise ConfigError(f"plan: pipeline {i}: layer {extra[0]} does not exist (the model has {num_layers})")
            missing = sorted(set(range(num_layers)) - set(seen))
            if missing:
                raise ConfigError(f"plan: pipeline {i}: layer {missing[0]} is in no stage")
            firsts = [s.layers[0] for s in p.stages]
            if firsts != sorted(firsts):
                raise ConfigError(f"plan: pipeline {i}: stages are not in layer order")
            if p.batch is not None and p.batch < 1:
                raise ConfigError(f"plan: pipeline {i}: batch {p.batch} must be >= 1")

    # -- the project's format ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        pipelines = []
        for p in self.pipelines:
            stages = []
            for s in p.stages:
                groups: list[dict[str, Any]] = []
                for r in s.replicas:
                    row = {"gpu": r.gpu, "tp": r.tp, "node_gpus": r.node_gpus, "zone": r.zone}
                    if r.machines > 1:
                        row["machines"] = r.machines
                    if groups and {k: groups[-1][k] for k in row} == row:
                        groups[-1]["count"] += 1
                    else:
                        groups.append({**row, "count": 1})
                stages.append({"layers": [s.layers[0], s.layers[-1]], "replicas": groups})
            pipelines.append({"batch": p.batch, "stages": stages})
        return {"format": FORMAT, "mbs": self.mbs, "global_batch": self.global_batch, "schedule": self.schedule.name,
                "pipelines": pipelines}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "plan") -> Plan:
        try:
            _keys(doc, ("format", "mbs", "global_batch", "schedule", "pipelines"), "the plan")
            if doc.get("format", FORMAT) != FORMAT:
                raise ValueError(f"format {doc['format']!r} (this version reads {FORMAT!r})")
            pipelines = []
            for i, p in enumerate(doc["pipelines"]):
                stages = []
                _keys(p, ("stages", "batch"), f"pipeline {i}")
                for j, s in enumerate(p["stages"]):
                    _keys(s, ("layers", "replicas"), f"pipeline {i} stage {j}")
                    first, last = (_whole(x, "layers", 0) for x in s["layers"])
                    reps = []
                    for g in s["replicas"]:
                        _keys(g, REPLICA_KEYS, f"pipeline {i} stage {j} replica")
                        r = Replica(str(g["gpu"]), _whole(g.get("tp", 1), "tp"),
                                    _whole(g.get("node_gpus", g.get("tp", 1)), "node_gpus"),
                                    str(g.get("zone", "us-central1-a")), _whole(g.get("machines", 1), "machines"))
                        reps.extend([r] * _whole(g.get("count", 1), "count"))
                    stages.append(Stage(tuple(range(first, last + 1)), tuple(reps)))
                pipelines.append(Pipeline(tuple(stages), None if p.get("batch") is None else _whole(p["batch"], "batch")))
            gb = doc.get("global_batch")
            return cls(pipelines, _whole(doc["mbs"], "mbs"), None if gb is None else _whole(gb, "global_batch"),
                       plan_schedule(str(doc.get("schedule", OneFOneB.name))))
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkloadError(f"{where}: not a plan in the {FORMAT} format ({type(exc).__name__}: {exc})"[:500]) from None

    # -- Sailor's format --------------------------------------------------------------------------
    def to_sailor(self) -> dict[str, Any]:
        pipelines = []
        for p in self.pipelines:
            entry: dict[str, Any] = {
                "num_stages": len(p.stages),
                "layers_per_stage": [list(s.layers) for s in p.stages],
                "dp": [s.dp for s in p.stages],
                "tmp_per_stage": [[[[[r.gpu, r.node_gpus, r.zone]] * r.machines, r.tp] for r in s.replicas]
                                  for s in p.stages],
            }
            if p.batch is not None:                  # an extra key (Sailor's code reads the keys it knows)
                entry["batch"] = p.batch
            pipelines.append(entry)
        out: dict[str, Any] = {"mbs": self.mbs, "pipeline_list": pipelines}
        if self.global_batch is not None:
            out["gbs"] = self.global_batch
        return out

    @classmethod
    def from_sailor(cls, doc: dict[str, Any], where: str = "plan") -> Plan:
        try:
            pipelines = []
            for i, p in enumerate(doc["pipeline_list"]):
                stages = []
                layers = p["layers_per_stage"]
                if len(layers) != int(p.get("num_stages", len(layers))):
                    raise WorkloadError(f"{where}: pipeline {i} has num_stages {p['num_stages']} but {len(layers)} layer lists")
                for j, (lay, tmps) in enumerate(zip(layers, p["tmp_per_stage"], strict=True)):
                    reps = []
                    for vms, tp in tmps:
                        if not vms or len({tuple(v) for v in vms}) != 1:
                            raise WorkloadError(f"{where}: pipeline {i} stage {j}: a TP group over machines of different "
                                                f"types or zones ({vms!r:.80}) is not supported")
                        gpu, node_gpus, zone = vms[0]
                        reps.append(Replica(str(gpu), int(tp), int(node_gpus), str(zone), len(vms)))
                    dp = p.get("dp", [len(reps)] * len(layers))[j]
                    if int(dp) != len(reps):
                        raise WorkloadError(f"{where}: pipeline {i} stage {j}: dp {dp} but {len(reps)} replicas listed")
                    stages.append(Stage(tuple(int(x) for x in lay), tuple(reps)))
                pipelines.append(Pipeline(tuple(stages), None if p.get("batch") is None else int(p["batch"])))
            meta = {k: v for k, v in doc.items() if k not in ("pipeline_list", "mbs")}
            gbs = doc.get("gbs")
            return cls(pipelines, int(doc["mbs"]), None if gbs is None else int(gbs), OneFOneB(), meta)
        except WorkloadError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkloadError(f"{where}: not a plan in Sailor's plan_config format ({type(exc).__name__}: {exc})"[:500]) from None

    # -- files ------------------------------------------------------------------------------------
    @classmethod
    def read(cls, path: str | Path) -> Plan:
        """A plan file in either format (told apart by its keys)."""
        p = Path(path)
        doc = read_json(p, f"planner.path={str(path)!r} does not exist", ConfigError)
        if not isinstance(doc, dict):
            raise WorkloadError(f"{p}: a plan file holds a JSON object")
        if "pipeline_list" in doc:
            return cls.from_sailor(doc, str(p))
        if "pipelines" in doc:
            return cls.from_dict(doc, str(p))
        raise WorkloadError(f"{p}: neither a plan.json ('pipelines') nor Sailor's plan_config ('pipeline_list')")

    def write(self, directory: str | Path) -> tuple[Path, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        ours, theirs = d / "plan.json", d / "plan_sailor.json"
        ours.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        theirs.write_text(json.dumps(self.to_sailor()) + "\n")
        return ours, theirs


REPLICA_KEYS = ("gpu", "tp", "node_gpus", "zone", "machines", "count")


def _whole(value: Any, key: str, low: int = 1) -> int:
    """A whole number of a plan file (2.5 GPUs was read as 2, "8" as 8)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key}={value!r} must be a whole number >= {low}")
    return value


def _keys(node: Any, known: tuple[str, ...], what: str) -> None:
    if not isinstance(node, dict):
        raise TypeError(f"{what} is {type(node).__name__}, not a mapping")
    unknown = sorted(str(k) for k in node if k not in known)
    if unknown:
        raise ValueError(f"{what}: unknown key {unknown[0]!r} (it takes {', '.join(known)})")
