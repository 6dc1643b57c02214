"""Sequential (autoregressive) decoding of the graph policy: atoms are placed one at a time in a
fixed, order-free priority order, and each decision is conditioned on the atoms already placed.

The state after t decisions is a partial list schedule (as HEFT builds one; Topcuoglu et al. 2002)
and a partial pipeline load (the msr authors' rule, docs/pipeline.md), per sample:
``fin[a]`` (the finish time of each placed atom), ``ready[d]`` (when device d is free),
``load[d]`` (compute plus transfers device d does per sample), and each memory pool's resident and
temporary bytes. For the next atom ``a`` and each device ``d`` (``c[a,d]`` its cost, ``C_e(i,d)``
the transfer time of atom edge ``e`` from device i to d: latency x tensors + bytes / bandwidth +
fixed edge costs x hops, summed over its tensors)::

    arrival[d] = max over placed preds p of  fin[p] + C_(p,a)(dev p, d)
    eft[d]     = max(ready[d], arrival[d]) + c[a,d]                       (earliest finish time)
    cin[d]     = sum over placed preds p on another device of C_(p,a)(dev p, d)
    bott[d]    = max(load[d] + c[a,d] + cin[d], max_{d' != d} load[d'])   (pipeline bottleneck after)
    fill[d]    = (resident of d's pool + res[a] + max(temp of the pool, temp[a])) / capacity

The K = 12 *dynamic* features of (a, d), the trial's objective's own pair first (for ``step``:
log(1 + (eft - min eft) / cbar), eft is the minimum, then log(1 + (bott - min bott) / cbar), bott is
the minimum; for ``pipeline`` the two pairs swapped), log(1 + cin / cbar), load[d] / fair share
(<= 4), fill (<= 2), objective flag (1 = pipeline), (eft - min eft) / (latest finish so far)
(<= 4), progress t / A, (load[d] + c[a,d] + cin[d]) / fair share (<= 4), all placed preds of a
are on d (a has some); ``cbar`` is the mean fastest atom cost, the fair share sum_a c*[a] / D,
minima over the devices whose memory still holds ``a``. The logit of (a, d) is

    logit = s[a,d] + T[a,d] + relu(f[a,d] Wq + z[a,d] Wr + bq) vq

with ``s`` and ``z`` the static network's logit and pair embedding (orchestrator.placement.learn.graph_policy),
``T`` the fine-tune's per-atom table. Devices whose pool cannot hold ``a`` are masked (all allowed
ones when none can). Greedy decoding takes the largest logit (rounded to 1e-4); sampling draws by
inverse CDF with uniform draw ``name_rank[a]``, so neither depends on the order of the graph file.
The features along each trajectory are recorded so the training step recomputes the same logits
in TensorFlow (``Rollouts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from orchestrator.graph.arrays import BoolArray, F32Array, FloatArray, IntArray
from orchestrator.hardware.cost import inputs_s
from orchestrator.placement.learn.policy_kernel import decode_kernel
from orchestrator.placement.simulate.sim_kernel import HAVE_NUMBA

if TYPE_CHECKING:
    from orchestrator.placement.solve.problem import PlacementProblem

K_DYN = 12


@dataclass
class DecodeInputs:
    order: IntArray        # [A] decode order (upward rank, then depth, then name)
    cost: FloatArray       # [A, D] atom cost in s (0 where not allowed; see mask)
    in_ptr: IntArray       # [A + 1] atom in-edges, CSR
    in_src: IntArray
    in_n: FloatArray       # tensors (latency count), bytes, fixed costs per atom edge
    in_bytes: FloatArray
    in_fixed: FloatArray
    lat: FloatArray        # [D, D]
    inv_bw: FloatArray
    hops: FloatArray
    cbar: float
    share: float
    pipeline: float


class DecodeGraph(Protocol):
    """What ``rollout`` reads of a graph's inputs (``graph_policy.GraphInputs``, which imports this
    module: a protocol, not an import, so the two modules stay out of an import circle)."""

    mask: BoolArray                  # [A, D] allowed
    name_rank: IntArray              # [A]
    res: FloatArray | None           # [A] resident bytes
    temp: FloatArray | None          # [A] temporary bytes
    pool_of: IntArray | None         # [D] memory pool of each device
    pool_cap: FloatArray | None      # [P] capacity of each pool
    dec: DecodeInputs | None


@dataclass
class Rollouts:
    actions: IntArray      # [B, A] device per atom
    feats: F32Array        # [B, A, D, K_DYN] float32, the dynamic features at each decision
    feasible: BoolArray    # [B, A, D] the devices the decision could choose


def head_logits(s: FloatArray, zr: FloatArray, head: dict[str, FloatArray], f: F32Array, ok: BoolArray) -> FloatArray:
    """The logits of decisions (numpy): s + relu(f Wq + z Wr + bq) vq, -1e9 where not ``ok``; ``s``
    [..., D], ``zr`` [..., D, Hq], ``f`` [..., D, K_DYN] (``GraphPolicy._dynamic`` in TensorFlow)."""
    return np.where(ok, s + np.maximum(f @ head["Wq"] + zr + head["bq"], 0.0) @ head["vq"][:, 0], -1e9)


def decode_inputs(prob: PlacementProblem, depth: FloatArray, rank: FloatArray, name_rank: IntArray, cmin: FloatArray,
                  ) -> DecodeInputs:
    """The arrays the sequential decode needs, from a ``PlacementProblem``."""
    s, A, D = prob.sim, prob.n_atoms, prob.nd
    src_n = np.repeat(np.arange(prob.n), np.diff(s.succ_ptr))
    sa, da = prob.atom_of[src_n], prob.atom_of[s.succ_idx]
    cross = sa != da
    fixed = s.succ_fixed[cross]
    key = sa[cross] * A + da[cross]
    uk, inv = np.unique(key, return_inverse=True)
    n_lat = np.bincount(inv, weights=(fixed < 0).astype(float), minlength=len(uk))
    nbytes = np.bincount(inv, weights=np.where(fixed < 0, s.succ_bytes[cross], 0.0), minlength=len(uk))
    nfix = np.bincount(inv, weights=np.where(fixed >= 0, fixed, 0.0), minlength=len(uk))
    esrc, edst = uk // A, uk % A
    o = np.lexsort((name_rank[esrc], edst))                    # per destination, sources by name: order-free
    esrc, edst, n_lat, nbytes, nfix = esrc[o], edst[o], n_lat[o], nbytes[o], nfix[o]
    ptr = np.zeros(A + 1, np.int64)
    np.add.at(ptr, edst + 1, 1)
    order = np.lexsort((name_rank, depth, -np.round(rank, 6)))
    cmean = float(cmin.mean()) or 1.0
    cost = np.where(prob.allowed, np.nan_to_num(prob.atom_cost, posinf=0.0), 0.0)
    pipe = float(getattr(prob.evaluator, "load_model", None) is not None)
    return DecodeInputs(order, cost, np.cumsum(ptr), esrc, n_lat, nbytes, nfix, prob.lat, prob.inv_bw, prob.hops,
                        cmean, float(cmin.sum() / D) or 1.0, pipe)


def rollout(gi: DecodeGraph, s: FloatArray, zr: FloatArray, head: dict[str, FloatArray], n: int, *, greedy: bool = False,
            draws: FloatArray | None = None, forced: IntArray | None = None) -> Rollouts:
    """``n`` trajectories: greedy (largest logit), sampled (``draws`` [n, A] uniforms, column by name
    rank) or ``forced`` ([n, A] given actions, for imitation). ``s`` [A, D] static logits (table
    included), ``zr`` [A, D, Hq] the pair embedding after Wr; ``head`` the numpy Wq, bq, vq.
    The compiled loop (``policy_kernel``) where numba is installed, else ``rollout_numpy``."""
    if not HAVE_NUMBA:
        return rollout_numpy(gi, s, zr, head, n, greedy=greedy, draws=draws, forced=forced)
    di, mask = gi.dec, gi.mask
    assert di is not None and gi.res is not None and gi.temp is not None and gi.pool_of is not None \
        and gi.pool_cap is not None
    A, D = mask.shape
    mode = 2 if forced is not None else 0 if greedy else 1
    assert mode != 1 or draws is not None       # sampling: the caller passes the uniforms
    dev = np.full((n, A), -1, np.int64)
    feats = np.zeros((n, A, D, K_DYN), np.float32)
    feas = np.zeros((n, A, D), bool)
    decode_kernel(di.order, di.cost, di.in_ptr, di.in_src, di.in_n, di.in_bytes, di.in_fixed, di.lat, di.inv_bw,
                  di.hops, float(di.cbar), float(di.share), float(di.pipeline), mask, gi.name_rank, gi.res, gi.temp,
                  gi.pool_of, np.where(np.isfinite(gi.pool_cap), gi.pool_cap, np.inf), np.ascontiguousarray(s),
                  np.ascontiguousarray(zr), np.ascontiguousarray(head["Wq"]), np.ascontiguousarray(head["bq"]),
                  np.ascontiguousarray(head["vq"][:, 0]), mode,
                  np.zeros((n, A)) if draws is None else np.asarray(draws, dtype=float),
                  np.zeros((n, A), np.int64) if forced is None else np.asarray(forced, dtype=np.int64),
                  dev, feats, feas)
    return Rollouts(dev, feats, feas)


def rollout_numpy(gi: DecodeGraph, s: FloatArray, zr: FloatArray, head: dict[str, FloatArray], n: int, *,
                  greedy: bool = False, draws: FloatArray | None = None, forced: IntArray | None = None) -> Rollouts:
    """``rollout`` vectorised over samples and devices with numpy, one step per atom: the reference
    the compiled loop is tested against, and the fallback without numba."""
    di, mask = gi.dec, gi.mask
    # ``graph_inputs`` fills the memory and decode fields (they default to None only in the dataclass)
    assert di is not None and gi.res is not None and gi.temp is not None and gi.pool_of is not None \
        and gi.pool_cap is not None
    A, D = mask.shape
    B = n
    ar = np.arange(B)
    cap = np.where(np.isfinite(gi.pool_cap), gi.pool_cap, np.inf)
    P = len(cap)
    q = gi.pool_of
    dev = np.full((B, A), -1, np.int64)
    fin = np.zeros((B, A))
    ready = np.zeros((B, D))
    load = np.zeros((B, D))
    used, tmp = np.zeros((B, P)), np.zeros((B, P))
    latest = np.zeros(B)
    feats = np.zeros((B, A, D, K_DYN), np.float32)
    feas = np.zeros((B, A, D), bool)
    for t, a in enumerate(di.order):
        c = di.cost[a]
        arrival, cin, comm, has_pred, pd, pdc = _inputs(di, a, dev, fin, D)
        eft = np.maximum(ready, arrival) + c
        after = load + c + cin
        bott = np.maximum(after, _others_max(load))
        fill = _fill(gi.res[a], gi.temp[a], used[:, q], tmp[:, q], cap[q])
        ok = (fill <= 1.0 + 1e-12) & mask[a][None]
        none = ~ok.any(axis=1)
        if none.any():
            ok[none] = mask[a]
        f = feats[:, t]
        _features(f, di, t / A, eft, bott, ok, cin, load, fill, after, latest, has_pred)
        feas[:, t] = ok
        ch = _choose(head_logits(s[a][None], zr[a][None], head, f, ok), ok, forced, greedy,
                     None if draws is None else draws[:, gi.name_rank[a]], a)
        dev[:, a] = ch
        fin[:, a] = eft[ar, ch]
        latest = np.maximum(latest, fin[:, a])
        ready[ar, ch] = fin[:, a]
        load[ar, ch] = after[ar, ch]
        if comm is not None:                                    # the senders pay their hop too
            send = comm[ar, :, ch]                              # [B, m]
            np.add.at(load, (np.repeat(ar, send.shape[1]), pdc.ravel()),
                      np.where(pd.ravel() != np.repeat(ch, send.shape[1]), send.ravel(), 0.0))
        qc = q[ch]
        used[ar, qc] += gi.res[a]
        tmp[ar, qc] = np.maximum(tmp[ar, qc], gi.temp[a])
    # rows of ``feats``/``feas`` are in decode order; store them per atom
    inv = np.empty(A, np.int64)
    inv[di.order] = np.arange(A)
    return Rollouts(dev, feats[:, inv], feas[:, inv])


def _inputs(di: DecodeInputs, a: int, dev: IntArray, fin: FloatArray, D: int,
            ) -> tuple[FloatArray | float, FloatArray, FloatArray | None, BoolArray, IntArray, IntArray]:
    """Atom ``a``'s inputs from its placed predecessors, per sample [B] and device [D]: (arrival, cin,
    comm [B, m, D] (None without predecessors), has a placed predecessor [B, 1], the predecessors' devices
    [B, m] (-1 not placed) and the same clipped at 0)."""
    B = dev.shape[0]
    lo, hi = di.in_ptr[a], di.in_ptr[a + 1]
    if hi <= lo:
        none = np.zeros((B, 0), np.int64)
        return 0.0, np.zeros((B, D)), None, np.zeros((B, 1), bool), none, none
    ps = di.in_src[lo:hi]
    pd = dev[:, ps]                                      # [B, m]
    placed = pd >= 0
    pdc = np.maximum(pd, 0)
    comm = inputs_s(di.in_n[lo:hi, None], di.lat[pdc], di.in_bytes[lo:hi, None], di.inv_bw[pdc],
                    di.in_fixed[lo:hi, None], di.hops[pdc])   # [B, m, D]
    comm = np.where(placed[:, :, None], comm, 0.0)
    arrival = np.where(placed[:, :, None], fin[:, ps][:, :, None] + comm, 0.0).max(axis=1)
    return arrival, comm.sum(axis=1), comm, placed.any(axis=1)[:, None], pd, pdc


def _others_max(load: FloatArray) -> FloatArray:
    """Per sample and device d, the largest load over the other devices [B, D]."""
    B, D = load.shape
    top = load.argmax(axis=1)
    srt = np.sort(load, axis=1)
    m1 = srt[:, -1][:, None]
    m2 = srt[:, -2][:, None] if D > 1 else np.zeros((B, 1))
    out: FloatArray = np.where(np.arange(D)[None] == top[:, None], m2, m1)
    return out


def _fill(res: float, temp: float, used: FloatArray, tmp: FloatArray, cap: FloatArray) -> FloatArray:
    """Each device's memory pool filled with the atom added (resident + peak temporary) / capacity [B, D];
    0 for an unbounded pool. ``used``, ``tmp`` [B, D] and ``cap`` [D] are the pools of the devices."""
    finite = np.isfinite(cap)
    out: FloatArray = np.where(finite[None], (used + res + np.maximum(tmp, temp)) / np.where(finite, cap, 1.0)[None],
                               0.0)
    return out


def _features(f: F32Array, di: DecodeInputs, progress: float, eft: FloatArray, bott: FloatArray, ok: BoolArray,
              cin: FloatArray, load: FloatArray, fill: FloatArray, after: FloatArray, latest: FloatArray,
              has_pred: BoolArray) -> None:
    """Writes the K_DYN dynamic features of one step into ``f`` [B, D, K] (the module docstring's list)."""
    cb = di.cbar
    emin = np.where(ok, eft, np.inf).min(axis=1, keepdims=True)
    bmin = np.where(ok, bott, np.inf).min(axis=1, keepdims=True)
    ex_e, is_e = np.log1p(np.maximum(eft - emin, 0) / cb), eft <= emin * (1 + 1e-9) + 1e-15
    ex_b, is_b = np.log1p(np.maximum(bott - bmin, 0) / cb), bott <= bmin * (1 + 1e-9) + 1e-15
    if di.pipeline:                     # the trial's objective first: bottleneck for pipeline, eft for step
        ex_e, is_e, ex_b, is_b = ex_b, is_b, ex_e, is_e
    f[..., 0], f[..., 1], f[..., 2], f[..., 3] = ex_e, is_e, ex_b, is_b
    f[..., 4] = np.log1p(cin / cb)
    f[..., 5] = np.minimum(load / di.share, 4.0)
    f[..., 6] = np.minimum(fill, 2.0)
    f[..., 7] = di.pipeline
    f[..., 8] = np.minimum(np.maximum(eft - emin, 0) / (np.maximum(latest, emin[:, 0]) + 1e-30)[:, None], 4.0)
    f[..., 9] = progress
    f[..., 10] = np.minimum(after / di.share, 4.0)
    f[..., 11] = has_pred & (cin <= 1e-15)


def _choose(logit: FloatArray, ok: BoolArray, forced: IntArray | None, greedy: bool, draw: FloatArray | None,
            a: int) -> IntArray:
    """The device of atom ``a`` per sample: ``forced[:, a]``, the largest logit (rounded to 1e-4), or drawn
    by inverse CDF with the uniforms ``draw`` [B] (a disallowed draw at the rounding edge: the best allowed)."""
    ch: IntArray
    if forced is not None:
        ch = forced[:, a].astype(np.int64)
        return ch
    if greedy:
        ch = np.argmax(np.round(logit, 4), axis=1)
        return ch
    z = np.exp(logit - logit.max(axis=1, keepdims=True)) * ok
    cum = np.cumsum(z / z.sum(axis=1, keepdims=True), axis=1)
    assert draw is not None             # sampling: the caller passes the uniforms
    ch = np.minimum((draw[:, None] > cum).sum(axis=1), ok.shape[1] - 1)
    bad = ~ok[np.arange(len(ch)), ch]                   # rounding at the top end
    if bad.any():
        ch[bad] = np.argmax(np.where(ok[bad], logit[bad], -np.inf), axis=1)
    return ch
