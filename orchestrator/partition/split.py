"""The partitioning engine: the best contiguous split of a DAG's units over devices (or pipeline stages), a
segment ``I \\ J`` for two ideals ``J ⊂ I`` (``partition.ideals``) per device, minimising the costliest segment::

    dp[k][∅] = 0
    dp[k][I] = min over a device class c with k_c > 0 of
               min( dp[k - e_c][I],                                     (a device left unused)
                    min over ideals J ⊂ I of max(dp[k - e_c][J], cost_c(I \\ J)) )
    answer  = dp[all devices][all units]

``k`` counts the devices used per class (identical devices share a class). ``cost_c`` comes from a callback
(``Segment``): the walk (``solve``) visits the ideals above each J depth first, one unit at a time, and the
callback keeps the segment's cost per class up to date (it says where the segment no longer fits memory, or can
no longer beat a known value, so that no superset is visited).

A layer chain is the special case whose ideals are the prefixes (``ideals.chain``); with the stages in a fixed
order (one device per stage, each its own class) and the costs as dense matrices ``cost_s[j, i]`` the recurrence
is vectorised over ``j`` (``chain_minmax``), and ``chain_split`` adds the second criterion, the least sum of the
stages' costs under the bottleneck (Bokhari 1988)::

    sum[s][i] = min over j < i with cost_s(j, i) <= B of sum[s-1][j] + cost_s(j, i)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from itertools import product
from typing import Protocol

import numpy as np

from orchestrator.graph.arrays import FloatArray


class Segment(Protocol):
    """The cost of the segment ``I \\ J`` as the walk grows it from J (``start``: empty) one unit at a time:
    ``enter(x)`` False (nothing added) where this segment and every larger one are ruled out; ``leave(x)`` the
    last unit added; ``costs()`` (class, cost) for every device class the segment fits on."""

    def start(self) -> None: ...

    def enter(self, x: int) -> bool: ...

    def leave(self, x: int) -> None: ...

    def costs(self) -> list[tuple[int, float]]: ...


class Split:
    """``dp[k][I]`` over the device-count states k (how many devices of each class are used, by total) and
    the ideals I, with back pointers (the J and the class of the last device's share)."""

    def __init__(self, counts: list[int], n_id: int):
        nc = len(counts)
        states = sorted(product(*[range(n + 1) for n in counts]), key=sum)
        sid = {s: i for i, s in enumerate(states)}
        # trans[k, c]: the state with one device of class c fewer (-1: none used)
        self.trans = np.array([[sid[s[:c] + (s[c] - 1,) + s[c + 1:]] if s[c] > 0 else -1 for c in range(nc)]
                               for s in states])
        self.ks = [np.flatnonzero(self.trans[:, c] >= 0) for c in range(nc)]
        self.kp = [self.trans[self.ks[c], c] for c in range(nc)]
        self.dp = np.full((len(states), n_id), math.inf)
        self.dp[:, 0] = 0.0
        self.back_j = np.full((len(states), n_id), -1, dtype=np.int64)
        self.back_c = np.full((len(states), n_id), -1, dtype=np.int64)

    @property
    def value(self) -> float:
        """The best split of every unit on every device (the last ideal, the last state)."""
        return float(self.dp[-1, -1])

    def leave_unused(self, j: int) -> None:
        """``dp[k][J] <= dp[k - e_c][J]``: a device left unused."""
        dp, trans = self.dp, self.trans
        for k in range(1, len(trans)):
            for c in range(trans.shape[1]):
                p = trans[k, c]
                if p >= 0 and dp[p, j] < dp[k, j]:
                    dp[k, j], self.back_j[k, j], self.back_c[k, j] = dp[p, j], j, c

    def relax(self, j: int, i: int, c: int, dpj: FloatArray, load: float) -> None:
        """``I \\ J`` on one more device of class c: ``dp[k][I] <= max(dp[k - e_c][J], load)``."""
        ks = self.ks[c]
        cand = np.maximum(dpj[self.kp[c]], load)
        better = cand < self.dp[ks, i]
        if better.any():
            rows = ks[better]
            self.dp[rows, i] = cand[better]
            self.back_j[rows, i] = j
            self.back_c[rows, i] = c

    def segments(self) -> Iterator[tuple[int, int, int]]:
        """(class, J, I) of each device's share in the best split, from the last ideal back (back pointers)."""
        k, i = len(self.trans) - 1, self.dp.shape[1] - 1
        while i != 0:
            j, c = int(self.back_j[k, i]), int(self.back_c[k, i])
            if j != i:
                yield c, j, i
                i = j
            k = int(self.trans[k, c])


def solve(split: Split, steps: list[list[tuple[int, int]]], segment: Segment, upper: float = math.inf,
          deadline: float = math.inf) -> tuple[int, bool]:
    """Fill ``split`` over the ideals (``steps`` from ``ideals.ideals``), each J in turn (a J whose every value is
    already ``>= upper`` skipped): (the pairs (J, I) walked, False where ``deadline`` cut it short)."""
    pairs = 0
    for j in range(len(steps)):
        if time.perf_counter() > deadline:
            return pairs, False
        split.leave_unused(j)
        dpj = split.dp[:, j].copy()
        if dpj.min() >= upper:
            continue
        pairs += _walk(j, dpj, steps, segment, split)
    return pairs, True


def _walk(j: int, dpj: FloatArray, steps: list[list[tuple[int, int]]], segment: Segment, split: Split) -> int:
    """The ideals I above J, depth first, one unit at a time (undone on the way back); each relaxes
    ``dp[.][I]``. A branch stops where ``segment`` rules it out. Returns the pairs (J, I) walked."""
    pairs, seen = 0, {j}
    segment.start()
    stack = [(j, iter(steps[j]), -1)]
    while stack:
        i, it, _ = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            _, _, x = stack.pop()
            if x >= 0:
                segment.leave(x)
            continue
        x, i2 = nxt
        if i2 in seen:
            continue
        seen.add(i2)
        if not segment.enter(x):
            continue                                     # supersets only get worse
        stack.append((i2, iter(steps[i2]), x))
        pairs += 1
        for c, load in segment.costs():
            split.relax(j, i2, c, dpj, load)
    return pairs


def chain_minmax(costs: list[FloatArray], n: int) -> float:
    """The least bottleneck of a chain of ``n`` units over the stages in order, ``costs[s][j, i]`` stage s
    holding units ``j .. i-1`` (inf: not allowed); inf where no split fits."""
    best = np.full(n + 1, math.inf)
    best[0] = 0.0
    for t in costs:
        best = np.min(np.maximum(best[:, None], t), axis=0)
    return float(best[n])


def chain_split(costs: list[FloatArray], n: int) -> tuple[float, float, tuple[int, ...]] | None:
    """(bottleneck B, least sum of the stages' costs among the splits within B, the split's bounds: stage s
    holds ``bounds[s] .. bounds[s+1]-1``) of the chain (``chain_minmax``); None where no split fits."""
    B = chain_minmax(costs, n)
    if not math.isfinite(B):
        return None
    total = np.full(n + 1, math.inf)
    total[0] = 0.0
    back = []
    for t in costs:
        cand = np.where(t <= B * (1 + 1e-12), total[:, None] + t, math.inf)
        back.append(np.argmin(cand, axis=0))
        total = np.min(cand, axis=0)
    bounds = [n]
    i = n
    for s in range(len(costs) - 1, -1, -1):
        i = int(back[s][i])
        bounds.append(i)
    bounds.reverse()
    if bounds[0] != 0:
        return None
    return B, float(total[n]), tuple(bounds)
