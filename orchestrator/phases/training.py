"""The training phase of a trial: the data-parallel workers under the sync strategy (each stepping at
the speed its placement or fastest device gives it), or one worker (placed, simulated or on one real
device), and the speedup over the reference it is compared with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import InfeasiblePlacementError
from orchestrator.execution.training import TrainContext, TrainResult, log_final
from orchestrator.phases.placement import single_device


class TrainingPhase:
    """Trains the model of one trial. Like ``PlacementPhase`` it gets what it uses (the settings, the
    sync strategy or None, the placer for the workers it places itself, the placement phase for the
    graph, how to load the data), never the trial; ``run`` returns the final metrics."""

    def __init__(self, *, cfg: Any, settings: Any, sync: Any, placer: Any, placing: Any, runtime: str,
                 output_dir: Path, show_progress: bool, dataset: Any) -> None:
        self.cfg, self.settings, self.sync, self.placer, self.placing = cfg, settings, sync, placer, placing
        self.runtime, self.output_dir, self.show_progress, self.dataset = runtime, output_dir, show_progress, dataset

    def check_resources(self, model_spec: Any, cluster: Any) -> None:
        """The virtual runtime's memory bound, checked before the MLflow run starts: a trial that cannot
        fit (``hardware.workers=100000``) is a one-line error and leaves no run behind."""
        if not (self.sync is not None and self.runtime == "virtual" and model_spec.trainable_on_mnist
                and model_spec.build is not None):
            return
        from orchestrator.sync.limits import check_virtual_memory

        check_virtual_memory(len(cluster.workers), int(model_spec.new_model().count_params()), self.dataset())

    def run(self, model_spec: Any, cluster: Any, sink: Any, placed: Any) -> dict[str, float]:
        ctx = TrainContext(self.settings, self.dataset(), model_spec, cluster, sink, self.output_dir, self.cfg,
                           show_progress=self.show_progress)
        reference: float | None
        if self.sync is not None:
            from orchestrator.sync.compare import trial_context
            from orchestrator.sync.run import train as train_sync

            ctx.worker_step_time_s = self.worker_step_times(cluster, model_spec, placed, sink)
            result: TrainResult = train_sync(self.sync, ctx)
            reference = result.reference_time_to_target_s     # its tags: orchestrator.sync.reference
            result.extra_metrics.update(trial_context(self.sync, self.cfg, ctx, result))   # vs allreduce, limit
        else:
            result, reference = self.one_worker(ctx, placed)
        speedup = None
        mine = result.extra_metrics.get("train.estimated_time_to_target_s") or result.time_to_target_s
        if reference is not None and mine:
            speedup = reference / mine
        return log_final(result, sink, speedup=speedup, reference_time_to_target_s=reference,
                         num_classes=model_spec.num_classes)

    def worker_step_times(self, cluster: Any, model_spec: Any, placed: Any, sink: Any) -> dict[str, float]:
        """The speed-1.0 step time the data-parallel workers start from. On a simulated cluster
        whose workers have different devices, each distinct worker is placed (or put on its fastest
        device) and the workers' speeds follow from their step times, relative to the first."""
        if not cluster.simulated:
            return {w.name: placed.measured_step_s for w in cluster.workers} if placed else {}
        graph = placed.graph if placed else self.placing.graph(model_spec, "simulated")
        by_devices: dict[tuple, float] = {}
        steps: dict[str, float] = {}
        for w in cluster.workers:
            key = tuple((d.name, d.profile) for d in w.devices)
            if key not in by_devices:
                if placed is not None and w is placed.worker:
                    by_devices[key] = placed.verdict.step_time_s
                else:
                    by_devices[key] = self.step_time_on(w, graph, model_spec, placed)
            steps[w.name] = by_devices[key]
        ref = steps[cluster.workers[0].name]
        if len(by_devices) > 1:
            for w in cluster.workers:
                w.speed = w.speed * ref / steps[w.name]
        sink.log_metrics({**{f"hardware.step_time_s.{w.name}": steps[w.name] for w in cluster.workers},
                          **{f"hardware.speed.{w.name}": w.speed for w in cluster.workers}})
        return {w.name: ref for w in cluster.workers}

    def step_time_on(self, worker: Any, graph: Any, model_spec: Any, placed: Any) -> float:
        """The simulated step time of a worker the placement phase did not place: the placer's answer
        on it, else its fastest single device."""
        from orchestrator.graph import PlacementContext
        from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator

        evaluator = SimulatedEvaluator(graph, worker, microbatch=placed.microbatch if placed else None)
        if self.placer is not None:
            ctx = PlacementContext(seed=self.settings.seed, output_dir=self.output_dir, cfg=self.cfg)
            verdict = evaluator.evaluate(self.placer.place(graph, worker, evaluator, ctx).check(graph))
        else:
            verdict = single_device(evaluator, graph, worker)[1]
        if verdict is None or not verdict.feasible:
            raise InfeasiblePlacementError(f"model {model_spec.name} does not fit worker {worker.name}")
        return verdict.step_time_s

    def one_worker(self, ctx: TrainContext, placed: Any) -> tuple[TrainResult, float | None]:
        """One worker's training and the reference time to target it is compared with."""
        from orchestrator.execution.runtime import ModelRuntime
        from orchestrator.execution.single_worker import train_single_worker

        lr, seed = self.settings.lr, self.settings.seed
        if ctx.cluster.simulated:
            # Real gradients on this machine's CPU, but each update takes the simulated step time of
            # the placed model (or of the single fastest device) on the simulated worker.
            step, ref_step, label = self.simulated_step_times(ctx, placed)
            rt = ModelRuntime(ctx.model, seed=seed, lr=lr)
            result = train_single_worker(ctx, rt, virtual_step_time_s=step)
            ctx.sink.set_tags({"train.reference": label})
            ref = result.updates_to_target * ref_step if result.updates_to_target is not None else None
            return result, ref
        if placed is None:
            worker = ctx.cluster.workers[0]
            rt = ModelRuntime(ctx.model, seed=seed, lr=lr, default_device=worker.devices[0].tf_device or "/device:CPU:0")
            result = train_single_worker(ctx, rt)
            ctx.sink.set_tags({"train.reference": "this trial (single device of one worker)"})
            return result, result.time_to_target_s
        rt = placed.measured.runtime(placed.placement, lr=lr)
        result = train_single_worker(ctx, rt)
        reference = None
        if result.updates_to_target is not None and placed.measured_baseline is not None:
            # Placement does not change the arithmetic, so the reference needs the same number of
            # updates; each takes the baseline placement's measured step time.
            # both sides the same way: updates to target x each placement's measured step time
            reference = result.updates_to_target * placed.measured_baseline.step_time_s
            result.extra_metrics["train.estimated_time_to_target_s"] = result.updates_to_target * placed.measured_step_s
            ctx.sink.set_tags({"train.reference": "the baseline placement's training, estimated as this one's: updates "
                                                  "to target x each placement's measured step time"})
        return result, reference

    def simulated_step_times(self, ctx: TrainContext, placed: Any) -> tuple[float, float, str]:
        """(this trial's step time, the reference step time, a label) on a simulated worker."""
        if placed is not None and placed.baseline is not None:
            return (placed.verdict.step_time_s, placed.baseline.step_time_s,
                    "updates to target x baseline placement's simulated step time")
        from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator

        worker = ctx.cluster.workers[0]
        evaluator = SimulatedEvaluator(self.placing.graph(ctx.model, "simulated"), worker)
        label, verdict = single_device(evaluator, evaluator.graph, worker)
        if verdict is None:
            raise InfeasiblePlacementError(f"model {ctx.model.name} fits on no single device of {worker.name}; add a placer")
        step = placed.verdict.step_time_s if placed is not None else verdict.step_time_s
        ctx.sink.log_metrics({"train.simulated_step_time_s": step})
        return step, verdict.step_time_s, f"updates to target x simulated step time on {label}"
