"""The partitioning engine (orchestrator.partition) against brute force: the ideals of a DAG, the contiguous
min-max split over them with a segment callback (devices of classes, memory), its chain form (ordered stages,
then the least sum), the column DP (with a box of resource counts and an extra state) and the work LP."""

import itertools
import math
import random

import numpy as np
import pytest

from orchestrator.partition.bounds import ColumnDP, column_dp, work_lp
from orchestrator.partition.ideals import chain, ideals, scc
from orchestrator.partition.split import Split, chain_minmax, chain_split, solve


def test_a_chains_ideals_are_its_prefixes_and_a_diamond_has_six():
    masks, _ = ideals(4, chain(4))
    assert masks == [0b0, 0b1, 0b11, 0b111, 0b1111]
    masks, _ = ideals(4, [set(), {0}, {0}, {1, 2}])             # 0 -> 1, 2 -> 3
    assert sorted(masks) == [0b0, 0b1, 0b11, 0b101, 0b111, 0b1111]
    assert ideals(4, [set(), set(), set(), set()], limit=10) is None   # 16 ideals, over the limit
    comp = scc([{1}, {0, 2}, set()])                              # 0 <-> 1 fused, before 2
    assert comp[0] == comp[1] != comp[2] and comp[2] > comp[0]


class _Additive:
    """A segment whose cost on class c is the sum of its units' ``work[x, c]``; it fits where its memory does."""

    def __init__(self, work, mem, cap):
        self.work, self.mem, self.cap = work, mem, cap

    def start(self):
        self.units = []

    def enter(self, x):
        self.units.append(x)
        return True

    def leave(self, x):
        assert self.units.pop() == x

    def costs(self):
        used = sum(self.mem[x] for x in self.units)
        return [(c, float(sum(self.work[x, c] for x in self.units))) for c in range(self.work.shape[1])
                if used <= self.cap[c]]


def _brute(n, preds, work, mem, cap, counts):
    """The least bottleneck over every assignment of units to devices that is contiguous (each device's units
    I \\ J of two ideals, the devices in some order) and fits memory."""
    devices = [c for c, k in enumerate(counts) for _ in range(k)]
    masks, _ = ideals(n, preds)
    ok = set(masks)
    best = math.inf
    for assign in itertools.product(range(len(devices)), repeat=n):
        used = sorted(set(assign))
        for order in itertools.permutations(used):
            seen, good = 0, True
            for d in order:
                seen |= sum(1 << x for x in range(n) if assign[x] == d)
                good &= seen in ok
            if good:
                break
        else:
            continue
        loads = []
        for d in used:
            units = [x for x in range(n) if assign[x] == d]
            if sum(mem[x] for x in units) > cap[devices[d]]:
                break
            loads.append(sum(work[x, devices[d]] for x in units))
        else:
            best = min(best, max(loads))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_the_split_over_ideals_is_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    n = 5
    preds = [set(rng.sample(range(x), k=min(x, rng.choice([0, 1, 1, 2])))) for x in range(n)]
    work = np.array([[rng.choice([1.0, 2.0, 3.5]), rng.choice([2.0, 5.0])] for _ in range(n)])
    mem = [rng.choice([1, 2]) for _ in range(n)]
    cap, counts = [4, 10], [2, 1]
    masks, steps = ideals(n, preds)
    table = Split(counts, len(masks))
    pairs, done = solve(table, steps, _Additive(work, mem, cap))
    assert done and pairs > 0
    assert table.value == pytest.approx(_brute(n, preds, work, mem, cap, counts))
    got = sorted((c, masks[i] & ~masks[j]) for c, j, i in table.segments())
    assert sum(m for _, m in got) == (1 << n) - 1                            # the segments cover every unit once
    assert max(sum(work[x, c] for x in range(n) if m >> x & 1) for c, m in got) == pytest.approx(table.value)


@pytest.mark.parametrize("seed", range(5))
def test_the_chain_split_is_min_max_then_least_sum(seed):
    rng = np.random.default_rng(seed)
    n, S = 6, 3
    costs = []
    for _ in range(S):
        t = np.full((n + 1, n + 1), math.inf)
        for j in range(n):
            for i in range(j + 1, n + 1):
                if rng.random() < 0.85:
                    t[j, i] = float(rng.integers(1, 9))
        costs.append(t)
    splits = [(0, *cut, n) for cut in itertools.combinations(range(1, n), S - 1)]
    stage = [[costs[s][b[s], b[s + 1]] for s in range(S)] for b in splits]
    B = min(max(x) for x in stage)
    assert chain_minmax(costs, n) == B
    got = chain_split(costs, n)
    if not math.isfinite(B):
        assert got is None
        return
    total = min(sum(x) for x in stage if max(x) <= B)
    assert got[0] == B and got[1] == total
    assert [costs[s][got[2][s], got[2][s + 1]] for s in range(S)] in [x for x in stage if sum(x) == total]


def test_the_column_dp_is_the_least_weighted_column_within_each_threshold():
    n, size = 4, 5
    t = [np.arange(n + 1, dtype=float), 2.0 * np.arange(n + 1)]          # kind 1 twice as slow
    weight = [3.0, 1.0]
    grid = np.arange(1.0, size + 1)
    starts = [(np.searchsorted(grid, tk[None, :] - tk[:, None]), int(np.searchsorted(grid, tk[-1]))) for tk in t]
    starts = [(np.where(np.triu(np.ones((n + 1, n + 1), bool), 1), s, size), w) for s, w in starts]
    out = column_dp(n, size, starts, lambda k, j, i: weight[k], lambda k: weight[k])
    for s, C in enumerate(grid):
        best = math.inf
        for cuts in range(n):
            for cut in itertools.combinations(range(1, n), cuts):
                b = (0, *cut, n)
                for kinds in itertools.product(range(2), repeat=len(b) - 1):
                    if all(t[k][b[x + 1]] - t[k][b[x]] <= C for x, k in enumerate(kinds)):
                        best = min(best, sum(weight[k] for k in kinds))
        assert out[s] == best, (C, out[s], best)


