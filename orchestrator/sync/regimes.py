"""The regime of a data-parallel cluster and the nearest cell of the measured sync regime map (``+sync=auto``).

The map (``regime_map.json`` beside this file) is exported from the committed runs of
``benchmarks/sync_regimes.py`` (``--export-map``; docs/benchmarks/sync_regimes.md and
sync_regimes_fashion_mnist.md): per measured regime its hardware, per strategy the median virtual seconds to
the target over the seeds, the seeds' spread and the tuned lr, the winner and its margin over allreduce.

A regime is read from the trial's hardware group as the data-parallel runtimes read it (``worker_layout``,
``DataParallelHardware``, the links of ``Topology``), as coordinates in units of one step between
neighbouring measured cells:

=============== ============================================== =====================================
coordinate      value                                          one unit
=============== ============================================== =====================================
``spread``      log2(fastest speed / slowest speed)            a doubling (2x: 1, 1/4: 2, 1/8: 3)
``stragglers``  straggler probability p / 0.1                  p = 0.1
``straggling``  p (slowdown - 1) / 0.4, the expected extra     p = 0.1 at 5x
                time of an iteration
``jitter``      lognormal sigma / 0.5                          sigma = 0.5
``bandwidth``   log10(slowest worker link, Gbit/s / 10)        a decade (1, 10, 100 Gbit/s)
``workers``     log2(W / 8)                                    a doubling (the map is measured at W = 8)
=============== ============================================== =====================================

The distance between two regimes is the Euclidean norm of their difference. A regime on a cell (distance 0)
runs that cell's winner. Elsewhere the cells within ``RADIUS`` (1.5: a step on one axis, or on two at once,
the diagonal sqrt 2) are its neighbours, and each strategy
measured in all of them is scored by the inverse-square-distance weighted mean of its log margin over the map's
baseline (Shepard's interpolation of log(baseline median / strategy median)) less the same weighted mean of that
margin's standard error in each cell (``_margin_se``: the seeds' half log ranges of the strategy and the baseline
in quadrature, over sqrt(seeds)); the highest of these lower bounds runs (the baseline at 0; ties go to the
baseline): a strategy leaves the baseline only where the cells around say it wins by more than their own seeds'
noise. A regime with no neighbour within ``RADIUS`` is *far*: balanced allreduce,
and the line says so. (``NEAR``, half a step, only words the line: "near" a single cell, else "between".)"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MAP_PATH = Path(__file__).with_name("regime_map.json")
NEAR = 0.5
# The map varies one factor at a time from its base: a regime that combines two of them sits a diagonal step
# (sqrt 2) from each single-factor cell, which is still a neighbour; two steps away is not.
RADIUS = 1.5
AXES = ("spread", "stragglers", "straggling", "jitter", "bandwidth", "workers")


@dataclass(frozen=True)
class Regime:
    """A cluster's regime: what it is (``speeds``, straggler ``p`` at ``slowdown``, jitter ``sigma``, the slowest
    worker link in Gbit/s) and its coordinates (``AXES``)."""

    speeds: tuple[float, ...]
    p: float
    slowdown: float
    sigma: float
    bandwidth_gbps: float

    @property
    def coordinates(self) -> tuple[float, ...]:
        return (math.log2(max(self.speeds) / min(self.speeds)), self.p / 0.1, self.p * (self.slowdown - 1.0) / 0.4,
                self.sigma / 0.5, math.log10(self.bandwidth_gbps / 10.0), math.log2(len(self.speeds) / 8))

    def describe(self) -> str:
        spread = max(self.speeds) / min(self.speeds)
        return (f"W={len(self.speeds)}, speed spread {spread:.3g}x, stragglers p={self.p:g}"
                f"{f' x{self.slowdown:g}' if self.p else ''}, jitter sigma={self.sigma:g}, "
                f"slowest link {self.bandwidth_gbps:g} Gbit/s")


def regime_of(hardware: Any) -> Regime:
    """The regime of a ``hardware`` group (a composed node or a plain mapping), validated as the sync runtimes
    validate it (a bad value is their one-line error)."""
    from orchestrator.config.hardware import DataParallelHardware
    from orchestrator.hardware.cost import GBIT
    from orchestrator.hardware.topology import Topology
    from orchestrator.hardware.workers import worker_layout

    speeds = worker_layout(hardware or {}, has_sync=True)
    hw = DataParallelHardware.from_node(hardware, len(speeds))
    links = Topology.from_cfg(hw.network, len(speeds)).workers
    p = hw.stragglers.probability
    return Regime(tuple(float(s) for s in speeds), p, hw.stragglers.slowdown if p else 1.0, hw.jitter_sigma,
                  min(link.bandwidth for link in links) / GBIT)


def distance(a: Regime, b: Regime) -> float:
    return math.dist(a.coordinates, b.coordinates)


@cache
def load_map(path: Path = MAP_PATH) -> dict:
    return json.loads(Path(path).read_text())


@dataclass(frozen=True)
class Choice:
    """The decision: the map (``dataset``), its nearest ``cell`` and the ``distance`` to it; ``label`` the
    strategy run (the map's, e.g. ``backup b=2``), ``entry`` its measured figures (None where the map has no
    near cell: balanced allreduce at its defaults), ``near`` whether the cell is within ``NEAR``, and a note
    (e.g. the map's winner is not installed); ``baseline`` the map's baseline label (its margins are over it)."""

    dataset: str
    cell: dict
    distance: float
    near: bool
    label: str
    entry: dict | None
    note: str = ""
    baseline: str = ""
    neighbours: tuple[tuple[str, float], ...] = ()   # (cell, distance) interpolated over; () on a cell or far
    estimate: float | None = None                     # the interpolated margin over the baseline

    @property
    def sync(self) -> str:
        return (self.entry or self.cell["strategies"][self.label])["sync"]

    @property
    def config(self) -> dict:
        """The sync group the map measured the strategy with (the map's baseline where no cell is near)."""
        return dict((self.entry or self.cell["strategies"][self.label])["config"])

    @property
    def margin(self) -> float | None:
        """The baseline's median over the chosen strategy's in the cell (1.0 for the baseline itself)."""
        if self.neighbours:
            return self.estimate
        ar = self.cell["strategies"].get(self.baseline, {}).get("median_s")
        return ar / self.entry["median_s"] if self.entry and ar else None

    def why(self, regime: Regime) -> str:
        """One line: the regime, the cell, the choice with its margin and spread."""
        where = f"map cell '{self.cell['regime']}' ({self.dataset}, distance {self.distance:.2f}"
        if not self.near:
            return (f"sync=auto: {regime.describe()}: no measured regime is near (nearest {where} > {RADIUS})); "
                    f"running balanced allreduce")
        if self.neighbours:
            cells = ", ".join(f"'{c}' ({d:.2f})" for c, d in self.neighbours)
            margin = f"{self.estimate:.2f}x {self.baseline}" if self.estimate else "-"
            lr = (self.entry or {}).get("lr")
            return (f"sync=auto: {regime.describe()}: between map cells {cells} ({self.dataset}, distances <= {RADIUS}) -> "
                    f"{self.label} (interpolated margin {margin}, inverse-square-distance weights; lr "
                    f"{'-' if lr is None else f'{lr:g}'} from the nearest cell that measured it){self.note}")
        e = self.entry or {}
        spread = (f", seeds {e['min_s']:.3f}-{e['max_s']:.3f} s ({e['reached']}/{e['seeds']} reached)"
                  if e.get("min_s") is not None else "")
        margin = f"{self.margin:.2f}x allreduce" if self.margin else "allreduce not measured"
        return (f"sync=auto: {regime.describe()}: {where} <= {NEAR}) -> {self.label} (median "
                f"{e['median_s']:.3f} s to target{spread}; {margin}; lr {e['lr']:g}){self.note}")


def nearest(regime: Regime, dataset: str = "mnist", path: Path = MAP_PATH) -> tuple[str, dict, float]:
    """(the map used, its nearest cell, the distance): the dataset's own map, else MNIST's."""
    maps = load_map(path)["maps"]
    name = dataset if dataset in maps else "mnist"
    cells = maps[name]["cells"]
    dist = [distance(regime, regime_of(c["hardware"])) for c in cells]
    i = min(range(len(cells)), key=dist.__getitem__)
    return name, cells[i], dist[i]


def choose(regime: Regime, available: set[str] | frozenset[str], dataset: str = "mnist",
           path: Path = MAP_PATH) -> Choice:
    """The strategy ``+sync=auto`` runs in ``regime`` (the module's doc): on a cell, its fastest installed
    strategy (and a note where the map's winner is not installed); between cells, the best interpolated margin
    among the installed strategies measured in every neighbour; balanced allreduce where no cell is within
    ``RADIUS``."""
    name, cell, dist = nearest(regime, dataset, path)
    base = load_map(path)["baseline"]
    if dist > RADIUS:
        return Choice(name, cell, dist, False, base, None, baseline=base)
    if dist > 1e-9:
        return _between(regime, available, name, cell, dist, base, path)
    runnable = {k: v["median_s"] for k, v in cell["strategies"].items()
                if v["sync"] in available and v["median_s"] is not None}
    label = min(runnable, key=runnable.__getitem__)
    note = "" if label == cell["winner"] else (
        f"; the map's winner {cell['winner']} ({cell['strategies'][cell['winner']]['sync']}) is not installed")
    return Choice(name, cell, dist, True, label, cell["strategies"][label], note, base)


def _margin_se(entry: dict, base: dict) -> float:
    """The standard error of a cell's log margin: each strategy's seeds' half log range (a rough standard
    deviation of one seed's log time) combined in quadrature, over the square root of the seeds (0 for the
    baseline itself, or where the map has no range)."""
    if entry is base:
        return 0.0

    def sd(e: dict) -> float:
        lo, hi = e.get("min_s"), e.get("max_s")
        return 0.5 * math.log(hi / lo) if lo and hi else 0.0

    return math.hypot(sd(entry), sd(base)) / math.sqrt(max(1, entry.get("seeds") or 1))


def _between(regime: Regime, available: set[str] | frozenset[str], name: str, cell: dict, dist: float, base: str,
             path: Path) -> Choice:
    """Shepard's interpolation of the log margins over the cells within ``RADIUS`` (the module's doc)."""
    near = [(c, distance(regime, regime_of(c["hardware"]))) for c in load_map(path)["maps"][name]["cells"]]
    near = sorted(((c, d) for c, d in near if d <= RADIUS and (c["strategies"].get(base) or {}).get("median_s")),
                  key=lambda cd: cd[1])
    labels = [k for k, v in cell["strategies"].items() if v["sync"] in available
              and all((c["strategies"].get(k) or {}).get("median_s") for c, _ in near)]
    score: dict[str, float] = {}
    bound: dict[str, float] = {}
    for k in labels:
        w = [(1.0 / d ** 2, math.log(c["strategies"][base]["median_s"] / c["strategies"][k]["median_s"]),
              _margin_se(c["strategies"][k], c["strategies"][base])) for c, d in near]
        total = sum(a for a, _, _ in w)
        score[k] = sum(a * m for a, m, _ in w) / total
        bound[k] = score[k] - sum(a * e for a, _, e in w) / total
    label = max(bound, key=lambda k: (bound[k], k == base)) if bound else base
    entry = next((c["strategies"][label] for c, _ in near if label in c["strategies"]), None)
    top = max(score, key=score.__getitem__) if score else label
    note = "" if top == label else (f"; {top}'s interpolated {math.exp(score[top]):.3f}x is within the cells' seed noise "
                                    f"(standard error {math.exp(score[top] - bound[top]):.3f}x)")
    return Choice(name, cell, dist, True, label, entry, note, base,
                  tuple((c["regime"], d) for c, d in near), math.exp(score.get(label, 0.0)))
