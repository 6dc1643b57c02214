"""The planning phase of a trial (``+planner=NAME``): the GPU cluster from the hardware adapter, the
layered profile from the model, the planner's plan judged by the chosen simulator (and, for comparison,
by the other registered ones), everything logged to the trial's MLflow run: ``plan.*`` metrics, ``plan.json``,
``plan_sailor.json``, the Gantt of one iteration and the layer map."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.plan import GpuCluster, LayeredProfile, Plan
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.plots import gantt, layer_map
from orchestrator.planning.simulators import PlanSimulator, simulator, simulator_names

DEFAULT_GLOBAL_BATCH = 1024


# GPU type name prefixes -> the built-in device profile a derived layered profile uses for them
DEVICE_PROFILES = (("A100", "A100 (datasheet)"), ("V100", "V100 (datasheet)"), ("H100", "H100 (datasheet)"),
                   ("H200", "H200 (datasheet)"), ("GH", "H200 (datasheet)"), ("K80", "K80 (datasheet)"))


def layered_profile(model_spec: Any, graph: Any = None, cluster: GpuCluster | None = None) -> LayeredProfile:
    """The model's layered profile: given (``model=llm``), else derived from its layer graph for the
    cluster's GPU types (each costed with the built-in device profile its name starts with)."""
    given = (model_spec.extra or {}).get("layered_profile")
    if given is not None:
        return given
    if graph is None or cluster is None:
        raise ConfigError(f"model {model_spec.name} has no layered profile to plan with (use model=llm)")
    from orchestrator.plan.derived import layered_profile as derive

    gpus = {t: prof for t in cluster.types for prefix, prof in DEVICE_PROFILES if t.upper().startswith(prefix)}
    if not gpus:
        raise ConfigError(f"model {model_spec.name}: no built-in device profile for the GPU types "
                          f"{', '.join(sorted(cluster.types))} (known prefixes: {', '.join(p for p, _ in DEVICE_PROFILES)})")
    batch = int((model_spec.extra or {}).get("global_batch") or DEFAULT_GLOBAL_BATCH)
    return derive(graph, model_spec.name, gpus, batch=batch)


