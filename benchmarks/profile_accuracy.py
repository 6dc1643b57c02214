"""Does a layer profile add up to the training step it was cut from? For a small GPT, the MNIST CNN and ResNet-50
(a functional model, cut at its blocks: ``keras_chain``; 64 x 64 inputs), the
layer profiler's entries (``orchestrator.profile.layers.run``, as ``python -m orchestrator.profile layers``
measures them) summed over the layers, ``sum(fwd + bwd) + update``, against a measured single-process training
step of the same model: the same layers and variables, the same micro-batch, the same Adam kernel, in one
``tf.function`` (forward, loss, gradients, update). The step is measured before and after the profile (the
median of both sets), so that a change of load on the machine falls on both sides. Target (issue 43):
|error| <= 10% (docs/benchmarks/profiling.md).

    python benchmarks/profile_accuracy.py                 # about a minute on 2 cores
    python benchmarks/profile_accuracy.py --repeats 15    # more repeats per entry
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.profile.layers import Adam, run, sample_input, sample_labels  # noqa: E402
from orchestrator.profile.models import GptSize, gpt, keras_chain, keras_spec  # noqa: E402
from orchestrator.profile.timing import Sample, timed  # noqa: E402


def step_function(tf, layers):
    """One training step of the whole chain: forward, loss, gradients of every variable, Adam."""
    variables = [v for layer in layers for v in layer.variables]
    opt = Adam(tf, variables)

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            h = x
            for layer in layers:
                h = layer(h, labels)
        opt.apply(tape.gradient(h, variables))
        return h

    return step


def case(tf, name, build, mbs, classes, warmup, repeats):
    layers = build(1)
    x, labels = sample_input(tf, layers[0], mbs, mbs), sample_labels(tf, layers, mbs, mbs, classes)
    step = step_function(tf, layers)
    steps = timed(lambda: step(x, labels), warmup + 2, 1)
    between = lambda tp, m, r: steps.extend(timed(lambda: step(x, labels), 0, 1))   # noqa: E731
    prof = run(lambda tp: layers, [mbs], [1], warmup, repeats, "/CPU:0", classes, lambda _: None, between)
    rows = prof.times[mbs][1]
    measured = Sample.of(steps)
    out = {"model": name, "layers": len(rows), "mbs": mbs, "iqr": measured.iqr}
    for stat in ("median", "min"):
        fwd, bwd = sum(r.fwd.value(stat) for r in rows), sum(r.bwd.value(stat) for r in rows)
        upd = prof.update[1].value(stat)
        pred, meas = fwd + bwd + upd, measured.value(stat)
        out[stat] = {"fwd": fwd, "bwd": bwd, "update": upd, "predicted": pred, "measured": meas, "error": pred / meas - 1}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    import tensorflow as tf

    size = GptSize()
    t0 = time.perf_counter()
    results = []
    with tf.device("/CPU:0"):
        for mbs in (1, 4):
            results.append(case(tf, f"gpt-L{size.layers}-H{size.hidden} (seq {size.sequence}, vocab {size.vocab})",
                                lambda tp: gpt(size, tp), mbs, size.vocab, args.warmup, args.repeats))
        cnn = keras_spec("cnn")
        for mbs in (32, 128):
            results.append(case(tf, "cnn (MNIST)", lambda tp: keras_chain(cnn, tp), mbs, 10, args.warmup, args.repeats))
        resnet = keras_spec("resnet50", options={"input_size": 64, "classes": 10})
        for mbs in (2, 8):
            results.append(case(tf, "resnet50 (64 x 64, cut at its blocks)", lambda tp: keras_chain(resnet, tp), mbs, 10,
                                args.warmup, args.repeats))
    print(f"Sum of profiled layers vs a measured training step (Adam), one process on /CPU:0, "
          f"{args.repeats} repeats after {args.warmup} warm-up; both sides measured; {time.perf_counter() - t0:.0f} s")
    for stat in ("median", "min"):
        print(f"\nstatistic: {stat} (of every entry's repeats, and of the step's)\n")
        print("| model | layers | mbs | sum fwd (s) | sum bwd (s) | update (s) | predicted step (s) | measured step (s) "
              "| step IQR (s) | error |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            x = r[stat]
            print(f"| {r['model']} | {r['layers']} | {r['mbs']} | {x['fwd']:.4f} | {x['bwd']:.4f} | {x['update']:.4f} | "
                  f"{x['predicted']:.4f} | {x['measured']:.4f} | {r['iqr']:.4f} | {x['error']:+.1%} |")
        err = np.abs([r[stat]["error"] for r in results])
        print(f"\n{stat}: median |error| {np.median(err):.1%}, max {err.max():.1%} (target: within 10%)")
    print(f"load average while measuring: {' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
