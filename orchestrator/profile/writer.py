"""Writing a profile in the layout of ``shared/workloads/sailor`` (its README: the formats), so that
``model=llm model.data=DIR`` and ``hardware=gpu_cluster hardware.data=DIR`` read it as they read Sailor's:

- ``profiles_tmp.json`` ``{model: {device type: {mbs: {tp: {layer: [fwd_s, bwd_s, update_s]}}}}}`` (medians);
- ``llm_info.json`` ``{model: {tp: {layer: {params_floats, act_output_floats, act_input_floats, act_mem_floats,
  ..._bytes}}}}``;
- ``cluster/training_config_<model>.json`` (model, hidden size, sequence, layers, global batch, optimizer);
- ``cluster/basic_cluster_config.json`` the profiled device type (devices per node, memory per device);
- ``network/intra_node_bandwidths.json``, ``network/multizone_bandwidths_het.json``: the links, measured by
  ``python -m orchestrator.profile links`` when it has written them, else the bandwidths stated on the command line;
- ``profile_stats.json`` (read by no planner): per entry the median, quartiles, min and max of the repeats,
  and the settings of the run.

Existing files are merged: a second model or device type profiled into the same directory is added beside
the first, and a model profiled again keeps the ``(mbs, tp)`` entries it does not measure again; a model of
another shape under the same name is refused, as are malformed files, before anything is measured.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, UserError
from orchestrator.hardware.gpu_cluster import DEFAULT_ZONE
from orchestrator.paths import read_json
from orchestrator.profile.layers import Profile

MEASURED_LINKS = "links_profile.json"         # under network/: written by the link profiler
BASIC = "cluster/basic_cluster_config.json"
NOT_DEVICES = ("zone",)                       # keys of the basic cluster config that name no device type
NETWORK = ("network/intra_node_bandwidths.json", "network/multizone_bandwidths_het.json", f"network/{MEASURED_LINKS}")
MODEL_FILES = ("profiles_tmp.json", "llm_info.json", "profile_stats.json")
SHAPE = ("type", "hidden_size", "sequence_length", "vocab_size", "heads")   # of the training config
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def load(path: Path) -> dict[str, Any]:
    return read_json(path) if path.exists() else {}


def save(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def check_writable(out: Path) -> None:
    """A one-line error before any measuring when ``out`` cannot be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".probe{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out={str(out)!r} is not a writable directory ({exc.strerror or exc})") from None


def check_name(model: str) -> None:
    """A model name is a file name (``training_config_<name>.json``): letters, digits, ``-``, ``_``, ``.``."""
    if not NAME.fullmatch(model):
        raise ConfigError(f"--name={model!r}: must be a plain name of letters, digits, '-', '_' and '.', not starting "
                          "with '.'")


def check_device_type(device: str) -> None:
    if not device.strip() or device in NOT_DEVICES:
        raise ConfigError(f"--device-type={device!r}: not a device type name (the cluster file's "
                          f"{', '.join(repr(k) for k in NOT_DEVICES)} key is no device)")


def preflight(out: Path, files: tuple[str, ...], model: str | None = None) -> None:
    """The files of ``out`` that a profile will merge into, read before any measuring: a malformed or truncated
    one (or one whose model entry is no mapping) is a one-line error naming it."""
    for rel in files:
        path = out / rel
        if not path.exists():
            continue
        try:
            doc = read_json(path, top=dict)
        except UserError as exc:
            raise ConfigError(f"{exc}; it is already in --out: repair or remove it (nothing was measured)") from None
        entry = doc.get(model) if rel in MODEL_FILES else None
        if entry is not None and not (isinstance(entry, dict) and all(isinstance(v, dict) for v in entry.values())):
            raise ConfigError(f"{path}: the entry of {model!r} is not a mapping of mappings; repair or remove it "
                              "(nothing was measured)")


