"""The profilers (``python -m orchestrator.profile layers|links``): a tiny GPT profiled in this process and
read back by the planner's reader, TP shards measured (not divided), bad input as one line and exit 2, the
link fit, and (slow) README's profile -> plan commands as written and the link profiler on MPI ranks."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from conftest import run_inprocess, store_runs

ROOT = Path(__file__).resolve().parents[1]
TINY = ("layers", "--model", "gpt", "--name", "tiny", "--layers", "2", "--hidden", "32", "--heads", "2", "--sequence",
        "16", "--vocab", "64", "--mbs", "1,2", "--tp", "1,2", "--warmup", "1", "--repeats", "2", "--progress", "false")


def profile(cwd: Path, *args: str):
    return run_inprocess(cwd, *args, module="orchestrator.profile")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("profile")
    out = profile(cwd, *TINY, "--out", "prof")
    assert out.returncode == 0, out.stderr[-2000:]
    return cwd, out


def test_a_tiny_gpt_profile_reads_back_as_a_layered_profile(tiny):
    from orchestrator.plan import LayeredProfile

    cwd, out = tiny
    prof = LayeredProfile.from_directory(cwd / "prof", "tiny")
    assert prof.num_layers == 4 and prof.gpu_types == ["CPU"]              # embedding, 2 blocks, head
    assert prof.micro_batches("CPU") == [1, 2] and prof.tp_degrees("CPU", 1) == [1, 2]
    for mbs in (1, 2):
        for tp in (1, 2):
            rows = prof.layer_times("CPU", mbs, tp)
            assert all(x > 0 and math.isfinite(x) for row in rows for x in row), rows
            assert len({row[2] for row in rows}) == 1          # the device's whole update on every layer (Sailor's rule)
    assert prof.hidden == 32 and prof.sequence == 16 and prof.global_batch == 32 and prof.optimizer == "adam"
    assert "profiled tiny on CPU" in out.stdout and "measured" in out.stdout


def test_tp_2_holds_half_a_block_and_its_own_vocabulary_share(tiny):
    from orchestrator.plan import LayeredProfile

    prof = LayeredProfile.from_directory(tiny[0] / "prof", "tiny")
    one, two = prof.layer_sizes(1), prof.layer_sizes(2)
    h = 32
    block = 12 * h * h + 13 * h                  # QKV, output, MLP weights and biases, two LayerNorms
    assert one.params[1] == block
    replicated = 6 * h                           # LayerNorms and the biases added after an all-reduce
    assert two.params[1] == (block - replicated) / 2 + replicated
    assert two.params[1] / one.params[1] == pytest.approx(0.5, rel=0.05)
    assert two.params[0] == 64 * h / 2 + 16 * h  # vocabulary rows split, positions replicated
    assert one.act_output[1] == 16 * h           # per sample: sequence x hidden
    assert 0 < two.act_mem[1] < one.act_mem[1]   # a shard keeps less


def test_the_spread_of_every_entry_is_kept_beside_the_median(tiny):
    cwd, _ = tiny
    stats = json.loads((cwd / "prof" / "profile_stats.json").read_text())["tiny"]["CPU"]
    times = json.loads((cwd / "prof" / "profiles_tmp.json").read_text())["tiny"]["CPU"]
    entry = stats["entries"]["2"]["2"]["1"]
    assert set(entry["fwd"]) >= {"median_s", "q1_s", "q3_s", "min_s", "max_s", "repeats"}
    assert entry["fwd"]["median_s"] == times["2"]["2"]["1"][0]
    assert "tp_allreduce" in entry and "tp_allreduce" not in stats["entries"]["2"]["1"]["1"]
    assert stats["settings"]["repeats"] == 2 and stats["settings"]["statistic"] == "median"


def test_the_profiled_device_is_a_cluster_the_planner_accepts(tiny):
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan import LayeredProfile
    from orchestrator.planning.phase import check_covered

    cwd, _ = tiny
    cluster = GpuCluster.from_directory(cwd / "prof").with_gpus({"CPU": 4})
    assert cluster.gpu_type("CPU").gpus_per_node == 2
    assert cluster.topology.intra_link("CPU", 2).time(1e9) == pytest.approx(0.1)     # stated: 10 GB/s
    check_covered(LayeredProfile.from_directory(cwd / "prof", "tiny"), cluster)


def test_a_cpu_profile_plans_on_cpu_devices_without_gpu_framework_memory(tiny):
    """The profiled type is a CPU: the project simulator charges it no CUDA context (3.76 GB a GPU), the summary
    counts CPU devices, and planner.fill, with nothing to derive, says so."""
    from orchestrator.hardware.gpu_cluster import GpuCluster
    from orchestrator.plan import LayeredProfile
    from orchestrator.planning.simulator import Calibration, ProjectSimulator

    cwd, _ = tiny
    assert json.loads((cwd / "prof/cluster/basic_cluster_config.json").read_text())["CPU"]["kind"] == "cpu"
    cluster = GpuCluster.from_directory(cwd / "prof").with_gpus({"CPU": 4})
    prof = LayeredProfile.from_directory(cwd / "prof", "tiny")
    need, _ = ProjectSimulator().stage_memory(prof, 1, "CPU", 1, 1, 0, 1, cluster)
    assert need(0, 0) == prof.transient_bytes(1, 1) < Calibration().framework_bytes
    out = run_inprocess(cwd, "+planner=joint", "model=llm", "model.name=tiny", "model.data=prof", "hardware=gpu_cluster",
                        "hardware.data=prof", "hardware.gpus={CPU: 2}", "planner.fill=true", "tracking.uri=sqlite:///fill.db")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "note: planner.fill=true derived nothing" in out.stdout
    assert re.search(r"samples/s on [12] CPU devices?", out.stdout), out.stdout


def test_the_profile_is_an_mlflow_run_with_its_files(tiny):
    cwd, _ = tiny
    run = next(r for r in store_runs(cwd) if r.data.tags.get("profile.kind") == "layers")
    assert run.info.status == "FINISHED" and run.data.tags["evaluator"] == "measured"
    assert run.data.params["profile.hidden"] == "32" and run.data.params["profile.tp"] == "[1, 2]"
    from mlflow.tracking import MlflowClient

    files = {f.path for f in MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").list_artifacts(run.info.run_id, "profile")}
    assert {"profile/profiles_tmp.json", "profile/llm_info.json", "profile/cluster"} <= files
    written = run.data.tags["profile.files"].split(", ")   # probe F: the device and link files were missing
    assert {"cluster/basic_cluster_config.json", "network/intra_node_bandwidths.json"} <= set(written), written


def test_a_functional_model_is_cut_where_every_path_passes():
    """A residual block is one profile layer: the tensors its skip connection jumps over are not cuts."""
    from profile_models import tiny_resnet

    from orchestrator.profile.models import cut_points

    ops, cuts = cut_points(tiny_resnet()[0])
    assert [ops[c].name for c in cuts] == ["stem", "b0_add", "b1_add", "pool", "logits"]


@pytest.mark.slow
def test_a_users_keras_model_is_profiled_and_planned(tmp_path):
    """--model keras --factory: a functional model's segments measured, then planned from the files."""
    out = profile(tmp_path, "layers", "--model", "keras", "--factory", "profile_models:tiny_resnet", "--mbs", "2",
                  "--warmup", "0", "--repeats", "1", "--progress", "false", "--out", "prof")
    assert out.returncode == 0, out.stderr[-2000:]
    from orchestrator.plan import LayeredProfile

    prof = LayeredProfile.from_directory(tmp_path / "prof", "tinyres")
    assert prof.num_layers == 5
    assert prof.layer_sizes(1).params[1] == 2 * (3 * 3 * 8 * 8 + 8)          # the block: both its convolutions
    stats = json.loads((tmp_path / "prof" / "profile_stats.json").read_text())["tinyres"]["CPU"]
    assert stats["layers"] == ["0:stem", "1:b0_c1..b0_add", "2:b1_c1..b1_add", "3:pool", "4:logits"]
    plan = run_inprocess(tmp_path, "+planner=joint", "model=llm", "model.name=tinyres", "model.data=prof",
                         "hardware=gpu_cluster", "hardware.data=prof", "hardware.gpus={CPU: 2}", "progress=false")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "plan.samples_per_s" in plan.stdout


