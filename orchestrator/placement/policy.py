"""The RL placer's policy pi(device | group, G) in TensorFlow: an MLP over per-group features plus a
per-group logit table (the table carries the prior, e.g. the greedy placement, and lets the policy
express any placement; the MLP generalises across graphs with the same device count). Trained by
REINFORCE with an entropy bonus. Weights are created from a seeded numpy generator, so runs repeat.

``placer=rl`` no longer uses it (since the graph policy, ``orchestrator.placement.graph_policy``); it
stays importable for code written against it (``orchestrator.rl_policy`` resolves here).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from orchestrator.placement.search import PlacementProblem


def group_features(prob: PlacementProblem, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: cost per device (normalised, inf -> 2), allowed flag, memory / capacity per device,
    upward rank, topological position, in/out degree (log), size (log). Returns (features, mask)."""
    n_groups, nd = int(group.max()) + 1, prob.nd
    cost = np.zeros((n_groups, nd))
    np.add.at(cost, group, np.where(np.isfinite(prob.atom_cost), prob.atom_cost, 0.0))
    mask = np.ones((n_groups, nd), dtype=bool)
    np.logical_and.at(mask, group, prob.allowed)
    scale = cost[mask].max(initial=0.0) or 1.0
    cost_f = np.where(mask, cost / scale, 2.0)
    mem = np.bincount(group, weights=prob.atom_resident, minlength=n_groups)
    cap = prob.pool_cap[prob.pool_of]
    mem_f = np.minimum(mem[:, None] / np.where(np.isfinite(cap), cap, np.inf)[None, :], 2.0)
    node_group = group[prob.atom_of]
    rank = np.zeros(n_groups)
    np.maximum.at(rank, node_group, prob.sim.rank)
    pos = np.bincount(node_group, weights=prob.topo_pos, minlength=n_groups) / np.bincount(node_group, minlength=n_groups)
    outdeg = np.bincount(node_group, weights=np.diff(prob.sim.succ_ptr).astype(float), minlength=n_groups)
    indeg = np.bincount(node_group, weights=prob.sim.npred.astype(float), minlength=n_groups)
    size = np.bincount(node_group, minlength=n_groups)
    extra = np.stack([rank / (rank.max() or 1.0), pos / max(1, prob.n), np.log1p(indeg), np.log1p(outdeg), np.log1p(size)], 1)
    return np.concatenate([cost_f, mask.astype(float), mem_f, extra], 1).astype(np.float32), mask


class PlacementPolicy:
    def __init__(self, n_features: int, n_devices: int, n_groups: int, hidden: int = 64, seed: int = 0,
                 lr: float = 0.05, mlp_lr_scale: float = 0.1):
        import tensorflow as tf

        self.tf = tf
        rng = np.random.default_rng(seed)
        g = lambda a, b, s: tf.Variable((rng.standard_normal((a, b)) * s).astype(np.float32))
        self.w1 = g(n_features, hidden, np.sqrt(1.0 / n_features))
        self.b1 = tf.Variable(np.zeros(hidden, np.float32))
        self.w2 = g(hidden, n_devices, 0.01)
        self.b2 = tf.Variable(np.zeros(n_devices, np.float32))
        self.table = tf.Variable(np.zeros((n_groups, n_devices), np.float32))
        self.opt = tf.keras.optimizers.Adam(learning_rate=lr)             # the table
        self.opt_mlp = tf.keras.optimizers.Adam(learning_rate=lr * mlp_lr_scale)
        self._step = tf.function(self._train_step, reduce_retracing=True)

    @property
    def variables(self):
        return [self.w1, self.b1, self.w2, self.b2, self.table]

    def _logits(self, feat, mask):
        tf = self.tf
        h = tf.tanh(feat @ self.w1 + self.b1)
        return tf.where(mask, h @ self.w2 + self.b2 + self.table, -1e9)

    def probs(self, feat: np.ndarray, mask: np.ndarray) -> np.ndarray:
        p = self.tf.nn.softmax(self._logits(feat, mask)).numpy().astype(np.float64)
        return p / p.sum(axis=1, keepdims=True)

    def _train_step(self, feat, mask, actions, adv, ent_coef):
        tf = self.tf
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(self._logits(feat, mask))                      # [G, D]
            onehot = tf.one_hot(actions, tf.shape(logp)[1])                         # [B, G, D]
            lp = tf.reduce_sum(onehot * logp[None], axis=[1, 2])                    # [B]
            p = tf.exp(logp)
            entropy = -tf.reduce_sum(tf.where(mask, p * logp, 0.0))                # summed over groups
            loss = -tf.reduce_mean(adv * lp) - ent_coef * entropy
        grads = tape.gradient(loss, self.variables)
        self.opt_mlp.apply_gradients(zip(grads[:4], self.variables[:4]))
        self.opt.apply_gradients([(grads[4], self.table)])
        return entropy / tf.cast(tf.shape(logp)[0], tf.float32)

    def update(self, feat, mask, actions: np.ndarray, adv: np.ndarray, ent_coef: float) -> float:
        tf = self.tf
        return float(self._step(tf.constant(feat), tf.constant(mask), tf.constant(actions, tf.int32),
                                tf.constant(adv, tf.float32), tf.constant(ent_coef, tf.float32)))

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            np.savez(f, **{k: v.numpy() for k, v in zip(("w1", "b1", "w2", "b2", "table"), self.variables)})

    def restore(self, path: str | Path) -> str:
        """Load what fits: the MLP when shapes match (same features and device count), the table too
        when the grouping matches (resuming). Returns what was restored ("all", "mlp", "none")."""
        data = np.load(path)
        if data["w1"].shape != tuple(self.w1.shape) or data["w2"].shape != tuple(self.w2.shape):
            return "none"
        for k, v in zip(("w1", "b1", "w2", "b2"), self.variables):
            v.assign(data[k])
        if data["table"].shape == tuple(self.table.shape):
            self.table.assign(data["table"])
            return "all"
        return "mlp"