def _columns(n, K):
    """Every column of a chain of ``n`` units: (its stages' bounds, its stages' kinds)."""
    for cuts in range(n):
        for cut in itertools.combinations(range(1, n), cuts):
            b = (0, *cut, n)
            for kinds in itertools.product(range(K), repeat=len(b) - 1):
                yield b, kinds


def _box_instance(seed, n=5, size=4):
    rng = np.random.default_rng(seed)
    uses, box = [(0, 1), (1, 1), (1, 2)], (2, 3)
    add = [np.triu(rng.integers(1, 9, (n + 1, n + 1)), 1).astype(float) for _ in uses]
    starts = [(np.where(np.triu(np.ones((n + 1, n + 1), bool), 1), rng.integers(0, size + 1, (n + 1, n + 1)), size),
               int(rng.integers(0, size + 1))) for _ in uses]
    return uses, box, add, starts, rng.integers(0, 4, (len(uses), len(uses))).astype(float)


@pytest.mark.parametrize("seed", range(4))
def test_the_column_dp_over_a_box_of_resources_is_the_brute_force_optimum(seed):
    n, size = 5, 4
    uses, box, add, starts, _ = _box_instance(seed, n, size)
    out = column_dp(n, size, starts, lambda k, j, i: add[k][j, i], lambda k: 10.0 + k, box=box, uses=uses, compact=True)
    best = np.full((box[0] + 1, box[1] + 1, size), math.inf)
    for b, kinds in _columns(n, len(uses)):
        x = [0, 0]
        for k in kinds:
            x[uses[k][0]] += uses[k][1]
        if x[0] > box[0] or x[1] > box[1]:
            continue
        first = max(starts[k][0][b[s], b[s + 1]] for s, k in enumerate(kinds))
        cost = sum(add[k][b[s], b[s + 1]] for s, k in enumerate(kinds))
        best[x[0], x[1], first:] = np.minimum(best[x[0], x[1], first:], cost)
        if len(kinds) == 1:                           # the whole chain as one stage, by its own rule
            w = starts[kinds[0]][1]
            best[x[0], x[1], w:] = np.minimum(best[x[0], x[1], w:], 10.0 + kinds[0])
    assert out.shape == best.shape and (out == best).all()


@pytest.mark.parametrize("seed", range(4))
def test_the_column_dp_with_the_last_kind_in_its_state_prices_each_boundary(seed):
    """The last stage's kind as the DP's state: each boundary between kinds k' and k costs hop[k', k] more
    (``merge``), checked against every column."""
    n, size = 5, 4
    uses, box, add, starts, hop = _box_instance(seed + 10, n, size)
    K = len(uses)
    dp = ColumnDP(n, size, uses, box, states=K + 1, start=False)
    dp.lat[0, K] = dp.origin                          # state K: no stage yet

    def moves(j, live):
        first = [q for q in live if q == K]
        via = dp.merge(j, [q for q in live if q < K], np.vstack([hop, np.zeros(K)])) if len(first) < len(live) else None
        for k in range(K):
            for i in range(j + 1, n + 1):
                s = int(starts[k][0][j, i])
                if s < size and first:
                    dp.push(dp.lat[j, K], k, add[k][j, i], s, i, k)
                if s < size and via is not None:
                    dp.push(via[k], k, add[k][j, i], s, i, k)

    dp.sweep(moves)
    out = dp.lat[n, :K].min(axis=0)
    best = np.full((box[0] + 1, box[1] + 1, size), math.inf)
    for b, kinds in _columns(n, K):
        x = [0, 0]
        for k in kinds:
            x[uses[k][0]] += uses[k][1]
        if x[0] <= box[0] and x[1] <= box[1]:
            first = max(starts[k][0][b[s], b[s + 1]] for s, k in enumerate(kinds))
            cost = sum(add[k][b[s], b[s + 1]] for s, k in enumerate(kinds)) + sum(hop[a, c] for a, c in zip(kinds, kinds[1:]))
            best[x[0], x[1], first:] = np.minimum(best[x[0], x[1], first:], cost)
    assert (out == best).all()
    assert np.isfinite(best).any() and (best < math.inf).sum() > 3     # the instance is not trivial


def test_the_work_lp_spreads_the_work_over_the_resources():
    # two items, two resources (one of two units): item 0 only on resource 0
    res = work_lp(np.array([[2.0, math.inf], [1.0, 1.0]]), np.array([1.0, 2.0]))
    # resource 0 carries item 0 (2 s) whatever the rest does: item 1 goes to resource 1 (1 s over 2 units)
    assert res.status == 0 and res.x[-1] == pytest.approx(2.0)
    cost = np.array([[1.0, 3.0], [1.0, 3.0]])
    assert work_lp(cost, np.ones(2)).x[-1] == pytest.approx(1.5)          # a share a on resource 0: a = 3 (2 - a)
    # resource 0's pool holds one item's worth of memory: a <= 1, so T = 3 (2 - 1)
    capped = work_lp(cost, np.ones(2), np.array([1.0, 1.0]), np.array([0, 1]), [1.0, math.inf])
    assert capped.x[-1] == pytest.approx(3.0)