class PlanningPhase:
    def __init__(self, cfg: Any, planner: Any, hardware: Any, output_dir: Path):
        self.cfg, self.planner, self.hardware, self.output_dir = cfg, planner, hardware, output_dir
        node = cfg.get("planner")
        self.sim: PlanSimulator = simulator(str(node.get("simulator", "project")))    # resolved once, here
        self.objective = PlanObjective(str(node.get("objective", "throughput")), node.get("min_samples_per_s"),
                                       node.get("max_usd_per_hour"))
        self.compare = bool(node.get("compare_simulators", True))

    def prepare(self, model_spec: Any, placing: Any, labels: dict[str, Any], version: str) -> tuple[LayeredProfile, dict[str, str]]:
        """The layered profile (derived from the model's graph when it has none) and the run's tags; a bad
        cluster is a one-line error here, before the run starts."""
        graph = None
        if (model_spec.extra or {}).get("layered_profile") is None:
            graph = placing.graph(model_spec, "simulated")
        profile = layered_profile(model_spec, graph, self.cluster())
        tags = {"planner": labels["planner"] or "none", "placer": "none", "sync": "none",
                "hardware": labels["hardware"], "model": str(self.cfg.model.get("name", labels["model"])),
                "evaluator": "simulated", "runtime": "plan", "orchestrator.version": version,
                "cluster.simulated": "true", "plan.simulator": self.sim.name}
        return profile, tags

    def cluster(self) -> GpuCluster:
        get = getattr(self.hardware, "gpu_cluster", None)
        if get is None:
            raise ConfigError("a planning trial (+planner=...) needs hardware=gpu_cluster (a cluster of GPUs)")
        return get()

    def global_batch(self, model_spec: Any, profile: LayeredProfile) -> int:
        given = (model_spec.extra or {}).get("global_batch")
        if given:
            return int(given)
        from_file = getattr(self.planner, "global_batch", None)
        if from_file is not None and from_file():
            return int(from_file())
        return int(profile.global_batch or DEFAULT_GLOBAL_BATCH)

    def run(self, model_spec: Any, profile: LayeredProfile, sink: Any) -> dict[str, float]:
        cluster = self.cluster()
        batch = self.global_batch(model_spec, profile)
        if not cluster.gpus and hasattr(self.planner, "read"):      # without hardware.gpus: the plan's own GPUs
            cluster = cluster.with_gpus({t: {z: n} for (t, z), n in self.planner.read().gpus_used().items()})
        evaluator = PlanEvaluator(self.sim, profile, cluster, batch)
        t0 = time.perf_counter()
        plan: Plan = self.planner.plan(profile, cluster, self.objective, evaluator)
        search_s = time.perf_counter() - t0
        evaluator.check(plan)
        if plan.global_batch is None:
            plan.global_batch = batch
        est = evaluator.evaluate(plan, timeline=True)
        metrics = self.metrics(plan, est, search_s, evaluator)
        metrics.update(getattr(self.planner, "stats", {}) or {})
        bound = self.sim.lower_bound(profile, cluster, batch, plan)
        if bound < float("inf"):
            metrics["plan.bound_iteration_s"] = bound
            metrics["plan.optimality_gap"] = est.iteration_s / bound - 1.0
        tags = {"plan.simulator": est.simulator, "plan.description": plan.describe()[:4900],
                "plan.cluster": cluster.describe(), "plan.objective": self.objective.kind,
                "plan.fits": str(est.fits).lower()}
        if not est.fits:
            tags["plan.violations"] = "; ".join(est.violations)[:4900]
        if self.compare:
            self.compare_simulators(plan, profile, cluster, batch, metrics, tags)
        metrics[f"plan.iteration_s.{est.simulator}"] = est.iteration_s
        sink.log_metrics(metrics)
        sink.set_tags(tags)
        self.artifacts(plan, est, profile, sink)
        self.estimate = est
        return metrics

    def compare_simulators(self, plan: Plan, profile: LayeredProfile, cluster: GpuCluster, batch: int,
                           metrics: dict[str, float], tags: dict[str, str]) -> None:
        """The plan's figure on every other registered simulator (``plan.iteration_s.NAME``)."""
        for other in simulator_names():
            if other == self.sim.name:
                continue
            try:
                metrics[f"plan.iteration_s.{other}"] = simulator(other).estimate(plan, profile, cluster, batch).iteration_s
            except ConfigError as exc:
                tags[f"plan.iteration_s.{other}"] = f"not available: {exc}"[:400]

    @staticmethod
    def metrics(plan: Plan, est: PlanEstimate, search_s: float, evaluator: PlanEvaluator) -> dict[str, float]:
        # a plan that does not fit is never figured as if it did: its time goes under another name
        key = "plan.iteration_s" if est.fits else "plan.iteration_s_if_it_fitted"
        m = {key: est.iteration_s, "plan.fits": float(est.fits), "plan.usd_per_iteration": est.usd_per_iteration,
             "plan.bubble_fraction": est.bubble_fraction, "plan.search_time_s": search_s,
             "plan.gpus": float(plan.gpus), "plan.pipelines": float(len(plan.pipelines)), "plan.mbs": float(plan.mbs),
             "plan.global_batch": float(est.global_batch), "plan.evaluations": float(evaluator.evaluations),
             "plan.skipped_candidates": float(evaluator.skipped)}
        if est.fits:
            m["plan.samples_per_s"] = est.samples_per_s
        for gpu, peak in est.peak_memory.items():
            m[f"plan.peak_memory_bytes.{gpu}"] = peak
        for s in est.stages:
            pre = f"plan.stage.p{s.pipeline}.s{s.stage}"
            m.update({f"{pre}.compute_s": s.compute_s, f"{pre}.send_s": s.send_s,
                      f"{pre}.allreduce_s": s.allreduce_s, f"{pre}.update_s": s.update_s})
        return m

    def artifacts(self, plan: Plan, est: PlanEstimate, profile: LayeredProfile, sink: Any) -> None:
        out = self.output_dir / "plan"
        for path in plan.write(out):
            sink.log_artifact(path)
        title = (f"{profile.model}: {est.iteration_s:.4g} s/iteration (simulated, {est.simulator} simulator)"
                 + ("" if est.fits else " - DOES NOT FIT in memory"))
        pictures = [gantt(est, out / "plan_gantt.png", title),
                    layer_map(plan, profile.num_layers, out / "plan_layers.png", f"{profile.model}: which GPUs hold which layers")]
        for p in pictures:
            if p is not None:
                sink.log_artifact(p)