def layer_counts(out: Path, model: str) -> set[int]:
    """The layer counts that ``out``'s files give ``model`` (empty where it holds none)."""
    counts = {len(rows) for rows in load(out / "llm_info.json").get(model, {}).values() if isinstance(rows, dict)}
    for per_mbs in load(out / "profiles_tmp.json").get(model, {}).values():
        for per_tp in per_mbs.values() if isinstance(per_mbs, dict) else ():
            counts |= {len(rows) for rows in per_tp.values() if isinstance(rows, dict)}
    return counts


def check_shape(out: Path, model: str, layers: int, training: dict[str, Any]) -> None:
    """Refuse, before measuring, a profile of ``model`` whose layers or shape differ from the one ``out`` holds
    under that name (the files would mix the two: one layer count per device type, the other in llm_info)."""
    counts = layer_counts(out, model)
    old = load(out / "cluster" / f"training_config_{model}.json")
    counts |= {int(old["num_all_layers"])} if isinstance(old.get("num_all_layers"), int) else set()
    diff = [f"{k} {old[k]} there, {training[k]} here" for k in SHAPE if k in old and k in training and old[k] != training[k]]
    if counts - {layers} or diff:
        have = "/".join(map(str, sorted(counts))) or "?"
        raise ConfigError(f"--name={model!r}: {out} already holds {model} with {have} layers, and this profile has {layers}"
                          f"{' (' + ', '.join(diff) + ')' if diff else ''}: profile it under another --name or into "
                          "another --out")


def merge_note(out: Path, model: str, device: str, mbs: list[int], tps: list[int]) -> str:
    """What a profile of ``(mbs, tp)`` entries replaces and keeps of the model's entries on ``device``."""
    old = load(out / "profiles_tmp.json").get(model, {}).get(device, {})
    have = {(str(m), str(t)) for m, per_tp in old.items() if isinstance(per_tp, dict) for t in per_tp}
    new = {(str(m), str(t)) for m in mbs for t in tps}

    def names(pairs: set[tuple[str, str]]) -> str:
        order = sorted(pairs, key=lambda p: tuple(int(x) if x.isdigit() else -1 for x in p))
        return ", ".join(f"mbs {m} tp {t}" for m, t in order)

    parts = ([f"replaced {names(have & new)}"] if have & new else []) + ([f"kept {names(have - new)}"] if have - new else [])
    return f"{model} on {device} in profiles_tmp.json: {'; '.join(parts)}" if parts else ""


def times_doc(prof: Profile, statistic: str) -> dict[str, dict[str, dict[str, list[float]]]]:
    return {str(mbs): {str(tp): {str(i): [r.fwd.value(statistic), r.bwd.value(statistic),
                                          prof.update[tp].value(statistic)]
                                 for i, r in enumerate(rows)} for tp, rows in per_tp.items()}
            for mbs, per_tp in prof.times.items()}


def sizes_doc(prof: Profile) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for tp, rows in prof.sizes.items():
        out[str(tp)] = {}
        for i, row in enumerate(rows):
            full = dict(row)
            full.update({k.replace("_floats", "_bytes"): 4.0 * v for k, v in row.items()})
            out[str(tp)][str(i)] = full
    return out


def stats_doc(prof: Profile) -> dict[str, Any]:
    """Every entry's median, quartiles, min, max (and the dispatch taken off, the TP all-reduce put in)."""
    entries: dict[str, Any] = {}
    for mbs, per_tp in prof.times.items():
        for tp, rows in per_tp.items():
            entries.setdefault(str(mbs), {})[str(tp)] = {
                str(i): {"fwd": r.fwd.as_dict(), "bwd": r.bwd.as_dict(), "clamped": r.clamped,
                         **({"tp_allreduce": r.allreduce.as_dict()} if r.allreduce else {}),
                         **({"dispatch": r.dispatch.as_dict()} if r.dispatch else {})}
                for i, r in enumerate(rows)}
    return {"layers": prof.names, "entries": entries, "update": {str(tp): s.as_dict() for tp, s in prof.update.items()}}


