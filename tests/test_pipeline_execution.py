"""Real pipelined training on two logical CPUs (micro-batches under tf.device, gradients accumulated,
one SGD step per mini-batch) and the micro-batched pipeline in a trial."""

import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import ConfigError
from orchestrator.execution.functional import layer_calls
from orchestrator.execution.pipelined import PipelinedRuntime, PipelineOrderError
from orchestrator.execution.runtime import ModelRuntime
from orchestrator.models import builtin
from orchestrator.phases.schedule import microbatch_spec
from orchestrator.placement.graph.workload import load_msr_workload
from orchestrator.placement.simulate.microbatch import task_order

from conftest import LOGICAL_CPUS, run_inprocess, store_runs

DATA = Path(__file__).parent / "data" / "msr-dnn-partitioning"


def _halves(spec):
    names = list(dict.fromkeys(layer.name for layer, _ in layer_calls(spec.build())))
    return names, {n: LOGICAL_CPUS[0] if i < len(names) // 2 else LOGICAL_CPUS[1] for i, n in enumerate(names)}


def _orders(kind, m):
    return [task_order(kind, m, 2, s) for s in range(2)]


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("name", ["cnn", pytest.param("transformer", marks=pytest.mark.slow)])
def test_pipelined_mini_batch_is_one_sgd_step_on_the_whole_batch(name, kind):
    spec = builtin(name)
    names, mapping = _halves(spec)
    pr = PipelinedRuntime(spec, mapping, LOGICAL_CPUS[:2], _orders(kind, 4), seed=3, lr=0.1, reference_names=names)
    ref = ModelRuntime(spec, seed=3, lr=0.1)
    np.testing.assert_allclose(pr.rt.get_flat(), ref.get_flat())
    x, y = spec.sample(32, 0)
    loss = pr.train_step(*pr.split(x, y))
    assert loss == pytest.approx(ref.train_step(x, y), rel=1e-5)
    # 4 micro-batches with accumulated gradients = one step on all 32 samples
    np.testing.assert_allclose(pr.rt.get_flat(), ref.get_flat(), atol=1e-6)
    assert {v.value.device.split("/")[-1] for v in pr.rt.variables} == {"device:CPU:0", "device:CPU:1"}
    assert [d for d, _, _ in pr.plan].count(LOGICAL_CPUS[0]) == 8          # 4 F + 4 B per stage


def test_placement_against_the_flow_cannot_run_as_a_pipeline():
    spec = builtin("cnn")
    names, _ = _halves(spec)
    zigzag = {n: LOGICAL_CPUS[i % 2] for i, n in enumerate(names)}     # conv1 cpu:0, pool1 cpu:1, conv2 cpu:0 ...
    with pytest.raises(PipelineOrderError, match="contiguous"):
        PipelinedRuntime(spec, zigzag, LOGICAL_CPUS[:2], _orders("1f1b", 2), reference_names=names)


def test_micro_batches_are_for_extracted_models(tmp_path):
    w = load_msr_workload(DATA / "throughput-inputs/LayerGraphs/bert24_training.json")
    assert microbatch_spec(w.graph, {"micro_batches": 1}) is None
    with pytest.raises(ConfigError, match="placement.micro_batches=4"):
        microbatch_spec(w.graph, {"micro_batches": 4, "schedule": "gpipe"})
    with pytest.raises(ConfigError, match="placement.pipeline_steps=0"):
        microbatch_spec(w.graph, {"micro_batches": 1, "pipeline_steps": 0})


def _metrics(workdir):
    (run,) = store_runs(workdir)
    return run


def test_simulated_trial_reports_the_schedule(workdir):
    out = run_inprocess(workdir, "+placer=greedy", "hardware=sim_1cpu_4gpu", "placement.micro_batches=4",
                        "placement.schedule=gpipe", "train.budget_updates=20", "train.eval_every=10", "train.eval_samples=200")
    assert out.returncode == 0, out.stderr[-3000:]
    run = _metrics(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["placement.schedule"] == "gpipe" and m["placement.micro_batches"] == 4
    assert m["placement.minibatch_time_s"] >= 4 * m["placement.time_per_microbatch_s"] * (1 - 1e-9)
    assert 0 <= m["placement.bubble_fraction"] < 1
    used = [k.split(".", 2)[2] for k in m if k.startswith("placement.in_flight.")]
    assert used and all(m[f"placement.in_flight.{d}"] == 4 for d in used)        # GPipe: every micro-batch
    assert "placement.measured_time_per_microbatch_s" not in m                    # simulated hardware
    assert list(Path(workdir).rglob("gantt_pipeline.png"))


def test_bad_schedule_is_a_one_line_error(workdir):
    out = run_inprocess(workdir, "+placer=greedy", "hardware=sim_1cpu_4gpu", "placement.micro_batches=2", "placement.schedule=zb")
    assert out.returncode == 2 and "placement.schedule='zb'" in out.stderr
    out = run_inprocess(workdir, "+placer=greedy", "hardware=sim_1cpu_4gpu", "placement.micro_batches=2",
                        "placement.profile_scale=fit")
    assert out.returncode == 2 and "placement.profile_scale='fit' (accepted: step, none)" in out.stderr


@pytest.mark.slow
def test_pipelined_training_runs_for_real_and_logs_both_figures(workdir):
    out = run_inprocess(workdir, "+placer=manual", "placement.micro_batches=2", "placement.pipeline_steps=2",
                        "train.budget_updates=20", "train.eval_every=10", "train.eval_samples=200")
    assert out.returncode == 0, out.stderr[-3000:]
    run = _metrics(workdir)
    m, tags = run.data.metrics, run.data.tags
    assert tags["placement.pipeline_measured"].startswith("yes: 2 mini-batches of 2 x")
    assert m["placement.measured_time_per_microbatch_s"] > 0 and m["placement.simulated_minibatch_per_microbatch_s"] > 0
    assert m["placement.pipeline_sim_error"] == pytest.approx(
        m["placement.simulated_minibatch_per_microbatch_s"] / m["placement.measured_time_per_microbatch_s"] - 1)
    assert m["placement.in_flight.cpu:0"] == 2 and m["placement.in_flight.cpu:1"] == 1     # 1F1B, 2 stages
    assert 0.05 < m["placement.profile_scale"] < 20      # the layer profile scaled to the measured whole step
    placement = json.loads(next(Path(workdir).rglob("placement.json")).read_text())
    assert set(placement["assignment"].values()) == {"cpu:0", "cpu:1"}
