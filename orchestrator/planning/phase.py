"""The planning phase of a trial (``+planner=NAME``): the GPU cluster from the hardware adapter, the
layered profile from the model, the planner's plan judged by the chosen simulator (and, for comparison,
by the other registered ones), everything logged to the trial's MLflow run: ``plan.*`` metrics, ``plan.json``,
``plan_sailor.json``, the Gantt of one iteration and the layer map."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any, NamedTuple

from orchestrator import cache
from orchestrator.errors import ConfigError, InfeasiblePlanError, WorkloadError
from orchestrator.hardware.catalog import default_catalog
from orchestrator.hardware.gpu_cluster import GpuCluster, price_source
from orchestrator.hardware.profiles import GPU_TYPE_PREFIXES, for_gpu_type
from orchestrator.plan import LayeredProfile, Plan
from orchestrator.plan.derive import at_precision, precisions, variant, with_recompute
from orchestrator.plan.fill import derive_for_cluster, derived_tags, fill_measured
from orchestrator.planning.estimate import PlanEstimate
from orchestrator.planning.evaluator import PlanEvaluator, PlanObjective
from orchestrator.planning.plots import gantt, layer_map
from orchestrator.planning.simulators import PlanSimulator, simulator, simulator_names
from orchestrator.planning.trust import Trust, assess, compare_simulators, disagreements, measured_errors

DEFAULT_GLOBAL_BATCH = 1024


def layered_profile(model_spec: Any, graph: Any = None, cluster: GpuCluster | None = None) -> LayeredProfile:
    """The model's layered profile: given (``model=llm``), else derived from its layer graph for the
    cluster's GPU types (each costed with the built-in device profile its name starts with, ``for_gpu_type``)."""
    given = (model_spec.extra or {}).get("layered_profile")
    if given is not None:
        return given
    if graph is None or cluster is None:
        raise ConfigError(f"model {model_spec.name} has no layered profile to plan with (use model=llm)")
    from orchestrator.plan.derived import layered_profile as derive

    gpus = {t: kind.name for t in cluster.types if (kind := for_gpu_type(t)) is not None}
    if not gpus:
        raise ConfigError(f"model {model_spec.name}: no built-in device profile for the GPU types "
                          f"{', '.join(sorted(cluster.types))} (known prefixes: {', '.join(p for p, _ in GPU_TYPE_PREFIXES)})")
    batch = int((model_spec.extra or {}).get("global_batch") or DEFAULT_GLOBAL_BATCH)
    return derive(graph, model_spec.name, gpus, batch=batch)


