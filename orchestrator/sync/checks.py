"""A sync strategy's answers checked where the runtimes use them (a plugin's too): one line naming the strategy
instead of a NaN speedup, numpy's broadcast error or a 'diverged' that blames the learning rate."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.errors import PluginError


def checked_quorum(strat: Any, workers: int) -> int:
    """A strategy's ``quorum(W)``, a whole number in [1, W] (a plugin's too): else one line naming the strategy."""
    q = strat.quorum(workers)
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not 1 <= q <= workers:
        raise PluginError(f"sync strategy {type(strat).__name__}: quorum({workers}) = {q!r}, not a whole number in "
                          f"[1, {workers}]")
    return int(q)


def checked_vector(strat: Any, vec: Any, theta: np.ndarray) -> np.ndarray:
    """A strategy's ``local(...)``: a vector shaped like the parameters (a plugin's wrong shape was numpy's
    'operands could not be broadcast', naming nothing)."""
    if getattr(vec, "shape", None) != theta.shape:
        raise PluginError(f"sync strategy {type(strat).__name__}: local() returned shape {getattr(vec, 'shape', type(vec).__name__)}"
                          f", not the parameters' {theta.shape}")
    return vec


def checked_bytes(strat: Any, nbytes: Any) -> float:
    """A strategy's ``message_bytes(...)``: a number of bytes >= 0 (a plugin's NaN ended as speedup = nan, FINISHED)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.number)) or not 0 <= nbytes < math.inf:
        raise PluginError(f"sync strategy {type(strat).__name__}: message_bytes() = {nbytes!r}, not a number of bytes >= 0")
    return float(nbytes)


def checked_weights(strat: Any, weights: Any, workers: int) -> Any:
    """A strategy's ``weights(round)``: one finite number per worker (a plugin's NaN ended as 'diverged: try a smaller
    train.lr', blaming the learning rate)."""
    values = np.asarray(weights, dtype=np.float64) if not isinstance(weights, str) else np.asarray([])
    if values.shape != (workers,) or not np.isfinite(values).all():
        raise PluginError(f"sync strategy {type(strat).__name__}: weights() = {weights!r}, not {workers} finite numbers"[:300])
    return weights
