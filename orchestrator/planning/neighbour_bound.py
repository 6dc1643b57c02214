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
from orchestrator.partition.bounds import ColumnDP
from orchestrator.plan import LayeredProfile, Replica
from orchestrator.planning.bound import least_send
from orchestrator.planning.column_bound import Columns, ExactColumns
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
                 a_max: int = 16, v_max: int = 32):
        self.profile, self.cluster, self.neighbours = profile, cluster, False
        super().__init__(cols, a_max, v_max, starts)

    def _table(self, cols: Columns, starts: list, box: list[int]) -> np.ndarray:
        self.neighbours = 4 * (cols.L + 1) * len(cols.kinds) * math.prod(b + 1 for b in box) * len(cols.grid) <= MEMORY
        if not self.neighbours:
            return super()._table(cols, starts, box)
        link = links(self.profile, self.cluster, [(g, tp) for g, tp, *_ in cols.kinds], cols.mbs)
        return _Neighbours(cols, starts, link, box).run()


class _Neighbours:
    """The DP (``partition.bounds.ColumnDP``) with the kind ``k`` of a column's last stage as its state:
    ``lat[i, k, x, s]`` the least latency of a column's first stages ending at layer ``i``, the last on kind
    ``k``, on the GPU vector ``x``, every stage within ``grid[s]``."""

    def __init__(self, cols: Columns, starts: list, link: np.ndarray, box: list[int]):
        self.cols, self.starts, self.link, self.box = cols, starts, link, box
        self.L, self.K, self.grid, self.size = cols.L, len(cols.kinds), cols.grid, len(cols.grid)
        self.own = np.array([float(k[3][1, 2]) / 2.0 for k in cols.kinds])  # kappa per send (a middle stage's / 2)
        self.uses = [(cols.types.index(g), tp) for g, tp, *_ in cols.kinds]
        self.comp = [k[2][None, :] - k[2][:, None] for k in cols.kinds]   # c[j, i] per kind
        self.fits = [k[4] & (st < self.size) for k, (st, _) in zip(cols.kinds, starts)]
        self.dp = ColumnDP(self.L, self.size, self.uses, box, states=self.K, compact=True, start=False)

    def vec(self, *ks: int) -> tuple[int, ...] | None:
        """The GPU vector of one replica of each kind ``ks`` (None: outside the box)."""
        v = [0] * len(self.box)
        for k in ks:
            v[self.uses[k][0]] += self.uses[k][1]
        return tuple(v) if all(x <= b for x, b in zip(v, self.box)) else None

    def run(self) -> np.ndarray:
        """The whole columns' least latency per (GPU vector, threshold): the first two stages seeded together
        (``two_stages``), a third stage onwards swept from each layer j (``ColumnDP.sweep``), one stage."""
        L, K, link, own, comp, dp = self.L, self.K, self.link, self.own, self.comp, self.dp
        self.two_stages()
        into = link.min(axis=0)                                           # the cheapest send into each kind
        mid = [np.where(self.fits[k], np.searchsorted(self.grid, comp[k] + into[k] + own[k]), self.size) for k in range(K)]
        last = [np.searchsorted(self.grid, comp[k][:, L][None, :] + 2 * link[:, k, None]) for k in range(K)]   # [k'][j]
        hop = (2 * link - own[:, None]).astype(np.float32)

        def moves(j: int, ok: list[int]) -> None:
            for k in range(K):            # the last stage j..L on k after k': its sends, 2 link(k', k), exactly
                for kp in ok if self.fits[k][j, L] else ():
                    if last[k][kp, j] < self.size:
                        dp.push(dp.lat[j, kp], k, float(comp[k][j, L]) + 3 * float(link[kp, k]) - own[kp],
                                int(last[k][kp, j]), L, k)
            # a middle stage j..i on k: its sends checked at into(k) + kappa_k; the previous stage's outgoing send
            # (link(k', k) - kappa_k' more than it was charged) and this one's incoming join the latency
            via = dp.merge(j, ok, hop)
            for k in range(K):
                for i in range(j + 1, L):
                    if mid[k][j, i] < self.size:
                        dp.push(via[k], k, float(comp[k][j, i]) + own[k], int(mid[k][j, i]), i, k)

        dp.sweep(moves, first=2)
        for k, (_, whole) in enumerate(self.starts):                      # one stage, the whole model
            dp.one_stage(k, float(self.cols.kinds[k][2][-1]), whole)
        return dp.lat[L].min(axis=0)

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
                dst = self.dp.lat[(slice(None), k1, *v)]
                np.minimum(dst, table, out=dst)
