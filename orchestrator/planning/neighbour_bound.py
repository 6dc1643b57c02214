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

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Replica
from orchestrator.planning.bound import least_send
from orchestrator.planning.column_bound import Columns, ExactColumns, scratch
from orchestrator.planning.simulators import simulators

MEMORY = 400e6       # the DP's table (float32) at most this many bytes, else the plain ExactColumns


def links(profile: LayeredProfile, cluster: GpuCluster, kinds: list[tuple[str, int]], mbs: int) -> np.ndarray:
    """``link[a, b]``: the least seconds of one activation (the smallest layer output at ``mbs``) between a
    replica of kind ``a`` and one of kind ``b``, either direction, over the registered simulators and the zones."""
    nbytes = min(profile.layer_sizes(1).act_output) * profile.act_float_bytes * mbs
    zones: dict[str, list[str]] = {}
    for (g, z), n in cluster.gpus.items():
        if n > 0:
            zones.setdefault(g, []).append(z)
    out = np.full((len(kinds), len(kinds)), math.inf)
    sims = simulators()
    for a, (ga, ta) in enumerate(kinds):
        for b, (gb, tb) in enumerate(kinds):
            out[a, b] = least_send(sims, [(Replica(ga, ta, cluster.gpu_type(ga).gpus_per_node, za),
                                           Replica(gb, tb, cluster.gpu_type(gb).gpus_per_node, zb))
                                          for za in zones.get(ga, [cluster.zone]) for zb in zones.get(gb, [cluster.zone])],
                                   nbytes, cluster)
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
        dp = _NeighbourDP(cols, starts, link, box)
        dp.two_stages()
        out = dp.more_stages()
        dp.one_stage(out)
        self._finish(cols, box, out)


