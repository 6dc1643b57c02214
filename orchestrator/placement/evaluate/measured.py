"""Measured and mixed rewards for searching placers (``placer.reward``), the reference study's
method: a candidate placement is scored by running it.

- ``measured``: every candidate the search asks about (``objective_value(assign)`` or
  ``evaluate(placement)``) runs for real on the trial's devices (``hardware=local`` logical devices,
  ``tf_cluster`` processes): a warm-up, then the median of ``placer.measure_steps`` timed training
  steps. Results are cached by assignment (a repeated candidate costs nothing; assignments that
  differ only where the runtime ignores the device, e.g. the loss node, share an entry); built
  TensorFlow runtimes are kept for the last few assignments (``TFMeasure.keep``). A candidate that fails (out
  of memory, any TF error) scores ``inf`` (infeasible) and the search goes on. A candidate the
  simulator's memory model rejects is not run (``inf``).
- ``mixed``: the simulator screens every candidate; its estimate, re-calibrated from the
  measurements so far (``orchestrator.placement.evaluate.measured_fit``), decides: a candidate within
  ``placer.measure_within`` (a fraction) of the best measured step time is measured, any other
  scores its re-calibrated estimate (it cannot be the best). The first candidate is always measured.
- A candidate whose measurement beats the best so far is measured again (``2 x measure_steps``
  steps) and scores that second, independent value: the best is then not simply the luckiest of many
  noisy draws. ``TFMeasure`` pairs each measurement with a reference placement against load drift.
- ``placer.budget_s``: seconds of measuring (build, warm-up and timed steps; null: no limit). Once
  spent, the search goes on but a candidate that would need a new measurement scores ``inf``
  ("not accepted"): cached ones keep their value, ``mixed`` still screens. So the search ends
  gracefully and its answer is always a placement that was measured. The measurement that crosses
  the budget is finished, so the budget can be overrun by one measurement.

After the search (``end_search``) the evaluator judges the final and baseline placements with fresh
measurements (``max(measure_steps, 10)`` timed steps, outside the budget), so the logged step time
is not the search's own best draw (the minimum of noisy measurements is biased low).
"""

from __future__ import annotations

import math
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import IntArray
from orchestrator.graph.opgraph import OpGraph
from orchestrator.graph.placement import Placement
from orchestrator.hardware.cluster import Worker
from orchestrator.placement.evaluate.evaluator import SimulatedEvaluator, Verdict, placed_runtime
from orchestrator.placement.evaluate.measured_fit import SimulatorFit
from orchestrator.placement.simulate.inflight import MicrobatchSpec

if TYPE_CHECKING:
    from orchestrator.execution.runtime import ModelRuntime
    from orchestrator.models import ModelSpec

_N = TypeVar("_N", int, float)
_RuntimeKey = tuple[tuple[str, str], ...]   # the (node, device) pairs a runtime depends on

REWARDS = ("simulated", "measured", "mixed")


@dataclass
class RewardSettings:
    reward: str = "simulated"
    budget_s: float | None = None
    measure_steps: int = 5
    measure_within: float = 0.1
    warmup: int = 2

    @classmethod
    def from_cfg(cls, cfg: Any, reward: str) -> RewardSettings:
        def get(k: str, d: Any) -> Any:
            return d if cfg is None or cfg.get(k) is None else cfg.get(k)

        budget = cfg.get("budget_s") if cfg is not None else None
        if budget is not None:
            budget = _number("placer.budget_s", budget, float, 0.0, strict=True)
        steps = _number("placer.measure_steps", get("measure_steps", 5), int, 1)
        within = _number("placer.measure_within", get("measure_within", 0.1), float, 0.0)
        return cls(reward, budget, steps, within)


