"""What the joint planner's dynamic program reads (``orchestrator.planning.search``): per stage kind and
micro-batch size, prefix sums of a micro-batch's forward + backward; per boundary, the seconds of its sends;
per segment, whether it fits in memory and its gradient all-reduce, each by the judging simulator's own rule
(``send_factors``, ``boundary_time``, ``gradient_layer``, ``stage_memory``, ``stage_allreduce``), cached."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.errors import UserError
from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile
from orchestrator.planning.simulators import PlanSimulator
from orchestrator.planning.templates import Kind


class Costs:
    """Per (kind, mbs): prefix sums of a micro-batch's forward + backward per layer; per boundary the
    seconds of one activation across it; memory per segment by the simulator's rule."""

    def __init__(self, profile: LayeredProfile, cluster: GpuCluster, sim: PlanSimulator):
        self.profile, self.cluster, self.sim = profile, cluster, sim
        self._prefix: dict[tuple[Kind, int], np.ndarray | None] = {}
        self._update: dict[tuple[Kind, int], float] = {}
        self._send: dict[tuple[Kind, Kind, int], np.ndarray] = {}
        self._fits: dict[tuple[Kind, int, int, int, int], np.ndarray] = {}
        self._ar: dict[tuple[Kind, int], np.ndarray] = {}
        self.layer_floor: dict[tuple[frozenset, int, int], tuple[float, float, float]] = {}
        self._min_send: dict[tuple[Kind, Kind, int], float] = {}
        self._rho: dict[int, dict] = {}
        self._tables: dict[tuple, np.ndarray | None] = {}
        L = profile.num_layers
        self.upper = np.arange(L + 1)[None, :] > np.arange(L + 1)[:, None]
        self._transfers: dict[int, list[float]] = {}
        self._share: dict[tuple, float] = {}
        self._ar_fn: dict[tuple[Kind, int], Any] = {}

    def prefix(self, kind: Kind, mbs: int) -> np.ndarray | None:
        key = (kind, mbs)
        if key not in self._prefix:
            if not self.profile.has(kind.gpu, mbs, kind.tp):
                self._prefix[key] = None
            else:
                t = self.profile.layer_times(kind.gpu, mbs, kind.tp)
                self._prefix[key] = np.concatenate([[0.0], np.cumsum([f + b for f, b, _ in t])])
                self._update[key] = float(max(u for _, _, u in t))
        return self._prefix[key]

    def update(self, kind: Kind, mbs: int) -> float:
        self.prefix(kind, mbs)
        return self._update.get((kind, mbs), 0.0)

    def send(self, a: Kind, b: Kind, mbs: int) -> np.ndarray:
        """Seconds across each boundary (column = the first layer after it): [activation, gradient]."""
        key = (a, b, mbs)
        if key not in self._send:
            self._send[key] = self._sends(a, b, mbs)
        return self._send[key]

    def table(self, prev: Kind | None, kind: Kind, nxt: Kind | None, stages: int, stage: int, mbs: int,
              m: int) -> np.ndarray | None:
        """t[j, i]: a micro-batch's forward + backward of layers j .. i-1 on ``kind`` as stage ``stage`` of
        ``stages`` plus its sends to ``prev`` and ``nxt`` (the simulator's ``send_factors``); +inf where the
        segment does not fit in memory (None: no profile for ``kind`` at ``mbs``)."""
        key = (prev, kind, nxt, stages, stage, mbs, m)
        got = self._tables.get(key, False)
        if got is not False:
            return got
        pre = self.prefix(kind, mbs)
        if pre is None:
            self._tables[key] = None
            return None
        t = pre[None, :] - pre[:, None]                                  # t[j, i] = compute of j..i-1
        f_in, f_out = self.sim.send_factors(stages, stage)
        if prev is not None:                                             # at j: the activation in, its gradient out
            into = self.send(prev, kind, mbs)
            t = t + _weighted(f_in, into)[:, None]
        if nxt is not None:                                              # at i: the activation out, its gradient in
            out = self.send(kind, nxt, mbs)
            t = t + _weighted(f_out, out)[None, :]
        ok = self.fits(kind, mbs, stages, stage, m) & self.upper
        t = np.where(ok, t, math.inf)
        if len(self._tables) > 200_000:
            self._tables.clear()
        self._tables[key] = t
        return t

    def speed(self, kinds: tuple[Kind, ...], mbs: int) -> tuple[float, list[float]]:
        """(T_ref, rho per stage) for ``quick_bound``: ``rho_k = min_l t_l(k) / t_l(ref)`` over the layers
        but the first and the last (an embedding and a head differ most between kinds; leaving layers out
        keeps it a bound: the others must still be covered), the reference the first kind seen at ``mbs``."""
        rho = self._rho.get(mbs)
        if rho is None:
            rho = self._rho[mbs] = {}
        out = []
        for k in kinds:
            r = rho.get(k)
            if r is None:
                pre = self.prefix(k, mbs)
                if "ref" not in rho and pre is not None:
                    rho["ref"] = np.diff(pre)[1:-1] if len(pre) > 3 else np.diff(pre)
                base = rho.get("ref")
                if pre is None or base is None:
                    r = math.inf
                else:
                    mine = np.diff(pre)[1:-1] if len(pre) > 3 else np.diff(pre)
                    ok = base > 0
                    r = float(np.min(mine[ok] / base[ok])) if ok.any() else math.inf
                rho[k] = r
            out.append(r)
        base = rho.get("ref")
        return (float(base.sum()) if base is not None else 0.0), out

    def transfers(self, stages: int) -> list[float]:
        """Per stage, the transfers per micro-batch the simulator charges (``send_factors``)."""
        if stages not in self._transfers:
            out = []
            for s in range(stages):
                f_in, f_out = self.sim.send_factors(stages, s)
                out.append((sum(f_in) if s > 0 else 0.0) + (sum(f_out) if s < stages - 1 else 0.0))
            self._transfers[stages] = out
        return self._transfers[stages]

    def share_allreduce(self, kinds: frozenset, dp: int, stages: int) -> float:
        """The all-reduce of ``1 / stages`` of the parameters on the cheapest of ``kinds`` (the largest stage
        holds at least that share)."""
        key = (kinds, dp, stages)
        if key not in self._share:
            best = math.inf
            p1 = sum(self.profile.layer_sizes(1).params) / stages
            for k in kinds:
                self.allreduce(k, dp)
                f = self._ar_fn.get((k, dp))
                if f is None:
                    best = 0.0
                    break
                pt = sum(self.profile.layer_sizes(k.tp).params) / stages
                best = min(best, float(f(np.array([p1]), np.array([pt]))[0]) if np.ndim(f(p1, pt)) else float(f(p1, pt)))
            self._share[key] = best if math.isfinite(best) else 0.0
        return self._share[key]

    def min_send(self, a: Kind, b: Kind, mbs: int) -> float:
        """The cheapest transfer (activation or gradient) across any boundary between ``a`` and ``b``."""
        key = (a, b, mbs)
        if key not in self._min_send:
            s = self.send(a, b, mbs)[:, 1:]
            self._min_send[key] = float(s.min()) if s.size and np.isfinite(s).any() else 0.0
        return self._min_send[key]

    def allreduce(self, kind: Kind, dp: int) -> np.ndarray:
        """ar[j, i]: the gradient all-reduce of layers j .. i-1 over ``dp`` replicas of ``kind``, by the
        simulator's own rule (``stage_allreduce``; 0 for one replica)."""
        key = (kind, dp)
        if key not in self._ar:
            L = self.profile.num_layers
            if dp <= 1:
                self._ar[key] = np.zeros((L + 1, L + 1))
                return self._ar[key]
            try:
                f = self.sim.stage_allreduce(self.profile, kind.replica(), dp, self.cluster)
                self._ar_fn[key] = f
            except UserError:                              # no link fit for this group: no stage of it
                self._ar[key] = np.full((L + 1, L + 1), math.inf)
            else:
                p1 = np.concatenate([[0.0], np.cumsum(self.profile.layer_sizes(1).params)])
                pt = np.concatenate([[0.0], np.cumsum(self.profile.layer_sizes(kind.tp).params)])
                a1, at = p1[None, :] - p1[:, None], pt[None, :] - pt[:, None]
                self._ar[key] = np.where(a1 > 0, f(np.maximum(a1, 0.0), np.maximum(at, 0.0)), 0.0)
        return self._ar[key]

    def _sends(self, a: Kind, b: Kind, mbs: int) -> np.ndarray:
        """Row 0: the activation across boundary ``i`` (layer i-1's output); row 1: the gradient sent back
        across it, by the simulator's rule (``boundary_time`` and ``gradient_layer``)."""
        sizes = np.array(self.profile.layer_sizes(1).act_output) * self.profile.act_float_bytes * mbs
        L = len(sizes)
        act = np.concatenate([[sizes[0]], sizes])                         # act[i] = output of layer i-1
        grad = np.array([sizes[min(max(self.sim.gradient_layer(i), 0), L - 1)] for i in range(L + 1)])
        out = np.zeros((2, L + 1))
        try:
            for row, nbytes in enumerate((act, grad)):
                out[row] = self.sim.boundary_time(a.replica(), b.replica(), nbytes, self.cluster)
        except UserError:
            return np.full((2, L + 1), math.inf)
        out[:, 0] = 0.0
        return np.where(np.isfinite(out) & (out >= 0), out, math.inf)

    def fits(self, kind: Kind, mbs: int, stages: int, stage: int, micro_batches: int) -> np.ndarray:
        """fits[j, i]: layers j .. i-1 on ``kind`` as stage ``stage`` of ``stages`` (True where it fits)."""
        key = (kind, mbs, stages, stage, micro_batches)
        if key not in self._fits:
            self._fits[key] = self._fit_table(kind, mbs, stages, stage, micro_batches)
        return self._fits[key]

    def _fit_table(self, kind: Kind, mbs: int, stages: int, stage: int, micro_batches: int) -> np.ndarray:
        sizes = self.profile.layer_sizes(kind.tp)
        p = np.concatenate([[0.0], np.cumsum(sizes.params)])
        a = np.concatenate([[0.0], np.cumsum(sizes.act_mem)])
        need, limit = self.sim.stage_memory(self.profile, kind.tp, kind.gpu, mbs, stages, stage, micro_batches, self.cluster)
        params = p[None, :] - p[:, None]
        acts = a[None, :] - a[:, None]
        return need(params, acts) <= limit


def _weighted(factors: tuple[float, float], sends: np.ndarray) -> np.ndarray:
    """factors[0] x activation + factors[1] x gradient, a term with factor 0 counting 0 even where +inf."""
    out = np.zeros(sends.shape[1])
    for f, row in zip(factors, sends):
        if f:
            out = out + f * row
    return out
