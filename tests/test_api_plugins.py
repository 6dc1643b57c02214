"""A third-party hardware adapter and placer, written only against ``orchestrator.api``, run a trial
in-process; the API's protocols describe the built-ins too."""

import json
import sys
from pathlib import Path

import pytest

from orchestrator import api, plugins
from orchestrator.testing import QUICK


@pytest.fixture
def api_plugin():
    import tests.api_plugin as module

    pm = plugins.get_plugin_manager()
    pm.register(module, name="api-test-plugin")
    yield module
    pm.unregister(module)


def compose(tmp_path: Path, *overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from omegaconf import open_dict

    with initialize_config_module(config_module="orchestrator_conf", version_base=None):
        cfg = hydra_compose("config", overrides=list(overrides))
    with open_dict(cfg):
        cfg.tracking.uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return cfg


def test_api_imports_no_tensorflow():
    import subprocess

    code = "import sys, orchestrator.api; print('tensorflow' in sys.modules, 'mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]


def test_built_ins_satisfy_the_protocols():
    hardware = plugins.load("hardware", "simulated")({"preset": "sim_1cpu_4gpu"})
    placer = plugins.load("placer", "greedy")({"name": "greedy"})
    assert isinstance(hardware, api.HardwareAdapter) and isinstance(placer, api.Placer)
    for name in ("allreduce", "async", "delay"):
        cls = plugins.load("sync", name)
        assert issubclass(cls, (api.CollectiveStrategy, api.ServerStrategy))


def test_third_party_adapter_and_placer_run_a_trial(tmp_path, api_plugin, monkeypatch):
    from omegaconf import OmegaConf, open_dict

    from orchestrator.trial import Trial

    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; restored after the test, so later CLI tests
    # write to their own stores
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    cfg = compose(tmp_path, *QUICK)
    with open_dict(cfg):
        cfg.hardware = OmegaConf.create({"name": "two_devices"})
        cfg.placer = OmegaConf.create({"name": "fastest_device_api"})
    trial = Trial(cfg, tmp_path)
    assert isinstance(trial.hardware, api.HardwareAdapter) and isinstance(trial.placer, api.Placer)
    trial.run()
    ctx = api_plugin.TwoDevices.last_context
    assert isinstance(ctx, api.TrialContext) and ctx.model.name == "cnn"
    assert ctx.trains and not ctx.has_sync and ctx.names["hardware"] == "two_devices"
    tags, metrics = trial.outcome["tags"], trial.outcome["metrics"]
    assert tags["hardware"] == "two_devices" and tags["placer"] == "fastest_device_api"
    assert tags["evaluator"] == "simulated" and "placement.step_time_s" in metrics
    placement = json.loads(next(tmp_path.rglob("placement.json")).read_text())
    assert set(placement["assignment"].values()) == {"fast"}


def test_a_sync_plugin_that_is_not_a_strategy_is_refused(tmp_path, api_plugin, monkeypatch):
    from omegaconf import OmegaConf, open_dict

    from orchestrator.errors import PluginError
    from orchestrator.trial import Trial

    real_load = plugins.load
    monkeypatch.setattr(plugins, "load", lambda kind, name: object if kind == "sync" else real_load(kind, name))
    cfg = compose(tmp_path)
    with open_dict(cfg):
        cfg.sync = OmegaConf.create({"name": "anything", "runtime": "virtual"})
    with pytest.raises(PluginError, match=r"^sync strategy 'anything' .* is not a subclass of orchestrator\.api\."):
        Trial(cfg, tmp_path)


def test_the_simulated_evaluator_judges_none_as_the_first_device():
    """``Evaluator.evaluate(None)`` (the protocol): the whole model on the worker's first device."""
    from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator
    from orchestrator.placement.graph.workload import load_msr_workload

    data = Path(__file__).parent / "data" / "msr-dnn-partitioning" / "latency-inputs" / "LayerGraphs"
    workload = load_msr_workload(data / "inceptionv3_inference.json")
    graph, worker = workload.graph, workload.worker
    ev = SimulatedEvaluator(graph, worker)
    first = api.Placement([d.name for d in worker.devices], {n.name: worker.devices[0].name for n in graph.nodes})
    assert isinstance(ev, api.Evaluator)
    assert ev.evaluate(None).step_time_s == ev.evaluate(first).step_time_s > 0


def test_a_listener_that_raises_does_not_change_how_the_trial_ended(tmp_path):
    """``orchestrator_trial_end`` raising turned a FINISHED trial into FAILED (with a traceback); now a warning line
    naming the plugin, and the other listeners still hear of the end."""
    from orchestrator import api, plugins

    from conftest import run_inprocess, store_runs

    heard = []

    class Broken:
        @api.hookimpl
        def orchestrator_trial_end(self, status):
            raise RuntimeError("listener bug")

    class Listening:
        @api.hookimpl
        def orchestrator_trial_end(self, run_id, status, metrics):
            heard.append((run_id, status))

    pm = plugins.get_plugin_manager()
    pm.register(Broken(), name="broken-listener")
    pm.register(Listening(), name="listener")
    try:
        out = run_inprocess(tmp_path, "+placer=greedy", "model=inception_v3", "hardware=sim_1cpu_4gpu")
    finally:
        pm.unregister(name="broken-listener")
        pm.unregister(name="listener")
    assert out.returncode == 0, out.stderr
    assert "WARNING: plugin 'broken-listener': orchestrator_trial_end raised RuntimeError: listener bug" in out.stderr
    run = store_runs(tmp_path)[0]
    assert run.info.status == "FINISHED" and heard == [(run.info.run_id, "FINISHED")]


def test_a_plugin_that_raises_is_named_in_one_line_with_its_traceback_kept(tmp_path, api_plugin):
    from conftest import run_inprocess, store_runs

    out = run_inprocess(tmp_path, "+placer=greedy", "placer.name=raising_api", *QUICK)
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "KeyError: 'no such device' at " in errors[0] and "api_plugin.py" in errors[0], errors[0]
    assert "in place, code of the plugin tests.api_plugin (it provides " in errors[0] and "placer 'raising_api'" in errors[0]
    saved = Path(errors[0].rsplit("the traceback is in ", 1)[1])
    assert "KeyError" in saved.read_text() and "Traceback" in saved.read_text()
    assert [r.info.status for r in store_runs(tmp_path)] == ["FAILED"]
