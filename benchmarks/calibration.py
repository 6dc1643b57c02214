"""Calibrate predicted against measured step times of layer placements on this machine's two
logical CPU devices (``runtime.split_cpu(2)``).

Predicted = ``orchestrator.calibration.critical_path_estimate`` (a list schedule over the profiled
layer graph; this branch has no ``orchestrator.simulator``) with edges at ``--link-bw`` bytes/s.
Measured = median step time of ``execute.measure_step``. Reports the median absolute relative
error raw, with a scale fitted on the single-device placements, and with a fitted per-transfer
latency too (in-sample). Usage: python benchmarks/calibration.py [--batch 32] [--md FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from orchestrator.runtime import configure_threads, split_cpu  # noqa: E402

CPUS = split_cpu(2)

from orchestrator.calibration import (Calibration, critical_path_estimate, fit_scale,  # noqa: E402
                                      median_abs_rel_error)
from orchestrator.cluster import Device  # noqa: E402
from orchestrator.execute import measure_step  # noqa: E402
from orchestrator.extract import extract  # noqa: E402
from orchestrator.models import builtin  # noqa: E402

PROFILE = "local-cpu"


def placements(layers: list[str]) -> dict[str, dict[str, int]]:
    n = len(layers)
    return {
        "all on cpu0": {l: 0 for l in layers},
        "all on cpu1": {l: 1 for l in layers},
        "first half / second half": {l: int(i >= n // 2) for i, l in enumerate(layers)},
        "alternate layers": {l: i % 2 for i, l in enumerate(layers)},
        "last layer on cpu1": {l: int(i == n - 1) for i, l in enumerate(layers)},
    }


def run(model: str, cfg: dict, batch: int, link_bw: float, repeats: int) -> list[dict]:
    spec = builtin(model, cfg)
    graph = extract(spec, batch, profile=PROFILE, warmup=2, repeats=repeats)
    devices = {c: Device(c, "cpu", profile=PROFILE, tf_device=c) for c in CPUS}
    layers = [n.name for n in graph.nodes if n.role == "forward"]
    rows = []
    for label, lp in placements(layers).items():
        dev_of = {l: CPUS[d] for l, d in lp.items()}
        assign = {n.name: dev_of[n.layer] if n.layer else dev_of[layers[-1]] for n in graph.nodes}
        est = critical_path_estimate(graph, assign, devices, Calibration(link_bandwidth=link_bw))
        meas = measure_step(spec, dev_of, batch, warmup=3, repeats=repeats).step_time_s
        rows.append({"model": model, "placement": label, "graph": graph, "assign": assign, "est": est, "meas": meas,
                     "single": len(set(lp.values())) == 1})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--link-bw", type=float, default=10e9)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", help="append the markdown table to this file")
    a = ap.parse_args(argv)
    configure_threads(a.threads)
    rows = run("cnn", {}, a.batch, a.link_bw, a.repeats)
    rows += run("transformer", {"seq_len": 16, "d_model": 32, "heads": 2, "ff": 64, "blocks": 2, "vocab": 1000}, a.batch, a.link_bw, a.repeats)
    devices = {c: Device(c, "cpu", profile=PROFILE) for c in CPUS}
    out = []
    for model in ("cnn", "transformer"):
        rs = [r for r in rows if r["model"] == model]
        scale = fit_scale([r["est"] for r in rs if r["single"]], [r["meas"] for r in rs if r["single"]])
        best = None
        for lat in (0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3):
            cal = Calibration({PROFILE: scale}, lat, a.link_bw)
            ests = [critical_path_estimate(r["graph"], r["assign"], devices, cal) for r in rs]
            err = median_abs_rel_error(ests, [r["meas"] for r in rs])
            if best is None or err < best[0]:
                best = (err, lat, ests)
        cal_scaled = Calibration({PROFILE: scale}, 0.0, a.link_bw)
        for r, e_fit in zip(rs, best[2]):
            r["est_scaled"] = critical_path_estimate(r["graph"], r["assign"], devices, cal_scaled)
            r["est_fit"] = e_fit
        out.append((model, scale, best[1],
                    median_abs_rel_error([r["est"] for r in rs], [r["meas"] for r in rs]),
                    median_abs_rel_error([r["est_scaled"] for r in rs], [r["meas"] for r in rs]), best[0]))
    lines = [f"batch {a.batch}, link {a.link_bw:.3g} B/s, {a.repeats} timed steps (median), 2 logical CPU devices, "
             f"{a.threads} TF threads", "",
             "| model | placement | measured ms | estimate ms (raw) | x scale | x scale + latency |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['placement']} | {r['meas']*1e3:.2f} | {r['est']*1e3:.2f} | "
                     f"{r['est_scaled']*1e3:.2f} | {r['est_fit']*1e3:.2f} |")
    lines += ["", "| model | fitted scale | fitted latency s | MdARE raw | MdARE scaled | MdARE scaled + latency (in-sample) |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {m} | {s:.3f} | {lat:g} | {e0:.1%} | {e1:.1%} | {e2:.1%} |" for m, s, lat, e0, e1, e2 in out]
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
