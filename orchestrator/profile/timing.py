"""Timing one callable: warm-up calls, then repeats, kept as the median and the spread.

Every entry of a profile is a ``Sample``: the median of ``repeats`` timed calls after ``warmup`` untimed ones
(the first calls trace and compile a ``tf.function`` and fill caches), with the quartiles, the minimum and
the maximum kept beside it. The median is what the profile files hold; the spread goes in ``profile_stats.json``.
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


def paired(first: Callable[[], object], both: Callable[[], object], warmup: int,
           repeats: int) -> tuple[Sample, Sample, Sample]:
    """``first`` (a forward) and ``both`` (forward and backward) timed in alternation, so that a change of
    load on the machine falls on both alike: (forward, backward = both - first per pair, both)."""
    for _ in range(warmup):
        first()
        both()
    f, b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        both()
        t2 = time.perf_counter()
        f.append(t1 - t0)
        b.append(t2 - t1)
    fa, ba = np.asarray(f), np.asarray(b)
    return Sample.of(fa), Sample.of(ba - fa), Sample.of(ba)
