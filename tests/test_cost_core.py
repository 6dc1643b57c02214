"""The cost core (orchestrator/hardware/cost.py): the only place a transfer time is computed.

A scan of orchestrator/ fails on any line outside hardware/ that divides by a bandwidth or multiplies
by an inverse bandwidth itself (the pattern of the project's structure figures); unit tests check the
core's formulas, that each numba twin gives the same floats as its Python function, and that the
array forms agree with the scalar ones."""

import io
import math
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest

from orchestrator.hardware import cost
from orchestrator.hardware.cluster import Device
from orchestrator.hardware.links import ConstantLink

ROOT = Path(__file__).resolve().parents[1]
# a division by a bandwidth (``/ bw``, ``/ link_bw[l]``, ``/ self.bandwidth``, ``/ bytes_per_s``) or a
# product with an inverse bandwidth (``* inv_bw``), in code (strings and comments are not code)
TRANSFER = re.compile(r"(/\s*[\w\.]*(bw|bandwidth|bytes_per_s)\w*\b|\*\s*[\w\.]*(inv_bw|ibw)\b)", re.I)


def transfer_lines(src: str) -> list[int]:
    """Line numbers of ``src`` whose code (tokens joined, strings and comments left out) computes a
    transfer time."""
    code: dict[int, list[str]] = {}
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type not in (tokenize.STRING, tokenize.COMMENT):
            code.setdefault(t.start[0], []).append(t.string)
    return [i for i, toks in code.items() if TRANSFER.search("".join(toks))]


def test_the_scan_finds_a_transfer_formula_and_ignores_strings_and_comments():
    src = ('t = lat + nbytes / link_bw[l]\n'
           'u = b * inv_bw  # a product with an inverse bandwidth\n'
           's = "x / bandwidth"  # / bandwidth in a comment\n'
           'v = flops / device.mem_bandwidth\n'
           'w = n / bytes_per_s\n'
           'ok = cost.hop_s(lat, nbytes, bw)\n'
           'c = lat + s.succ_bytes * ibw\n')       # an inverse bandwidth by a short name (graph_policy had one)
    assert transfer_lines(src) == [1, 2, 4, 5, 7]


def test_no_transfer_time_is_computed_outside_the_hardware_cost_core():
    pkg = ROOT / "orchestrator"
    sites = [f"{path.relative_to(ROOT)}:{line}"
             for path in sorted(pkg.rglob("*.py")) if path.relative_to(pkg).parts[0] != "hardware"
             for line in transfer_lines(path.read_text())]
    assert not sites, ("these lines compute a transfer time themselves; call orchestrator.hardware.cost "
                       "instead:\n  " + "\n  ".join(sites))


# -- the formulas ---------------------------------------------------------------------------------
def test_units():
    assert cost.GB == 1e9 and cost.GBIT == 1.25e8
    from orchestrator.hardware import links
    assert links.GB is cost.GB


def test_known_values():
    assert cost.serialize_s(2e9, 1e9) == 2.0
    assert cost.hop_s(1e-3, 2e9, 1e9) == 2.001
    assert cost.hop_or_fixed_s(-1.0, 1e-3, 2e9, 1e9) == 2.001
    assert cost.hop_or_fixed_s(0.5, 1e-3, 2e9, 1e9) == 0.5
    assert cost.hop_or_fixed_s(0.0, 1e-3, 2e9, 1e9) == 0.0          # a fixed time of zero is a time
    assert cost.inverse_bandwidth(4.0) == 0.25
    assert cost.path_s(1.0, 8.0, 0.25) == 3.0
    assert cost.path_or_fixed_s(-1.0, 2, 1.0, 8.0, 0.25) == 3.0
    assert cost.path_or_fixed_s(0.5, 2, 1.0, 8.0, 0.25) == 1.0       # hops x fixed
    assert cost.inputs_s(3, 0.5, 8.0, 0.25, 0.25, 2) == 1.5 + 2.0 + 0.5
    from orchestrator.hardware.topology import Topology
    from orchestrator.sync.costmodel import allgather_s

    net = Topology.uniform(4, 1e9, 1e-3)           # the all-gather is the ring's second half: (k - 1) (n / B + L)
    assert allgather_s(1e9, net) == 3 * 1.001
    assert allgather_s(1e9, Topology.uniform(1, 1e9, 1e-3)) == 0.0 and allgather_s(0.0, net) == 0.0
    assert cost.roofline_s(2e12, 1e9, 1e12, 1e11) == 2.0             # compute-bound
    assert cost.roofline_s(1e9, 1e12, 1e12, 1e11) == 10.0            # memory-bound
    assert Device("gpu:0", "gpu", peak_flops=1e12, mem_bandwidth=1e11).roofline_s(1e9, 1e12) == 10.0
    assert ConstantLink(1e9, 1e-3).time(2e9) == cost.hop_s(1e-3, 2e9, 1e9)


