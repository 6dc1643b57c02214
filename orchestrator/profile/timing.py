"""Timing one callable: warm-up calls, then repeats, kept as the median and the spread.

Every entry of a profile is a ``Sample``: the median of ``repeats`` timed calls after ``warmup`` untimed ones
(the first calls trace and compile a ``tf.function`` and fill caches), with the quartiles, the minimum and
the maximum kept beside it; an entry that is a difference of two calls timed in the same rounds (a forward less
the dispatch) takes them of the per-round differences. The profile files hold the median (or, with
``--statistic min``, the minimum: the least contended round); the spread goes in ``profile_stats.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Sample:
    """Seconds of ``n`` timed calls: median, quartiles, min, max."""

    median: float
    q1: float
    q3: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, seconds: list[float] | np.ndarray[Any, Any]) -> Sample:
        s = np.asarray(seconds, dtype=float)
        q1, med, q3 = np.percentile(s, [25, 50, 75])
        return cls(float(med), float(q1), float(q3), float(s.min()), float(s.max()), int(s.size))

    def value(self, statistic: str) -> float:
        """The figure a profile file holds: ``median`` or ``min``."""
        return self.low if statistic == "min" else self.median

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def as_dict(self) -> dict[str, float]:
        return {"median_s": self.median, "q1_s": self.q1, "q3_s": self.q3, "min_s": self.low, "max_s": self.high,
                "repeats": self.n}

    def plus(self, other: Sample) -> Sample:
        """Two independent parts of one entry (a shard's compute and its all-reduces): medians and bounds add."""
        return Sample(self.median + other.median, self.q1 + other.q1, self.q3 + other.q3, self.low + other.low,
                      self.high + other.high, min(self.n, other.n))

    def scaled(self, k: float) -> Sample:
        return Sample(self.median * k, self.q1 * k, self.q3 * k, self.low * k, self.high * k, self.n)


def timed(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones (wall clock;
    on TensorFlow's CPU device a ``tf.function`` returns when its result is computed)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def less_dispatch(empty: Callable[[], object], fn: Callable[[], object], warmup: int, repeats: int) -> Sample:
    """``fn`` less ``empty`` (the same call computing nothing), timed in turn round after round."""
    for _ in range(warmup):
        empty()
        fn()
    e, f = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        empty()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        e.append(t1 - t0)
        f.append(t2 - t1)
    return difference(np.asarray(f), np.asarray(e))


def difference(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> Sample:
    """``a - b`` of timings taken in the same rounds (paired): every statistic is of the per-round differences,
    so that ``low <= q1 <= median <= q3 <= high`` (a difference of the two minima is no minimum of the
    differences: it can exceed their median)."""
    return Sample.of(a - b)


def rounds(calls: list[tuple[Callable[[], object], Callable[[], object], Callable[[], object]]], warmup: int,
           repeats: int, after_round: Callable[[int], None] | None = None) -> list[tuple[Sample, Sample, Sample]]:
    """For each layer, ``empty`` (a call that computes nothing: the dispatch), ``first`` (a forward) and
    ``both`` (forward and backward): (forward = first - empty, backward = both - first, dispatch = empty), the
    differences taken round by round. Round-robin: each round times every layer's three calls once, so that the load of the machine, which changes over a profile, falls on every layer alike (timing one
    layer's repeats in a block would give the layers timed in a quiet minute an advantage). ``after_round(r)``
    runs after each round (a progress bar; a benchmark's own measurement between rounds)."""
    for _ in range(warmup):
        for call in calls:
            for fn in call:
                fn()
    times = np.zeros((len(calls), 3, repeats))
    for r in range(repeats):
        for i, call in enumerate(calls):
            for j, fn in enumerate(call):
                t0 = time.perf_counter()
                fn()
                times[i, j, r] = time.perf_counter() - t0
        if after_round is not None:
            after_round(r)
    return [(difference(t[1], t[0]), difference(t[2], t[1]), Sample.of(t[0])) for t in times]
