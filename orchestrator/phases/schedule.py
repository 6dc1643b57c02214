"""The micro-batched pipeline in a trial (``placement.micro_batches`` > 1, ``placement.schedule``):
the graph records the schedule (so that the simulator charges every stage the activations it holds
in flight, for every placer and the judge), the chosen placement is scheduled (metrics, a Gantt
chart of the micro-batches) and, on real devices, trained with micro-batches for real, the
measured time per micro-batch logged beside the simulated one."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.config.root import PlacementConfig
from orchestrator.errors import ConfigError, InfeasiblePlacementError
from orchestrator.placement.simulate.inflight import MicrobatchSpec
from orchestrator.placement.simulate.microbatch import MicrobatchSchedule


def microbatch_spec(graph: Any, p: PlacementConfig | Any) -> MicrobatchSpec | None:
    """``placement.micro_batches`` and ``placement.schedule`` of the placement group ``p`` (validated where the
    trial started; a plain mapping is validated here) as the spec the placement is judged under (None: no
    micro-batching)."""
    p = p if isinstance(p, PlacementConfig) else PlacementConfig.from_node(p, "placement")
    m, kind = p.micro_batches, p.schedule
    if m <= 1:
        return None
    if graph.meta.get("format") == "msr-dnn-partitioning":
        raise ConfigError(f"placement.micro_batches={m}: micro-batched schedules are for models extracted from "
                          "TensorFlow; a workload file's pipeline objective is its authors' load rule (placement.objective=pipeline)")
    return MicrobatchSpec(m, kind)


def normalise_profile(p: PlacementConfig, graph, worker, model_spec, x, y, metrics: dict):
    """``placement.profile_scale=step``: the layer graph's ``local-cpu`` costs (each layer timed
    alone) scaled by one number so that its forward and backward add up to the model's training
    step measured whole on one logical CPU (``contention.measure_model_step``, the micro-batch
    ``x``, ``y``): timing tiny layers one by one over-counts their fixed overheads (the CNN's
    layers add up to 1.4x its step) and large ones can under-count. Logs ``placement.profile_scale``;
    returns the graph the simulated figures use (``graph`` itself with ``none`` or no such CPU)."""
    if p.profile_scale == "none":
        return graph
    cpu = next((d for d in worker.devices if d.profile == "local-cpu" and d.tf_device), None)
    profiled = layer_profile_s(graph)
    if cpu is None or profiled <= 0:
        return graph
    from orchestrator.hardware.calibration import Calibration, calibrate_graph
    from orchestrator.hardware.contention import measure_model_step

    scale = measure_model_step(model_spec, x, y, cpu.tf_device) / profiled
    metrics["placement.profile_scale"] = scale
    return calibrate_graph(graph, Calibration(scale={"local-cpu": scale}))


def layer_profile_s(graph) -> float:
    """Seconds the ``local-cpu`` profile gives the forward and backward of all layers (each timed alone)."""
    return sum(n.cost.get("local-cpu", 0.0) for n in graph.nodes if n.role in ("forward", "backward")) * graph.time_unit_s


def schedule_metrics(r) -> dict[str, float]:
    """The metrics of a ``ScheduleResult`` (simulated)."""
    m = {"placement.micro_batches": float(r.micro_batches), "placement.time_per_microbatch_s": r.time_per_microbatch_s,
         "placement.minibatch_time_s": r.minibatch_time_s, "placement.bubble_fraction": r.bubble_fraction}
    for dev, b in r.activation_memory_bytes.items():
        m[f"placement.activation_memory_bytes.{dev}"] = b
    for dev, k in r.in_flight.items():
        m[f"placement.in_flight.{dev}"] = float(k)
    return m


def core_sharing(worker, stages, metrics: dict) -> dict[str, str]:
    """Where stages share a core pool (``hardware=local``'s logical CPUs): its eff(2) into ``metrics``
    (``placement.core_sharing_eff2``) and the tag ``placement.core_sharing`` (how it was obtained)."""
    pools = [worker.core_pool_of(worker.device(d)) for d in stages]
    shared = [p for p in pools if p is not None and pools.count(p) > 1]
    if not shared:
        return {"placement.core_sharing": "none"}
    metrics["placement.core_sharing_eff2"] = shared[0].eff(2)
    return {"placement.core_sharing": f"{shared[0].source}: {len(shared)} of {len(stages)} stages share cores"}


def report_schedule(phase: Any, placed: Any, model_spec, cluster, sink) -> None:
    """Schedule the chosen placement (metrics into ``placed.metrics``, ``gantt_pipeline.png``); on real
    devices also run it pipelined (``orchestrator.execution.pipelined``) and log the measured time.
    ``phase`` is the trial's ``PlacementPhase``, ``placed`` its ``PlacementOutcome``."""
    spec = placed.microbatch
    if spec is None:
        return
    placement, evaluator, graph, worker, metrics = placed.placement, placed.evaluator, placed.graph, placed.worker, \
        placed.metrics
    m, kind = spec.micro_batches, spec.schedule
    real = not cluster.simulated and model_spec.build is not None
    sim_graph = graph
    if real and "local-cpu" not in graph.meta.get("profiles", []) and any(d.profile == "local-cpu" for d in worker.devices):
        # judged without this machine's profile (a measured evaluator): profile for the simulated figures
        sim_graph = phase.graph(model_spec, "simulated")
        if len(sim_graph.nodes) != len(graph.nodes):
            raise RuntimeError(f"model {model_spec.name}: the profiled graph differs from the placed one")
    index = {d.name: i for i, d in enumerate(worker.devices)}
    assign = np.array([index[placement.assignment[n.name]] for n in graph.nodes], dtype=np.int64)
    if real:   # the profile normalised to the measured whole step; core_sharing=model: eff on the model
        from orchestrator.hardware.contention import on_model

        batch = int(graph.meta.get("batch") or phase.train.batch_size)
        x, y = model_spec.sample(batch, phase.train.seed)
        sim_graph = normalise_profile(phase.placement, sim_graph, worker, model_spec, x, y, metrics)
        worker = on_model(worker, model_spec, x, y)
    sim = getattr(evaluator, "simulator", None) if sim_graph is graph else None
    r = MicrobatchSchedule(sim_graph, worker, m, kind, sim if sim is not None and sim.graph is sim_graph else None) \
        .evaluate(assign, record=True)
    if not r.feasible:
        over = ", ".join(f"{d} by {b / 2**20:.1f} MiB" for d, b in r.oom)
        raise InfeasiblePlacementError(f"the placement does not fit with {m} micro-batches in flight ({kind}): {over}")
    metrics.update(schedule_metrics(r))
    _gantt(phase.output_dir, r, sink)
    sink.set_tags({"placement.schedule": kind, **core_sharing(worker, r.stages, metrics)})
    if real and graph.granularity == "layer" and all(worker.device(d).is_real for d in r.stages):
        metrics.update(measure(phase, model_spec, graph, placement, worker, r, sink))


def measure(phase: Any, model_spec, graph, placement, worker, r, sink) -> dict[str, float]:
    """Train ``placement.pipeline_steps`` mini-batches pipelined on the real devices; the median
    wall time per mini-batch / m is the measured time per micro-batch (bubble included), compared
    with the simulated mini-batch time / m: ``placement.pipeline_sim_error`` = simulated / measured - 1."""
    from orchestrator.execution.pipelined import PipelinedRuntime, PipelineOrderError
    from orchestrator.placement.simulate.microbatch import task_order

    steps = phase.placement.pipeline_steps
    tf_dev = {d.name: d.tf_device for d in worker.devices}
    layers = [n for n in graph.nodes if n.role == "forward"]
    device_of = {n.name: tf_dev[placement.assignment[n.name]] for n in layers}
    batch = int(graph.meta.get("batch") or phase.train.batch_size)
    try:
        S = len(r.stages)
        orders = [task_order(r.schedule, r.micro_batches, S, s) for s in range(S)]
        rt = PipelinedRuntime(model_spec, device_of, [tf_dev[d] for d in r.stages], orders, seed=phase.train.seed,
                              lr=float(phase.train.lr), default_device=worker.devices[0].tf_device, reference_names=[n.name for n in layers])
        x, y = model_spec.sample(batch * r.micro_batches, phase.train.seed)
        times, losses = rt.time_steps(x, y, warmup=2, repeats=steps)
    except PipelineOrderError as exc:
        sink.set_tags({"placement.pipeline_measured": f"no: {exc}"})
        return {}
    measured = float(np.median(times))
    sim = r.minibatch_time_s / r.micro_batches
    per_mb = measured / r.micro_batches
    sink.set_tags({"placement.pipeline_measured": f"yes: {steps} mini-batches of {r.micro_batches} x {batch} samples"})
    return {"placement.measured_minibatch_time_s": measured, "placement.measured_time_per_microbatch_s": per_mb,
            "placement.simulated_minibatch_per_microbatch_s": sim,
            "placement.pipeline_sim_error": sim / per_mb - 1.0 if per_mb > 0 else math.nan,
            "placement.pipeline_loss_first": losses[0], "placement.pipeline_loss_last": losses[-1]}


def _gantt(output_dir: Any, r, sink) -> None:
    from orchestrator.placement.simulate.gantt import gantt_events

    path = output_dir / "gantt_pipeline.png"
    gantt_events(r.schedule_events, path, f"{r.schedule}: {r.micro_batches} micro-batches over {len(r.stages)} stages, "
                 f"mini-batch {r.minibatch_time_s:.4g} s (simulated), bubble {r.bubble_fraction:.0%}")
    sink.log_artifact(path)
