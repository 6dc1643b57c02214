"""Property-based fuzzing of everything that reads user input: the workload importer, the split-file
reader, the IDX reader, the profile and cluster directories (Sailor's layout) and the config validation. Each gets the Hypothesis profile's number of
generated malformed (or valid) inputs (CI's: 1,000; a contributor's: 50; see tests/conftest.py),
called in-process; the only acceptable outcomes are a result or a one-line ``UserError`` naming the
file or key. Any other exception is a traceback a user would see, and fails the test."""

from __future__ import annotations

import gzip
import json
import math
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.data import IMAGE_MAGIC, LABEL_MAGIC, parse_idx, read_idx
from orchestrator.errors import UserError
from orchestrator.execution.training import TrainSettings
from orchestrator.hardware.workers import worker_layout
from orchestrator.placement.graph.workload import load_msr_split, load_msr_workload

from tests.fakes import strategy

FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)  # max_examples: the profile's
TMP = Path(tempfile.mkdtemp(prefix="orchestrator-fuzz-"))

# any JSON value, and values of the kinds config keys take (plus wrong ones)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from(["inf", "-1", "nan", "1e400", "lr/W", "lr", "abc", ""]))
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                            st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                           max_leaves=12)


def _valid_workload() -> dict:
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": 2.0, "fpgaLatency": 1.0, "size": 10, "colorClass": i % 2,
              "isBackwardNode": i >= 2} for i in range(4)]
    edges = [{"sourceId": 0, "destId": 1, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5, "size": 4}]
    return {"maxSizePerFPGA": 1000, "maxFPGAs": 2, "maxCPUs": 1, "nodes": nodes, "edges": edges}


def _mutate(doc, draw):
    """Replace, drop or retype one field somewhere in a valid document."""
    if isinstance(doc, dict) and doc:
        key = draw(st.sampled_from(sorted(doc, key=str)))
        op = draw(st.integers(0, 3))
        out = dict(doc)
        if op == 0:
            del out[key]
        elif op == 1:
            out[key] = draw(json_values)
        else:
            out[key] = _mutate(doc[key], draw)
        return out
    if isinstance(doc, list) and doc:
        i = draw(st.integers(0, len(doc) - 1))
        out = list(doc)
        if draw(st.booleans()):
            out[i] = _mutate(doc[i], draw)
        else:
            out.append(draw(json_values))
        return out
    return draw(json_values)


@st.composite
def workload_files(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200))                   # binary junk
    if kind == 1:
        return json.dumps(draw(json_values)).encode()          # any JSON
    doc = _valid_workload()
    for _ in range(draw(st.integers(1, 3))):
        doc = _mutate(doc, draw)
    text = json.dumps(doc).encode()
    return text[: draw(st.integers(0, len(text)))] if kind == 2 else text  # truncated, or well-formed JSON


def _write(data: bytes, name: str) -> Path:
    path = TMP / name
    path.write_bytes(data)
    return path


def _user_error_or_result(fn, *args):
    try:
        return fn(*args)
    except UserError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, repr(msg)
        return None


@FUZZ
@given(workload_files())
def test_workload_importer_never_raises_anything_but_a_user_error(data):
    path = _write(data, "workload.json")
    wl = _user_error_or_result(load_msr_workload, path)
    if wl is not None:
        assert wl.graph.nodes and wl.worker.devices


def _small_workload():
    return load_msr_workload(_write(json.dumps(_valid_workload()).encode(), "base.json"))


@FUZZ
@given(st.data())
def test_split_reader_never_raises_anything_but_a_user_error(data):
    valid = {"fpgas": [{"nodes": [0, 2]}, {"nodes": [1]}], "cpus": [{"nodes": [3]}]}
    kind = data.draw(st.integers(0, 4))
    if kind == 0:
        raw = data.draw(st.binary(max_size=100))
    elif kind == 1:
        raw = json.dumps(data.draw(json_values)).encode()
    else:
        doc = valid
        for _ in range(data.draw(st.integers(1, 3))):
            doc = _mutate(doc, data.draw)
        raw = json.dumps(doc).encode()
    _user_error_or_result(load_msr_split, _write(raw, "split.json"), WORKLOAD)


