"""The sequential policy decode (``policy_decode.rollout``) as one compiled loop (numba), for the
zero-shot placer's sub-second target on graphs of thousands of atoms: the numpy version pays a
few dozen array calls per atom, about 0.5 ms, so a 2,000-atom graph cost a second per decode.

Same state, features, logits and choices as ``policy_decode.rollout_numpy`` (its docstring states
them), computed per sample and device in the same order of floating-point operations; only the
head's two small matrix products (12 x 16 and 16 x 1 per device) are summed here in index order
where numpy calls BLAS, so a logit can differ in its last bit: a decision changes only when that
bit moves a logit across a 1e-4 rounding step (greedy) or a cumulative probability across its
uniform draw (sampling). ``tests/test_placement_scale.py`` checks the decisions seed for seed."""

from __future__ import annotations

import numpy as np

from orchestrator.graph.arrays import BoolArray, F32Array, FloatArray, IntArray
from orchestrator.hardware.cost import inputs_nb
from orchestrator.placement.graph.kernels import njit


@njit(cache=True)
def decode_kernel(order: IntArray, cost: FloatArray, in_ptr: IntArray, in_src: IntArray, in_n: FloatArray,
                  in_bytes: FloatArray, in_fixed: FloatArray, lat: FloatArray, inv_bw: FloatArray, hops: FloatArray,
                  cb: float, share: float, pipeline: float, mask: BoolArray, name_rank: IntArray, res: FloatArray,
                  temp: FloatArray, pool_of: IntArray, cap: FloatArray, s: FloatArray, zr: FloatArray, wq: FloatArray,
                  bq: FloatArray, vq: FloatArray, mode: int, draws: FloatArray, forced: IntArray,
                  dev: IntArray, feats: F32Array, feas: BoolArray) -> None:
    """Fills ``dev`` [B, A], ``feats`` [B, A, D, K] and ``feas`` [B, A, D] (per atom, not per step).
    ``mode``: 0 greedy, 1 sampled with ``draws`` [B, A], 2 ``forced`` [B, A]."""
    B, A = dev.shape
    D = mask.shape[1]
    K, H = wq.shape
    P = cap.shape[0]
    fin = np.zeros((B, A))
    ready = np.zeros((B, D))
    load = np.zeros((B, D))
    used = np.zeros((B, P))
    tmp = np.zeros((B, P))
    latest = np.zeros(B)
    maxm = 1
    for a in range(A):
        maxm = max(maxm, in_ptr[a + 1] - in_ptr[a])
    comm = np.zeros((maxm, D))
    arrival, cin, eft = np.zeros(D), np.zeros(D), np.zeros(D)
    after, bott, fill = np.zeros(D), np.zeros(D), np.zeros(D)
    ok = np.zeros(D, dtype=np.bool_)
    logit = np.zeros(D)
    acc = np.zeros(H)
    for t in range(A):
        a = order[t]
        lo, hi = in_ptr[a], in_ptr[a + 1]
        for b in range(B):
            has = False
            for d in range(D):
                arrival[d] = 0.0
                cin[d] = 0.0
            for j in range(lo, hi):
                pd = dev[b, in_src[j]]
                if pd < 0:
                    for d in range(D):
                        comm[j - lo, d] = 0.0
                    continue
                has = True
                fp = fin[b, in_src[j]]
                for d in range(D):
                    cm = inputs_nb(in_n[j], lat[pd, d], in_bytes[j], inv_bw[pd, d], in_fixed[j], hops[pd, d])
                    comm[j - lo, d] = cm
                    arrival[d] = max(arrival[d], fp + cm)
                    cin[d] += cm
            top = 0
            for d in range(1, D):
                if load[b, d] > load[b, top]:
                    top = d
            m1 = load[b, top]
            m2 = 0.0
            if D > 1:
                m2 = -np.inf
                for d in range(D):
                    if d != top and load[b, d] > m2:
                        m2 = load[b, d]
            anyok = False
            for d in range(D):
                eft[d] = max(ready[b, d], arrival[d]) + cost[a, d]
                after[d] = load[b, d] + cost[a, d] + cin[d]
                bott[d] = max(after[d], m2 if d == top else m1)
                q = pool_of[d]
                if np.isfinite(cap[q]):
                    fill[d] = (used[b, q] + res[a] + max(tmp[b, q], temp[a])) / cap[q]
                else:
                    fill[d] = 0.0
                ok[d] = fill[d] <= 1.0 + 1e-12 and mask[a, d]
                anyok = anyok or ok[d]
            if not anyok:
                for d in range(D):
                    ok[d] = mask[a, d]
            emin, bmin = np.inf, np.inf
            for d in range(D):
                if ok[d]:
                    emin = min(emin, eft[d])
                    bmin = min(bmin, bott[d])
            den = max(latest[b], emin) + 1e-30
            for d in range(D):
                f = feats[b, a, d]
                ex_e = np.log1p(max(eft[d] - emin, 0.0) / cb)
                is_e = eft[d] <= emin * (1 + 1e-9) + 1e-15
                ex_b = np.log1p(max(bott[d] - bmin, 0.0) / cb)
                is_b = bott[d] <= bmin * (1 + 1e-9) + 1e-15
                if pipeline:
                    ex_e, is_e, ex_b, is_b = ex_b, is_b, ex_e, is_e
                f[0], f[1], f[2], f[3] = ex_e, 1.0 if is_e else 0.0, ex_b, 1.0 if is_b else 0.0
                f[4] = np.log1p(cin[d] / cb)
                f[5] = min(load[b, d] / share, 4.0)
                f[6] = min(fill[d], 2.0)
                f[7] = pipeline
                f[8] = min(max(eft[d] - emin, 0.0) / den, 4.0)
                f[9] = t / A
                f[10] = min(after[d] / share, 4.0)
                f[11] = 1.0 if has and cin[d] <= 1e-15 else 0.0
                feas[b, a, d] = ok[d]
                if ok[d]:
                    # f Wq with k outer: each unit's sum still runs k = 0, 1, ... (the same
                    # roundings), and the units' sums advance side by side (vectorisable)
                    for h in range(H):
                        acc[h] = 0.0
                    for k in range(K):
                        fk = np.float64(f[k])
                        for h in range(H):
                            acc[h] += fk * wq[k, h]
                    z = 0.0
                    for h in range(H):
                        x = (acc[h] + zr[a, d, h]) + bq[h]
                        if x > 0.0:
                            z += x * vq[h]
                    logit[d] = s[a, d] + z
                else:
                    logit[d] = -1e9
            if mode == 2:
                ch = forced[b, a]
            elif mode == 0:
                ch, bestv = 0, -np.inf
                for d in range(D):
                    v = np.round(logit[d], 4)
                    if v > bestv:
                        ch, bestv = d, v
            else:
                top_l = logit.max()
                tot = 0.0
                for d in range(D):
                    eft_d = np.exp(logit[d] - top_l) * ok[d]
                    cin[d] = eft_d                      # (cin is free here: reused for the weights)
                    tot += eft_d
                u = draws[b, name_rank[a]]
                ch, cum = 0, 0.0
                for d in range(D):
                    cum += cin[d] / tot
                    if u > cum:
                        ch += 1
                ch = min(ch, D - 1)
                if not ok[ch]:                          # rounding at the top end
                    ch, bestv = 0, -np.inf
                    for d in range(D):
                        if ok[d] and logit[d] > bestv:
                            ch, bestv = d, logit[d]
            dev[b, a] = ch
            fin[b, a] = eft[ch]
            latest[b] = max(latest[b], fin[b, a])
            ready[b, ch] = fin[b, a]
            load[b, ch] = after[ch]
            for j in range(lo, hi):                     # the senders pay their hop too
                pd = dev[b, in_src[j]]
                if pd >= 0 and pd != ch:
                    load[b, pd] += comm[j - lo, ch]
            q = pool_of[ch]
            used[b, q] += res[a]
            tmp[b, q] = max(tmp[b, q], temp[a])
