"""The placement phase of a trial: the op graph to place, the evaluator that judges placements, the
placer's search, the baseline it is compared with, and the figures (simulated, and measured on real
devices) that the trial logs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.api import PlacementOutcome
from orchestrator.config.root import PlacementConfig
from orchestrator.errors import ConfigError, InfeasiblePlacementError, WorkloadError
from orchestrator.graph.placement import Placement, PlacementContext
from orchestrator.placement.simulate.inflight import MicrobatchSpec


def on_one_device(graph, worker, device: str) -> Placement:
    return Placement(worker.device_names, {n.name: device for n in graph.nodes}, {"placer": f"single device {device}"})


def single_device(evaluator, graph, worker):
    """The fastest device that holds the whole model (simulated), as (label, verdict)."""
    best = None
    for d in worker.devices:
        v = evaluator.evaluate(on_one_device(graph, worker, d.name))
        if v.feasible and (best is None or v.value < best[1].value):
            best = (f"single device {d.name}", v)
    return best if best is not None else ("none: no single device fits the model", None)


def best_accelerator(evaluator, graph, worker):
    """The baseline where no human expert's placement exists: the best single accelerator that
    holds the model (nodes it cannot run go to their fastest allowed device), on the trial's
    objective; on a worker without accelerators, the best single device. (label, placement,
    verdict), or (reason, None, None) when no accelerator holds the model: no CPU straw man."""
    import numpy as np

    from orchestrator.placement.solve.problem import PlacementProblem

    prob = PlacementProblem(graph, worker, evaluator, memory_headroom=0.0)
    acc = [i for i, d in enumerate(worker.devices) if d.kind != "cpu"] or list(range(len(worker.devices)))
    best = None
    for d in acc:
        atoms = np.where(prob.allowed[:, d], d, np.argmin(prob.atom_cost, axis=1))
        placement = prob.placement(prob.expand(atoms), placer=f"single device {worker.devices[d].name}")
        v = evaluator.evaluate(placement)
        if v.feasible and math.isfinite(v.value) and (best is None or v.value < best[2].value):
            best = (f"best single accelerator {worker.devices[d].name}" if worker.devices[d].kind != "cpu"
                    else f"single device {worker.devices[d].name} (no accelerator)", placement, v)
    return best if best is not None else ("none: no single accelerator holds the model", None, None)


def memory_headroom(p: PlacementConfig, objective: str) -> float:
    """``placement.memory_headroom``: auto -> 0.1 for the pipeline objective (a stage keeps the
    activations of micro-batches in flight, which the workload's sizes do not count), 0 for step
    (the simulator already holds every activation of the step)."""
    h = p.memory_headroom
    if h is None or str(h) == "auto":
        return 0.1 if objective == "pipeline" else 0.0
    return float(h)          # the schema checked it: a fraction in [0, 1)


def objective_source(p: PlacementConfig, graph) -> str:
    """Why the placement has its objective (the summary names it: the same graph file is judged by another
    objective in another folder)."""
    if p.objective != "auto":
        return "set"
    if graph.meta.get("objective") == "pipeline":
        return "auto: the file sits in a throughput-inputs folder"
    return "auto"


def resolve_objective(p: PlacementConfig, graph) -> str:
    """``placement.objective``: auto -> pipeline for the throughput inputs of the public workloads
    (their file says so: ``graph.meta["objective"]``), step elsewhere."""
    if p.objective == "auto":
        return str(graph.meta.get("objective", "step"))
    return str(p.objective)


class PlacementPhase:
    """Places the model of one trial and judges the answer. It gets what it uses (the config, the
    placer, the training settings for the batch, where to write, how to load the data), never the
    trial; ``place`` returns a ``PlacementOutcome``."""

    def __init__(self, *, cfg: Any, names: dict[str, str | None], settings: Any, placement: PlacementConfig,
                 placer: Any, hardware: Any, output_dir: Path, show_progress: bool, dataset: Callable[[], Any]):
        self.cfg, self.names, self.train, self.placer = cfg, names, settings, placer
        self.placement = placement              # the placement group, validated where the trial started
        self.hardware, self.output_dir, self.show_progress, self.dataset = hardware, output_dir, show_progress, dataset
        self.simulated_cluster = True           # set by ``place`` (or the caller) once the cluster is known

    def graph(self, model_spec, evaluator_kind: str):
        """The op graph to place: a workload's own, else extracted from the Keras model (layer level;
        profiled on this machine when a simulated evaluator judges local devices)."""
        if model_spec.graph is not None:
            return model_spec.graph
        from orchestrator.placement.graph.extract import extract

        # searching placers use the costs (the simulated reward, mixed's screening, the start of a
        # measured search); a placer that only evaluates its answer (manual) does not
        searching = getattr(type(self.placer), "auto_evaluator", None) != "measured"
        wants = evaluator_kind == "simulated" or (evaluator_kind in ("measured", "mixed") and searching)
        profile = "local-cpu" if wants and not self.simulated_cluster else None
        graph = extract(model_spec, self.train.batch_size, profile=profile, seed=self.train.seed)
        calib = getattr(self.hardware, "calibration", None)   # hardware.cost_scale on the profiled costs
        if profile and calib is not None:
            from orchestrator.hardware.calibration import calibrate_graph
            graph = calibrate_graph(graph, calib)
        return graph

    def evaluator(self, kind: str, graph, worker, model_spec, microbatch: MicrobatchSpec | None = None):
        from orchestrator.placement.evaluate.evaluator import MeasuredEvaluator, SimulatedEvaluator

        objective = resolve_objective(self.placement, graph)
        headroom = memory_headroom(self.placement, objective)
        if kind == "simulated":
            return SimulatedEvaluator(graph, worker, objective, headroom, microbatch)
        if objective == "pipeline":
            raise ConfigError("placement.objective=pipeline is evaluated by the simulator: set placer.reward=simulated")
        if model_spec.build is None:
            raise ConfigError(f"model={self.names['model']} is a cost graph; it can only be simulated")
        x, y = self.batch(model_spec)
        seed = self.train.seed
        if kind == "final":      # measures the answer of a simulated-reward search, and its baseline
            return MeasuredEvaluator(model_spec, worker, x, y, seed=seed)
        from orchestrator.placement.evaluate.measured import MeasuredRewardEvaluator, RewardSettings, TFMeasure

        settings = RewardSettings.from_cfg(self.cfg.get("placer"), kind)
        measure = TFMeasure(model_spec, worker, x, y, seed=seed, warmup=settings.warmup, graph=graph)
        return MeasuredRewardEvaluator(graph, worker, settings, measure, memory_headroom=headroom, microbatch=microbatch)

    def batch(self, model_spec):
        """The batch measured steps run on: MNIST for models trained on it, else the model's sample."""
        bs, seed = self.train.batch_size, self.train.seed
        if model_spec.trainable_on_mnist:
            ds = self.dataset()
            return ds.x_train[:bs], ds.y_train[:bs]
        return model_spec.sample(bs, seed)

    def place(self, model_spec, cluster, reward: str, sink) -> PlacementOutcome:
        """Place on the cluster's first worker, searching with ``reward`` (``placer.reward`` resolved:
        simulated | measured | mixed); judge, compare with the baseline, log."""
        worker = self.worker_of(cluster)
        self.simulated_cluster = cluster.simulated
        graph = self.graph(model_spec, reward)
        missing = graph.uncosted(worker.devices)
        if missing:
            kinds = sorted({k for n in graph.nodes for k in n.cost})
            raise WorkloadError(f"model={self.names['model']} is costed on {', '.join(kinds)} devices only (no FLOPs "
                                f"for a roofline), not on {', '.join(d.name for d in missing)} of this hardware: use the "
                                "hardware it was profiled on (hardware=auto for a workload file)")
        from orchestrator.phases.schedule import microbatch_spec  # micro-batches (placement.micro_batches)
        microbatch = microbatch_spec(graph, self.placement)
        evaluator = self.evaluator(reward, graph, worker, model_spec, microbatch)
        placement, search_m = self.search(graph, worker, evaluator, sink)
        verdict = evaluator.evaluate(placement, **({"schedule": True} if evaluator.kind == "simulated" else {}))
        if not verdict.feasible:
            over = ", ".join(f"{d} by {b / 2**20:.1f} MiB" for d, b in verdict.oom)
            raise InfeasiblePlacementError(f"placer {self.names['placer']}'s placement does not fit in memory: {over}")
        base_label, base_placement, base = (self.baseline(graph, worker, evaluator, model_spec) if worker in cluster.workers
                                            else self.baseline_across(graph, worker, evaluator, model_spec, cluster))
        objective = getattr(evaluator, "objective", "step")
        fallback: dict[str, float] = {}
        # only a search's answer is replaced; a placer that does not search (manual: the placement the user asked
        # for) says so with ``searches = False``
        if reward != "simulated" and getattr(self.placer, "searches", True) and keep_baseline(verdict, base, base_placement):
            fallback = self.fall_back(verdict, base_label, base, base_placement, sink)
            placement, verdict = base_placement, base
        m = {"placement.step_time_s": verdict.step_time_s, **search_m,
             "placement.devices_used": float(len(set(placement.assignment.values()))), **fallback}
        if objective == "pipeline":
            m["placement.time_per_sample_s"] = verdict.time_per_sample_s
            for dev, load in verdict.loads_s.items():
                m[f"placement.load_s.{dev}"] = load
        if reward != "simulated" and (self.cfg.get("placer") or {}).get("compare_simulated"):
            m.update(self.compare_simulated(graph, worker, evaluator, verdict))
        if "contiguous_optimum_s" in placement.meta:
            m["placement.contiguous_optimum_s"] = float(placement.meta["contiguous_optimum_s"])
        base_label, base = self.against_baseline(base_label, base, verdict, objective, m)
        tags = {"placement.baseline": base_label, "placement.objective": objective, "placement.reward": reward,
                "placement.objective_source": objective_source(self.placement, graph),
                "placement.graph_unit": "sample" if graph.meta.get("format") == "msr-dnn-partitioning" else
                f"batch of {int(graph.meta.get('batch') or self.train.batch_size)} samples",
                "placement.worker": worker.name, **self.unused_workers(cluster, worker)}
        if evaluator.kind == "simulated":
            tags["placement.lower_bound"] = self.bound(graph, worker, evaluator, placement, verdict, m)
            self.gantt(verdict, sink)
        placed = PlacementOutcome(placement=placement, graph=graph, worker=worker, evaluator=evaluator, verdict=verdict,
                                  baseline=base, metrics=m, microbatch=microbatch)
        if not cluster.simulated and model_spec.build is not None:
            self.measure_too(placed, base_placement, model_spec)
        from orchestrator.phases.schedule import report_schedule  # the micro-batched
        report_schedule(self, placed, model_spec, cluster, sink)  # pipeline
        sink.log_metrics(m)
        sink.set_tags(tags)
        return placed

    def worker_of(self, cluster):
        """The worker placed: the first, or (``placement.hosts=all``) every host's devices as one worker."""
        if self.placement.hosts != "all" or len(cluster.workers) == 1:
            return cluster.workers[0]
        if self.names.get("sync"):
            raise ConfigError(f"placement.hosts=all places one model across every host, while sync={self.names['sync']} "
                              "makes each host a data-parallel worker: drop one of them")
        if not cluster.simulated:
            raise ConfigError("placement.hosts=all places across hosts on a simulated cluster (the network between "
                              "the hosts is its cost model); on real hosts, hardware=tf_cluster gives one worker "
                              "holding the other processes' devices")
        from orchestrator.hardware.presets import multi_host_worker

        return multi_host_worker(cluster)

    def unused_workers(self, cluster, worker) -> dict[str, str]:
        """Workers no phase uses (several workers, no sync strategy, one placed): a tag the summary warns with."""
        others = [w for w in cluster.workers if w is not worker and w.name != worker.name]
        if self.names.get("sync") or not others or worker not in cluster.workers:
            return {}
        listed = ", ".join(f"{w.name} ({len(w.devices)} device{'s' if len(w.devices) != 1 else ''})" for w in others[:6])
        more = f" and {len(others) - 6} more" if len(others) > 6 else ""
        return {"placement.unused_workers": f"{listed}{more}"}

    def search(self, graph, worker, evaluator, sink) -> tuple[Placement, dict[str, float]]:
        """The placer's answer (saved as ``placement.json``) and the search's metrics: its time, the
        evaluations it made, what a measured reward spent."""
        context = PlacementContext(seed=self.train.seed, sink=sink, output_dir=self.output_dir,
                                   show_progress=self.show_progress, cfg=self.cfg)
        t0 = time.perf_counter()
        placement = Placement.of(self.placer.place(graph, worker, evaluator, context), graph, self.names["placer"])
        search_time = time.perf_counter() - t0
        searched = evaluator.evaluations
        end_search = getattr(evaluator, "end_search", None)    # measured / mixed rewards: stop the budget
        search_m = end_search() if end_search is not None else {"placement.measured_placements": 0.0}
        self.save(placement, sink)
        return placement, {"placement.search_time_s": search_time, "placement.evaluations": float(searched), **search_m}

    def save(self, placement: Placement, sink) -> None:
        path = self.output_dir / "placement.json"
        placement.save(path)
        sink.log_artifact(path)

    def fall_back(self, verdict, base_label: str, base, base_placement: Placement, sink) -> dict[str, float]:
        """A measured search can end slower than the baseline (noise, a budget too small): say so and keep
        the better placement (saved in place of the search's); the search's own answer stays in
        ``placement.searched_*`` (the metrics returned)."""
        print(f"placement: {self.names['placer']}'s answer measured {verdict.step_time_s:.4g} s per step, slower than "
              f"the baseline ({base_label}: {base.step_time_s:.4g} s); keeping the baseline's placement "
              "(raise placer.budget_s, or use placer.reward=simulated)", flush=True)
        fallback = {"placement.searched_step_time_s": verdict.step_time_s,
                    "placement.searched_speedup": base.value / verdict.value}
        self.save(base_placement, sink)
        sink.set_tags({"placement.fallback": f"the search's answer was slower than {base_label}; the baseline kept"})
        return fallback

    @staticmethod
    def against_baseline(base_label: str, base, verdict, objective: str, m: dict[str, float]) -> tuple[str, Any]:
        """The baseline's figures and the speedup over it into ``m``; (label, baseline verdict), the
        verdict None (and the label saying why) when the baseline does not fit."""
        if base is not None and base.feasible and math.isfinite(base.value):
            m["placement.baseline_step_time_s"] = base.step_time_s
            if objective == "pipeline":
                m["placement.baseline_time_per_sample_s"] = base.time_per_sample_s
            m["placement.speedup"] = base.value / verdict.value
        elif base is not None:  # e.g. an expert split that breaks device memory: nothing to compare with
            over = ", ".join(f"{d} by {b / 2**20:.1f} MiB" for d, b in base.oom)
            base_label = f"{base_label}: infeasible ({over})"
            base = None
        return base_label, base

    def bound(self, graph, worker, evaluator, placement: Placement, verdict, m: dict[str, float]) -> str:
        """A simulated verdict's lower bound, optimality gap, memory and utilisation per device into ``m``;
        returns where the bound came from (certified by the placer or here, else the evaluator's largest
        part)."""
        objective = getattr(evaluator, "objective", "step")
        lb, parts = evaluator.bound_parts()
        certified = float(placement.meta.get("certified_bound_s") or 0.0)   # e.g. placer=optimal's MILP
        limit = float(self.placement.bound_time_limit_s or 0)
        cert_src = str(placement.meta.get("certified_bound_src") or "milp")
        if objective == "pipeline" and not certified and limit > 0 and math.isfinite(verdict.value):
            from orchestrator.placement.solve.config_bound import certify  # certify the gap of any placer
            from orchestrator.placement.solve.problem import PlacementProblem

            prob = PlacementProblem(graph, worker, evaluator)
            mine = prob.atoms_of(prob.sim.assignment(placement))
            certified, cert_src = certify(prob, evaluator.load_model, lb, verdict.value, limit, seeds=[mine])
        bound_src = cert_src if certified > lb else max(parts, key=parts.get)
        lb = max(lb, certified)
        m["placement.lower_bound_s"] = lb
        if lb > 0 and math.isfinite(verdict.value):
            m["placement.optimality_gap"] = verdict.value / lb - 1.0
        for dev, b in verdict.peak_memory_bytes.items():
            m[f"placement.memory_bytes.{dev}"] = b
        for dev, busy in verdict.busy_s.items():
            m[f"placement.utilisation.{dev}"] = busy / verdict.step_time_s if verdict.step_time_s else 0.0
        return bound_src

    def compare_simulated(self, graph, worker, evaluator, verdict) -> dict[str, float]:
        """``placer.compare_simulated``: the same placer searches again with the simulated reward,
        and its answer is measured like this search's (fresh, by the same evaluator), so the run
        says whether measuring paid: ``placement.vs_simulated_reward`` = that placement's measured
        step time / this one's (>= 1: this one is no slower)."""
        from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator

        sim = SimulatedEvaluator(graph, worker, "step", evaluator.memory_headroom, getattr(evaluator, "microbatch", None))
        context = PlacementContext(seed=self.train.seed, output_dir=self.output_dir, cfg=self.cfg)
        other = Placement.of(self.placer.place(graph, worker, sim, context), graph, self.names["placer"])
        v = evaluator.evaluate(other)
        return {"placement.simulated_reward_step_time_s": v.step_time_s,
                "placement.vs_simulated_reward": v.step_time_s / verdict.step_time_s}

    def measure_too(self, placed: PlacementOutcome, base_placement, model_spec) -> None:
        """On real devices, the chosen and the baseline placement also run for real: their measured
        step times are logged beside the simulated ones, and training uses the measured runtime."""
        placement, base, evaluator, m = placed.placement, placed.baseline, placed.evaluator, placed.metrics
        if evaluator.kind == "measured":
            placed.measured, placed.measured_baseline = evaluator, base
            placed.measured_step_s = m["placement.step_time_s"]
            return
        from orchestrator.placement.evaluate.measured_fit import median_rel_error

        measured = self.evaluator("final", placed.graph, placed.worker, model_spec)
        mv = measured.evaluate(placement)
        mb = measured.evaluate(base_placement) if base_placement is not None else None
        m["placement.measured_step_time_s"] = mv.step_time_s
        sim, real = [m["placement.step_time_s"]], [mv.step_time_s]
        if mb is not None:
            m["placement.measured_baseline_step_time_s"] = mb.step_time_s
            m["placement.measured_speedup"] = mb.step_time_s / mv.step_time_s
            if base is not None:
                sim, real = sim + [base.step_time_s], real + [mb.step_time_s]
        err = median_rel_error(sim, real)          # the simulator on the two placements measured
        if math.isfinite(err):
            m["placement.sim_error"] = err
        placed.measured, placed.measured_baseline, placed.measured_step_s = measured, mb, mv.step_time_s

    def baseline(self, graph, worker, evaluator, model_spec):
        """The reference placement: the human expert's where one exists (the workload's split file,
        else the manual placer's split, rules, the model's own rules or a literature rule such as
        rnn), else the best single accelerator that holds the model; none (no speedup) when no
        accelerator does. The manual placer itself is compared with the best single accelerator."""
        if self.names["placer"] != "manual":
            if model_spec.expert_split is not None:
                split = model_spec.expert_split.check(graph)
                return "expert split (model.split)", split, evaluator.evaluate(split)
            expert = self.manual_baseline(graph, worker)
            if expert is not None:
                expert, strategy = expert
                return f"expert placement (manual placer, strategy {strategy})", expert.check(graph), evaluator.evaluate(expert)
        if evaluator.kind == "measured":
            dev, v = evaluator.single_device_baseline()
            return f"single device {dev}", on_one_device(graph, worker, dev), v
        return best_accelerator(evaluator, graph, worker)

    def baseline_across(self, graph, worker, evaluator, model_spec, cluster):
        """``placement.hosts=all``: the best of the reference placement over every host's devices and on each host
        alone, judged alike (an expert placing on one machine is not charged a network it would not use)."""
        options = [self.baseline(graph, worker, evaluator, model_spec)]    # its single devices span every host
        for w in cluster.workers if self.names["placer"] != "manual" and model_spec.expert_split is None else []:
            expert = self.manual_baseline(graph, w)
            if expert is not None:
                placement, strategy = expert
                options.append((f"expert placement on {w.name} alone (manual placer, strategy {strategy})",
                                placement.check(graph), evaluator.evaluate(placement)))
        fits = [o for o in options if o[2] is not None and o[2].feasible] or options
        return min(fits, key=lambda o: math.inf if o[2] is None else o[2].value)

    def gantt(self, verdict, sink) -> None:
        result = getattr(verdict, "result", None)
        if result is None or not result.schedule:
            return
        from orchestrator.placement.simulate.gantt import gantt

        path = self.output_dir / "gantt.png"
        gantt(result, path)
        sink.log_artifact(path)

    def manual_baseline(self, graph, worker):
        """The human expert's placement that other placers are measured against, as (placement,
        strategy): the packaged ``placer/manual.yaml`` unless ``placer.baseline`` gives its own
        manual-placer config; None when its strategy is no expert's (``fastest``: one device)."""
        from orchestrator import plugins

        cfg = self.cfg.placer.get("baseline")   # None: the manual placer's schema defaults (its YAML sets no more)
        placer = plugins.load("placer", "manual")(cfg)
        context = PlacementContext(seed=self.train.seed, cfg=self.cfg)
        strategy_of = getattr(placer, "_strategy", None)
        strategy = strategy_of(graph, worker, context)[0] if strategy_of else "rules"
        if strategy == "fastest":
            return None
        return placer.place(graph, worker, None, context).check(graph), strategy


def keep_baseline(searched, base, base_placement) -> bool:
    """A measured search's answer is replaced by the baseline's placement when the baseline fits and measured
    faster (lower objective value): the trial never returns a placement slower than the one it is compared with."""
    return (base is not None and base_placement is not None and bool(base.feasible)
            and math.isfinite(base.value) and base.value < searched.value)
