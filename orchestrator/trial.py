"""One trial, read top to bottom in ``Trial.run``: the model, the hardware adapter's cluster, the
trial's MLflow run, the placement phase (the placer's placement judged by the shared evaluator), the
training phase (a sync strategy's data-parallel workers, or one worker) and the value the summary
reports; a planning trial (``+planner=``) plans the whole GPU cluster instead. Each phase lives in
``orchestrator.phases`` (``planning.phase`` for plans) and gets what it uses, never the trial."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig

from orchestrator import __version__
from orchestrator.api import TrialContext
from orchestrator.errors import ConfigError
from orchestrator.hardware.cluster import checked
from orchestrator.phases import setup
from orchestrator.phases.placement import PlacementPhase
from orchestrator.phases.tracking import TrialRecord, stop_if_interrupted
from orchestrator.phases.training import TrainingPhase
from orchestrator.summary import headline_speedup, objective_value


class Trial:
    """Built from the composed config: every plugin resolved and built, every value checked, before any
    MLflow run starts (a bad config is one line and leaves no run); ``run`` runs the phases."""

    def __init__(self, cfg: DictConfig, output_dir: Path):
        self.cfg, self.output_dir = cfg, output_dir
        self.names, self.labels = setup.group_names(cfg)
        # Resolve every plugin before anything starts, so that a bad name costs no MLflow run.
        classes = setup.load_plugins(self.names)
        self.model_fn, self.placer_cls = classes.model, classes.placer
        groups = setup.validated(cfg, classes)   # every group checked once, as its object (one line, before any run)
        self.settings, self.dataset_cfg, self.show_progress = groups.settings, groups.dataset, groups.show_progress
        self.objective_metric, self.direction = groups.objective_metric, groups.direction
        # Build the pieces whose config can be wrong before the run starts, too.
        self.hardware = setup.build("hardware", classes.hardware, cfg)
        self.placer = setup.build("placer", classes.placer, cfg)
        self.sync = setup.build("sync", classes.sync, cfg)
        self.planner = setup.build("planner", classes.planner, cfg)
        if self.sync is not None:
            self.sync.check_config(cfg)   # +sync=auto becomes here the strategy it picks (its sync group, train.lr)
            self.settings = dataclasses.replace(self.settings, lr=self.sync.run_options(cfg).train.lr)
        self.dataset = setup.LazyDataset(self.dataset_cfg, cfg)
        self.placing = PlacementPhase(cfg=cfg, names=self.names, settings=self.settings, placement=groups.placement,
                                      placer=self.placer, hardware=self.hardware, output_dir=output_dir,
                                      show_progress=self.show_progress, dataset=self.dataset)
        self.training = TrainingPhase(cfg=cfg, settings=self.settings, sync=self.sync, placer=self.placer,
                                      placing=self.placing, runtime=self.runtime_kind, output_dir=output_dir,
                                      show_progress=self.show_progress, dataset=self.dataset)
        self.record = TrialRecord(cfg, output_dir, self.objective_metric)

    has_sync = property(lambda self: self.sync is not None)

    def context(self, model_spec, sink=None) -> TrialContext:
        """What a plugin may use of this trial (``orchestrator.api.TrialContext``)."""
        return TrialContext(cfg=self.cfg, names=dict(self.names), model=model_spec, has_sync=self.has_sync,
                            trains=bool(model_spec.trainable_on_mnist), output_dir=self.output_dir,
                            **({"sink": sink} if sink is not None else {}))

    @property
    def runtime_kind(self) -> str:
        return str(self.sync.config.runtime) if self.sync is not None else "local"   # the strategy's typed sync group

    def run_name(self, cluster: str = "") -> str:
        custom = (self.cfg.get("tracking") or {}).get("run_name")
        if custom:
            return str(custom)
        n = self.labels
        if self.planner is not None:
            where = f"{n['hardware']} ({cluster})" if cluster else n["hardware"]       # runs on different clusters differ
            name = f"plan:{n['planner']}/{where}/{self.cfg.model.get('name', n['model'])}"
            return (name + setup.sweep_suffix())[:250]
        name = f"{n['placer'] or 'none'}/{n['sync'] or 'none'}/{n['hardware']}/{n['model']}"
        return (name + setup.sweep_suffix())[:250]

    # -- the trial ----------------------------------------------------------------------------
    def run(self) -> float:
        try:
            return self._run()
        finally:
            close = getattr(self.hardware, "close", None)
            if close is not None:
                close()  # stop the processes a hardware adapter started (tf_cluster servers)

    def _run(self) -> float:
        model_spec = self.model_spec = self.model_fn(self.cfg.model)                 # the model
        if self.planner is not None:
            return self._plan(model_spec)                                           # or a plan for a GPU cluster
        if self.labels.get("sync") and not model_spec.trainable_on_mnist:           # nothing to combine gradients of
            raise ConfigError(f"+sync={self.labels['sync']} trains the model on data, and model={self.labels['model']} "
                              "is placed only (it has no training data here): drop +sync, or use model=cnn")
        cluster = checked(self.hardware.cluster(self.context(model_spec)), self.labels["hardware"])   # the hardware
        self.placing.simulated_cluster = cluster.simulated
        tags = self._tags(cluster, self._evaluator_kind(cluster))
        self.training.check_resources(model_spec, cluster)
        with self.record.open(self.run_name(), tags) as (sink, metrics):            # tracking
            sink.log_metrics({"workers": len(cluster.workers)})  # data-parallel workers (a column in the UI)
            placed = None
            if self.placer is not None:                                             # the placement phase
                placed = self.placing.place(model_spec, cluster, self.reward, sink)
                metrics.update(placed.metrics)
                pm = placed.metrics
                base = pm.get("placement.baseline_step_time_s")
                stop_if_interrupted(sink, "placement", f"the best placement so far takes {pm['placement.step_time_s']:.4g} s "
                                    "per step" + (f" (its baseline {base:.4g} s)" if base else "")
                                    + f", saved as placement.json in {self.output_dir}")
            if model_spec.trainable_on_mnist:                                       # the training phase
                metrics.update(self.training.run(model_spec, cluster, sink, placed))
                stop_if_interrupted(sink, "training")
            speedup = headline_speedup(metrics, trained=model_spec.trainable_on_mnist)
            if speedup:
                sink.log_metrics(speedup)
        return self._summary(metrics, workers=len(cluster.workers), runtime=self.runtime_kind,  # the summary
                             target=self.settings.target_accuracy)

    def _plan(self, model_spec) -> float:
        """A planning trial: the planner's plan for the GPU cluster, judged by the plan simulator."""
        from orchestrator.planning.phase import PlanningPhase

        phase = PlanningPhase(self.cfg, self.planner, self.hardware, self.output_dir)
        profile, tags = phase.prepare(model_spec, self.placing, self.labels, __version__)
        with self.record.open(self.run_name(phase.run_label()), tags) as (sink, metrics):
            metrics.update(phase.run(model_spec, profile, sink))
        return self._summary(metrics, workers=0, runtime="plan", target=None, plan=phase.estimate)

    def _summary(self, metrics: dict[str, float], **facts) -> float:
        """What the summary reads (``outcome``) and the value the trial returns."""
        self.outcome = {**self.record.outcome, **facts}
        return objective_value(self.outcome, metrics, self.objective_metric)

    def _tags(self, cluster, evaluator_kind: str) -> dict[str, str]:
        return {"placer": self.labels["placer"] or "none", "sync": self.labels["sync"] or "none",
                "hardware": self.labels["hardware"], "model": self.labels["model"],
                "evaluator": evaluator_kind, "runtime": self.runtime_kind,
                "orchestrator.version": __version__, "cluster.simulated": str(cluster.simulated).lower(),
                **getattr(self.sync, "trial_tags", {})}   # +sync=auto's decision (sync.auto.*)

    def _evaluator_kind(self, cluster) -> str:
        if self.placer is None:
            return "measured" if not cluster.simulated else "simulated"
        # placer.reward (auto | simulated | measured | mixed)
        from orchestrator.placement.evaluate.measured import resolve_reward

        self.reward = resolve_reward(self.cfg.placer, cluster.simulated, self.placer_cls, self.names["hardware"])
        return "simulated" if self.reward == "simulated" else "measured"    # the final verdict's kind