def test_a_second_model_is_merged_beside_the_first(tiny, tmp_path):   # the CNN on its default TP (1)
    import shutil

    cwd, _ = tiny
    shutil.copytree(cwd / "prof", tmp_path / "prof")
    out = profile(tmp_path, "layers", "--model", "cnn", "--mbs", "4", "--warmup", "0", "--repeats", "1",
                  "--progress", "false", "--out", "prof")
    assert out.returncode == 0, out.stderr[-2000:]
    from orchestrator.plan import LayeredProfile

    assert LayeredProfile.from_directory(tmp_path / "prof", "tiny").num_layers == 4
    cnn = LayeredProfile.from_directory(tmp_path / "prof", "cnn")
    assert cnn.num_layers == 7 and cnn.layer_sizes(1).params[0] == 3 * 3 * 32 + 32      # conv1


def test_another_shape_under_a_name_already_there_is_refused_before_measuring(tiny, tmp_path):
    import shutil

    shutil.copytree(tiny[0] / "prof", tmp_path / "prof")
    before = {p: p.read_bytes() for p in (tmp_path / "prof").rglob("*") if p.is_file()}
    argv = [a if a != "2" or i != TINY.index("--layers") + 1 else "3" for i, a in enumerate(TINY)]    # 3 blocks
    out = profile(tmp_path, *argv, "--device-type", "CPU-b", "--out", "prof")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: --name='tiny': prof already holds tiny with 4 layers, and this profile has 5")
    assert "another --name" in line and "another --out" in line
    assert before == {p: p.read_bytes() for p in (tmp_path / "prof").rglob("*") if p.is_file()}