def constant_fit(gbps: float) -> list[Any]:
    """A constant bandwidth in the fitted form: ``[[0, 0, GB/s], max bytes/s]``."""
    return [[0.0, 0.0, float(gbps)], float(gbps) * 1e9]


def write_links(out: Path, device: str, per_node: int, intra: list[Any] | None, inter: list[Any] | None,
                zone: str = DEFAULT_ZONE) -> None:
    """The device type's links in the network files: ``intra`` inside a machine (every group size up to
    ``per_node``), ``inter`` between two machines (every pair of GPU counts); None leaves one as it is."""
    counts = [g for g in (1, 2, 4, 8, 16, 32) if g <= max(per_node, 1)]
    if intra is not None:
        doc = load(out / "network" / "intra_node_bandwidths.json")
        doc[device] = {str(g): intra for g in counts if g > 1} or {"2": intra}
        save(out / "network" / "intra_node_bandwidths.json", doc)
    if inter is not None:
        doc = load(out / "network" / "multizone_bandwidths_het.json")
        src = doc.setdefault(zone, {}).setdefault(device, {})
        for g in counts:
            src.setdefault(str(g), {}).setdefault(zone, {})[device] = {str(h): inter for h in counts}
        save(out / "network" / "multizone_bandwidths_het.json", doc)


def write_device(out: Path, device: str, per_node: int, memory_bytes: float, zone: str = DEFAULT_ZONE,
                 kind: str = "gpu") -> None:
    """The device type's entry; ``kind`` ``cpu`` for a type timed on CPUs (planning then charges it no GPU
    framework memory), not written for a GPU (Sailor's layout has no such key)."""
    doc = load(out / "cluster" / "basic_cluster_config.json")
    doc[device] = {"gpus_per_node": int(per_node), "mem_per_gpu": int(memory_bytes)} | ({"kind": kind} if kind != "gpu" else {})
    doc.setdefault("zone", zone)
    save(out / "cluster" / "basic_cluster_config.json", doc)


def write_profile(out: Path, model: str, device: str, prof: Profile, training: dict[str, Any],
                  settings: dict[str, Any]) -> list[Path]:
    """The model's entries into the directory's files, merged per ``(mbs, tp)`` (an entry measured again is
    replaced, the others kept; ``check_shape`` has made sure they are of the same model); the paths written."""
    times = load(out / "profiles_tmp.json")
    entries = times.setdefault(model, {}).setdefault(device, {})
    for mbs, per_tp in times_doc(prof, str(settings["statistic"])).items():
        entries.setdefault(mbs, {}).update(per_tp)
    info = load(out / "llm_info.json")
    info.setdefault(model, {}).update(sizes_doc(prof))
    stats = load(out / "profile_stats.json")
    kept = stats.setdefault(model, {}).setdefault(device, {})
    new = stats_doc(prof)
    for mbs, per_tp in new["entries"].items():
        kept.setdefault("entries", {}).setdefault(mbs, {}).update(per_tp)
    kept.setdefault("update", {}).update(new["update"])
    kept.update(layers=new["layers"], settings=settings)     # the settings of the last run
    paths = [out / "profiles_tmp.json", out / "llm_info.json", out / "profile_stats.json",
             out / "cluster" / f"training_config_{model}.json"]
    for path, doc in zip(paths, (times, info, stats, training), strict=True):
        save(path, doc)
    return paths


def has_measured_links(out: Path, device: str) -> dict[str, bool]:
    """Which of the device's links (``intra``, ``inter``) a link profile measured into this directory."""
    doc = load(out / "network" / MEASURED_LINKS)
    got = doc.get(device, {}) if isinstance(doc, dict) else {}
    return {"intra": "intra" in got, "inter": "inter" in got}
