"""Greedy placement heuristics on a ``PlacementProblem``: memory-aware earliest-finish-time list
scheduling (HEFT-style) under two priorities (upward rank, topological order), the fastest single
device that holds the graph, and for the load objective the best split of one topological order into
consecutive stages. ``best_greedy`` judges every candidate with the problem's evaluator and keeps
the best; ``placer=greedy`` is it, and rl and pre-training start from it. Deterministic."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import FloatArray, IntArray
from orchestrator.hardware.cost import path_or_fixed_array
from orchestrator.placement.graph.kernels import upward_rank
from orchestrator.placement.solve.contiguous import solve
from orchestrator.placement.solve.list_kernel import run_list_schedule
from orchestrator.placement.solve.problem import PlacementProblem


def best_greedy(prob: PlacementProblem, variants: Iterable[str] = ("heft", "topo", "single"),
                ) -> tuple[IntArray, str, dict[str, float]]:
    """Every variant's placement judged by the evaluator; (best assignment, its variant, all times)."""
    cands: dict[str, IntArray] = {}
    for v in variants:
        if v == "heft":
            cands[v] = list_schedule(prob, heft_rank(prob))
        elif v == "topo":
            cands[v] = list_schedule(prob, -prob.topo_pos.astype(float))
        elif v == "single":
            a = single_device(prob)
            if a is not None:
                cands[v] = a
        else:
            raise ConfigError(f"placer.variants: unknown greedy variant {v!r} (heft, topo, single)")
    if getattr(prob.evaluator, "load_model", None) is not None:
        # The pipeline objective: also the best split of one topological order into consecutive
        # stages (``contiguous.solve(linear=True)``, cheap), which list scheduling does not aim at.
        chain = solve(prob, prob.evaluator.load_model, linear=True)
        if chain.assign is not None:
            cands["chain"] = chain.assign
    times = {k: prob.objective_value(a) for k, a in cands.items()}
    best = min(times, key=lambda k: (times[k], list(times).index(k)))
    return cands[best], best, times


def heft_rank(prob: PlacementProblem) -> FloatArray:
    """Upward rank: mean cost over allowed devices plus the largest (mean transfer + rank) of a successor."""
    s = prob.sim
    cost = np.where(np.isfinite(s.cost), s.cost, np.nan)
    w = np.nan_to_num(np.nanmean(cost, axis=1))
    return upward_rank(prob.graph.topological_order(), s.succ_ptr, s.succ_idx, w, mean_comm_all(prob))


def mean_comm_all(prob: PlacementProblem) -> FloatArray:
    """``prob.mean_comm(k)`` of every simulator edge k at once (the same floats: each edge's
    device-pair matrix is summed as one row), in blocks so memory stays O(block x D^2)."""
    s, nd = prob.sim, prob.nd
    out = np.empty(len(s.succ_idx))
    denom = max(1, nd * (nd - 1))
    for lo in range(0, len(out), 8192):
        f, b = s.succ_fixed[lo:lo + 8192], s.succ_bytes[lo:lo + 8192]
        m = path_or_fixed_array(f[:, None, None], prob.hops[None], prob.lat[None], b[:, None, None], prob.inv_bw[None])
        out[lo:lo + len(f)] = m.reshape(len(f), nd * nd).sum(axis=1) / denom
    return out


def list_schedule(prob: PlacementProblem, priority: FloatArray) -> IntArray:
    """Earliest-finish-time list scheduling, highest ``priority`` first among ready nodes
    (``list_kernel``: one compiled pass over the graph's arrays)."""
    s = prob.sim
    pred_ptr, pred_src, pred_edge = prob.pred_csr
    return run_list_schedule((np.asarray(priority, dtype=float), s.cost, s.npred, s.succ_ptr, s.succ_idx, s.succ_bytes,
                              s.succ_fixed, pred_ptr, pred_src, pred_edge, prob.atom_of, prob.n_atoms, prob.allowed,
                              prob.pool_of, prob.pool_cap, prob.atom_resident, prob.atom_temp, s.route_ptr,
                              s.route_link, s.link_chan, s.link_lat, s.link_bw, s.n_chan))


def single_device(prob: PlacementProblem) -> IntArray | None:
    """Every atom on the fastest device (by total cost) that holds the whole graph; atoms that cannot
    run there go to their fastest allowed device. None when no single device fits."""
    fastest = prob.atom_cost.min(axis=1, keepdims=True)
    order = np.argsort(np.where(prob.allowed, prob.atom_cost, fastest).sum(axis=0), kind="stable")
    for d in order:
        a = np.where(prob.allowed[:, d], d, np.argmin(prob.atom_cost, axis=1))
        if prob.fits(a):
            return prob.expand(a)
    return None
