"""``ExactColumns`` with each stage's sends priced by its neighbours' kinds (docs/plans.md, "The bound on
Sailor's metric", *Sends between neighbours*).

``ExactColumns`` charges every send the cheapest transfer of its own kind, ``kappa_k = min over partners``.
A send crosses one boundary, between two kinds, and costs ``link(k', k)`` (the least over the simulators,
both directions and the kinds' zones), at least both kinds' ``kappa``. The DP here keeps the kind of a
column's last stage in its state, so that a stage ``s`` on kind ``k`` after a stage on ``k'`` is checked
against the threshold with (Sailor's send counts, ``SailorSimulator.send_factors``)

    first stage, followed by k1:   c + link(k, k1)                       (checked when k1 is chosen)
    middle stage:                  c + link(k', k) + kappa_k              (its successor not known yet)
    last stage:                    c + 2 link(k', k)

and the column's latency adds each middle stage's outgoing send exactly, ``link(k, k_next)``, once the
next stage is chosen. Every term is at most what the plan pays, so ``tau*(x)`` stays a lower bound; the
packing and the bisection are ``ExactColumns``'."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.errors import UserError
from orchestrator.plan import GpuCluster, LayeredProfile, Replica
from orchestrator.planning.column_bound import Columns, ExactColumns, scratch
from orchestrator.planning.simulators import simulators

MEMORY = 400e6       # the DP's table (float32) at most this many bytes, else the plain ExactColumns


def links(profile: LayeredProfile, cluster: GpuCluster, kinds: list[tuple[str, int]], mbs: int) -> np.ndarray:
    """``link[a, b]``: the least seconds of one activation (the smallest layer output at ``mbs``) between a
    replica of kind ``a`` and one of kind ``b``, either direction, over the registered simulators and the zones."""
    nbytes = min(profile.layer_sizes(1).act_output) * profile.float_bytes * mbs
    zones: dict[str, list[str]] = {}
    for (g, z), n in cluster.gpus.items():
        if n > 0:
            zones.setdefault(g, []).append(z)
    out = np.full((len(kinds), len(kinds)), math.inf)
    sims = simulators()
    for a, (ga, ta) in enumerate(kinds):
        for b, (gb, tb) in enumerate(kinds):
            for za in zones.get(ga, [cluster.zone]):
                for zb in zones.get(gb, [cluster.zone]):
                    ra = Replica(ga, ta, cluster.gpu_type(ga).gpus_per_node, za)
                    rb = Replica(gb, tb, cluster.gpu_type(gb).gpus_per_node, zb)
                    for sim in sims:
                        for x, y in ((ra, rb), (rb, ra)):
                            try:
                                v = float(np.asarray(sim.boundary_time(x, y, nbytes, cluster)))
                            except UserError:
                                continue
                            if math.isfinite(v):
                                out[a, b] = min(out[a, b], max(v, 0.0))
    return np.where(np.isfinite(out), out, 0.0)


class NeighbourColumns(ExactColumns):
    """``ExactColumns`` whose DP knows each stage's previous kind (module docstring). Falls back to the plain
    DP (``self.neighbours = False``) where its table would exceed ``MEMORY``."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, cols: Columns, starts: list | None = None,
                 link: np.ndarray | None = None, a_max: int = 16, v_max: int = 32):
        T = max(2, len(cols.types))
        self.counts = np.concatenate([cols.counts, np.zeros(T - len(cols.types))])
        box = self._box(self.counts, len(cols.types), a_max, v_max)
        K = len(cols.kinds)
        need = 4 * (cols.L + 1) * K * math.prod(b + 1 for b in box) * (len(cols.grid) if cols.ok else 0)
        self.neighbours = cols.ok and need <= MEMORY
        if not self.neighbours:
            super().__init__(cols, a_max, v_max, starts)
            return
        self.ok = True
        kinds = [(g, tp) for g, tp, *_ in cols.kinds]
        starts = cols.starts if starts is None else starts               # a subset of the stages: a restricted bound
        link = links(profile, cluster, kinds, cols.mbs) if link is None else link
        own = np.array([float(k[3][1, 2]) / 2.0 for k in cols.kinds])      # kappa per send (a middle stage's / 2)
        grid, size, L = cols.grid, len(cols.grid), cols.L
        axis = [cols.types.index(g) for g, _ in kinds]
        tps = [tp for _, tp in kinds]
        lat = scratch((L + 1, K, *(b + 1 for b in box), size))
        live = np.zeros((L + 1, K), dtype=bool)
        comp = [k[2][None, :] - k[2][:, None] for k in cols.kinds]        # c[j, i] per kind
        fits = [k[4] & (st < size) for k, (st, _) in zip(cols.kinds, starts)]

        def vec(*ks):
            v = [0] * T
            for k in ks:
                v[axis[k]] += tps[k]
            return tuple(v) if all(x <= b for x, b in zip(v, box)) else None

        # two stages: the first (0..j on k0) and the second (j..i on k1), both sends known; per (k0, k1) every
        # (j, i) at once: A[i, s] the least latency of those within grid[s] (a running minimum over s)
        ii = np.arange(L + 1)
        for k0 in range(K):
            for k1 in range(K):
                v = vec(k0, k1)
                if v is None:
                    continue
                lk = float(link[k0, k1])
                c0 = comp[k0][0, :] + lk                                  # the first stage ends at j
                c1 = comp[k1] + np.where(ii == L, 2 * lk, lk + own[k1])[None, :]
                ok = fits[k1] & fits[k0][0, :, None] & (ii[:, None] >= 1) & (ii[:, None] < L)
                s = np.maximum(np.searchsorted(grid, c0)[:, None], np.searchsorted(grid, c1))
                ok &= s < size
                if not ok.any():
                    continue
                jj, iw = np.nonzero(ok)
                table = np.full((L + 1, size + 1), math.inf)
                np.minimum.at(table, (iw, s[jj, iw]), c0[jj] + c1[jj, iw])
                table = np.minimum.accumulate(table[:, :size], axis=1).astype(np.float32)
                dst = lat[(slice(None), k1, *v)]
                np.minimum(dst, table, out=dst)
                live[:, k1] |= np.isfinite(table).any(axis=1)
        # a third stage onwards, pushed from each layer j once the prefixes ending there are final
        everything = (slice(None),) * T
        cell = math.prod(b + 1 for b in box) * size
        buf = np.empty(cell, dtype=np.float32)
        shift = [(everything[:axis[k]] + (slice(None, -tps[k]),) + everything[axis[k] + 1:],
                  everything[:axis[k]] + (slice(tps[k], None),) + everything[axis[k] + 1:]) for k in range(K)]
        into = link.min(axis=0)                                           # the cheapest send into each kind
        final = lat[L].min(axis=0)
        nxt = np.empty((K, *lat.shape[2:]), dtype=np.float32)

        def push(src_all, k, add, s, dst_all):
            src, dst = src_all[(*shift[k][0], slice(s, None))], dst_all[(*shift[k][1], slice(s, None))]
            tmp = buf[:src.size].reshape(src.shape)
            np.add(src, add, out=tmp)
            np.minimum(dst, tmp, out=dst)

        mid = [np.where(fits[k], np.searchsorted(grid, comp[k] + into[k] + own[k]), size) for k in range(K)]
        last = [np.searchsorted(grid, comp[k][:, L][None, :] + 2 * link[:, k, None]) for k in range(K)]   # [k'][j]
        for j in range(2, L):
            ok = [kp for kp in range(K) if live[j, kp]]
            if not ok:
                continue
            for k in range(K):
                if tps[k] > box[axis[k]] or not fits[k][j, L]:
                    continue
                for kp in ok:                                             # the last stage: 2 link(k', k), exactly
                    st = int(last[k][kp, j])
                    if st < size:
                        push(lat[j, kp], k, float(comp[k][j, L]) + 3 * float(link[kp, k]) - own[kp], st, final)
            # a middle stage on k: its sends checked at into(k) + kappa_k; the previous stage's outgoing
            # send (link(k', k) - kappa_k' more than it was charged) and this one's incoming join the latency
            for k in range(K):
                np.add(lat[j, ok[0]], np.float32(2 * link[ok[0], k] - own[ok[0]]), out=nxt[k])
                for kp in ok[1:]:
                    np.add(lat[j, kp], np.float32(2 * link[kp, k] - own[kp]), out=buf.reshape(nxt[k].shape))
                    np.minimum(nxt[k], buf.reshape(nxt[k].shape), out=nxt[k])
            for k in range(K):
                if tps[k] > box[axis[k]]:
                    continue
                for i in range(j + 1, L):
                    st = int(mid[k][j, i])
                    if st < size:
                        push(nxt[k], k, float(comp[k][j, i]) + own[k], st, lat[i, k])
                        live[i, k] = True
        out = final
        for k, (_, whole) in enumerate(starts):                           # one stage, the whole model
            v = vec(k)
            if whole < size and v is not None:
                np.minimum(out[v][whole:], float(cols.kinds[k][2][-1]), out=out[v][whole:])
        self._finish(cols, box, out)