@pytest.mark.parametrize("rel", ["profiles_tmp.json", "network/links_profile.json"])
def test_a_malformed_file_in_out_is_found_before_measuring(tiny, tmp_path, rel):
    import shutil

    shutil.copytree(tiny[0] / "prof", tmp_path / "prof")
    path = tmp_path / "prof" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"tiny": {"CPU": {"1"')                                  # truncated
    readers = [TINY] + [("links", "--sizes", "1e3,1e4,1e5")] * rel.startswith("network/")
    for argv in readers:                                                     # none gets as far as measuring
        out = profile(tmp_path, *argv, "--out", "prof")
        assert out.returncode == 2 and out.stdout == "", out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert f"prof/{rel}: malformed or truncated JSON" in line and "nothing was measured" in line


def test_a_profile_again_merges_per_entry_in_gib_leaving_no_scratch(tiny, tmp_path, monkeypatch):
    import shutil
    import tempfile

    shutil.copytree(tiny[0] / "prof", tmp_path / "prof")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    argv = [a for a in TINY if a not in ("--mbs", "1,2", "--tp", "1,2")]
    out = profile(tmp_path, *argv, "--mbs", "1", "--tp", "1", "--memory-gb", "40", "--out", "prof")
    assert out.returncode == 0, out.stderr[-2000:]
    times = json.loads((tmp_path / "prof" / "profiles_tmp.json").read_text())["tiny"]["CPU"]
    assert {m: sorted(t) for m, t in times.items()} == {"1": ["1", "2"], "2": ["1", "2"]}          # merged, not replaced
    assert sorted(json.loads((tmp_path / "prof" / "llm_info.json").read_text())["tiny"]) == ["1", "2"]
    stats = json.loads((tmp_path / "prof" / "profile_stats.json").read_text())["tiny"]["CPU"]
    assert sorted(stats["entries"]["2"]) == ["1", "2"] and sorted(stats["update"]) == ["1", "2"]
    assert "merged: tiny on CPU in profiles_tmp.json: replaced mbs 1 tp 1; kept mbs 1 tp 2, mbs 2 tp 1" in out.stdout
    basic = json.loads((tmp_path / "prof" / "cluster" / "basic_cluster_config.json").read_text())
    assert basic["CPU"]["mem_per_gpu"] == 40 * 2**30                                             # GiB, as docs/plans.md
    assert not list((tmp_path / "tmp").iterdir())                                                # no /tmp/profile-*


@pytest.mark.parametrize("args, message", [
    (("--model", "resnet9"), "--model='resnet9': unknown model (gpt, or one that builds a Keras model: cnn, "),
    (("--model", "keras"), "--model keras needs --factory package.module:function"),
    (("--model", "keras", "--factory", "nowhere:f"), "--factory='nowhere:f' cannot be loaded"),
    (("--model", "keras", "--factory", "profile_models:shared_layer"), "layer twice of shared is called 2 times"),
    (("--model", "llm"), "--model=llm: reads a profile or a cost graph, it has no layers to time"),
    (("--factory", "a:b"), "--factory and --set are for a Keras model (got --model gpt"),
    (("--model", "resnet50", "--set", "input_size=8"), "--set input_size=8 must be"),
    (("--model", "cnn", "--set", "nokey"), "'nokey' is not KEY=VALUE"),
    (("--hidden", "-4"), "--hidden=-4: must be >= 1"),
    (("--tp", "3", "--devices-per-node", "4"), "--tp 3: the TP degree must divide --heads=4 and --vocab=2048"),
    (("--tp", "4"), "--tp 4 exceeds --devices-per-node=2"),
    (("--mbs", "0"), "'0': every entry must be a whole number >= 1"),
    (("--model", "cnn", "--tp", "1,2"), "--model cnn has no tensor-parallel form here"),
    (("--repeats", "0"), "--repeats=0: must be >= 1"),
    (("--out", "/proc/version/x"), "--out='/proc/version/x' is not a writable directory"),
    (("--device", "/GPU:7"), "--device='/GPU:7': TensorFlow has no such device"),
    (("--memory-gb", "nan"), "--memory-gb=nan: must be a number > 0"),
    (("--device-type", "H100"), "--device-type='H100' is a GPU type of the catalog, and the layers would be timed on"),
    (("--name", "../../../../outside"), "--name='../../../../outside': must be a plain name"),
    (("--name", "a/b"), "--name='a/b': must be a plain name"),
    (("--name", ".hidden"), "--name='.hidden': must be a plain name"),
    (("--device-type", "zone"), "--device-type='zone': not a device type name"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    argv = ["layers", "--out", "prof", *args] if "--out" not in args else ["layers", *args]
    out = profile(tmp_path, *argv)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert not (tmp_path / "prof").exists()                # nothing written, and no empty --out left behind


@pytest.mark.parametrize("args, message", [
    (("--sizes", "1e3,1e4"), "a quadratic fit needs at least 3 sizes"),
    (("--sizes", "1e3,big,1e5"), "expected message bytes"),
    (("--ranks", "1"), "--ranks=1: a link needs at least 2 ranks"),
    (("--hostfile", "nowhere"), "--hostfile='nowhere': no such file"),
    (("--device-type", "zone"), "--device-type='zone': not a device type name"),
])
def test_bad_link_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = profile(tmp_path, "links", "--out", "prof", *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_the_link_fit_recovers_a_known_link_and_judges_held_out_sizes():
    from orchestrator.hardware.links import FittedLink
    from orchestrator.profile.links import errors, fit, held_out_errors

    true = FittedLink((-0.01, 0.2, 3.0), math.inf)
    sizes = [int(s) for s in np.geomspace(1e4, 1e8, 9)]
    seconds = [true.time(float(n)) for n in sizes]
    coeffs, cap = fit(sizes, seconds)
    assert coeffs == pytest.approx([-0.01, 0.2, 3.0], rel=1e-6)
    assert max(abs(e) for e in errors(sizes, seconds, coeffs, cap)) < 1e-6
    assert max(abs(e) for e in held_out_errors(sizes, seconds)) < 1e-6
    noisy = [t * (1.3 if i == 4 else 1.0) for i, t in enumerate(seconds)]       # one slow measurement
    assert max(abs(e) for e in held_out_errors(sizes, noisy)) > 0.1


def readme_profile_commands() -> list[list[str]]:
    """README's profile commands and the plan command that reads their output, in order, as argv lists."""
    block = "\n".join(re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S))
    lines = [ln for ln in re.sub(r"\\\n\s*", " ", block).splitlines() if ln.strip().startswith("python -m orchestrator")]
    prof = [shlex.split(ln, comments=True) for ln in lines if ln.strip().startswith("python -m orchestrator.profile")]
    outs = {a.split("=", 1)[1] if "=" in a else argv[argv.index(a) + 1] for argv in prof for a in argv if a.startswith("--out")}
    plan = [shlex.split(ln, comments=True) for ln in lines
            if "+planner=" in ln and any(f"model.data={o}" in ln for o in outs)]
    return prof + plan


@pytest.mark.slow
@pytest.mark.mpi
def test_readme_profiles_then_plans_with_the_profile(tmp_path):
    commands = readme_profile_commands()
    assert [c[2] for c in commands] == ["orchestrator.profile", "orchestrator.profile", "orchestrator"], commands
    for argv in commands:
        out = run_inprocess(tmp_path, *argv[3:], module=argv[2])
        assert out.returncode == 0, f"{' '.join(argv)}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert "s per iteration" in out.stdout and "simulated" in out.stdout


@pytest.mark.slow
@pytest.mark.mpi
def test_the_link_profiler_fits_two_ranks_on_this_host(tmp_path):
    from orchestrator.hardware.gpu_cluster import GpuCluster

    out = profile(tmp_path, "links", "--out", "prof", "--sizes", "1e3,1e4,1e5,1e6", "--repeats", "3", "--progress", "false")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "profiled the intra link of CPU: 2 ranks on 1 host(s)" in out.stdout and "fit: B(n) =" in out.stdout
    doc = json.loads((tmp_path / "prof" / "network" / "links_profile.json").read_text())["CPU"]["intra"]
    assert len(doc["p2p"]) == 4 and all(p["median_s"] > 0 for p in doc["p2p"]) and len(doc["held_out_error"]) == 4
    link = GpuCluster.from_directory(tmp_path / "prof").topology.intra_link("CPU", 2)
    assert link.time(1e6) == pytest.approx(doc["p2p"][3]["median_s"] * (1 + doc["fit_error"][3]))


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.netns
def test_the_link_profiler_on_emulated_hosts_fits_the_tc_rate(tmp_path):
    from services import require_netlab

    require_netlab()
    out = profile(tmp_path, "links", "--out", "prof", "--netlab", "1gbit", "--sizes", "1e5,1e6,4e6,16e6",
                  "--repeats", "3", "--progress", "false")
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "prof" / "network" / "links_profile.json").read_text())["CPU"]["inter"]
    assert len(set(doc["hosts"])) == 2
    assert doc["bandwidth_at_largest_Bps"] / doc["tc_rate_Bps"] == pytest.approx(1.0, abs=0.15)
