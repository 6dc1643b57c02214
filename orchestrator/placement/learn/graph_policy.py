"""A graph policy pi(device | atom, G, W) in TensorFlow that applies to any graph on any worker.

Inputs (``graph_inputs``), all invariant to the order of the nodes in the graph file:

- per atom (a colocation group or a lone node): its fastest cost relative to the graph's mean and
  maximum, resident memory relative to the mean and to the worker's memory, the mean transfer time
  of its inputs and outputs relative to the mean atom cost, depth (longest path from a source,
  normalised), upward rank (critical path to the exit, normalised), size, degree, colocation flag;
- per device: speed (median over atoms of its cost / the atom's fastest cost, log), memory
  (share of the worker's, and relative to the graph's need), kind (cpu / accelerator), its ordinal
  among devices of the same profile and their count, fastest flag, mean inverse bandwidth to the
  others relative to the worker's mean (log), device count / 8;
- per (atom, device): log cost ratio to the atom's fastest device, share of a fair per-device
  work slice, resident memory / device memory, allowed flag;
- edges between atoms, weighted by log(1 + mean transfer time / mean atom cost).

Network: atom embedding h0 = relu(X W0 + E_mean Wc + b0); R rounds of mean message passing
h <- h + relu(h Ws + mean_in(w h) Wi + mean_out(w h) Wo + b) (``tf.math.unsorted_segment_sum``);
device embedding e = relu(F Wd + bd); per pair z = relu(h Wa + e Wb + P Wp + mean(h) Wg + bz),
static logit s = z v + table[a, d] (the per-atom table is zero in pre-training; a fine-tune trains
it too, so the policy can express any placement of this graph). Decisions are sequential
(``orchestrator.placement.learn.policy_decode``): atom by atom, the logit adds
relu(f Wq + z Wr + bq) vq of the dynamic features f of the partial placement (earliest finish time,
pipeline bottleneck, transfers, memory fill per device). Disallowed devices get -1e9. The heads are
shared over devices, so the same weights apply to any device count. Trained by REINFORCE on the
recorded trajectories (and by imitation of a teacher, teacher-forced).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import BoolArray, F32Array, FloatArray
from orchestrator.hardware.cost import path_or_fixed_array
from orchestrator.placement.learn.policy_decode import (
    K_DYN,
    Rollouts,
    decode_inputs,
)
from orchestrator.placement.learn.policy_inference import (  # noqa: F401  (re-exported: the policy's API)
    FORMAT,
    HQ,
    N_ATOM,
    N_DEV,
    N_PAIR,
    PRIOR,
    Decoding,
    GraphInputs,
    InferencePolicy,
    read_checkpoint,
    static_numpy,
    weight_shapes,
)
from orchestrator.placement.solve.problem import PlacementProblem

SHIPPED = Path(__file__).with_name("checkpoints") / "graph_policy.npz"




def _depth(prob: PlacementProblem) -> FloatArray:
    s, d = prob.sim, np.zeros(prob.n)
    for u in prob.graph.topological_order():
        nxt = s.succ_idx[s.succ_ptr[u]:s.succ_ptr[u + 1]]
        if len(nxt):
            d[nxt] = np.maximum(d[nxt], d[u] + 1)
    return d


def graph_inputs(prob: PlacementProblem) -> GraphInputs:
    s, A, D = prob.sim, prob.n_atoms, prob.nd
    mask = prob.allowed.copy()
    cost = np.where(mask, prob.atom_cost, np.nan)
    cmin = np.nanmin(cost, axis=1)
    cmean = float(cmin.mean()) or 1.0
    # mean transfer time of each simulator edge over device pairs (contention free)
    off = max(1, D * (D - 1))
    lat, ibw, hops = prob.lat.sum() / off, prob.inv_bw.sum() / off, prob.hops.sum() / off
    comm = path_or_fixed_array(s.succ_fixed, hops, lat, s.succ_bytes, ibw)        # the cost core's route time
    src_n = np.repeat(np.arange(prob.n), np.diff(s.succ_ptr))
    sa, da = prob.atom_of[src_n], prob.atom_of[s.succ_idx]
    cross = sa != da
    out_c = np.bincount(sa[cross], weights=comm[cross], minlength=A)
    in_c = np.bincount(da[cross], weights=comm[cross], minlength=A)
    outdeg = np.bincount(sa[cross], minlength=A)
    indeg = np.bincount(da[cross], minlength=A)
    depth = np.zeros(A)
    np.maximum.at(depth, prob.atom_of, _depth(prob))
    rank = np.zeros(A)
    np.maximum.at(rank, prob.atom_of, s.rank)
    size = np.bincount(prob.atom_of, minlength=A)
    res = prob.atom_resident
    cap = prob.pool_cap[prob.pool_of]
    fin_cap = cap[np.isfinite(cap)]
    total_cap = float(fin_cap.sum()) if len(fin_cap) else np.inf
    need = float(res.sum()) or 1.0
    x = np.stack([np.log1p(cmin / cmean), cmin / (cmin.max() or 1.0), np.log1p(res / (res.mean() or 1.0)),
                  np.minimum(res / total_cap, 2.0), np.log1p(out_c / cmean), np.log1p(in_c / cmean),
                  depth / (depth.max() or 1.0), rank / (rank.max() or 1.0), np.log1p(size), (size > 1).astype(float),
                  np.log1p(indeg), np.log1p(outdeg), np.full(A, np.log(A) / 10)], 1)
    ratio = np.where(mask, cost / cmin[:, None], np.nan) if (cmin > 0).all() else np.where(mask, (cost + 1e-30) / (cmin[:, None] + 1e-30), np.nan)
    speed = np.log(np.nanmedian(np.where(np.isfinite(ratio), ratio, np.nan), axis=0))
    speed = np.where(np.isfinite(speed), speed, 5.0)
    kinds = [d.kind for d in prob.worker.devices]
    prof = [(d.kind, d.profile, float(d.peak_flops)) for d in prob.worker.devices]
    ordinal = np.array([prof[:i].count(p) for i, p in enumerate(prof)], float)
    count = np.array([prof.count(p) for p in prof], float)
    ib = prob.inv_bw.sum(axis=1) / max(1, D - 1)
    ib_rel = np.log((ib + 1e-30) / (ib.mean() + 1e-30)) if ib.mean() > 0 else np.zeros(D)
    e = np.stack([np.minimum(speed, 5.0), np.where(np.isfinite(cap), cap / min(total_cap, 1e300), 1.0),
                  np.minimum(np.where(np.isfinite(cap), cap / need, 4.0), 4.0),
                  np.array([k == "cpu" for k in kinds], float), np.array([k != "cpu" for k in kinds], float),
                  ordinal / count, count / D, (speed <= speed.min() + 1e-9).astype(float), ib_rel, np.full(D, D / 8)], 1)
    share = cmin.sum() / D or 1.0
    p = np.stack([np.where(mask, np.minimum(np.log(np.nan_to_num(ratio, nan=1.0)), 5.0), 5.0),
                  np.where(mask, np.minimum(np.nan_to_num(cost, nan=0.0) / share, 2.0), 2.0),
                  np.minimum(res[:, None] / cap[None, :], 2.0), mask.astype(float)], 2)
    p = np.concatenate([p, _slots(cmin, depth, mask, np.exp(-speed), np.array([k != "cpu" for k in kinds]), cap)], 2)
    w = np.log1p(comm[cross] / cmean)
    key = [prob.graph.nodes[m[0]].group or prob.graph.nodes[m[0]].name for m in prob.members]
    name_rank = np.empty(A, np.int64)
    name_rank[np.argsort(np.array(key, dtype=object), kind="stable")] = np.arange(A)
    def f(a: FloatArray) -> F32Array:
        return np.nan_to_num(a, nan=0.0, posinf=5.0, neginf=-5.0).astype(np.float32)

    return GraphInputs(f(x), f(e), f(p), sa[cross].astype(np.int32), da[cross].astype(np.int32), f(w), mask, name_rank,
                       res, prob.atom_temp, prob.pool_of, prob.pool_cap,
                       decode_inputs(prob, depth, rank, name_rank, np.nan_to_num(cmin)))


def _slots(cmin: FloatArray, depth: FloatArray, mask: BoolArray, rel_speed: FloatArray, acc: BoolArray,
           cap: FloatArray) -> F32Array:
    """Pair features of two contiguous splits along depth (both order-free): each atom's position =
    the work of shallower atoms plus half of its own depth level, as a fraction of all work; split
    ``speed`` gives the accelerators (or all devices when none) consecutive slices of that range in
    proportion to their speed, split ``memory`` gives the devices of finite memory slices in
    proportion to their capacity. Features: in the speed slice, in the memory slice, distance to
    the speed slice (fraction of the range)."""
    A, D = mask.shape
    levels, inv = np.unique(depth, return_inverse=True)
    lw = np.bincount(inv, weights=cmin, minlength=len(levels))
    before = np.concatenate([[0.0], np.cumsum(lw)[:-1]])
    pos = (before[inv] + 0.5 * lw[inv]) / (lw.sum() or 1.0)
    out = np.zeros((A, D, 3), np.float32)
    for k, weight in ((0, rel_speed), (1, np.where(np.isfinite(cap), cap, 0.0))):
        use = weight > 0
        if k == 0 and (use & acc).any():
            use = use & acc
        if not use.any():
            continue
        wv = np.where(use, weight, 0.0)
        hi = np.cumsum(wv) / wv.sum()
        lo = hi - wv / wv.sum()
        inside = (pos[:, None] >= lo[None]) & (pos[:, None] < hi[None]) & use[None]
        inside |= (pos[:, None] >= 1.0) & (hi[None] >= 1.0 - 1e-12) & use[None]
        out[:, :, k] = inside
        if k == 0:
            out[:, :, 2] = np.where(use[None], np.maximum(lo[None] - pos[:, None], pos[:, None] - hi[None]).clip(0), 1.0)
    return out


class GraphPolicy(Decoding):
    """The weights (shared by every graph and worker) and their Adam optimiser. TensorFlow values
    (variables, tensors, traced functions) are typed ``Any``: TensorFlow has no type information."""

    meta: dict[str, Any]       # set by ``load``: the checkpoint's own record (e.g. its pre-training cases)

    def __init__(self, hidden: int = 32, rounds: int = 3, seed: int = 0, lr: float = 0.003, table_lr: float = 0.05,
                 prior: float | None = None) -> None:
        import tensorflow as tf

        self.tf, self.hidden, self.rounds, self.lr, self.table_lr = tf, hidden, rounds, lr, table_lr
        rng = np.random.default_rng(seed)
        shapes = weight_shapes(hidden, rounds)
        self.names = list(shapes)
        init = {k: self._init(rng, k, s) for k, s in shapes.items()}
        # list-scheduling prior: one unit of the sequential head starts as -PRIOR x (the objective's
        # excess over its best device), so an untrained policy decodes like greedy on the objective
        # (``prior=0``: no prior, all units random)
        prior = PRIOR if prior is None else float(prior)
        if prior:
            init["Wq"][:, 0], init["Wr"][:, 0], init["bq"][0], init["vq"][0, 0] = 0.0, 0.0, 0.0, -prior
            init["Wq"][0, 0] = 1.0
            init["Wq"][:, 1], init["Wr"][:, 1], init["bq"][1], init["vq"][1, 0] = 0.0, 0.0, 0.0, prior / PRIOR
            init["Wq"][1, 1] = 1.0             # and +1 for the objective's best device (breaks near ties)
        self.vars = {k: tf.Variable(v) for k, v in init.items()}
        self.opt = tf.keras.optimizers.Adam(learning_rate=lr)
        self.opt_table = tf.keras.optimizers.Adam(learning_rate=table_lr)
        self.updates = 0
        spec = [tf.TensorSpec([None, N_ATOM]), tf.TensorSpec([None, N_DEV]), tf.TensorSpec([None, None, N_PAIR]),
                tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32), tf.TensorSpec([None]),
                tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([None, None])]
        self._static_fn = tf.function(self._static, input_signature=spec)
        self._table: Any = None                              # the tf.Variable the traced step trains
        self._train_fn: Callable[..., Any] | None = None

    @staticmethod
    def _init(rng: np.random.Generator, k: str, s: tuple[int, ...]) -> F32Array:
        if len(s) == 1:
            return np.zeros(s, np.float32)
        scale = 0.01 if k in ("v", "vq") else np.sqrt(1.0 / s[0]) * (0.5 if k[:2] in ("Ws", "Wi", "Wo") else 1.0)
        return (rng.standard_normal(s) * scale).astype(np.float32)

    @property
    def variables(self) -> list[Any]:
        return [self.vars[k] for k in self.names]

    def _static(self, x: Any, e: Any, p: Any, src: Any, dst: Any, w: Any, mask: Any, table: Any) -> tuple[Any, Any]:
        """(static logits [A, D] with the table, disallowed -1e9; pair embedding z Wr [A, D, HQ])."""
        tf, V = self.tf, self.vars
        A = tf.shape(x)[0]
        ed = tf.nn.relu(e @ V["Wd"] + V["bd"])                                  # [D, H]
        h = tf.nn.relu(x @ V["W0"] + tf.reduce_mean(ed, 0, keepdims=True) @ V["Wc"] + V["b0"])
        wc = w[:, None]
        deg_in = tf.math.unsorted_segment_sum(w, dst, A)[:, None] + 1.0
        deg_out = tf.math.unsorted_segment_sum(w, src, A)[:, None] + 1.0
        for r in range(self.rounds):
            m_in = tf.math.unsorted_segment_sum(wc * tf.gather(h, src), dst, A) / deg_in
            m_out = tf.math.unsorted_segment_sum(wc * tf.gather(h, dst), src, A) / deg_out
            h = h + tf.nn.relu(h @ V[f"Ws{r}"] + m_in @ V[f"Wi{r}"] + m_out @ V[f"Wo{r}"] + V[f"b{r}"])
        g = tf.reduce_mean(h, 0, keepdims=True) @ V["Wg"]                     # [1, H]
        pw = tf.einsum("adf,fh->adh", p, V["Wp"])
        z = tf.nn.relu((h @ V["Wa"])[:, None, :] + (ed @ V["Wb"])[None] + pw + g[:, None, :] + V["bz"])
        logits = tf.squeeze(z @ V["v"], -1) + table
        return tf.where(mask, logits, -1e9), tf.einsum("adh,hq->adq", z, V["Wr"])

    def _dynamic(self, s: Any, zr: Any, feats: Any, feas: Any) -> Any:
        """Logits [B, A, D] of recorded decisions: s + relu(f Wq + z Wr + bq) vq, infeasible -1e9."""
        tf, V = self.tf, self.vars
        dyn = tf.squeeze(tf.nn.relu(tf.einsum("badk,kq->badq", feats, V["Wq"]) + zr[None] + V["bq"]) @ V["vq"], -1)
        return tf.where(feas, s[None] + dyn, -1e9)

    def _grads(self, x: Any, e: Any, p: Any, src: Any, dst: Any, w: Any, mask: Any, table: Any, feats: Any, feas: Any,
               actions: Any, adv: Any, ent_coef: Any) -> tuple[Any, Any, Any]:
        tf = self.tf
        with tf.GradientTape() as tape:
            tape.watch(table)
            s, zr = self._static(x, e, p, src, dst, w, mask, table)
            logp = tf.nn.log_softmax(self._dynamic(s, zr, feats, feas))                      # [B, A, D]
            lp = tf.reduce_sum(tf.one_hot(actions, tf.shape(logp)[2]) * logp, axis=[1, 2])    # [B]
            pr = tf.exp(logp)
            entropy = -tf.reduce_sum(tf.where(feas, pr * logp, 0.0)) / tf.cast(tf.shape(logp)[0], tf.float32)
            loss = -tf.reduce_mean(adv * lp) - ent_coef * entropy
        grads = tape.gradient(loss, self.variables + [table])
        return grads[:-1], grads[-1], entropy / tf.cast(tf.shape(logp)[1], tf.float32)

    # -- numpy API ----------------------------------------------------------------------------
    def _args(self, gi: GraphInputs, table: npt.ArrayLike | None) -> tuple[Any, ...]:
        tf = self.tf
        t = np.zeros(gi.mask.shape, np.float32) if table is None else np.asarray(table, np.float32)
        return (tf.constant(gi.x), tf.constant(gi.e), tf.constant(gi.p), tf.constant(gi.src), tf.constant(gi.dst),
                tf.constant(gi.w), tf.constant(gi.mask), tf.constant(t))

    def static(self, gi: GraphInputs, table: npt.ArrayLike | None = None, traced: bool = False,
               ) -> tuple[FloatArray, FloatArray]:
        """Eager by default (tracing costs more than one zero-shot decode); ``traced`` for the many
        calls of a search (traced once per policy)."""
        fn = self._static_fn if traced else self._static
        s, zr = fn(*self._args(gi, table))
        return s.numpy().astype(np.float64), zr.numpy().astype(np.float64)

    def _head(self) -> dict[str, FloatArray]:
        return {k: self.vars[k].numpy().astype(np.float64) for k in ("Wq", "bq", "vq")}

    def update(self, gi: GraphInputs, ro: Rollouts, adv: FloatArray, ent_coef: float, table: Any = None) -> float:
        """One REINFORCE step on the recorded trajectories ``ro`` (with ``adv`` = 1 and teacher-forced
        rollouts: one imitation step); ``table`` (a tf.Variable [A, D] or None) is trained alongside.
        Gradient and both Adam steps run as one traced function (traced once per policy and table)."""
        tf = self.tf
        if table is not self._table or self._train_fn is None:
            self._table = table
            self.opt.build(self.variables)
            if table is not None:
                self.opt_table.build([table])
            self._train_fn = tf.function(self._train, reduce_retracing=True)
        args = self._args(gi, None)[:-1]
        ent = self._train_fn(*args, tf.constant(ro.feats), tf.constant(ro.feasible), tf.constant(ro.actions, tf.int32),
                             tf.constant(adv, tf.float32), tf.constant(ent_coef, tf.float32))
        self.updates += 1
        return float(ent)

    def _train(self, x: Any, e: Any, p: Any, src: Any, dst: Any, w: Any, mask: Any, feats: Any, feas: Any,
               actions: Any, adv: Any, ent_coef: Any) -> Any:
        tf = self.tf
        t = tf.zeros(tf.shape(mask)) if self._table is None else tf.convert_to_tensor(self._table)
        g_net, g_table, ent = self._grads(x, e, p, src, dst, w, mask, t, feats, feas, actions, adv, ent_coef)
        self.opt.apply_gradients(zip(g_net, self.variables))
        if self._table is not None:
            self.opt_table.apply_gradients([(g_table, self._table)])
        return ent

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, path: str | Path, meta: dict[str, Any] | None = None, table: npt.ArrayLike | None = None) -> None:
        """The weights and their config (and a trial's per-atom table, to resume it) in one .npz."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        cfg = {"format": FORMAT, "hidden": self.hidden, "rounds": self.rounds, "n_atom": N_ATOM, "n_dev": N_DEV,
               "n_pair": N_PAIR, "n_dyn": K_DYN, "updates": self.updates, "meta": meta or {}}
        with open(path, "wb") as f:
            np.savez_compressed(f, __config__=np.array(json.dumps(cfg)), **{k: v.numpy() for k, v in self.vars.items()},
                                **({} if table is None else {"__table__": np.asarray(table, np.float32)}))

    def restore(self, path: str | Path, table: Any = None) -> str:
        """Resume from a trial's checkpoint: the weights when their shapes match, the table (a
        tf.Variable) too when it has this graph's shape. Returns "all", "net" or "none"."""
        try:
            other = GraphPolicy.load(path, key="placer.checkpoint")
        except ConfigError:
            return "none"
        if (other.hidden, other.rounds) != (self.hidden, self.rounds):
            return "none"
        for k in self.names:
            self.vars[k].assign(other.vars[k])
        data = np.load(path, allow_pickle=False)
        if table is not None and "__table__" in data.files and data["__table__"].shape == tuple(table.shape):
            table.assign(data["__table__"])
            return "all"
        return "net"

    @classmethod
    def load(cls, path: str | Path, seed: int = 0, lr: float = 0.003, table_lr: float = 0.05,
             key: str = "placer.policy") -> GraphPolicy:
        """A policy from a checkpoint; ``ConfigError`` (one line naming the file) when it is not one."""
        cfg, weights = read_checkpoint(path, key)
        pol = cls(int(cfg["hidden"]), int(cfg["rounds"]), seed, lr, table_lr)
        for k in pol.names:
            pol.vars[k].assign(weights[k])
        pol.updates, pol.meta = int(cfg.get("updates", 0)), cfg.get("meta", {})
        return pol
