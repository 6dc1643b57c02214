"""One trial: hardware adapter -> cluster, model -> graph, placer -> placement (judged by the shared
evaluator), sync strategy or single worker -> training, all recorded in one MLflow run."""

from __future__ import annotations

import dataclasses
import math
import sys
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from orchestrator import __version__, plugins
from orchestrator.api import TrialContext
from orchestrator.config import from_node, schema_of, validate
from orchestrator.config.model import MNISTDatasetConfig
from orchestrator.config.root import ObjectiveConfig
from orchestrator.errors import ConfigError, InfeasiblePlacementError, Interrupt, PluginError, number
from orchestrator.execution.training import TrainContext, TrainResult, TrainSettings, log_final
from orchestrator.phases.placement import PlacementPhase, single_device
from orchestrator.progress import enabled as progress_enabled
from orchestrator.sync.compare import trial_context
from orchestrator.sync.run import train as train_sync
from orchestrator.sync.strategy import SyncStrategy


def _choices() -> dict[str, str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}
    except Exception:  # not running under Hydra (tests, API use)
        return {}


def sweep_suffix() -> str:
    """In a sweep, `` #N [overrides]``: the job number and this trial's overrides that are not group
    choices (those are in the name), so that the trials of a sweep have different run names."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return ""
        task, num = list(hc.overrides.task), hc.job.get("num")
    except Exception:
        return ""
    groups = ("placer=", "sync=", "hardware=", "model=", "+placer=", "+sync=", "+experiment=", "dataset=")
    varied = [o for o in task if not o.startswith(groups)]
    return (f" #{num}" if num is not None else "") + (f" [{' '.join(varied)}]" if varied else "")


def _name(cfg: DictConfig, group: str) -> str | None:
    node = cfg.get(group)
    if node is None:
        return None
    if not isinstance(node, DictConfig) or "name" not in node:
        raise ConfigError(f"config group {group!r} has no 'name' (got {OmegaConf.to_yaml(node).strip()[:80]!r})")
    # an option whose 'name' means something else (model=llm: the model in the profile files) names
    # its plugin under 'plugin'
    return str(node.get("plugin") or node.name)


def _build(group: str, cls, cfg: DictConfig):
    """A plugin built from its config group. Its values were checked against its schema
    (``orchestrator.config.validate``) before; a plugin without a schema that cannot convert a value
    (``float('abc')``) is still a one-line ``ConfigError``, naming the group."""
    node = cfg.get(group)
    try:
        return cls(node)
    except (ValueError, TypeError) as exc:
        name = node.get("name") if isinstance(node, DictConfig) else None
        raise ConfigError(f"{group}={name}: a {group}.* value cannot be used by its plugin "
                          f"({str(exc).splitlines()[0][:200]})") from None


def dataset_config(cfg: DictConfig) -> MNISTDatasetConfig:
    """The trial's ``dataset`` group, typed: MNIST-format IDX files (MNIST, Fashion-MNIST)."""
    node = cfg.get("dataset")
    typed = schema_of(node)
    return from_node(typed if typed is not None and issubclass(typed, MNISTDatasetConfig) else MNISTDatasetConfig,
                     node, "dataset")


def _stop_if_interrupted(sink, phase: str) -> None:
    """A phase that kept its best result when interrupted (a placer's search) returned normally: the
    run still ends KILLED, and what it logged is tagged partial."""
    if Interrupt.signal is not None:
        sink.set_tags({"orchestrator.partial": "true", "orchestrator.interrupted_in": phase})
        raise KeyboardInterrupt(f"signal {Interrupt.signal} during {phase}")


