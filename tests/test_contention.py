"""Shared-core contention (``orchestrator.hardware.contention``): processor sharing with a parallel
efficiency eff(k), worked out by hand, in the pipeline schedule; the ``hardware.core_sharing`` knob;
the calibration on this machine's logical CPUs (slow)."""

import math

import numpy as np
import pytest
from omegaconf import OmegaConf
from test_pipeline_schedule import _assign, _chain, _worker

from orchestrator.errors import ConfigError
from orchestrator.hardware.cluster import CorePool, Device, Worker
from orchestrator.hardware.contention import SharedCores, core_pool
from orchestrator.hardware.links import ConstantLink
from orchestrator.hardware.topology import Topology
from orchestrator.placement.simulate.microbatch import MicrobatchSchedule


def _pooled(n, eff, shared=None):
    """``n`` CPUs, those in ``shared`` (default: all) on one core pool with eff(2) = ``eff`` (a
    number; eff(k > 2) the same) or (eff(2), eff(3), ...) = ``eff`` (a tuple)."""
    shared = range(n) if shared is None else shared
    devs = [Device(f"cpu:{i}", "cpu", core_pool="h:cores" if i in shared else None) for i in range(n)]
    links = Topology({(f"cpu:{i}", f"cpu:{j}"): ConstantLink(1e9) for i in range(n) for j in range(n) if i != j})
    return Worker("w", devs, links, core_pools={"h:cores": CorePool(eff if isinstance(eff, tuple) else (eff,))})


def _run(tasks, pools):
    """Finish times of ``tasks`` = [(name, group, work, start)] under SharedCores (a tiny event loop)."""
    import heapq

    sc, heap, done, seq = SharedCores(), [], {}, 0
    for name, group, work, start in tasks:
        heap.append((start, 1, seq, name, (group, work)))
        seq += 1
    heapq.heapify(heap)
    while heap:
        t, kind, _, name, extra = heapq.heappop(heap)
        if kind == 1:
            new = sc.start(name, extra[0], pools.get(extra[0]), extra[1], t)
        elif sc.current(name, extra):
            done[name] = t
            new = sc.finish(name, t)
        else:
            continue
        for at, task, version in new:
            seq += 1
            heapq.heappush(heap, (at, 0, seq, task, version))
    return done


def test_core_pool_efficiency_and_rates():
    p = CorePool((1.2, 1.5))
    assert p.eff(1) == 1.0 and p.eff(2) == 1.2 and p.eff(3) == 1.5 and p.eff(7) == 1.5   # saturated
    assert p.rate(1) == 1.0 and p.rate(2) == pytest.approx(0.6) and p.rate(3) == pytest.approx(0.5)
    for bad in ((0.0,), (2.5,), (1.0, 3.5)):
        with pytest.raises(ValueError, match="must be in"):
            CorePool(bad)
    calls = []
    lazy = CorePool(lambda: calls.append(1) or (1.25,))
    assert not calls and lazy.rate(2) == pytest.approx(0.625) and lazy.eff(2) == 1.25 and calls == [1]


def test_processor_sharing_by_hand():
    pool = {"P": CorePool((1.0,))}
    # two equal tasks on one pool, eff(2) = 1: each at half speed, twice as long, ending together
    assert _run([("a", "P", 1.0, 0.0), ("b", "P", 1.0, 0.0)], pool) == {"a": 2.0, "b": 2.0}
    # eff(2) = 2: independent
    assert _run([("a", "P", 1.0, 0.0), ("b", "P", 1.0, 0.0)], {"P": CorePool((2.0,))}) == {"a": 1.0, "b": 1.0}
    # a late start: b (work 2) runs alone on [0, 1], then shares with c at 0.5: its last 1 takes [1, 3];
    # c (work 1.5) does 1 on [1, 3] and its last 0.5 alone: ends at 3.5; x, outside the pool, is unaffected
    got = _run([("b", "P", 2.0, 0.0), ("c", "P", 1.5, 1.0), ("x", ("device", 9), 1.5, 0.5)], pool)
    assert got == pytest.approx({"b": 3.0, "c": 3.5, "x": 2.0})
    # eff(2) = 1.5: rate 0.75 while both run
    got = _run([("a", "P", 3.0, 0.0), ("b", "P", 1.5, 0.0)], {"P": CorePool((1.5,))})
    assert got == pytest.approx({"b": 2.0, "a": 2.0 + 1.5})


