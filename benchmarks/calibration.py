"""Simulated vs measured step times of layer placements on this machine's two logical CPU devices
(``runtime.split_cpu(2)``), and the ``hardware=local`` calibration knobs fitted to them.

Simulated = the project's simulator (``evaluator.SimulatedEvaluator``) on the graph extracted and
profiled here (``extract.extract(profile="local-cpu")``) and the worker ``hardware=local`` builds
(``plugins.hardware.local.LocalHardware``), calibrated with ``hardware.cost_scale`` and
``hardware.link_latency_us`` exactly as a trial would be. Measured = median wall time of the real
placed step (``execute.measure_step``); each placement is measured ``--rounds`` times, interleaved,
and the fastest median kept (the other benchmarks on this machine only ever slow a step down).

Fits, and what they are judged on:
- cost scale: per model, on its single-device placement ("all on cpu:0"; the loss is not placed
  by ``execute`` and runs on the default device cpu:0, so "all layers on cpu:1" crosses devices
  twice and is a multi-device placement); that error is in-sample, the others' held out;
- link latency: per model, on the *other* model's multi-device placements (held out for every row;
  it changes only multi-device placements). The overrides printed at the end use the latency
  fitted on both models' multi-device placements (in-sample; its error is printed too).

Usage: python benchmarks/calibration.py [--batch 32] [--repeats 20] [--rounds 5] [--md FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from orchestrator.execution.runtime import configure_threads, split_cpu  # noqa: E402

CPUS = split_cpu(2)

import numpy as np  # noqa: E402

from orchestrator.execution.execute import layer_devices, measure_step  # noqa: E402
from orchestrator.graph import Placement  # noqa: E402
from orchestrator.hardware.calibration import fit_scale, median_abs_rel_error  # noqa: E402
from orchestrator.models import builtin  # noqa: E402
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator  # noqa: E402
from orchestrator.placement.graph.extract import extract  # noqa: E402
from plugins.hardware.local import LocalHardware  # noqa: E402

PROFILE = "local-cpu"
MODELS = {"cnn": {}, "transformer": {"seq_len": 16, "d_model": 32, "heads": 2, "ff": 64, "blocks": 2, "vocab": 1000}}
LATENCY_GRID_US = [0.0] + [float(x) for x in np.round(np.logspace(0, 4, 25), 1)]   # 1 us .. 10 ms


def local(**knobs):
    """The graph calibration and worker ``hardware=local`` builds with these overrides."""
    hw = LocalHardware({"logical_cpus": 2, "gpus": False, **knobs})
    return hw.calibration, hw.cluster(SimpleNamespace(has_sync=False)).workers[0]


def placements(graph, devices: list[str]) -> dict[str, Placement]:
    layers = [n.layer for n in graph.nodes if n.role == "forward" and n.layer]
    n = len(layers)
    by_label = {
        "all on cpu:0": {l: 0 for l in layers},
        "all layers on cpu:1": {l: 1 for l in layers},
        "first half / second half": {l: int(i >= n // 2) for i, l in enumerate(layers)},
        "alternate layers": {l: i % 2 for i, l in enumerate(layers)},
        "last layer on cpu:1": {l: int(i == n - 1) for i, l in enumerate(layers)},
    }
    out = {}
    for label, dev in by_label.items():
        # a layer's forward, backward and update stay together (execute places whole layers); the
        # loss is placed by TF on the step's default device, cpu:0, so it is simulated there
        assign = {nd.name: devices[dev[nd.layer] if nd.layer else 0] for nd in graph.nodes}
        out[label] = Placement(devices, assign)
    return out


def simulate(graph, placement: Placement, **knobs) -> float:
    from orchestrator.hardware.calibration import calibrate_graph

    calib, worker = local(**knobs)
    return SimulatedEvaluator(calibrate_graph(graph, calib), worker).evaluate(placement).step_time_s


def collect(model: str, batch: int, repeats: int, rounds: int) -> list[dict]:
    spec = builtin(model, MODELS[model])
    graph = extract(spec, batch, profile=PROFILE, warmup=2, repeats=repeats)
    _, worker = local()
    pl = placements(graph, worker.device_names)
    meas: dict[str, list[float]] = {k: [] for k in pl}
    for _ in range(rounds):
        for label, p in pl.items():
            meas[label].append(measure_step(spec, layer_devices(graph, p, worker), batch, warmup=3, repeats=repeats,
                                            default_device=worker.devices[0].tf_device).step_time_s)
    return [{"model": model, "placement": label, "graph": graph, "p": p, "meas": min(meas[label]),
             "single": len(set(p.assignment.values())) == 1, "raw": simulate(graph, p)} for label, p in pl.items()]


def fit_latency(rows: list[dict], scale: dict[str, float]) -> tuple[float, float]:
    """The grid latency (us) with the least median abs. relative error on ``rows``, and that error."""
    best = None
    for lat in LATENCY_GRID_US:
        est = [simulate(r["graph"], r["p"], cost_scale=scale[r["model"]], link_latency_us=lat) for r in rows]
        err = median_abs_rel_error(est, [r["meas"] for r in rows])
        if best is None or err < best[1] - 1e-12:
            best = (lat, err)
    return best


def err(rows, key) -> float:
    return median_abs_rel_error([r[key] for r in rows], [r["meas"] for r in rows]) if rows else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20, help="timed steps per measurement (and per profiled layer)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved measurements per placement (fastest kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", help="append the markdown tables to this file")
    a = ap.parse_args(argv)
    configure_threads(a.threads)
    rows = [r for m in MODELS for r in collect(m, a.batch, a.repeats, a.rounds)]
    scale = {m: fit_scale([r["raw"] for r in rows if r["model"] == m and r["single"]],
                          [r["meas"] for r in rows if r["model"] == m and r["single"]]) for m in MODELS}
    multi = [r for r in rows if not r["single"]]
    lat_other = {m: fit_latency([r for r in multi if r["model"] != m], scale)[0] for m in MODELS}
    lat_all, err_all = fit_latency(multi, scale)
    for r in rows:
        r["scaled"] = simulate(r["graph"], r["p"], cost_scale=scale[r["model"]])
        r["lat"] = simulate(r["graph"], r["p"], cost_scale=scale[r["model"]], link_latency_us=lat_other[r["model"]])
    lines = [f"batch {a.batch}, {a.repeats} timed steps per measurement (fastest median of {a.rounds} interleaved "
             f"rounds), 2 logical CPU devices, {a.threads} TF threads", "",
             "| model | placement | measured ms | simulated ms (raw) | x cost_scale | x cost_scale + link latency |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['model']} | {r['placement']} | {r['meas']*1e3:.2f} | {r['raw']*1e3:.2f} | {r['scaled']*1e3:.2f} | "
              f"{r['lat']*1e3:.2f} |" for r in rows]
    lines += ["", "Median absolute relative error. single = the single-device placement (the cost scale is "
              "fitted on it: in-sample); multi = the 4 multi-device placements (held out: the scale comes from "
              "the single-device ones, the latency from the other model's multi-device ones).", "",
              "| model | cost_scale | link latency us (fitted on other model) | raw single / multi | "
              "scaled single / multi | scaled + latency single / multi |",
              "| --- | --- | --- | --- | --- | --- |"]
    for m in MODELS:
        s = [r for r in rows if r["model"] == m and r["single"]]
        mu = [r for r in rows if r["model"] == m and not r["single"]]
        lines.append(f"| {m} | {scale[m]:.3f} | {lat_other[m]:g} | {err(s, 'raw'):.1%} / {err(mu, 'raw'):.1%} | "
                     f"{err(s, 'scaled'):.1%} / {err(mu, 'scaled'):.1%} | {err(s, 'lat'):.1%} / {err(mu, 'lat'):.1%} |")
    lines.append(f"| both, all {len(rows)} placements | | | {err(rows, 'raw'):.1%} | {err(rows, 'scaled'):.1%} | "
                 f"{err(rows, 'lat'):.1%} |")
    lines += ["", f"Fitted knobs as config overrides (latency fitted on all 8 multi-device placements, in-sample "
              f"error {err_all:.1%}):", ""]
    lines += [f"- `model={m} hardware=local hardware.cost_scale={scale[m]:.3f} hardware.link_latency_us={lat_all:g}`"
              for m in MODELS]
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