class Trial:
    def __init__(self, cfg: DictConfig, output_dir: Path):
        self.cfg = cfg
        self.output_dir = output_dir
        self.names = {g: _name(cfg, g) for g in ("placer", "sync", "hardware", "model", "planner")}
        # The option a user picked (hardware=sim_1cpu_4gpu) says more than the plugin behind it
        # (simulated): tags and run names use the option where Hydra knows it.
        self.labels = dict(self.names)
        self.labels.update({g: c for g, c in _choices().items() if g in self.labels and c and self.names.get(g)})
        if self.names["hardware"] is None or self.names["model"] is None:
            raise ConfigError("the config needs a hardware and a model group")
        # Resolve every plugin before anything starts, so that a bad name costs no MLflow run.
        self.hardware_cls = plugins.load("hardware", self.names["hardware"])
        self.model_fn = plugins.load("model", self.names["model"])
        self.placer_cls = plugins.load("placer", self.names["placer"]) if self.names["placer"] else None
        self.sync_cls = plugins.load("sync", self.names["sync"]) if self.names["sync"] else None
        self.planner_cls = plugins.load("planner", self.names["planner"]) if self.names["planner"] else None
        if self.planner_cls is not None and (self.placer_cls is not None or self.sync_cls is not None):
            raise ConfigError("+planner= plans a whole cluster (placement and data parallelism in one plan): "
                              "drop +placer= and +sync= from a planning trial")
        if self.sync_cls is not None and not (isinstance(self.sync_cls, type) and issubclass(self.sync_cls, SyncStrategy)):
            raise PluginError(f"sync strategy {self.names['sync']!r} ({self.sync_cls!r}) is not a subclass of "
                              "orchestrator.api.CollectiveStrategy or ServerStrategy")
        validate(cfg)  # every typed key: type, range, choices, no unknown key (one line, before any run)
        self.settings = TrainSettings.from_cfg(cfg.get("train"), seed=cfg.get("seed"))
        if self.sync_cls is not None:
            from orchestrator.sync.reference import check_grid

            check_grid((cfg.get("train") or {}).get("reference_grid"))
        objective = from_node(ObjectiveConfig, cfg.get("objective"), "objective")
        self.objective_metric, self.direction = objective.metric, objective.direction
        if self.planner_cls is not None and self.objective_metric == "speedup":   # the default: a plan's own figure
            self.objective_metric = "plan.samples_per_s"
        self.show_progress = progress_enabled(cfg.get("progress", "auto"))
        # Build the pieces whose config can be wrong before the run starts, too.
        self.dataset_cfg = dataset_config(cfg)
        raw, ds = cfg.get("train") or {}, self.dataset_cfg   # null / auto: the dataset's target, cadence and budget
        from_dataset = {"target_accuracy": float(ds.target_accuracy) if raw.get("target_accuracy") is None else None,
                        "eval_every": int(ds.eval_every) if raw.get("eval_every") is None else None,
                        "budget_updates": int(ds.budget_updates) if raw.get("budget_updates", "auto") == "auto" else None}
        self.settings = dataclasses.replace(self.settings, **{k: v for k, v in from_dataset.items() if v is not None})
        self.hardware = _build("hardware", self.hardware_cls, cfg)
        self.placer = _build("placer", self.placer_cls, cfg) if self.placer_cls else None
        self.sync = _build("sync", self.sync_cls, cfg) if self.sync_cls else None
        self.planner = _build("planner", self.planner_cls, cfg) if self.planner_cls else None
        if self.sync is not None:
            self.sync.check_config(cfg)
        self.placing = PlacementPhase(cfg=cfg, names=self.names, settings=self.settings, placer=self.placer,
                                      hardware=self.hardware, output_dir=output_dir, show_progress=self.show_progress,
                                      dataset=self._dataset)

    has_sync = property(lambda self: self.sync is not None)

    def context(self, model_spec, sink=None) -> TrialContext:
        """What a plugin may use of this trial (``orchestrator.api.TrialContext``)."""
        return TrialContext(cfg=self.cfg, names=dict(self.names), model=model_spec, has_sync=self.has_sync,
                            trains=bool(model_spec.trainable_on_mnist), output_dir=self.output_dir,
                            **({"sink": sink} if sink is not None else {}))

    @property
    def runtime_kind(self) -> str:
        return str(self.cfg.sync.get("runtime", "virtual")) if self.sync is not None else "local"

    def run_name(self) -> str:
        custom = (self.cfg.get("tracking") or {}).get("run_name")
        if custom:
            return str(custom)
        n = self.labels
        if self.planner is not None:
            name = f"plan:{n['planner']}/{n['hardware']}/{self.cfg.model.get('name', n['model'])}"
            return (name + sweep_suffix())[:250]
        name = f"{n['placer'] or 'none'}/{n['sync'] or 'none'}/{n['hardware']}/{n['model']}"
        return (name + sweep_suffix())[:250]

    # -- the trial ----------------------------------------------------------------------------
    def run(self) -> float:
        try:
            return self._run()
        finally:
            close = getattr(self.hardware, "close", None)
            if close is not None:
                close()  # stop the processes a hardware adapter started (tf_cluster servers)

    @contextmanager
    def _recorded(self, tags: dict[str, str]):
        """The trial's MLflow run, with the listeners told of its start and of how it ended; yields
        (sink, metrics), the metrics a FINISHED trial hands its listeners."""
        from orchestrator.tracking import store as tracking

        commit = tracking.git_commit()
        if commit:
            tags["orchestrator.git_commit"] = commit
        pm = plugins.get_plugin_manager()
        with tracking.trial_run(self.cfg, run_name=self.run_name(), tags=tags, output_dir=self.output_dir,
                                config_yaml=OmegaConf.to_yaml(self.cfg, resolve=True)) as sink:
            pm.hook.orchestrator_trial_start(run_id=sink.run_id, cfg=self.cfg)
            metrics: dict[str, float] = {}
            try:
                yield sink, metrics
                self._note_sweep_value(metrics.get(self.objective_metric, sink.latest.get(self.objective_metric)))
            except BaseException as exc:  # listeners hear of failed and killed trials too
                status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
                pm.hook.orchestrator_trial_end(run_id=sink.run_id, cfg=self.cfg, status=status, metrics=dict(sink.latest))
                raise
            pm.hook.orchestrator_trial_end(run_id=sink.run_id, cfg=self.cfg, status="FINISHED", metrics=metrics)
        self.outcome = {"run_id": sink.run_id, "uri": tracking.tracking_uri(self.cfg), "metrics": dict(sink.latest),
                        "tags": {**tags, **sink.tags}, "experiment_id": getattr(sink, "experiment_id", None),
                        "experiment": (self.cfg.get("tracking") or {}).get("experiment") or "orchestrator"}

    def _value(self, metrics: dict[str, float]) -> float:
        value = metrics.get(self.objective_metric, self.outcome["metrics"].get(self.objective_metric))
        if value is None:
            why = (" (it missed its target: no time to target, so no speedup)"
                   if self.outcome["tags"].get("train.reached_target") == "false" else "")
            print(f"objective.metric {self.objective_metric!r} was not logged by this trial{why}", flush=True)
            return math.nan
        return float(value)

    def _run(self) -> float:
        model_spec = self.model_spec = self.model_fn(self.cfg.model)
        if self.planner is not None:
            return self._plan(model_spec)
        cluster = self.hardware.cluster(self.context(model_spec))
        self.placing.simulated_cluster = cluster.simulated
        evaluator_kind = self._evaluator_kind(cluster)
        self._check_resources(model_spec, cluster)
        tags = {
            "placer": self.labels["placer"] or "none", "sync": self.labels["sync"] or "none",
            "hardware": self.labels["hardware"], "model": self.labels["model"],
            "evaluator": evaluator_kind, "runtime": self.runtime_kind,
            "orchestrator.version": __version__, "cluster.simulated": str(cluster.simulated).lower(),
        }
        with self._recorded(tags) as (sink, metrics):
            sink.log_metrics({"workers": len(cluster.workers)})  # data-parallel workers (a column in the UI)
            placed = None
            if self.placer is not None:
                placed = self.placing.place(model_spec, cluster, self.reward, sink)
                metrics.update(placed.metrics)
                _stop_if_interrupted(sink, "placement")
            if model_spec.trainable_on_mnist:
                metrics.update(self._train(model_spec, cluster, sink, placed))
                _stop_if_interrupted(sink, "training")
            # One meaning per trial: the training speedup when it trained (absent if the target was
            # not reached), the placement speedup when it only placed.
            key = "train.speedup" if model_spec.trainable_on_mnist else "placement.speedup"
            if key in metrics:
                metrics["speedup"] = metrics[key]
            if "speedup" in metrics:
                sink.log_metrics({"speedup": metrics["speedup"]})
        self.outcome.update({"workers": len(cluster.workers), "runtime": self.runtime_kind,
                             "target": self.settings.target_accuracy})
        return self._value(metrics)

    def _plan(self, model_spec) -> float:
        """A planning trial: the planner's plan for the GPU cluster, judged by the plan simulator."""
        from orchestrator.planning.phase import PlanningPhase

        phase = PlanningPhase(self.cfg, self.planner, self.hardware, self.output_dir)
        profile, tags = phase.prepare(model_spec, self.placing, self.labels, __version__)
        with self._recorded(tags) as (sink, metrics):
            metrics.update(phase.run(model_spec, profile, sink))
        self.outcome.update({"workers": 0, "runtime": "plan", "target": None, "plan": phase.estimate})
        return self._value(metrics)

    def _note_sweep_value(self, value) -> None:
        """In an Optuna sweep, the objective goes on the study's trial before the run is marked FINISHED,
        so a sweep interrupted from here on resumes with this trial COMPLETE, not FAIL."""
        from orchestrator.tracking.sweep import note_trial_value
        try:
            note_trial_value(self.cfg, value)
        except Exception as exc:  # the study is a convenience for resuming; the trial is recorded
            print(f"could not note the value in the Optuna study: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _evaluator_kind(self, cluster) -> str:
        if self.placer is None:
            return "measured" if not cluster.simulated else "simulated"
        # placer.reward (simulated | measured | mixed; placer.evaluator is its deprecated alias)
        from orchestrator.placement.evaluate.measured import resolve_reward

        self.reward = resolve_reward(self.cfg.placer, cluster.simulated, self.placer_cls, self.names["hardware"])
        return "simulated" if self.reward == "simulated" else "measured"    # the final verdict's kind

    def _check_resources(self, model_spec, cluster) -> None:
        """The virtual runtime's memory bound, checked before the MLflow run starts: a trial that cannot
        fit (``hardware.workers=100000``) is a one-line error and leaves no run behind."""
        if not (self.has_sync and self.runtime_kind == "virtual" and model_spec.trainable_on_mnist
                and model_spec.build is not None):
            return
        from orchestrator.sync.limits import check_virtual_memory

        check_virtual_memory(len(cluster.workers), int(model_spec.new_model().count_params()), self._dataset())

    def _dataset(self):
        if getattr(self, "_loaded_dataset", None) is None:
            self._loaded_dataset = self._load_dataset()
        return self._loaded_dataset

    def _load_dataset(self):
        from orchestrator.data import load_mnist
        ds = self.dataset_cfg
        return load_mnist(ds.path, seed=number(self.cfg.get("seed", 0), "seed", int),
                          test_fraction=ds.test_fraction, limit=ds.limit)

    def _train(self, model_spec, cluster, sink, placed) -> dict[str, float]:
        ctx = TrainContext(self.settings, self._dataset(), model_spec, cluster, sink, self.output_dir, self.cfg,
                           show_progress=self.show_progress)
        reference: float | None
        if self.sync is not None:
            ctx.worker_step_time_s = self._worker_step_times(cluster, model_spec, placed, sink)
            result: TrainResult = train_sync(self.sync, ctx)
            reference = result.reference_time_to_target_s     # its tags: orchestrator.sync.reference
            result.extra_metrics.update(trial_context(self.sync, self.cfg, ctx, result))   # vs allreduce, limit
        else:
            result, reference = self._train_one_worker(ctx, placed)
        speedup = None
        mine = result.extra_metrics.pop("train.estimated_time_to_target_s", None) or result.time_to_target_s
        if reference is not None and mine:
            speedup = reference / mine
        return log_final(result, sink, speedup=speedup, reference_time_to_target_s=reference,
                         num_classes=model_spec.num_classes)

    def _worker_step_times(self, cluster, model_spec, placed, sink) -> dict[str, float]:
        """The speed-1.0 step time the data-parallel workers start from. On a simulated cluster
        whose workers have different devices, each distinct worker is placed (or put on its fastest
        device) and the workers' speeds follow from their step times, relative to the first."""
        if not cluster.simulated:
            return {w.name: placed.measured_step_s for w in cluster.workers} if placed else {}
        from orchestrator.graph import PlacementContext
        from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator

        graph = placed.graph if placed else self.placing.graph(model_spec, "simulated")
        by_devices: dict[tuple, float] = {}
        steps: dict[str, float] = {}
        for w in cluster.workers:
            key = tuple((d.name, d.profile) for d in w.devices)
            if key not in by_devices:
                if placed is not None and w is placed.worker:
                    by_devices[key] = placed.verdict.step_time_s
                else:
                    evaluator = SimulatedEvaluator(graph, w, microbatch=placed.microbatch if placed else None)
                    if self.placer is not None:
                        ctx = PlacementContext(seed=self.settings.seed, output_dir=self.output_dir, cfg=self.cfg)
                        verdict = evaluator.evaluate(self.placer.place(graph, w, evaluator, ctx).check(graph))
                    else:
                        verdict = single_device(evaluator, graph, w)[1]
                    if verdict is None or not verdict.feasible:
                        raise InfeasiblePlacementError(f"model {model_spec.name} does not fit worker {w.name}")
                    by_devices[key] = verdict.step_time_s
            steps[w.name] = by_devices[key]
        ref = steps[cluster.workers[0].name]
        if len(by_devices) > 1:
            for w in cluster.workers:
                w.speed = w.speed * ref / steps[w.name]
        sink.log_metrics({**{f"hardware.step_time_s.{w.name}": steps[w.name] for w in cluster.workers},
                          **{f"hardware.speed.{w.name}": w.speed for w in cluster.workers}})
        return {w.name: ref for w in cluster.workers}

    def _train_one_worker(self, ctx: TrainContext, placed) -> tuple[TrainResult, float | None]:
        from orchestrator.execution.runtime import ModelRuntime
        from orchestrator.execution.single_worker import train_single_worker

        lr, seed = self.settings.lr, self.settings.seed
        if ctx.cluster.simulated:
            # Real gradients on this machine's CPU, but each update takes the simulated step time of
            # the placed model (or of the single fastest device) on the simulated worker.
            step, ref_step, label = self._simulated_step_times(ctx, placed)
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
            ctx.sink.set_tags({"train.reference": "estimated, both sides alike: updates to target x the baseline "
                                                  "placement's measured step time, over x this placement's"})
        return result, reference

    def _simulated_step_times(self, ctx: TrainContext, placed) -> tuple[float, float, str]:
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
