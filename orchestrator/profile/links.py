"""``python -m orchestrator.profile links``: point-to-point and all-reduce seconds against message size between
MPI ranks (``link_rank``), on this host (ranks through shared memory: the link inside a machine), on the hosts
of a hostfile, on emulated hosts (``--netlab RATE``: network namespaces shaped by ``tc``, root) or inside a
Slurm allocation (the link between machines), fitted in Sailor's form and written as the cluster's network files.

The fit (Sailor, SOSP'25; ``hardware.links.FittedLink``): bandwidth ``B(n) = a x^2 + b x + c`` GB/s with
``x = log2(n / 1e6)``, least squares over the measured ``(x, n / t(n))``, capped at the largest bandwidth
measured, weighting each size's residual by ``1 / B`` (relative errors). Its error: the fitted link's seconds (``FittedLink.time``) against the measured median, per size, in
sample and leaving each size out of the fit in turn; the ring all-reduce the fit predicts
(``hardware.links.ring_allreduce_time``) against the all-reduce measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.errors import ConfigError, WorkerFailedError
from orchestrator.execution.jobs import kill_job
from orchestrator.hardware.links import FittedLink, ring_allreduce_time
from orchestrator.profile import record, writer
from orchestrator.profile.timing import Sample


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(float(s)) for s in text.split(",") if s.strip()})
    except ValueError:
        raise ConfigError(f"--sizes={text!r}: expected message bytes, comma-separated (e.g. 1e3,1e5,1e7)") from None
    if len(sizes) < 3 or sizes[0] < 1:
        raise ConfigError(f"--sizes={text!r}: a quadratic fit needs at least 3 sizes, each >= 1 byte")
    return sizes


def fit(sizes: list[int], seconds: list[float]) -> tuple[list[float], float]:
    """``([a, b, c], max bytes/s)``: bandwidth in GB/s against ``x = log2(n / 1e6)``, least squares of the
    relative residuals (weights ``1 / B``: a size's seconds count alike whatever its bandwidth)."""
    n, t = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    gbps = n / t / 1e9
    coeffs = np.polyfit(np.log2(n / 1e6), gbps, 2, w=1.0 / gbps)
    return [float(c) for c in coeffs], float(gbps.max() * 1e9)


def errors(sizes: list[int], seconds: list[float], coeffs: list[float], cap: float) -> list[float]:
    """Relative error of the fitted link's seconds against the measured, per size."""
    link = FittedLink(tuple(coeffs), cap)
    return [float(link.time(float(n)) / t - 1.0) for n, t in zip(sizes, seconds, strict=True)]


def held_out_errors(sizes: list[int], seconds: list[float]) -> list[float]:
    """Each size predicted by the fit of the others (its own measurement left out); [] with under 4 sizes."""
    if len(sizes) < 4:
        return []
    out = []
    for i in range(len(sizes)):
        rest = [j for j in range(len(sizes)) if j != i]
        coeffs, cap = fit([sizes[j] for j in rest], [seconds[j] for j in rest])
        out.extend(errors([sizes[i]], [seconds[i]], coeffs, max(cap, sizes[i] / seconds[i])))
    return out


def launch(args: Any, sizes: list[int], hostfile: str | None, run_dir: Path) -> dict[str, Any]:
    """The MPI job; its rank 0's measurements."""
    from orchestrator.sync.mpi import host_args, in_allocation, mpiexec_path, rank_env

    env = rank_env()
    spread = bool(hostfile) or in_allocation(env)
    # a rank waiting for a message yields its core: on a machine with more runnable processes than cores, a
    # spinning rank would keep its peer from being scheduled and a ping-pong would time the scheduler
    mapping = (["--map-by", "node:OVERSUBSCRIBE"] if spread else ["--oversubscribe"]) + ["--mca", "mpi_yield_when_idle", "1"]
    out = run_dir / "link_rank.json"
    cmd = [mpiexec_path(), *mapping, "-n", str(args.ranks), *host_args(hostfile, env), sys.executable, "-m",
           "orchestrator.profile.link_rank", "--sizes", ",".join(map(str, sizes)), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--out", str(out)]
    log_path = run_dir / "mpiexec.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill_job(proc, str(out))           # its process group, and any rank that left it
            raise WorkerFailedError(f"the link profile's MPI job ran past --timeout={args.timeout:g} s "
                                    f"(its log: {log_path})") from None
        except BaseException:                   # Ctrl-C, SIGTERM: the job goes with this process
            kill_job(proc, str(out))
            raise
    if rc != 0 or not out.exists():
        kill_job(proc, str(out))
        raise WorkerFailedError(f"{failure(run_dir, rc)} (its log: {log_path})")
    return dict(json.loads(out.read_text()))


def failure(run_dir: Path, rc: int) -> str:
    """The failed rank (``sync.mpi.rank_failure``), else mpiexec's first line of its own (often the cause: ssh
    could not reach a host), printable."""
    from orchestrator.sync.mpi import rank_failure

    said = rank_failure(run_dir, rc)
    if not said.startswith("mpiexec exited"):
        return said
    text = (run_dir / "mpiexec.log").read_text(errors="replace")
    lines = [t for ln in text.splitlines() if (t := ln.strip()) and not set(t) <= {"-"}]
    first = "".join(c if c.isprintable() else "?" for c in (lines[0] if lines else "no output"))[:200]
    return f"mpiexec exited with code {rc}: {first}"


def check_hostfile(path: str) -> None:
    """A hostfile that is a text file naming at least one host, checked before mpiexec starts."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--hostfile={path!r}: no such file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--hostfile={path!r}: not a text file (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"--hostfile={path!r}: cannot be read ({exc.strerror or exc})") from None
    bad = next((i for i, c in enumerate(text) if not (c.isprintable() or c in "\t\n\r")), None)
    if bad is not None:
        raise ConfigError(f"--hostfile={path!r}: not a text file (character {bad})")
    if not any(ln.split("#", 1)[0].strip() for ln in text.splitlines()):
        raise ConfigError(f"--hostfile={path!r}: names no host (one host a line, e.g. 'node1 slots=1')")


def analyse(raw: dict[str, Any], ranks: int) -> dict[str, Any]:
    """Medians and spreads, the fit, its errors, the all-reduce it predicts against the measured."""
    sizes = [int(s) for s in raw["sizes"]]
    p2p = [Sample.of(r) for r in raw["p2p_s"]]
    ar = [Sample.of(r) for r in raw["allreduce_s"]]
    med = [s.median for s in p2p]
    coeffs, cap = fit(sizes, med)
    err = errors(sizes, med, coeffs, cap)
    held = held_out_errors(sizes, med)
    link = FittedLink(tuple(coeffs), cap)
    ar_pred = [float(ring_allreduce_time(link, float(n), ranks)) for n in sizes]
    return {"sizes": sizes, "hosts": raw["hosts"], "ranks": ranks,
            "p2p": [s.as_dict() for s in p2p], "allreduce_s": [s.as_dict() for s in ar],
            "fit": [coeffs, cap], "fit_error": err, "held_out_error": held,
            "allreduce_predicted_s": ar_pred,
            "allreduce_error": [p / s.median - 1.0 for p, s in zip(ar_pred, ar, strict=True)],
            "bandwidth_at_largest_Bps": float(link.bandwidth_at(float(sizes[-1])))}  # type: ignore[no-untyped-call]


def netlab_hosts(rate: str, hosts: int, run_dir: Path) -> Any:
    """Emulated hosts of their own (prefix, subnet and state directory of this process: a lab someone else
    runs is left alone), each shaped to ``rate`` both ways."""
    from orchestrator.hardware import netlab

    octet = 100 + os.getpid() % 150
    return netlab.up(hosts, rate, 1, f"10.{octet}.{(os.getpid() // 150) % 250}", run_dir / "netlab", netlab_prefix())


def netlab_prefix() -> str:
    return f"prof{os.getpid() % 1000}"


def profile_links(args: Any) -> int:
    sizes = parse_sizes(args.sizes)
    if args.ranks < 2:
        raise ConfigError(f"--ranks={args.ranks}: a link needs at least 2 ranks")
    if args.hostfile and args.netlab:
        raise ConfigError("give one of --hostfile and --netlab")
    if args.hostfile:
        check_hostfile(args.hostfile)
    if not args.timeout > 0:
        raise ConfigError(f"--timeout={args.timeout}: must be > 0")
    out = Path(args.out)
    writer.check_writable(out)
    writer.preflight(out, (writer.BASIC, *writer.NETWORK))     # before measuring: a malformed file is found now
    device = args.device_type or "CPU"
    from orchestrator.sync.mpi import in_allocation, rank_env

    where = "inter" if (args.hostfile or args.netlab or in_allocation(rank_env())) else "intra"
    t0 = time.perf_counter()
    run_dir = Path(tempfile.mkdtemp(prefix="profile-links-"))
    with record.tracked(args, "links", {"profile.device_type": device, "profile.link": where}) as sink:
        try:
            raw, lab = measure(args, sizes, run_dir)
        except WorkerFailedError:             # its log (named in the error) is kept
            raise
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        shutil.rmtree(run_dir, ignore_errors=True)
        result = analyse(raw, args.ranks)
        if lab is not None:
            result.update(tc_rate=args.netlab, tc_rate_Bps=lab.hosts[0].bandwidth_Bps, tc_payload_Bps=lab.hosts[0].payload_Bps)
        save_result(out, device, where, result, args)
        sink.log_metrics(metrics(result))
        record.log_directory(sink, out)
    print_links(device, where, result, out, record.elapsed(t0))
    return 0


def measure(args: Any, sizes: list[int], run_dir: Path) -> tuple[dict[str, Any], Any]:
    """The MPI job's measurements, and the emulated hosts it ran on (``--netlab``, taken down again, also when
    it failed or was interrupted, even while they were coming up)."""
    from orchestrator.hardware import netlab

    lab = None
    if args.netlab:
        netlab.check_allowed()
    try:
        if args.netlab:
            lab = netlab_hosts(args.netlab, args.ranks, run_dir)
        return launch(args, sizes, str(lab.hostfile) if lab else args.hostfile, run_dir), lab
    finally:
        if args.netlab:
            netlab.down(run_dir / "netlab", lab.prefix if lab is not None else netlab_prefix())


def save_result(out: Path, device: str, where: str, result: dict[str, Any], args: Any) -> None:
    doc = writer.load(out / "network" / writer.MEASURED_LINKS)
    doc.setdefault(device, {})[where] = {**result, "settings": {"warmup": args.warmup, "repeats": args.repeats,
                                                                 "hostfile": args.hostfile, "netlab": args.netlab}}
    writer.save(out / "network" / writer.MEASURED_LINKS, doc)
    basic = writer.load(out / "cluster" / "basic_cluster_config.json")
    per_node = int(basic.get(device, {}).get("gpus_per_node", args.devices_per_node))
    if device not in basic:
        writer.write_device(out, device, per_node, record.machine_memory_bytes() / per_node)
    measured = writer.has_measured_links(out, device)        # the other link: measured earlier, else stated
    links = {k: result["fit"] if k == where else None if measured[k] else writer.constant_fit(getattr(args, f"{k}_gbps"))
             for k in ("intra", "inter")}
    writer.write_links(out, device, per_node, links["intra"], links["inter"])


def metrics(result: dict[str, Any]) -> dict[str, float]:
    err = np.abs(result["fit_error"])
    out = {"links.fit_error_median": float(np.median(err)), "links.fit_error_max": float(err.max()),
           "links.bandwidth_at_largest_Bps": result["bandwidth_at_largest_Bps"],
           "links.allreduce_error_median": float(np.median(np.abs(result["allreduce_error"])))}
    if result["held_out_error"]:
        out["links.held_out_error_median"] = float(np.median(np.abs(result["held_out_error"])))
        out["links.held_out_error_max"] = float(np.max(np.abs(result["held_out_error"])))
    if "tc_rate_Bps" in result:
        out["links.vs_tc_rate"] = result["bandwidth_at_largest_Bps"] / result["tc_rate_Bps"] - 1.0
    return out


def print_links(device: str, where: str, result: dict[str, Any], out: Path, took: str) -> None:
    hosts = sorted(set(result["hosts"]))
    print(f"profiled the {where} link of {device}: {result['ranks']} ranks on {len(hosts)} host(s) ({', '.join(hosts)}), "
          f"measured (median of the repeats), {took}")
    print(f"  {'bytes':>10} {'p2p_s':>10} {'fit_s':>10} {'fit_err':>7} {'held-out':>8} {'GB/s':>7} {'allreduce_s':>11} "
          f"{'ring(fit)_s':>11} {'ring_err':>8}")
    held = result["held_out_error"] or [float("nan")] * len(result["sizes"])
    for i, n in enumerate(result["sizes"]):
        t = result["p2p"][i]["median_s"]
        fit_s = t * (1 + result["fit_error"][i])
        held_s = f"{held[i]:+8.1%}" if held[i] == held[i] else f"{'-':>8}"       # none with under 4 sizes
        print(f"  {n:>10} {t:10.3g} {fit_s:10.3g} {result['fit_error'][i]:+7.1%} {held_s} {n / t / 1e9:7.3f} "
              f"{result['allreduce_s'][i]['median_s']:11.3g} {result['allreduce_predicted_s'][i]:11.3g} "
              f"{result['allreduce_error'][i]:+8.1%}")
    (a, b, c), cap = result["fit"]
    print(f"  fit: B(n) = {a:.4g} x^2 + {b:.4g} x + {c:.4g} GB/s, x = log2(n / 1e6), capped at {cap / 1e9:.4g} GB/s; "
          f"at {result['sizes'][-1]} bytes: {result['bandwidth_at_largest_Bps'] / 1e9:.4g} GB/s")
    if "tc_rate_Bps" in result:
        bw = result["bandwidth_at_largest_Bps"]
        print(f"  tc rate {result['tc_rate']}: {result['tc_rate_Bps'] / 1e9:.4g} GB/s (TCP payload "
              f"{result['tc_payload_Bps'] / 1e9:.4g}); fitted / rate - 1 = {bw / result['tc_rate_Bps'] - 1:+.1%}, "
              f"fitted / payload - 1 = {bw / result['tc_payload_Bps'] - 1:+.1%} (emulated hosts)")
    print(f"  written to {out}/network ({writer.MEASURED_LINKS}: every repeat's median, quartiles, min, max)")
    for line in fit_warnings(result):
        print(f"WARNING: {line}", file=sys.stderr)


POOR_FIT = 0.25              # an in-sample error above this at any size is a warning
PLANNED_BYTES = 1e6          # the planners' messages (activations, gradients) are MBs


def fit_warnings(result: dict[str, Any]) -> list[str]:
    """One line for a poor fit (an in-sample |error| above 25 % at some size), one for sizes that stop short of
    the MBs the planners send (the fit extrapolates there)."""
    out = []
    err = result["fit_error"]
    worst = max(range(len(err)), key=lambda i: abs(err[i]))
    if abs(err[worst]) > POOR_FIT:
        out.append(f"a poor fit: its in-sample error is {err[worst]:+.0%} at {result['sizes'][worst]} bytes (over "
                   f"{POOR_FIT:.0%}); measure with more --repeats or other --sizes")
    if result["sizes"][-1] < PLANNED_BYTES:
        out.append(f"the largest size measured is {result['sizes'][-1]} bytes, under 1 MB: the planners' messages are "
                   "MBs, where this fit extrapolates (add sizes of 1e6 and more to --sizes)")
    return out