@pytest.mark.parametrize("kind,eff2,total", [
    # f = 1, b = 2 per stage, m = 2, free transfers; by hand in the comments
    ("gpipe", 1.0, 12.0),   # F1 [0,1]; s0 F2 + s1 F1 share [1,3]; s1 F2 [3,4], B2 [4,6]; s1 B1 + s0 B2 share [6,10]; s0 B1 [10,12]
    ("gpipe", 1.5, 10.0),   # shared at 0.75: [1, 7/3]; s1 F2, B2 to 16/3; both B2 work 2 at 0.75 to 8; s0 B1 to 10
    ("gpipe", 2.0, 9.0),    # independent: (m + S - 1)(f + b)
    ("1f1b", 1.0, 12.0),    # s0 F2 + s1 F1 [1,3]; s1 B1 [3,5]; s1 F2 + s0 B1 from 5: F2 ends 7, B1 has 1 left;
                            # s1 B2 + s0 B1 share: B1 ends 9, B2 (1 left) alone to 10; s0 B2 [10,12]
])
def test_two_stages_on_one_pool_by_hand(kind, eff2, total):
    g = _chain([1.0, 1.0], [2.0, 2.0])
    r = MicrobatchSchedule(g, _pooled(2, eff2), 2, kind).evaluate(_assign(g, [0, 1]), record=True)
    assert r.minibatch_time_s == pytest.approx(total)
    if kind == "1f1b":
        ends = {(e["row"], e["label"]): e["end"] for e in r.schedule_events if e["kind"] == "node"}
        assert ends["cpu:1", "F2"] == pytest.approx(7.0) and ends["cpu:0", "B1"] == pytest.approx(9.0)
        assert ends["cpu:1", "B2"] == pytest.approx(10.0)


