"""The link profiler against links whose rate is known: emulated hosts (``orchestrator.hardware.netlab``,
network namespaces shaped by ``tc``; root) at several rates, two ranks, one per host, and for reference two
ranks on this host (shared memory, no set rate). Per rate: the fitted bandwidth at the largest message
against the ``tc`` rate and against what TCP carries of it, the fit's error in sample and held out (each size
left out of the fit in turn), and the ring all-reduce predicted from the fit against the all-reduce measured.
Target (issue 43): the fitted bandwidth within 10% of the rate ``tc`` sets (docs/benchmarks/profiling.md).

    python benchmarks/link_profile.py                        # about 70 s (root)
    python benchmarks/link_profile.py --rates 1gbit --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.profile import main as profile  # noqa: E402

SIZES = "1e5,1e6,4e6,16e6"


def one(rate: str | None, sizes: str, repeats: int, tmp: Path) -> dict:
    out = tmp / (rate or "host")
    argv = ["links", "--out", str(out), "--sizes", sizes, "--repeats", str(repeats), "--warmup", "1",
            "--progress", "false", "--tracking-uri", f"sqlite:///{tmp / 'mlflow.db'}"]
    if rate:
        argv += ["--netlab", rate]
    if profile(argv) != 0:
        raise SystemExit(f"the link profile at {rate or 'this host'} failed")
    doc = json.loads((out / "network" / "links_profile.json").read_text())["CPU"]
    return doc["inter" if rate else "intra"]


def row(rate: str | None, r: dict) -> str:
    fit = np.abs(r["fit_error"])
    held = np.abs(r["held_out_error"]) if r["held_out_error"] else np.array([np.nan])
    bw = r["bandwidth_at_largest_Bps"]
    tc = f"{r['tc_rate_Bps'] / 1e9:.4f}" if rate else "-"
    payload = f"{r['tc_payload_Bps'] / 1e9:.4f}" if rate else "-"
    vs_rate = f"{bw / r['tc_rate_Bps'] - 1:+.1%}" if rate else "-"
    vs_payload = f"{bw / r['tc_payload_Bps'] - 1:+.1%}" if rate else "-"
    return (f"| {rate or 'this host (shared memory)'} | {len(set(r['hosts']))} | {tc} | {payload} | {bw / 1e9:.4f} | "
            f"{vs_rate} | {vs_payload} | {np.median(fit):.1%} / {fit.max():.1%} | {np.median(held):.1%} / {held.max():.1%} | "
            f"{r['allreduce_error'][-1]:+.1%} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="100mbit,500mbit,1gbit,4gbit")
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="link-bench-"))
    rows = [row(None, one(None, args.sizes, args.repeats, tmp))]
    for rate in args.rates.split(","):
        rows.append(row(rate, one(rate, args.sizes, args.repeats, tmp)))
    print(f"\nLink profiles, 2 MPI ranks, messages {args.sizes} bytes, median of {args.repeats} repeats "
          f"(measured; emulated hosts: netlab, tc tbf both ways); {time.perf_counter() - t0:.0f} s, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    big = f"{max(float(s) for s in args.sizes.split(',')) / 1e6:g} MB"
    print(f"| link | hosts | tc rate (GB/s) | TCP payload (GB/s) | fitted at {big} (GB/s) | fitted vs rate | "
          f"fitted vs payload | fit error median / max | held-out error median / max | all-reduce {big}, ring(fit) vs measured |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
