"""``python -m orchestrator.profile layers``: checks, the measuring, the files, the MLflow run, the summary."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.profile import record, writer
from orchestrator.profile.models import GptSize, Layer, gpt, keras_chain, keras_spec
from orchestrator.progress import Bar, enabled


def check(args: Any) -> GptSize | None:
    """The model's sizes (gpt; None for a Keras model), or a one-line error for a bad size."""
    for key in ("global_batch",) + (("memory_gb",) if args.memory_gb is not None else ()):
        value = getattr(args, key)
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--{key.replace('_', '-')}={value}: must be a number > 0")
    if args.tp is None:
        args.tp = [1, 2] if args.model == "gpt" else [1]
    if max(args.tp) > args.devices_per_node:
        raise ConfigError(f"--tp {max(args.tp)} exceeds --devices-per-node={args.devices_per_node} "
                          "(a TP group is measured inside one machine)")
    if args.model != "gpt":
        if args.tp != [1]:
            raise ConfigError(f"--tp {','.join(map(str, args.tp))}: --model {args.model} has no tensor-parallel form "
                              "here (use --tp 1; gpt has one)")
        return None
    if args.factory is not None or args.model_options:
        raise ConfigError("--factory and --set are for a Keras model (got --model gpt: its sizes are --layers, --hidden, ...)")
    size = GptSize(args.layers, args.hidden, args.heads, args.sequence, args.vocab)
    size.check(args.tp)
    return size


def on_cpu(device: str) -> bool:
    """Whether a TensorFlow device name (``/CPU:0``, ``/job:.../device:CPU:0``) is a CPU."""
    return "CPU" in device.upper()