def check_covered(profile: LayeredProfile, cluster: GpuCluster) -> None:
    """Every GPU the cluster lists can be planned for: its type has profile entries, and the links its machines
    need exist (between two of its machines in its zone when it has more than one there; inside a machine).
    Otherwise one line naming the missing entry: a planner would leave those GPUs out without a word, and a
    bound over the rest would not hold for the cluster given."""
    for (t, z), n in sorted((key, n) for key, n in cluster.gpus.items() if n > 0):
        per_node = cluster.gpu_type(t).gpus_per_node
        if not any(profile.tp_degrees(t, mbs) for mbs in profile.micro_batches(t)):
            derived = profile.source.startswith("derived")
            how = (f"a derived profile needs a GPU type whose name starts with {', '.join(p for p, _ in GPU_TYPE_PREFIXES)}"
                   if derived else f"add {t} to {profile.source or 'the profile'}/profiles_tmp.json (the GPU catalog, "
                   f"which derives the types it has, has no {t}: {', '.join(default_catalog().names())})")
            raise ConfigError(f"hardware.gpus lists {n} {t} GPUs but model {profile.model} has no profile on {t} "
                              f"(profiled: {', '.join(profile.gpu_types) or 'none'}): {how}, or leave {t} out")
        if n > per_node and cluster.topology.find_inter(z, t, 1, z, t, 1) is None:
            raise ConfigError(f"hardware.gpus lists {n} {t} GPUs in {z} ({math.ceil(n / per_node)} machines) but the "
                              f"network has no link fit between two {t} machines in {z} (multizone_bandwidths_het"
                              f".json[{z}][{t}][1][{z}][{t}][1], or links.inter in a cluster file): add it, or list "
                              f"at most {per_node} {t}")
        if min(n, per_node) > 1:
            try:
                cluster.topology.intra_link(t, min(n, per_node))
            except WorkloadError:
                raise ConfigError(f"hardware.gpus lists {n} {t} GPUs but the network has no link fit inside a {t} "
                                  f"machine (intra_node_bandwidths.json[{t}], or links.intra.{t} in a cluster file)") from None
    listed = sorted((t, z) for (t, z), n in cluster.gpus.items() if n > 0)
    for (t, z), (u, y) in itertools.combinations(listed, 2):   # two groups without a link: one would sit idle
        if cluster.topology.find_inter(z, t, 1, y, u, 1) is None or cluster.topology.find_inter(y, u, 1, z, t, 1) is None:
            raise ConfigError(f"hardware.gpus lists {t} in {z} and {u} in {y} but the network has no link fit between "
                              f"their machines (multizone_bandwidths_het.json[{z}][{t}][1][{y}][{u}][1] and back, or "
                              f"links.inter in a cluster file), so no plan could use both: add it, or list one of them")


def cost_lower_bound(profile: LayeredProfile, cluster: GpuCluster, global_batch: int) -> float:
    """USD per iteration no plan on ``cluster`` beats: every sample's forward and backward of each layer, at the
    GPU type, micro-batch and TP degree where it costs least (GPU-seconds x price), bills at least that much
    (sends, bubbles, all-reduces and updates only add). 0 when a listed type has no price."""
    total = 0.0
    for layer in range(profile.num_layers):
        best = math.inf
        for (t, _), n in cluster.gpus.items():
            price = cluster.gpu_type(t).usd_per_gpu_hour if n > 0 else None
            if n <= 0:
                continue
            if not price:
                return 0.0
            for mbs in profile.micro_batches(t):
                for tp in profile.tp_degrees(t, mbs):
                    if tp <= n:
                        f, b, _ = profile.layer_times(t, mbs, tp)[layer]
                        best = min(best, price * tp * (f + b) / mbs)
        total += best
    return total * global_batch / 3600.0 if math.isfinite(total) else 0.0


def unfit(exc: InfeasiblePlanError, profile: LayeredProfile, cluster: GpuCluster, recompute: Any) -> InfeasiblePlanError:
    """The planner's "no plan fits" with the figures behind it (the model's states, the largest GPU) and, where it
    was not tried, activation recomputation (probe F: the error named neither)."""
    if "memory" not in str(exc):
        return exc
    states = sum(profile.layer_sizes(1).params) * (12.0 if profile.optimizer == "sgd" else 16.0)
    largest = max(cluster.gpu_type(t).memory_bytes for (t, _), n in cluster.gpus.items() if n)
    hint = "" if True in tuple(recompute) else "; planner.recompute=auto also tries activation recomputation"
    return InfeasiblePlanError(f"{exc}: the model's weights, gradients and {profile.optimizer} state are "
                               f"{states / 2**30:.1f} GiB in all, the largest GPU holds {largest / 2**30:.1f} GiB{hint}")


class Planned(NamedTuple):
    """One variant's outcome: the planner's plan on ``profile``, its estimate, the evaluator, search seconds."""

    plan: Plan
    est: PlanEstimate
    evaluator: PlanEvaluator
    search_s: float
    profile: LayeredProfile