@st.composite
def idx_bytes(draw) -> tuple[bytes, int]:
    magic = draw(st.sampled_from([IMAGE_MAGIC, LABEL_MAGIC]))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(max_size=64)), magic
    header_magic = draw(st.one_of(st.just(magic), st.integers(0, 2**32 - 1)))
    ndim = header_magic & 0xFF
    dims = draw(st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 30), min_size=min(ndim, 4), max_size=min(ndim, 4)))
    head = struct.pack(">I", header_magic) + struct.pack(">" + "I" * len(dims), *dims)
    body = draw(st.binary(max_size=3000))
    if kind == 1:  # a consistent header and body (well-formed)
        dims = [draw(st.integers(0, 3))] + ([28, 28] if magic == IMAGE_MAGIC else [])
        head = struct.pack(">I", magic) + struct.pack(">" + "I" * len(dims), *dims)
        body = bytes(draw(st.integers(0, 255)) for _ in range(math.prod(dims)))
    data = head + body
    if kind == 2:
        data = data[: draw(st.integers(0, len(data)))]           # truncated anywhere, header included
    return data, magic


@FUZZ
@given(idx_bytes(), st.booleans())
def test_idx_reader_never_raises_anything_but_a_user_error(case, gz):
    data, magic = case
    if gz:  # through a file, sometimes a corrupted gzip stream
        blob = gzip.compress(data)
        blob = blob[: len(blob) // 2] if len(data) % 3 == 0 else blob
        path = _write(blob, "t10k-images-idx3-ubyte.gz")
        out = _user_error_or_result(read_idx, path.with_suffix(""), magic)
    else:
        out = _user_error_or_result(parse_idx, data, magic, "fuzz")
    if out is not None:
        assert isinstance(out, np.ndarray)


config_values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=5), scalars, max_size=3))


@FUZZ
@given(st.dictionaries(st.sampled_from(["batch_size", "lr", "target_accuracy", "stop", "eval_every", "budget_updates",
                                        "budget_s", "seed", "eval_samples"]), config_values),
       st.dictionaries(st.sampled_from(["name", "runtime", "staleness", "lr_scaling", "max_staleness", "base_time_s",
                                        "timeout_s", "dynamic_staleness", "hostfile"]),
                       config_values),
       st.dictionaries(st.sampled_from(["workers", "worker_speeds", "speed_pattern", "stragglers"]),
                       st.one_of(config_values, st.integers(1, 8), st.lists(st.floats(0.1, 4), min_size=1, max_size=6))))
def test_config_validation_never_raises_anything_but_a_user_error(train, sync, hardware):
    _user_error_or_result(TrainSettings.from_cfg, train)
    for name in ("delay", "async", "allreduce"):
        opts = _user_error_or_result(lambda s, h, n=name: strategy({**s, "name": n}).options({"hardware": h}),
                                     sync, hardware)
        if opts is not None:
            assert opts.workers == len(opts.speeds) >= 1 and all(s > 0 for s in opts.speeds)
            assert opts.staleness >= 0
    _user_error_or_result(worker_layout, hardware, True)


WORKLOAD = _small_workload()


def _sailor_layout() -> dict[str, object]:
    """A small directory laid out like ../shared/workloads/sailor: one GPU type, a 3-layer model at TP 1 and 2."""
    fit = [[0.8, 16.4, 33.0], 2.5e11]
    per_tp = {str(tp): {str(i): [0.01 * (i + 1), 0.02, 0.001] for i in range(3)} for tp in (1, 2)}
    sizes = {str(tp): {str(i): {"params_floats": 1e6, "act_output_floats": 1e4, "act_mem_floats": 2e4} for i in range(3)}
             for tp in (1, 2)}
    return {"profiles_tmp.json": {"M": {"A100-40": {"1": per_tp, "2": per_tp}}},
            "llm_info.json": {"M": sizes},
            "cluster/basic_cluster_config.json": {"zone": "z", "A100-40": {"gpus_per_node": 4, "mem_per_gpu": 4e10}},
            "cluster/training_config_m.json": {"model": "M", "global_batch_size": 8, "hidden_size": 16, "sequence_length": 4},
            "network/intra_node_bandwidths.json": {"A100-40": {"2": fit, "4": fit}},
            "network/multizone_bandwidths_het.json": {"z": {"A100-40": {"1": {"z": {"A100-40": {"1": fit}}}}}},
            "network/communication_cost.json": {"z": {"z": 0.0}}}


def _layout_dir(name: str = "", raw: bytes = b"") -> Path:
    """The small layout in a new directory, with the file ``name`` (if given) holding ``raw`` instead."""
    root = Path(tempfile.mkdtemp(dir=TMP))
    for rel, doc in _sailor_layout().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(raw if rel == name else json.dumps(doc).encode())
    return root