def device_of(args: Any) -> tuple[str, str]:
    """(TensorFlow device, device type name)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    device = args.device or ("/GPU:0" if gpus else "/CPU:0")
    known = [d.name for d in tf.config.list_logical_devices()]
    if not any(name.endswith(device.upper().lstrip("/").replace("DEVICE:", "")) for name in known):
        raise ConfigError(f"--device={device!r}: TensorFlow has no such device (it has: {', '.join(known)})")
    if args.device_type:
        from orchestrator.hardware.catalog import default_catalog

        if on_cpu(device) and default_catalog().find(args.device_type) is not None:
            raise ConfigError(f"--device-type={args.device_type!r} is a GPU type of the catalog, and the layers would be "
                              f"timed on {device}: planning would read this CPU's times as a {args.device_type}'s, at its "
                              "price (name the CPU otherwise, e.g. --device-type CPU-myhost)")
        return device, args.device_type
    if "GPU" in device.upper():
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        return device, str(details.get("device_name", "GPU")).replace(" ", "-")
    return device, "CPU"


def training_config(args: Any, name: str, size: GptSize | None, layers: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": name, "type": args.model, "global_batch_size": args.global_batch,
                           "optimizer": "Adam", "num_all_layers": layers, "num_layers": layers - 2}
    if size is not None:
        doc.update(hidden_size=size.hidden, sequence_length=size.sequence, vocab_size=size.vocab, heads=size.heads,
                   head_dim=size.hidden // size.heads, num_layers=size.layers)
    return doc


def model_of(args: Any, size: GptSize | None) -> tuple[str, int, Callable[[int], list[Layer]], int]:
    """The model's name, its number of layers, its chain's builder (per TP degree) and its classes; a Keras model
    is built and cut into its chain here, before anything is measured."""
    if size is not None:
        name = args.name or f"gpt-L{size.layers}-H{size.hidden}"
        writer.check_name(name)
        return name, size.layers + 2, lambda tp: gpt(size, tp), size.vocab
    spec = keras_spec(args.model, args.factory, dict(args.model_options))
    writer.check_name(args.name or spec.name)
    chain = keras_chain(spec, 1)
    return args.name or spec.name, len(chain), lambda tp: chain, spec.num_classes


def profile_layers(args: Any) -> int:
    size = check(args)
    name, n_layers, build, classes = model_of(args, size)
    out = Path(args.out)
    writer.check_writable(out)
    training = training_config(args, name, size, n_layers)
    writer.preflight(out, (*writer.MODEL_FILES, f"cluster/training_config_{name}.json", writer.BASIC, *writer.NETWORK),
                     name)
    writer.check_shape(out, name, n_layers, training)     # before measuring: nothing is measured to be thrown away
    device, dtype = device_of(args)
    note = writer.merge_note(out, name, dtype, args.mbs, args.tp)
    t0 = time.perf_counter()
    with record.tracked(args, "layers", {"model": name, "profile.device_type": dtype}) as sink:
        from orchestrator.profile.layers import run

        bar = Bar(enabled(args.progress), total=len(args.tp) * (1 + len(args.mbs) * args.repeats), desc=f"profile {name}",
                  unit="round")
        try:
            prof = run(build, args.mbs, args.tp, args.warmup, args.repeats, device, classes,
                       lambda what: bar.update(1, at=what))
        finally:
            bar.close()
        settings = {"device": device, "cpu_count": os.cpu_count(), "warmup": args.warmup, "repeats": args.repeats,
                    "mbs": args.mbs, "tp": args.tp, "seconds": time.perf_counter() - t0, "statistic": args.statistic}
        paths = writer.write_profile(out, name, dtype, prof, training, settings)
        memory = args.memory_gb * 2**30 if args.memory_gb else record.machine_memory_bytes() / args.devices_per_node
        writer.write_device(out, dtype, args.devices_per_node, memory, kind="cpu" if on_cpu(device) else "gpu")
        measured = writer.has_measured_links(out, dtype)
        writer.write_links(out, dtype, args.devices_per_node,
                           None if measured["intra"] else writer.constant_fit(args.intra_gbps),
                           None if measured["inter"] else writer.constant_fit(args.inter_gbps))
        rows = summary(prof, args.statistic)
        sink.log_metrics({"profile.seconds": time.perf_counter() - t0,
                          **{f"profile.step_s.mbs{m}.tp{t}": s for m, t, _, _, _, s in rows}})
        sink.set_tags({"profile.links": ", ".join(f"{k}: {'measured' if v else 'stated'}" for k, v in measured.items()),
                       "profile.files": ", ".join([*(str(p.relative_to(out)) for p in paths), writer.BASIC,
                                                   *(n for n, k in zip(writer.NETWORK, ("intra", "inter")) if not measured[k])])})
        record.log_directory(sink, out)
    print_summary(name, dtype, device, rows, measured, out, args, record.elapsed(t0))
    if note:
        print(f"  merged: {note}")
    return 0


def summary(prof: Any, statistic: str) -> list[tuple[int, int, float, float, float, float]]:
    """Per (mbs, tp): sum of forwards, of backwards, the update, and their total (one step of one micro-batch)."""
    out = []
    for mbs, per_tp in sorted(prof.times.items()):
        for tp, rows in sorted(per_tp.items()):
            f = sum(r.fwd.value(statistic) for r in rows)
            b = sum(r.bwd.value(statistic) for r in rows)
            u = prof.update[tp].value(statistic)
            out.append((mbs, tp, f, b, u, f + b + u))
    return out


def print_summary(name: str, dtype: str, device: str, rows: list[Any], measured: dict[str, bool], out: Path, args: Any,
                  took: str) -> None:
    print(f"profiled {name} on {dtype} ({device}), measured: {args.statistic} of {args.repeats} repeats after {args.warmup} "
          f"warm-up calls, {took}")
    print(f"  {'mbs':>4} {'tp':>3} {'fwd_s':>9} {'bwd_s':>9} {'update_s':>9} {'step_s':>9}   (sums over layers)")
    for mbs, tp, f, b, u, s in rows:
        print(f"  {mbs:>4} {tp:>3} {f:9.4f} {b:9.4f} {u:9.4f} {s:9.4f}")
    links = ", ".join(f"{k}: {'measured' if v else 'stated'}" for k, v in measured.items())
    print(f"  links: {links}; written to {out} (profile_stats.json: quartiles, min, max of every entry)")
    print(f"  plan with it: python -m orchestrator +planner=joint model=llm model.name={name} model.data={out} "
          f"hardware.data={out} 'hardware.gpus={{{dtype}: {2 * args.devices_per_node}}}'")