def test_fifo_link_queues_messages_in_arrival_order():
    link = cost.FifoLink(bandwidth=1e9, latency_s=1e-3)
    assert link.send(0.0, 1e9) == 1.001                             # served at once
    assert link.send(0.5, 1e9) == 2.001                             # waits for the first one
    assert link.send(5.0, 5e8) == 5.501                             # the link was idle again
    assert link.busy_s == 2.5 and link.free_at == 5.5


def test_path_tables_sum_each_route():
    # three devices; routes 0->1 over link 0, 0->2 over links 0 and 1, 1->0 over link 2, others none
    route_ptr = np.array([0, 0, 1, 3, 4, 4, 4, 4, 4, 4], dtype=np.int64)
    route_link = np.array([0, 0, 1, 2], dtype=np.int64)
    link_lat, link_bw = np.array([1e-3, 2e-3, 3e-3]), np.array([1e9, 4e9, 2e9])
    hops, lat, inv_bw = cost.path_tables(3, route_ptr, route_link, link_lat, link_bw)
    assert hops.tolist() == [[0, 1, 2], [1, 0, 0], [0, 0, 0]]
    assert lat[0, 2] == 1e-3 + 2e-3 and inv_bw[0, 2] == 1 / 1e9 + 1 / 4e9 and inv_bw[1, 0] == 1 / 2e9
    # a route of one hop costs what the hop does over that link in its inverse form
    assert cost.path_s(lat[0, 1], 1e6, inv_bw[0, 1]) == cost.path_or_fixed_s(-1.0, 1.0, 1e-3, 1e6,
                                                                             cost.inverse_bandwidth(1e9))


RNG = np.random.default_rng(0)
CASES = [(float(f), float(lat), float(b), float(bw)) for f, lat, b, bw in zip(
    np.where(RNG.random(40) < 0.3, RNG.random(40), -1.0), RNG.random(40) * 1e-4, RNG.random(40) * 1e8,
    10 ** RNG.uniform(8, 11, 40))]


@pytest.mark.parametrize("twin, python", [(cost.hop_or_fixed_nb, cost.hop_or_fixed_s),
                                          (cost.path_or_fixed_nb, cost.path_or_fixed_s),
                                          (cost.inverse_bandwidth_nb, cost.inverse_bandwidth),
                                          (cost.inputs_nb, cost.inputs_s)])
def test_each_numba_twin_gives_the_same_floats(twin, python):
    for f, lat, b, bw in CASES:
        args = {cost.hop_or_fixed_s: (f, lat, b, bw), cost.path_or_fixed_s: (f, 2.0, lat, b, 1.0 / bw),
                cost.inverse_bandwidth: (bw,), cost.inputs_s: (3.0, lat, b, 1.0 / bw, max(f, 0.0), 2.0)}[python]
        assert twin(*args) == python(*args)


def test_the_array_forms_agree_with_the_scalar_ones():
    f, lat, b, bw = (np.array(x) for x in zip(*CASES))
    hop = cost.hop_or_fixed_array(f, lat, b, bw)
    assert hop.tolist() == [cost.hop_or_fixed_s(*c) for c in CASES]
    path = cost.path_or_fixed_array(f, 3.0, lat, b, 1.0 / bw)
    assert path.tolist() == [cost.path_or_fixed_s(c[0], 3.0, c[1], c[2], 1.0 / c[3]) for c in CASES]
    assert cost.hop_s(lat, b, bw).tolist() == [cost.hop_s(c[1], c[2], c[3]) for c in CASES]
    assert all(math.isfinite(x) for x in hop)


def test_a_table_of_ring_sizes_is_the_scalar_bucketed_ring_at_each_size():
    """planning/sync_bound's table of all-reduce times over message sizes x ring sizes is links.bucketed_allreduce_time
    with an array of members (it wrote the bucketed ring out again)."""
    from orchestrator.hardware.links import bucketed_allreduce_time

    link = ConstantLink(1.2e10, 2e-5)
    sizes, ks = np.array([[1e5], [3e7], [7.7e8]]), np.arange(1, 9, dtype=float)[None, :]
    table = bucketed_allreduce_time(link, sizes, ks, 2.5e7)
    for i, n in enumerate(sizes[:, 0]):
        for j, k in enumerate(ks[0]):
            assert table[i, j] == pytest.approx(bucketed_allreduce_time(link, float(n), int(k), 2.5e7), rel=1e-12)
    assert (table[:, 0] == 0).all()                               # one member: no ring