def _number(key: str, v: Any, kind: type[_N], minimum: float, strict: bool = False) -> _N:
    try:
        if isinstance(v, bool) or (kind is int and float(v) != int(v)):
            raise ValueError
        x = kind(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={v!r} must be {'an integer' if kind is int else 'a number'}") from None
    if x != x or x < minimum or (strict and x == minimum):
        raise ConfigError(f"{key}={v!r} must be {'>' if strict else '>='} {minimum:g}")
    return x




def resolve_reward(placer_cfg: Any, cluster_simulated: bool, placer_cls: Any, hardware: str) -> str:
    """``placer.reward`` (``auto | simulated | measured | mixed``) resolved for this trial. ``auto``:
    simulated on simulated hardware; on real devices simulated for searching placers (their final
    placement is measured as well) and measured for placers that only evaluate their answer
    (``auto_evaluator = "measured"``, e.g. manual)."""
    cfg = placer_cfg if placer_cfg is not None else {}
    if "evaluator" in cfg:                # an untyped (plugin's) placer config: the old key was read by nothing
        raise ConfigError("placer.evaluator is placer.reward now (auto | simulated | measured | mixed)")
    reward = str(cfg.get("reward") or "auto")
    if reward == "auto":
        return "simulated" if cluster_simulated else getattr(placer_cls, "auto_evaluator", "simulated")
    if reward not in REWARDS:
        raise ConfigError(f"placer.reward={reward!r} (accepted: auto, {', '.join(REWARDS)})")
    if reward != "simulated" and cluster_simulated:
        raise ConfigError(f"placer.reward={reward} needs real devices; hardware={hardware} is simulated")
    RewardSettings.from_cfg(cfg, reward)    # validate the keys before anything runs
    return reward


class Measure(Protocol):
    """What ``MeasuredRewardEvaluator`` runs a placement with: seconds of one step over ``steps``
    timed steps (``TFMeasure``; tests pass a fake)."""

    def __call__(self, placement: Placement, steps: int) -> float:
        ...


class TFMeasure:
    """The median wall time of ``steps`` training steps (after ``warmup`` untimed ones, parameters
    restored) of a placement on the worker's real TF devices. Built runtimes (a placed clone and its
    traced step) are kept for the last ``keep`` assignments, so re-measuring one costs only its steps.

    ``paired`` (default): the load of a shared machine drifts between measurements more than it
    varies within one, so each candidate's timed steps alternate with steps of a *reference*
    placement (the first one measured; its runtime is kept), and the value is
    ``median(candidate) * median(all reference steps so far) / median(reference steps this time)``:
    the candidate's time at the reference's typical load. Warm-up and tracing are not paired."""

    def __init__(self, spec: ModelSpec, worker: Worker, x: Any, y: Any, seed: int = 0, warmup: int = 2, keep: int = 4,
                 graph: OpGraph | None = None, paired: bool = True) -> None:
        missing = [d.name for d in worker.devices if not d.is_real]
        if missing:
            raise ConfigError(f"placer.reward=measured needs real devices; {', '.join(missing)} exist only in the simulator")
        self.spec, self.worker, self.x, self.y = spec, worker, x, y
        self.seed, self.warmup, self.keep = seed, warmup, keep
        self._runtimes: OrderedDict[_RuntimeKey, ModelRuntime] = OrderedDict()
        self.built = 0
        self.paired = paired
        self._ref: tuple[_RuntimeKey, ModelRuntime] | None = None       # (key, runtime) of the reference placement
        self._ref_times: list[float] = []
        _quiet_retracing()
        # the nodes whose device the runtime uses: a layer's forward node (its backward and update
        # follow it, the loss runs on the default device); None: every node
        self.nodes = None if graph is None else {n.name for n in graph.nodes if n.role == "forward" and n.layer} or None

    def key(self, placement: Placement) -> _RuntimeKey:
        return tuple(sorted((k, v) for k, v in placement.assignment.items() if self.nodes is None or k in self.nodes))

    def runtime(self, placement: Placement) -> ModelRuntime:
        key = self.key(placement)
        if self._ref is not None and key == self._ref[0]:
            return self._ref[1]
        if key in self._runtimes:
            self._runtimes.move_to_end(key)
            return self._runtimes[key]
        rt = placed_runtime(self.spec, self.worker, placement, seed=self.seed, lr=0.05)
        self.built += 1
        self._runtimes[key] = rt
        while len(self._runtimes) > self.keep:
            self._runtimes.popitem(last=False)
        return rt

    def __call__(self, placement: Placement, steps: int) -> float:
        rt = self.runtime(placement)
        if not self.paired or self._ref is None or rt is self._ref[1]:
            times, _ = rt.time_steps(self.x, self.y, warmup=self.warmup, repeats=steps)
            if self.paired:
                if self._ref is None:
                    self._ref = (self.key(placement), rt)
                self._ref_times.extend(times)
                return float(np.median(self._ref_times))
            return float(np.median(times))
        ref = self._ref[1]
        saved, ref_saved = rt.get_flat(), ref.get_flat()
        for _ in range(self.warmup):
            rt.train_step(self.x, self.y)
        ref.train_step(self.x, self.y)
        cand: list[float] = []
        base: list[float] = []
        for _ in range(steps):
            t0 = time.perf_counter()
            rt.train_step(self.x, self.y)
            t1 = time.perf_counter()
            ref.train_step(self.x, self.y)
            cand.append(t1 - t0)
            base.append(time.perf_counter() - t1)
        rt.set_flat(saved)
        ref.set_flat(ref_saved)
        self._ref_times.extend(base)
        return float(np.median(cand) * np.median(self._ref_times) / np.median(base))


def _quiet_retracing() -> None:
    """Each candidate's runtime traces its own step: TensorFlow's advice against retracing (meant
    for one function traced again and again) does not apply, so that one message is dropped."""
    import logging

    log = logging.getLogger("tensorflow")
    if not any(getattr(f, "_orchestrator_retracing", False) for f in log.filters):
        f = logging.Filter()
        f.filter = lambda record: "triggered tf.function retracing" not in record.getMessage()  # type: ignore[method-assign]
        f._orchestrator_retracing = True  # type: ignore[attr-defined]  # a marker: added once per process
        log.addFilter(f)


class MeasuredRewardEvaluator:
    """The evaluator of ``placer.reward=measured|mixed`` (see the module docstring). It offers what
    placers use of the simulated evaluator (``objective_value``, ``evaluate``, ``assignment``,
    ``simulator``, ``memory_headroom``), so no placer needs to know which reward it is given.
    ``measure(placement, steps) -> seconds`` runs a placement (``TFMeasure``; tests pass a fake)."""

    kind = "measured"
    objective = "step"
    load_model = None

    def __init__(self, graph: OpGraph, worker: Worker, settings: RewardSettings, measure: Measure,
                 *, clock: Callable[[], float] = time.perf_counter, memory_headroom: float = 0.0,
                 log: Callable[[str], None] | None = None, microbatch: MicrobatchSpec | None = None) -> None:
        if settings.reward not in ("measured", "mixed"):
            raise ConfigError(f"placer.reward={settings.reward!r}: this evaluator measures (measured, mixed)")
        self.graph, self.worker, self.settings = graph, worker, settings
        self.reward = settings.reward
        self.memory_headroom = float(memory_headroom)
        self.microbatch = microbatch
        self.simulated = SimulatedEvaluator(graph, worker, "step", memory_headroom, microbatch)
        self.simulator = self.simulated.simulator
        self.measure, self.clock = measure, clock
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.fit = SimulatorFit(self.simulator)
        self.cache: dict[bytes, float] = {}
        # placements that differ only on nodes the measurement ignores share a cache entry
        nodes = getattr(measure, "nodes", None)
        self._relevant = np.array([nodes is None or n.name in nodes for n in graph.nodes], dtype=bool)
        self.evaluations = 0
        self.measured = self.failed = self.cache_hits = self.screened = self.after_budget = self.confirmed = 0
        self.measure_s = 0.0
        self.best_measured = math.inf
        self.searching = True
        self._budget_note = False

    # -- what the search asks ---------------------------------------------------------------------
    def objective_value(self, assign: npt.ArrayLike) -> float:
        """The reward's value of an assignment (device index per node, ``graph.nodes`` order)."""
        self.evaluations += 1
        a = np.asarray(assign, dtype=np.int64)
        key = a[self._relevant].tobytes()
        if key in self.cache:
            self.cache_hits += 1
            return self.cache[key]
        s = self.simulator.step_time(a)
        if not math.isfinite(s):          # breaks memory or a placement constraint: not run
            return math.inf
        f = self.fit.features(a, s)
        if self.reward == "mixed":
            est = self.fit.predict(f)
            if est > (1.0 + self.settings.measure_within) * self.best_measured:
                self.screened += 1
                return est
        if not self.budget_left():
            self.after_budget += 1
            self._note_budget()
            return math.inf
        p = self.placement_of(a)
        t = self._measure(p, self.settings.measure_steps)
        if math.isfinite(self.best_measured) and t < self.best_measured and self.budget_left():
            # a claim to be the new best: judged on a second, independent measurement, so that the
            # best value is not the luckiest draw of many (the winner's curse of noisy minima)
            self.confirmed += 1
            t = self._measure(p, 2 * self.settings.measure_steps, count=False)
        self.cache[key] = t
        if math.isfinite(t):
            self.fit.add(f, t)
            self.best_measured = min(self.best_measured, t)
        return t

    def evaluate(self, placement: Placement | None, **_: Any) -> Verdict:
        """A verdict on ``placement``: during the search through ``objective_value`` (cached, on the
        budget); after ``end_search`` a fresh measurement (a failure then raises)."""
        a = self.assignment(placement)
        if self.searching:
            t = self.objective_value(a)
            return Verdict(t, math.isfinite(t), self.kind)
        self.evaluations += 1
        placement = self.placement_of(a)
        t = float(self.measure(placement, max(self.settings.measure_steps, 10)))
        return Verdict(t, True, self.kind)

    def assignment(self, placement: Placement | None) -> IntArray:
        if placement is None:
            return np.zeros(len(self.graph.nodes), dtype=np.int64)
        return self.simulator.assignment(placement)

    def placement_of(self, assign: Sequence[int] | IntArray) -> Placement:
        names = self.worker.device_names
        return Placement(list(names), {n.name: names[int(d)] for n, d in zip(self.graph.nodes, assign)},
                         {"reward": self.reward})

    def budget_left(self) -> bool:
        return self.settings.budget_s is None or self.measure_s < self.settings.budget_s

    # -- after the search -------------------------------------------------------------------------
    def end_search(self) -> dict[str, float]:
        """Stop charging the budget; the search's metrics (``placement.*``)."""
        self.searching = False
        m = {"placement.measured_placements": float(self.measured),
             "placement.measure_s": self.measure_s,
             "placement.failed_placements": float(self.failed),
             "placement.cache_hits": float(self.cache_hits),
             "placement.confirmations": float(self.confirmed),
             "placement.unmeasured_after_budget": float(self.after_budget),
             "placement.budget_spent": float(not self.budget_left())}
        if self.reward == "mixed":
            m["placement.screened_placements"] = float(self.screened)
        for key, v in (("placement.sim_error", self.fit.raw_error),
                       ("placement.sim_error_calibrated", self.fit.calibrated_error),
                       ("placement.sim_error_fitted", self.fit.fitted_error)):
            if math.isfinite(v):
                m[key] = v
        if self.fit.m:
            m.update({f"placement.fit.{k}": v for k, v in self.fit.coefficients().items()})
        return m

    def single_device_baseline(self) -> tuple[str, Verdict]:
        """The fastest single device of the worker for the whole model (fresh measurements)."""
        verdicts: dict[str, Verdict] = {}
        for d in self.worker.devices:
            p = Placement(self.worker.device_names, {n.name: d.name for n in self.graph.nodes}, {})
            verdicts[d.name] = self.evaluate(p)
        best = min(verdicts, key=lambda name: verdicts[name].step_time_s)
        return best, verdicts[best]

    def runtime(self, placement: Placement | None, lr: float = 0.1) -> ModelRuntime:
        """The built runtime of ``placement`` (for training after the search), at learning rate ``lr``."""
        # only a TFMeasure builds runtimes (trial training after a measured search uses one)
        rt = cast(TFMeasure, self.measure).runtime(self.placement_of(self.assignment(placement)))
        rt.set_lr(lr)
        return rt

    # -- measuring --------------------------------------------------------------------------------
    def _measure(self, placement: Placement, steps: int, count: bool = True) -> float:
        t0 = self.clock()
        try:
            t = float(self.measure(placement, steps))
            self.measured += count
            return t
        except Exception as exc:          # out of memory, a TF error: infeasible, the search goes on
            self.failed += 1
            if self.failed <= 3:
                self.log(f"placement: a candidate failed to run ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); scored inf")
            return math.inf
        finally:
            self.measure_s += self.clock() - t0

    def _note_budget(self) -> None:
        if not self._budget_note:
            self._budget_note = True
            self.log(f"placement: measuring budget placer.budget_s={self.settings.budget_s:g} spent after "
                     f"{self.measured + self.failed} placements; candidates that need a new measurement now score inf")