def test_three_stages_two_sharing_by_hand():
    # gpipe, m = 2, f = 1, b = 2, cpu:0 and cpu:1 on one pool (eff(2) = 1), cpu:2 on its own:
    # s0 F1 [0,1]; s0 F2 + s1 F1 share [1,3]; s1 F2 [3,4] alone in the pool, s2 F1 [3,4]; s2 F2 [4,5],
    # B2 [5,7], B1 [7,9]; s1 B2 [7,9]; s1 B1 + s0 B2 share [9,13]; s0 B1 [13,15]
    g = _chain([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    r = MicrobatchSchedule(g, _pooled(3, 1.0, shared={0, 1}), 2, "gpipe").evaluate(_assign(g, [0, 1, 2]), record=True)
    assert r.minibatch_time_s == pytest.approx(15.0)
    spans = {(e["row"], e["label"]): (e["start"], e["end"]) for e in r.schedule_events if e["kind"] == "node"}
    for lab, dur in (("F1", 1.0), ("F2", 1.0), ("B2", 2.0), ("B1", 2.0)):   # the stage outside: unaffected
        s, e = spans["cpu:2", lab]
        assert e - s == pytest.approx(dur)
    assert spans["cpu:0", "F2"] == pytest.approx((1.0, 3.0)) and spans["cpu:1", "B1"] == pytest.approx((9.0, 13.0))
    assert r.stage_time_s == {"cpu:0": 3.0, "cpu:1": 3.0, "cpu:2": 3.0}     # alone, as profiled


def _same(r1, r2):
    import dataclasses

    for f in dataclasses.fields(r1):
        assert repr(getattr(r1, f.name)) == repr(getattr(r2, f.name)), f.name


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_no_pool_or_one_stage_per_pool_is_the_old_schedule(kind):
    g = _chain([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], u=[0.5, 0.25, 0.75], hop=0.5, loss=0.25)
    a = _assign(g, [0, 1, 2])
    base = MicrobatchSchedule(g, _worker(3), 3, kind).evaluate(a, record=True)
    # a pool holding one stage only, or a device naming a pool the worker does not declare: no sharing
    _same(base, MicrobatchSchedule(g, _pooled(3, 1.0, shared={1}), 3, kind).evaluate(a, record=True))
    w = _worker(3)
    w.devices[0].core_pool = w.devices[1].core_pool = "undeclared"
    _same(base, MicrobatchSchedule(g, w, 3, kind).evaluate(a, record=True))
    # eff(k) = k: the event-driven path gives the independent schedule (to rounding)
    indep = MicrobatchSchedule(g, _pooled(3, (2.0, 3.0)), 3, kind).evaluate(a, record=True)
    assert indep.minibatch_time_s == pytest.approx(base.minibatch_time_s)
    assert indep.time_per_microbatch_s == pytest.approx(base.time_per_microbatch_s)
    # contention never makes a schedule faster, and S = 1 (one device) is never affected
    slow = MicrobatchSchedule(g, _pooled(3, 1.0), 3, kind).evaluate(a)
    assert slow.minibatch_time_s > base.minibatch_time_s and slow.time_per_microbatch_s >= base.time_per_microbatch_s
    one = np.zeros(len(g.nodes), dtype=np.int64)
    _same(MicrobatchSchedule(g, _worker(3), 3, kind).evaluate(one), MicrobatchSchedule(g, _pooled(3, 1.0), 3, kind).evaluate(one))


def test_core_sharing_knob():
    from plugins.hardware.local import core_sharing_of

    assert core_sharing_of(OmegaConf.create({})) == "auto"
    assert core_sharing_of(OmegaConf.create({"core_sharing": "None"})) == "none"
    assert core_sharing_of(OmegaConf.create({"core_sharing": None})) == "none"
    assert core_sharing_of(OmegaConf.create({"core_sharing": 1.3})) == 1.3
    assert core_sharing_of(OmegaConf.create({"core_sharing": "Model"})) == "model"
    for bad in ("fast", 0, -1.0, True, [1], math.inf):
        with pytest.raises(ConfigError, match=r"^hardware\.core_sharing=") as exc:
            core_sharing_of(OmegaConf.create({"core_sharing": bad}))
        assert "\n" not in str(exc.value)
    # a number c: eff(k) = min(k, c); none or one device: no pool
    assert core_pool(1.5, ["a", "b", "c"]).values == (1.5, 1.5)
    assert core_pool(2.5, ["a", "b", "c"]).values == (2.0, 2.5)
    assert core_pool("none", ["a", "b"]) is None and core_pool(1.2, ["a"]) is None


@pytest.mark.slow
def test_calibration_on_two_logical_cpus():
    import time

    import tensorflow as tf

    from orchestrator.hardware.contention import measure_efficiency

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < 2:
        pytest.skip("TensorFlow has one CPU device in this process")
    t0 = time.perf_counter()
    eff = measure_efficiency(cpus[:2], repeats=3, reps=2)
    assert len(eff) == 1 and 0.0 < eff[0] <= 2.0
    assert measure_efficiency(cpus[:2], repeats=3, reps=2) is eff          # cached per process
    assert time.perf_counter() - t0 < 30
    pool = core_pool("auto", cpus[:2])
    assert 0.0 < pool.eff(2) <= 2.0 and pool.source == "measured"


def test_model_pools_are_recalibrated_on_the_model_lazily():
    """hardware.core_sharing=model: a trial with a TF model measures eff(k) on the model's own step
    (on_model); auto and hand-set pools stay; nothing is measured until a schedule needs it."""
    from orchestrator.hardware.contention import ON_MODEL, WANTS_MODEL, measure_model_efficiency, on_model

    devs = [Device(f"cpu:{i}", "cpu", tf_device=f"/CPU:{i}", core_pool="a" if i < 2 else "b") for i in range(4)]
    w = Worker("w", devs, core_pools={"a": core_pool("model", ["/CPU:0", "/CPU:1"]), "b": CorePool((1.4,))})
    spec = object()
    w2 = on_model(w, spec, "x", "y")
    pa = w2.core_pools["a"]
    assert pa.source == ON_MODEL and pa.efficiency.func is measure_model_efficiency
    assert pa.efficiency.args == (spec, "x", "y", ("/CPU:0", "/CPU:1")) and "_values" not in pa.__dict__
    assert w2.core_pools["b"] is w.core_pools["b"] and w.core_pools["a"].source == WANTS_MODEL   # w untouched
    w3 = Worker("w", devs[:2], core_pools={"a": core_pool("auto", ["/CPU:0", "/CPU:1"])})
    assert w3.core_pools["a"].source == "measured" and on_model(w3, spec, "x", "y") is w3


@pytest.mark.slow
def test_model_calibration_on_two_logical_cpus():
    import tensorflow as tf

    from orchestrator.hardware.contention import measure_model_efficiency
    from orchestrator.models import builtin

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < 2:
        pytest.skip("TensorFlow has one CPU device in this process")
    spec = builtin("cnn", OmegaConf.create({"name": "cnn"}))
    x, y = spec.sample(16, 0)
    eff = measure_model_efficiency(spec, x, y, cpus[:2], repeats=2)
    assert len(eff) == 1 and 0.0 < eff[0] <= 2.0


def test_local_hardware_puts_its_logical_cpus_on_one_pool():
    from types import SimpleNamespace

    from plugins.hardware.local import LocalHardware

    base = {"logical_cpus": 2, "gpus": False}
    w = LocalHardware(OmegaConf.create({**base, "core_sharing": 1.3})).cluster(SimpleNamespace(has_sync=False)).workers[0]
    pools = {w.core_pool_of(d) for d in w.devices}
    assert len(pools) == 1 and None not in pools and w.core_pool_of(w.devices[0]).eff(2) == 1.3
    w = LocalHardware(OmegaConf.create({**base, "core_sharing": "none"})).cluster(SimpleNamespace(has_sync=False)).workers[0]
    assert w.core_pools == {} and {d.core_pool for d in w.devices} == {None}
    with pytest.raises(ConfigError, match="core_sharing"):
        LocalHardware(OmegaConf.create({**base, "core_sharing": "lots"}))


def test_trial_reports_the_pool_its_stages_share():
    from orchestrator.phases.schedule import core_sharing

    metrics = {}
    w = _pooled(3, 1.25, shared={0, 1})
    assert core_sharing(w, ["cpu:0", "cpu:1", "cpu:2"], metrics) == {"placement.core_sharing": "set by hand: 2 of 3 stages share cores"}
    assert metrics == {"placement.core_sharing_eff2": 1.25}
    metrics = {}
    assert core_sharing(w, ["cpu:0", "cpu:2"], metrics) == {"placement.core_sharing": "none"} and metrics == {}
