"""Inference with the graph policy in numpy: its inputs (``GraphInputs``), checkpoints read without
TensorFlow (``read_checkpoint``), the forward pass (``static_numpy``, equal to ``GraphPolicy._static`` to
float32 precision) and the decodes every policy offers (``Decoding``). A zero-shot placement
(``InferencePolicy``) imports no TensorFlow; ``graph_policy.GraphPolicy`` trains."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.errors import ConfigError
from orchestrator.graph.arrays import BoolArray, F32Array, FloatArray, I32Array, IntArray
from orchestrator.placement.learn.policy_decode import K_DYN, DecodeInputs, Rollouts, head_logits, rollout

FORMAT = "orchestrator.graph_policy/2"
N_ATOM, N_DEV, N_PAIR = 13, 10, 7
HQ = 16                                # hidden width of the dynamic head
PRIOR = 10.0                           # the list-scheduling prior's weight (see GraphPolicy.__init__)

@dataclass
class GraphInputs:
    x: F32Array            # [A, N_ATOM]
    e: F32Array            # [D, N_DEV]
    p: F32Array            # [A, D, N_PAIR]
    src: I32Array          # [M] atom edges
    dst: I32Array
    w: F32Array            # [M]
    mask: BoolArray        # [A, D] allowed
    name_rank: IntArray    # [A] rank of each atom's name: order-free random draws
    res: FloatArray | None = None       # [A] resident bytes, temp bytes (memory-aware decoding)
    temp: FloatArray | None = None
    pool_of: IntArray | None = None     # [D] memory pool of each device, and each pool's capacity (less headroom)
    pool_cap: FloatArray | None = None
    dec: DecodeInputs | None = None     # what the sequential decode needs (``graph_inputs`` fills all five)


def weight_shapes(hidden: int, rounds: int) -> dict[str, tuple[int, ...]]:
    """The shape of every weight of a policy of this width and depth, in checkpoint order."""
    H = hidden
    shapes = {"W0": (N_ATOM, H), "b0": (H,), "Wc": (H, H), "Wd": (N_DEV, H), "bd": (H,), "Wa": (H, H),
              "Wb": (H, H), "Wp": (N_PAIR, H), "Wg": (H, H), "bz": (H,), "v": (H, 1),
              "Wr": (H, HQ), "Wq": (K_DYN, HQ), "bq": (HQ,), "vq": (HQ, 1)}
    for r in range(rounds):
        shapes.update({f"Ws{r}": (H, H), f"Wi{r}": (H, H), f"Wo{r}": (H, H), f"b{r}": (H,)})
    return shapes


def read_checkpoint(path: str | Path, key: str = "placer.policy") -> tuple[dict[str, Any], dict[str, F32Array]]:
    """(config, weights) of a checkpoint, read with numpy alone; ``ConfigError`` (one line naming the
    file) when it is not one of this format."""
    try:
        data = np.load(path, allow_pickle=False)
        cfg = json.loads(str(data["__config__"]))
    except FileNotFoundError:
        raise ConfigError(f"{key}={path}: no such file") from None
    except Exception as exc:                       # noqa: BLE001  (any unreadable file)
        raise ConfigError(f"{key}={path}: not a graph-policy checkpoint ({type(exc).__name__})") from None
    if cfg.get("format") != FORMAT or (cfg.get("n_atom"), cfg.get("n_dev"), cfg.get("n_pair")) != (N_ATOM, N_DEV, N_PAIR):
        raise ConfigError(f"{key}={path}: checkpoint format {cfg.get('format')!r} with other features, expected {FORMAT!r}")
    try:
        shapes = weight_shapes(int(cfg["hidden"]), int(cfg["rounds"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{key}={path}: checkpoint without a valid hidden / rounds") from None
    weights = {}
    for k, shape in shapes.items():
        if k not in data.files or data[k].shape != shape:
            raise ConfigError(f"{key}={path}: weight {k!r} missing or of the wrong shape")
        weights[k] = np.asarray(data[k], np.float32)
    return cfg, weights


def static_numpy(V: dict[str, F32Array], rounds: int, gi: GraphInputs, table: npt.ArrayLike | None = None,
                 ) -> tuple[FloatArray, FloatArray]:
    """``GraphPolicy._static`` in numpy (float32, as TensorFlow computes it): the static logits [A, D]
    (table added, disallowed -1e9) and the pair embedding after Wr [A, D, Hq]. Inference needs no
    TensorFlow: a zero-shot placement imports none."""
    from scipy import sparse

    f32 = np.float32
    A = len(gi.x)

    def relu(a: Any) -> Any:
        return np.maximum(a, f32(0.0))

    ed = relu(gi.e @ V["Wd"] + V["bd"])                                           # [D, H]
    h = relu(gi.x @ V["W0"] + ed.mean(0, keepdims=True, dtype=f32) @ V["Wc"] + V["b0"])
    w = gi.w.astype(f32)
    into = sparse.csr_matrix((w, (gi.dst, gi.src)), shape=(A, A), dtype=f32)       # m_in[d] = sum w h[src]
    out_of = into.T.tocsr()                                                       # m_out[s] = sum w h[dst]
    deg_in = (np.bincount(gi.dst, weights=w, minlength=A).astype(f32) + f32(1.0))[:, None]
    deg_out = (np.bincount(gi.src, weights=w, minlength=A).astype(f32) + f32(1.0))[:, None]
    for r in range(rounds):
        m_in, m_out = (into @ h) / deg_in, (out_of @ h) / deg_out
        h = h + relu(h @ V[f"Ws{r}"] + m_in @ V[f"Wi{r}"] + m_out @ V[f"Wo{r}"] + V[f"b{r}"])
    g = h.mean(0, keepdims=True, dtype=f32) @ V["Wg"]                            # [1, H]
    z = relu((h @ V["Wa"])[:, None, :] + (ed @ V["Wb"])[None] + gi.p @ V["Wp"] + g[:, None, :] + V["bz"])
    t = np.zeros(gi.mask.shape, f32) if table is None else np.asarray(table, f32)
    logits = np.where(gi.mask, (z @ V["v"])[..., 0] + t, f32(-1e9))
    return logits.astype(np.float64), (z @ V["Wr"]).astype(np.float64)


class Decoding:
    """The decodes every policy offers, given ``static`` and ``_head`` (numpy in, numpy out)."""

    def static(self, gi: GraphInputs, table: npt.ArrayLike | None = None, traced: bool = False,
               ) -> tuple[FloatArray, FloatArray]:
        raise NotImplementedError

    def _head(self) -> dict[str, FloatArray]:
        raise NotImplementedError

    def logits(self, gi: GraphInputs, table: npt.ArrayLike | None = None, traced: bool = False) -> FloatArray:
        """The static logits [A, D] (before the sequential head)."""
        return self.static(gi, table, traced)[0]

    def rollouts(self, gi: GraphInputs, n: int = 1, rng: np.random.Generator | None = None,
                 table: npt.ArrayLike | None = None, traced: bool = False, greedy: bool = False,
                 forced: IntArray | None = None) -> Rollouts:
        """``n`` sequential decodes (``policy_decode.rollout``): greedy, ``forced`` ([n, A]) or sampled
        (atom a uses the ``name_rank[a]``-th uniform of its row, so samples do not depend on the
        order of the nodes in the graph file)."""
        s, zr = self.static(gi, table, traced)
        # sampling needs ``rng`` (every sampling caller passes one; None there fails here)
        draws = None if (greedy or forced is not None) else rng.random((n, len(gi.mask)))  # type: ignore[union-attr]
        return rollout(gi, s, zr, self._head(), n, greedy=greedy, draws=draws, forced=forced)

    def decode(self, gi: GraphInputs, table: npt.ArrayLike | None = None) -> IntArray:
        """The greedy sequential decode: per atom in priority order the largest logit (rounded to
        1e-4, so float summation order cannot flip a near tie) among the devices whose memory pool
        still holds it."""
        best: IntArray = self.rollouts(gi, 1, table=table, greedy=True).actions[0]   # (a row: Any to numpy)
        return best

    def probs(self, gi: GraphInputs, table: npt.ArrayLike | None = None) -> FloatArray:
        """The policy's distribution [A, D] at each decision of the greedy decode."""
        s, zr = self.static(gi, table)
        head = self._head()
        ro = rollout(gi, s, zr, head, 1, greedy=True)
        z = head_logits(s, zr, head, ro.feats[0], ro.feasible[0])
        z = np.exp(z - z.max(axis=1, keepdims=True)) * ro.feasible[0]
        out: FloatArray = z / z.sum(axis=1, keepdims=True)
        return out

    def sample(self, gi: GraphInputs, n: int, rng: np.random.Generator, table: npt.ArrayLike | None = None,
               traced: bool = False) -> Rollouts:
        """``n`` sampled placements (``.actions`` [n, A]) with their recorded decisions."""
        return self.rollouts(gi, n, rng, table, traced)


class InferencePolicy(Decoding):
    """A checkpoint's policy for inference only (zero-shot placement): numpy weights, the forward
    pass in numpy (``static_numpy``), no TensorFlow imported. ``GraphPolicy`` trains."""

    meta: dict[str, Any]

    def __init__(self, cfg: dict[str, Any], weights: dict[str, F32Array]) -> None:
        self.hidden, self.rounds = int(cfg["hidden"]), int(cfg["rounds"])
        self.weights, self.updates, self.meta = weights, int(cfg.get("updates", 0)), cfg.get("meta", {})

    @classmethod
    def load(cls, path: str | Path, key: str = "placer.policy") -> InferencePolicy:
        return cls(*read_checkpoint(path, key))

    def static(self, gi: GraphInputs, table: npt.ArrayLike | None = None, traced: bool = False,
               ) -> tuple[FloatArray, FloatArray]:
        return static_numpy(self.weights, self.rounds, gi, table)

    def _head(self) -> dict[str, FloatArray]:
        return {k: self.weights[k].astype(np.float64) for k in ("Wq", "bq", "vq")}