class _NeighbourDP:
    """The DP's table while ``NeighbourColumns`` is built: ``lat[i, k, x, s]`` the least latency of a column's
    first stages ending at layer ``i``, the last on kind ``k``, on the GPU vector ``x``, every stage within
    ``grid[s]`` (a running minimum over ``s``); ``final`` the same for whole columns."""

    def __init__(self, cols: Columns, starts: list, link: np.ndarray, box: list[int]):
        self.cols, self.link, self.box = cols, link, box
        self.T, self.K = len(box), len(cols.kinds)
        self.own = np.array([float(k[3][1, 2]) / 2.0 for k in cols.kinds])  # kappa per send (a middle stage's / 2)
        self.grid, self.size, self.L = cols.grid, len(cols.grid), cols.L
        kinds = [(g, tp) for g, tp, *_ in cols.kinds]
        self.axis = [cols.types.index(g) for g, _ in kinds]
        self.tps = [tp for _, tp in kinds]
        self.lat = scratch((self.L + 1, self.K, *(b + 1 for b in box), self.size))
        self.live = np.zeros((self.L + 1, self.K), dtype=bool)
        self.comp = [k[2][None, :] - k[2][:, None] for k in cols.kinds]   # c[j, i] per kind
        self.fits = [k[4] & (st < self.size) for k, (st, _) in zip(cols.kinds, starts)]
        self.starts = starts

    def vec(self, *ks: int) -> tuple[int, ...] | None:
        """The GPU vector of one replica of each kind ``ks`` (None: outside the box)."""
        v = [0] * self.T
        for k in ks:
            v[self.axis[k]] += self.tps[k]
        return tuple(v) if all(x <= b for x, b in zip(v, self.box)) else None

    def two_stages(self) -> None:
        """The first (0..j on k0) and the second stage (j..i on k1), both sends known; per (k0, k1) every (j, i)
        at once: A[i, s] the least latency of those within grid[s] (a running minimum over s)."""
        L, K, grid, size, comp, fits, own = self.L, self.K, self.grid, self.size, self.comp, self.fits, self.own
        ii = np.arange(L + 1)
        for k0 in range(K):
            for k1 in range(K):
                v = self.vec(k0, k1)
                if v is None:
                    continue
                lk = float(self.link[k0, k1])
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
                dst = self.lat[(slice(None), k1, *v)]
                np.minimum(dst, table, out=dst)
                self.live[:, k1] |= np.isfinite(table).any(axis=1)

    def more_stages(self) -> np.ndarray:
        """A third stage onwards, pushed from each layer j once the prefixes ending there are final; returns
        ``final``, the whole columns' least latency per (GPU vector, threshold)."""
        L, K, T, lat, link, own, comp = self.L, self.K, self.T, self.lat, self.link, self.own, self.comp
        everything = (slice(None),) * T
        self.buf = np.empty(math.prod(b + 1 for b in self.box) * self.size, dtype=np.float32)
        self.shift = [(everything[:self.axis[k]] + (slice(None, -self.tps[k]),) + everything[self.axis[k] + 1:],
                       everything[:self.axis[k]] + (slice(self.tps[k], None),) + everything[self.axis[k] + 1:])
                      for k in range(K)]
        into = link.min(axis=0)                                           # the cheapest send into each kind
        final = lat[L].min(axis=0)
        nxt = np.empty((K, *lat.shape[2:]), dtype=np.float32)
        mid = [np.where(self.fits[k], np.searchsorted(self.grid, comp[k] + into[k] + own[k]), self.size) for k in range(K)]
        last = [np.searchsorted(self.grid, comp[k][:, L][None, :] + 2 * link[:, k, None]) for k in range(K)]   # [k'][j]
        for j in range(2, L):
            ok = [kp for kp in range(K) if self.live[j, kp]]
            if ok:
                self._last_stage(j, ok, last, final)
                self._middle_stage(j, ok, mid, nxt)
        return final

    def _push(self, src_all: np.ndarray, k: int, add: float, s: int, dst_all: np.ndarray) -> None:
        """``dst = min(dst, src + add)`` from grid index ``s`` on, ``dst`` shifted by one replica of kind ``k``."""
        src, dst = src_all[(*self.shift[k][0], slice(s, None))], dst_all[(*self.shift[k][1], slice(s, None))]
        tmp = self.buf[:src.size].reshape(src.shape)
        np.add(src, add, out=tmp)
        np.minimum(dst, tmp, out=dst)

    def _last_stage(self, j: int, ok: list[int], last: list[np.ndarray], final: np.ndarray) -> None:
        """The last stage j..L on each kind k after k': its sends, 2 link(k', k), exactly."""
        L, comp, link, own, lat = self.L, self.comp, self.link, self.own, self.lat
        for k in range(self.K):
            if self.tps[k] > self.box[self.axis[k]] or not self.fits[k][j, L]:
                continue
            for kp in ok:
                st = int(last[k][kp, j])
                if st < self.size:
                    self._push(lat[j, kp], k, float(comp[k][j, L]) + 3 * float(link[kp, k]) - own[kp], st, final)

    def _middle_stage(self, j: int, ok: list[int], mid: list[np.ndarray], nxt: np.ndarray) -> None:
        """A middle stage j..i on k: its sends checked at into(k) + kappa_k; the previous stage's outgoing send
        (link(k', k) - kappa_k' more than it was charged) and this one's incoming join the latency."""
        L, comp, link, own, lat, buf = self.L, self.comp, self.link, self.own, self.lat, self.buf
        for k in range(self.K):
            np.add(lat[j, ok[0]], np.float32(2 * link[ok[0], k] - own[ok[0]]), out=nxt[k])
            for kp in ok[1:]:
                np.add(lat[j, kp], np.float32(2 * link[kp, k] - own[kp]), out=buf.reshape(nxt[k].shape))
                np.minimum(nxt[k], buf.reshape(nxt[k].shape), out=nxt[k])
        for k in range(self.K):
            if self.tps[k] > self.box[self.axis[k]]:
                continue
            for i in range(j + 1, L):
                st = int(mid[k][j, i])
                if st < self.size:
                    self._push(nxt[k], k, float(comp[k][j, i]) + own[k], st, lat[i, k])
                    self.live[i, k] = True

    def one_stage(self, out: np.ndarray) -> None:
        """One stage, the whole model, on each kind."""
        for k, (_, whole) in enumerate(self.starts):
            v = self.vec(k)
            if whole < self.size and v is not None:
                np.minimum(out[v][whole:], float(self.cols.kinds[k][2][-1]), out=out[v][whole:])