class PlanningPhase:
    def __init__(self, cfg: Any, planner: Any, hardware: Any, output_dir: Path):
        self.cfg, self.planner, self.hardware, self.output_dir = cfg, planner, hardware, output_dir
        node = cfg.get("planner")
        self.sim: PlanSimulator = simulator(str(node.get("simulator", "project")))    # resolved once, here
        self.sim.bound_time_limit_s = node.get("bound_time_limit_s") or None         # 0: no limit
        self.objective = PlanObjective(str(node.get("objective", "throughput")), node.get("min_samples_per_s"),
                                       node.get("max_usd_per_hour"))
        for note in self.objective.ignored():                    # a constraint the objective does not read
            print(f"note: {note}", flush=True)
        self.compare = bool(node.get("compare_simulators", True))
        self.headroom = float(node.get("memory_headroom", 0.0) or 0.0)
        self.precision = str(node.get("precision", "fp32") or "fp32")
        recompute = node.get("recompute", False)
        self.recompute = [False, True] if recompute == "auto" else [bool(recompute)]
        self.fill = bool(node.get("fill", False))

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
                "cluster.simulated": "true", "plan.simulator": self.sim.name,
                "plan.profile": "derived" if profile.source.startswith("derived") else "measured"}
        return profile, tags

    def cluster(self) -> GpuCluster:
        get = getattr(self.hardware, "gpu_cluster", None)
        if get is None:
            raise ConfigError("a planning trial (+planner=...) needs hardware=gpu_cluster (a cluster of GPUs)")
        return get().with_headroom(self.headroom)

    def run_label(self) -> str:
        """The cluster part of the run's name (one name per cluster): the given GPUs, else a plan file's own."""
        try:
            cluster = self.cluster()
            if not cluster.gpus and hasattr(self.planner, "read"):
                cluster = cluster.with_plan_gpus(self.planner.read())
            return cluster.describe()
        except Exception:          # a bad cluster or plan is reported by the run itself
            return "?"

    def global_batch(self, model_spec: Any, profile: LayeredProfile) -> tuple[int, str]:
        """The global batch planned for and where it comes from (a default is said: probe F)."""
        given = (model_spec.extra or {}).get("global_batch")
        if given:
            return int(given), "model.global_batch"
        from_file = getattr(self.planner, "global_batch", None)
        if from_file is not None and from_file():
            return int(from_file()), "the plan file"
        if profile.global_batch:
            return int(profile.global_batch), "the model's training config"
        return DEFAULT_GLOBAL_BATCH, (f"default: no cluster/training_config_*.json for {profile.model} and no "
                                      "model.global_batch")

    def planning_cluster(self, profile: LayeredProfile) -> tuple[GpuCluster, str, LayeredProfile]:
        """The cluster planned for, where its GPUs come from: ``given`` (hardware.gpus or the cluster file),
        else ``plan`` (a plan file's own GPUs), and the profile with entries derived for the listed types it lacks
        that the GPU catalog has (``plan.fill.derive_for_cluster``; the measured entries unchanged). Every listed GPU can be planned for
        (``check_covered``)."""
        cluster = self.cluster()
        source = "given"
        if not cluster.gpus and hasattr(self.planner, "read"):      # without hardware.gpus: the plan's own GPUs
            (plan := self.planner.read()).check(profile.num_layers)
            cluster = cluster.with_plan_gpus(plan)
            source = "plan"
        profile = derive_for_cluster(profile, cluster)              # the types it lacks, from the GPU catalog
        if self.fill:
            filled = fill_measured(profile, cluster)
            if filled is profile:
                print("note: planner.fill=true derived nothing: every listed type already has each (micro-batch, TP) "
                      "entry that the profile's measured types have", flush=True)
            profile = filled
        check_covered(profile, cluster)
        self.objective.unpriced(cluster)                            # cost and budget need every price
        return cluster, source, profile

    def run(self, model_spec: Any, profile: LayeredProfile, sink: Any) -> dict[str, float]:
        t_start = time.perf_counter()
        cluster, source, base = self.planning_cluster(profile)
        batch, batch_source = self.global_batch(model_spec, base)
        tried: list[Planned] = []
        refused: list[tuple[LayeredProfile, InfeasiblePlanError]] = []
        for p in precisions(base, cluster, self.precision):
            at_p = at_precision(base, cluster, p)
            for prof in (with_recompute(at_p) if r else at_p for r in self.recompute):
                try:
                    tried.append(self.plan_at(prof, cluster, batch))
                except InfeasiblePlanError as exc:      # this variant has no plan; another may (recomputation's)
                    refused.append((prof, exc))
        if not tried:
            raise unfit(refused[0][1], base, cluster, self.recompute)
        plan, est, evaluator, _, profile = min(tried, key=lambda t: self.objective.score(t.est))   # ties: the first
        search_s = sum(t.search_s for t in tried)
        metrics = self.metrics(plan, est, search_s, evaluator)
        metrics.update({f"plan.variant_iteration_s.{variant(t.profile)}": t.est.iteration_s for t in tried
                        if len(tried) + len(refused) > 1})
        metrics.update(getattr(self.planner, "stats", {}) or {})
        metrics.update(self.memory_metrics(cluster, est))
        limits = {"plan.min_samples_per_s": self.objective.min_samples_per_s if self.objective.kind == "cost" else None,
                  "plan.max_usd_per_hour": self.objective.max_usd_per_hour if self.objective.kind == "budget" else None,
                  "plan.memory_headroom": self.headroom or None}
        metrics.update({k: float(v) for k, v in limits.items() if v is not None})
        tags = {"plan.simulator": est.simulator, "plan.description": plan.describe()[:4900],
                "plan.cluster": cluster.describe(), "plan.cluster_source": source, "plan.objective": self.objective.kind,
                "plan.fits": str(est.fits).lower(), "plan.unpriced": self.objective.unpriced(cluster),
                "plan.global_batch_source": batch_source}
        tags.update(derived_tags(profile, cluster, plan))
        used = {r.gpu for p in plan.pipelines for st in p.stages for r in st.replicas}
        tags["plan.unpriced"] = ", ".join(t for t in tags["plan.unpriced"].split(", ") if t in used)
        tags["plan.device_kind"] = "+".join(sorted({cluster.gpu_type(t).kind for t in used}))    # "cpu" on CPU profiles
        tags["plan.prices"] = ", ".join(f"{t} {k.usd_per_gpu_hour:g} ({price_source(k)})" for t in sorted(used)
                                        if (k := cluster.gpu_type(t)).usd_per_gpu_hour is not None)
        if tags["plan.unpriced"]:      # a partial sum is no price (probe F: 0 USD/h logged for an unpriced type)
            for k in ("plan.usd_per_iteration", "plan.usd_per_hour"):
                metrics.pop(k, None)
        if source == "given" and (unused := plan.unused(cluster.gpus)):
            tags["plan.unused"] = unused                        # the planner's choice: the summary names them
        tags.update({"plan.precision": profile.precision, "plan.recompute": str(profile.recompute).lower()})
        if len(tried) + len(refused) > 1:
            tags["plan.variants_tried"] = ", ".join(variant(t.profile) for t in tried)
        if refused:
            tags["plan.variants_refused"] = ", ".join(variant(prof) for prof, _ in refused)
        t0, hits = time.perf_counter(), cache.hits
        metrics.update(self.bounds([t.profile for t in tried] + [prof for prof, _ in refused], cluster, batch, plan, est))
        metrics["plan.bound_time_s"] = time.perf_counter() - t0
        if cache.hits > hits:                      # computed by an earlier trial on the same cluster (orchestrator.cache)
            tags["plan.bound_cached"] = "true"
        if self.sim.bound_cut:
            tags["plan.bound_cut"] = f" (cut at planner.bound_time_limit_s={self.sim.bound_time_limit_s:g}: certified, looser)"
        if not est.fits:
            tags["plan.violations"] = "; ".join(est.violations)[:4900]
        if evaluator.skipped_reasons:
            tags["plan.skipped_reasons"] = "; ".join(f"{n} x {why}" for why, n in sorted(
                evaluator.skipped_reasons.items(), key=lambda kv: -kv[1]))[:4900]
        metrics.update(self.measured(plan, est, batch))
        if self.compare:
            compare_simulators(est, plan, profile, cluster, batch, metrics, tags)
        metrics[f"plan.iteration_s.{est.simulator}"] = est.iteration_s
        others = tuple(k.removeprefix("plan.iteration_s.") for k in metrics if k.startswith("plan.iteration_s."))
        judged = assess(plan, batch, est.simulator, others, precision=profile.precision, model=profile.model)  # vs measured
        metrics.update(judged.metrics())
        tags.update(judged.tags())             # plan.trust: the summary's trust line (docs/plans.md)
        self.disagreement(est.simulator, metrics, tags, judged)
        metrics["plan.phase_time_s"] = time.perf_counter() - t_start
        sink.log_metrics(metrics)
        sink.set_tags(tags)
        self.artifacts(plan, est, profile, sink)
        self.estimate = est
        return metrics

    def plan_at(self, profile: LayeredProfile, cluster: GpuCluster, batch: int) -> Planned:
        """The planner's plan on ``profile`` (a precision, ``plan.derive.at_precision``, with or without activation
        recomputation, ``with_recompute``): (plan, its estimate with the timeline, the evaluator, search seconds, the
        profile)."""
        evaluator = PlanEvaluator(self.sim, profile, cluster, batch)
        t0 = time.perf_counter()
        plan: Plan = self.planner.plan(profile, cluster, self.objective, evaluator)
        search_s = time.perf_counter() - t0
        evaluator.check(plan)
        if plan.global_batch is None:
            plan.global_batch = batch
        return Planned(plan, evaluator.evaluate(plan, timeline=True), evaluator, search_s, profile)

    def bounds(self, profiles: list[LayeredProfile], cluster: GpuCluster, batch: int, plan: Plan,
               est: PlanEstimate) -> dict[str, float]:
        """The bound that matches the objective over the plans of every precision tried (the least of their bounds), and
        the plan's gap to it (``plan.optimality_gap``; none where the plan does not fit: the bounds are over plans that
        fit): throughput: least s/iteration (``plan.bound_iteration_s``, the simulator's certified bound); cost:
        least USD/iteration (``plan.bound_usd_per_iteration``); budget: most samples/s within the ceiling
        (``plan.bound_samples_per_s``: the time bound's, or the ceiling over the least USD per sample)."""
        out: dict[str, float] = {}
        bound = min(self.sim.lower_bound(p, cluster, batch, plan) for p in profiles)
        if bound < float("inf"):
            out["plan.bound_iteration_s"] = bound
            if est.fits:
                out["plan.optimality_gap"] = est.iteration_s / bound - 1.0
        kind = self.objective.kind
        if kind == "throughput" or not est.fits:
            return out
        out.pop("plan.optimality_gap", None)
        usd = min(cost_lower_bound(p, cluster, batch) for p in profiles)
        if kind == "cost" and usd > 0:
            out["plan.bound_usd_per_iteration"] = usd
            out["plan.optimality_gap"] = est.usd_per_iteration / usd - 1.0
        elif kind == "budget":
            ceiling = self.objective.max_usd_per_hour
            best = [batch / b for b in (out.get("plan.bound_iteration_s"),) if b]
            if ceiling is not None and usd > 0:
                best.append(ceiling / 3600.0 / (usd / batch))
            if best:
                out["plan.bound_samples_per_s"] = min(best)
                out["plan.optimality_gap"] = min(best) / est.samples_per_s - 1.0
        return out

    @staticmethod
    def measured(plan: Plan, est: PlanEstimate, batch: int) -> dict[str, float]:
        """A plan file's measured figures (Sailor's ``real`` seconds, ``max_mem`` bytes) beside the simulated
        ones, when it was measured at this global batch."""
        meta = plan.meta or {}
        real, gbs = meta.get("real"), meta.get("gbs")
        if not isinstance(real, int | float) or real <= 0 or (gbs is not None and int(gbs) != batch):
            return {}
        out = {"plan.measured_iteration_s": float(real), "plan.simulated_error": est.iteration_s / float(real) - 1.0}
        if isinstance(meta.get("max_mem"), int | float) and meta["max_mem"] > 0:
            out["plan.measured_peak_memory_bytes"] = float(meta["max_mem"])
        return out

    @staticmethod
    def memory_metrics(cluster: GpuCluster, est: PlanEstimate) -> dict[str, float]:
        """Per GPU type the plan uses: its capacity and the limit plans are held to (capacity less the headroom)."""
        out = {}
        for gpu, t in ((gpu, cluster.gpu_type(gpu)) for gpu in est.peak_memory):
            out[f"plan.memory_capacity_bytes.{gpu}"] = t.capacity
            out[f"plan.memory_limit_bytes.{gpu}"] = t.memory_bytes
        return out

    @staticmethod
    def disagreement(sim: str, metrics: dict[str, float], tags: dict[str, str], judged: Trust | None = None) -> None:
        """``plan.simulators_disagree``: both figures, where the trial's simulator and another cannot both be within
        their error on the measured plans nearest the plan's shape (``judged``, ``trust.assess``), or without a
        plan on every measured plan (planning/trust.py: computed by simulating them, once per process)."""
        named = {k.removeprefix("plan.iteration_s."): v for k, v in metrics.items() if k.startswith("plan.iteration_s.")}
        figures = {k: v for k, v in named.items() if k in simulator_names()}
        if judged is not None:
            errors, where = judged.errors, f"on the nearest measured plans, {', '.join(m.name for m, _ in judged.nearest)}"
        else:
            errors, where = measured_errors(tuple(figures)), "on every measured plan"
        notes = disagreements(sim, figures, errors, where)
        if notes:
            tags["plan.simulators_disagree"] = "; ".join(notes)[:4900]

    @staticmethod
    def metrics(plan: Plan, est: PlanEstimate, search_s: float, evaluator: PlanEvaluator) -> dict[str, float]:
        # a plan that does not fit is never figured as if it did: its time goes under another name
        key = "plan.iteration_s" if est.fits else "plan.iteration_s_if_it_fitted"
        m = {key: est.iteration_s, "plan.fits": float(est.fits), "plan.usd_per_iteration": est.usd_per_iteration,
             "plan.search_time_s": search_s,
             "plan.gpus": float(plan.gpus), "plan.pipelines": float(len(plan.pipelines)), "plan.mbs": float(plan.mbs),
             "plan.stages": float(max(len(p.stages) for p in plan.pipelines)),
             "plan.global_batch": float(est.global_batch), "plan.evaluations": float(evaluator.evaluations),
             "plan.skipped_candidates": float(evaluator.skipped)}
        if est.iteration_s > 0:
            m["plan.usd_per_hour"] = est.usd_per_iteration * 3600.0 / est.iteration_s
        if m["plan.stages"] > 1:         # a pipeline bubble exists only where there are stages
            m["plan.bubble_fraction"] = est.bubble_fraction
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
        used = {r.gpu for p in plan.pipelines for s in p.stages for r in s.replicas}
        derived = [t for t in sorted((profile.extra or {}).get("derived_types", {})) if t in used]
        title = (f"{profile.model}: {est.iteration_s:.4g} s/iteration (simulated, {est.simulator} simulator"
                 + (f"; {', '.join(derived)} derived from datasheet" if derived else "") + ")"
                 + ("" if est.fits else " - DOES NOT FIT in memory"))
        pictures = [gantt(est, out / "plan_gantt.png", title),
                    layer_map(plan, profile.num_layers, out / "plan_layers.png", f"{profile.model}: which GPUs hold which layers")]
        for p in pictures:
            if p is not None:
                sink.log_artifact(p)
