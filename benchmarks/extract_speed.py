"""Seconds to extract (build + layer graph) and profile Inception-V3 at layer granularity here.
Usage: python benchmarks/extract_speed.py [--sizes 75 299] [--batch 1] [--repeats 5]"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from orchestrator.execution.runtime import configure_threads  # noqa: E402
from orchestrator.models import builtin  # noqa: E402
from orchestrator.placement.graph.extract import extract  # noqa: E402
from orchestrator.placement.graph.extract_ops import extract_op_graph  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[75, 299])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", help="append the markdown table to this file")
    a = ap.parse_args(argv)
    configure_threads(a.threads)
    lines = [f"batch {a.batch}, warm-up 2, {a.repeats} timed repeats (median) per layer, {a.threads} TF threads", "",
             "| input | layer nodes | edges | GFLOP/step | extract s | profile s | op-level nodes | op-level extract s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for size in a.sizes:
        spec = builtin("inception_v3", {"input_size": size})
        g = extract(spec, a.batch, warmup=2, repeats=a.repeats)
        t0 = time.perf_counter()
        og = extract_op_graph(spec.new_model(), a.batch, spec.input_specs)
        op_s = time.perf_counter() - t0
        lines.append(f"| {size}x{size} | {len(g)} | {len(g.edges)} | {g.total_flops/1e9:.2f} | {g.meta['extract_s']:.2f} | "
                     f"{g.meta['profile_s']:.2f} | {len(og)} | {op_s:.2f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
