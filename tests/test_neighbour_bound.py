"""The columns' DP with sends priced by the neighbours' kinds (``planning.neighbour_bound``) against the
exact best column, enumerated: every sequence of stage kinds on a column's GPUs, each split exactly on
Sailor's formula (``(m - 1) B + sum_s (c_s + k_s)`` with the simulator's own sends and memory rule)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile
from orchestrator.planning.column_bound import Columns, ExactColumns
from orchestrator.planning.costs import Costs
from orchestrator.planning.evaluator import simulator
from orchestrator.planning.neighbour_bound import NeighbourColumns, links
from orchestrator.planning.templates import Kind

SAILOR = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "sailor"
pytestmark = pytest.mark.skipif(not SAILOR.is_dir(), reason="needs ../shared/workloads/sailor")


def _best_column(costs: Costs, kinds: list[Kind], gpus: tuple[int, ...], types: list[str], mbs: int, m: int) -> float:
    """min over kind sequences on exactly ``gpus`` and splits of (m - 1) B + sum of the stages' times."""
    L = costs.profile.num_layers
    best = math.inf

    def seqs(seq, used):
        if used == gpus and seq:
            yield tuple(seq)
        for k in kinds:
            nxt = tuple(u + (k.tp if t == k.gpu else 0) for u, t in zip(used, types))
            if all(a <= b for a, b in zip(nxt, gpus)) and len(seq) < L:
                seq.append(k)
                yield from seqs(seq, nxt)
                seq.pop()

    for seq in seqs([], tuple(0 for _ in gpus)):
        S = len(seq)
        tabs = [costs.table(seq[s - 1] if s else None, k, seq[s + 1] if s < S - 1 else None, S, s, mbs, m)
                for s, k in enumerate(seq)]
        if any(t is None for t in tabs):
            continue
        values = np.unique(np.concatenate([t[np.isfinite(t)] for t in tabs]))
        for cap in values:                       # the bottleneck B: the least sum of the stages within it
            if (m - 1) * cap >= best:
                break
            total = np.full(L + 1, math.inf)
            total[0] = 0.0
            for t in tabs:
                total = np.min(np.where(t <= cap, total[:, None] + t, math.inf), axis=0)
            best = min(best, (m - 1) * cap + float(total[L]))
    return best


def test_sends_between_neighbours_stay_below_the_exact_column_and_tighten_the_plain_dp():
    profile = LayeredProfile.from_directory(SAILOR, "OPT-350")
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 4, "V100-16": 8})
    mbs, m = 2, 16
    cols = Columns(profile, cluster, mbs)
    plain = ExactColumns(cols)._tau(m)
    near = NeighbourColumns(profile, cluster, cols)
    assert near.neighbours
    tau = near._tau(m)
    costs = Costs(profile, cluster, simulator("sailor"))
    zone = {g: z for (g, z) in cluster.gpus}
    kinds = [Kind(g, tp, cluster.gpu_type(g).gpus_per_node, zone[g]) for g, tp, *_ in cols.kinds]
    raised = 0
    for x in ((1, 2), (2, 2), (2, 4), (0, 6), (1, 4)):
        exact = _best_column(costs, kinds, x, cols.types, mbs, m)
        assert tau[x] <= exact * (1 + 1e-9), (x, tau[x], exact)
        assert tau[x] >= plain[x] * (1 - 1e-6)
        raised += tau[x] > plain[x] * 1.01
    assert raised >= 2                           # the neighbours' sends matter on mixed columns


def test_a_link_is_at_least_each_end_s_cheapest_send():
    profile = LayeredProfile.from_directory(SAILOR, "OPT-350")
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 8, "V100-16": 8})
    cols = Columns(profile, cluster, 2)
    link = links(profile, cluster, [(g, tp) for g, tp, *_ in cols.kinds], 2)
    own = np.array([float(k[3][1, 2]) / 2 for k in cols.kinds])
    assert (link >= own[:, None] - 1e-12).all() and (link >= own[None, :] - 1e-12).all()
    assert np.allclose(link, link.T)


def test_the_columns_box_follows_the_column_count():
    from orchestrator.planning.column_bound import BOX_CELLS, column_box

    assert column_box(np.array([128.0, 384.0]), 19) == (16, 64)      # four times the mean, a power of two, within BOX_CELLS
    assert column_box(np.array([32.0, 96.0]), 16) == (16, 32)        # at least the fixed box
    a, v = column_box(np.array([128.0, 384.0]), 1)                    # few columns: capped
    assert (a + 1) * (v + 1) <= BOX_CELLS
    # the corners alone (a column outside the box) cannot make the columns: they need more GPUs than exist
    for counts, n in (([128.0, 384.0], 19), ([32.0, 96.0], 16), ([80.0, 240.0], 40)):
        a, v = column_box(np.array(counts), n)
        assert counts[0] / (a + 1) + counts[1] / (v + 1) < n


def test_a_stage_holds_at_least_one_layer():
    """``stage_fits[j, i]`` only for ``j < i``: an empty or reversed range has negative bytes (it "fitted") and
    negative times, which let the neighbours' two-stage seeding charge second stages that end before they start."""
    from orchestrator.planning.bound import stage_fits

    profile = LayeredProfile.from_directory(SAILOR, "OPT-350")
    cluster = GpuCluster.from_directory(SAILOR).with_gpus({"A100-40": 4, "V100-16": 8})
    L = profile.num_layers
    for gpu in ("A100-40", "V100-16"):
        fits = stage_fits(profile, cluster, gpu, 1, 2)
        assert not fits[np.tril_indices(L + 1)].any(), gpu
        assert fits[np.arange(L), np.arange(1, L + 1)].all(), gpu      # every single layer is a stage that fits