@FUZZ
@given(st.data())
def test_profile_and_cluster_directories_never_raise_anything_but_a_user_error(data):
    """``model=llm model.data=DIR`` and ``hardware.data=DIR``: one file of the layout mutated (retyped, dropped or
    replaced anywhere, up to three times), or not JSON at all."""
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan.profile import LayeredProfile

    layout = _sailor_layout()
    name = data.draw(st.sampled_from(sorted(layout)))
    if data.draw(st.integers(0, 5)) == 0:
        raw = json.dumps(data.draw(json_values)).encode()
    else:
        doc = layout[name]
        for _ in range(data.draw(st.integers(1, 3))):
            doc = _mutate(doc, data.draw)
        raw = json.dumps(doc).encode()
    root = _layout_dir(name, raw)
    _user_error_or_result(LayeredProfile.from_directory, root, "M")
    _user_error_or_result(GpuCluster.from_directory, root)


def test_the_fuzzed_layout_is_valid_unmutated():
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan.profile import LayeredProfile

    root = _layout_dir()
    prof = LayeredProfile.from_directory(root, "M")
    assert prof.num_layers == 3 and prof.global_batch == 8 and prof.tp_degrees("A100-40", 2) == [1, 2]
    assert "A100-40" in GpuCluster.from_directory(root).types


def test_a_wrong_training_config_or_a_list_for_a_profile_is_one_line_naming_the_file():
    import pytest

    from orchestrator.errors import WorkloadError
    from orchestrator.plan.profile import LayeredProfile

    for rel, doc, words in (("cluster/training_config_m.json", {"model": "M", "global_batch_size": -1},
                             "training_config_m.json: global_batch_size=-1 must be a whole number >= 1"),
                            ("llm_info.json", [], "llm_info.json: expected an object at the top, got a list"),
                            ("profiles_tmp.json", {"M": []}, "profiles_tmp.json: M needs a mapping")):
        root = _layout_dir(rel, json.dumps(doc).encode())
        with pytest.raises(WorkloadError, match=words.replace(".", r"\.")):
            LayeredProfile.from_directory(root, "M")


CLUSTER_FILES = {  # (reader, a valid file as in the docs)
    "plan cluster (hardware.file)": ("orchestrator.hardware.gpu_cluster:GpuCluster.from_yaml", {
        "name": "lab", "zone": "z", "node_types": {"A100-40": {"gpus_per_node": 4, "memory_GB": 40, "usd_per_gpu_hour": 3.67},
                                                   "V100-16": {"gpus_per_node": 4, "memory_GB": 16}},
        "gpus": {"A100-40": 32, "V100-16": {"z": 64, "y": 32}},
        "links": {"inter": {"bandwidth_GBps": 3, "latency_us": 20}, "intra": {"A100-40": {"fit": [0.83, 15.6, 31.2], "max_GBps": 243}},
                  "intra_default": {"bandwidth_GBps": 100}},
        "egress_usd_per_gb": {"z": {"y": 0.02}}}),
    "placement cluster (hardware.path)": ("orchestrator.hardware.presets:load_cluster_file", {
        "name": "c", "network": {"bandwidth_GBps": 12.5, "latency_us": 5},
        "hosts": [{"name": "h0", "cpu": "Xeon Platinum 8380 (datasheet)", "cpus": 1, "gpu": "V100 (datasheet)", "gpus": 4,
                   "nvlink": True, "pcie_switch_per": 0},
                  {"name": "h1", "cpu": "Xeon Platinum 8380 (datasheet)", "gpu": "K80 (datasheet)", "gpus": 2}]}),
}


@FUZZ
@given(st.sampled_from(sorted(CLUSTER_FILES)), st.data())
def test_cluster_files_never_raise_anything_but_a_user_error(kind, data):
    import importlib

    import yaml

    where, doc = CLUSTER_FILES[kind]
    module, attr = where.split(":")
    reader = importlib.import_module(module)
    for part in attr.split("."):
        reader = getattr(reader, part)
    if data.draw(st.integers(0, 3)) == 0:      # the valid file reads
        assert reader(_write(yaml.safe_dump(doc).encode(), "cluster.yaml")) is not None
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data.draw)
    _user_error_or_result(reader, _write(yaml.safe_dump(doc).encode(), "cluster.yaml"))
