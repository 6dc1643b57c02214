"""Expert placement rules of the device-placement literature (``placer.strategy`` of ``manual``):

- ``fastest``: the whole graph on the fastest device (least total cost) whose memory holds it;
- ``rnn``: stacked recurrent models: recurrent layer k (encoder and decoder alike) on accelerator k
  (contiguous blocks when there are more layers than accelerators), attention and softmax on the
  last; other nodes follow their producer;
- ``chain``: the topological order cut into contiguous pieces of balanced fastest cost, one per
  accelerator.

Colocation groups follow their first member; ``cpu_only`` nodes go to the first CPU. Rules do not
check memory (except ``fastest``): the evaluator judges them.
"""

from __future__ import annotations

import re

import numpy as np

from orchestrator.errors import ConfigError, InfeasiblePlacementError
from orchestrator.graph import Placement
from orchestrator.placement.solve.greedy import single_device
from orchestrator.placement.solve.problem import PlacementProblem

STRATEGIES = ("fastest", "rnn", "chain")
RNN_LAYER = re.compile(r"(?:lstm|gru|rnn|recurrent|cell|layer)[_/:\-]?(\d+)", re.I)
HEAD = re.compile(r"attention|softmax|logits|output_proj|projection|classifier", re.I)


def expert_placement(strategy: str, graph, worker, evaluator=None) -> Placement:
    prob = PlacementProblem(graph, worker, evaluator)
    if strategy == "fastest":
        assign = single_device(prob)
        if assign is None:
            raise InfeasiblePlacementError(f"strategy fastest: no single device of {worker.name!r} holds {graph.name}")
    elif strategy == "rnn":
        assign = _rnn(prob)
    elif strategy == "chain":
        assign = _chain(prob)
    else:
        raise ConfigError(f"placer.strategy={strategy!r} (accepted: {', '.join(STRATEGIES)} or null)")
    return prob.placement(_legal(prob, assign), placer="manual", strategy=strategy)


def _accelerators(worker) -> list[int]:
    acc = [i for i, d in enumerate(worker.devices) if d.kind != "cpu"]
    return acc or list(range(len(worker.devices)))


def _legal(prob: PlacementProblem, assign: np.ndarray) -> np.ndarray:
    """Groups follow their first member (topological order); nodes that cannot run on their device
    go to their fastest allowed device."""
    atom = np.full(prob.n_atoms, -1, dtype=np.int64)
    for u in prob.graph.topological_order():
        a = prob.atom_of[u]
        if atom[a] < 0:
            atom[a] = assign[u]
    bad = ~prob.allowed[np.arange(prob.n_atoms), atom]
    atom[bad] = np.argmin(prob.atom_cost[bad], axis=1)
    return prob.expand(atom)


def _rnn(prob: PlacementProblem) -> np.ndarray:
    g, acc = prob.graph, _accelerators(prob.worker)
    layer = []
    for n in g.nodes:
        m = None
        for key in (n.layer, n.name):
            if key and (m := RNN_LAYER.search(key)):
                break
        layer.append(int(m.group(1)) if m else None)
    found = sorted({k for k in layer if k is not None})
    if not found:
        raise ConfigError(f"placer.strategy=rnn: no recurrent layer found in {g.name} (node or layer names like lstm_1)")
    slot = {k: acc[i * len(acc) // len(found)] for i, k in enumerate(found)}
    assign = np.full(prob.n, -1, dtype=np.int64)
    for i, n in enumerate(g.nodes):
        if HEAD.search(n.layer or "") or HEAD.search(n.name):
            assign[i] = acc[-1]
        elif layer[i] is not None:
            assign[i] = slot[layer[i]]
    for u in g.topological_order():                   # the rest follows its producer
        if assign[u] < 0:
            preds = [p for p, _ in prob.preds[u] if assign[p] >= 0]
            assign[u] = assign[preds[0]] if preds else acc[0]
    return assign


def _chain(prob: PlacementProblem) -> np.ndarray:
    acc = _accelerators(prob.worker)
    fastest = np.where(np.isfinite(prob.sim.cost[:, acc]), prob.sim.cost[:, acc], np.inf).min(axis=1)
    fastest = np.where(np.isfinite(fastest), fastest, 0.0)
    if not fastest.any():  # no costs known (e.g. a measured-only graph): balance by node count
        fastest = np.ones_like(fastest)
    order = prob.graph.topological_order()
    cum = np.cumsum(fastest[order])
    total = cum[-1] if len(cum) else 0.0
    piece = np.minimum((cum - fastest[order] / 2) * len(acc) // max(total, 1e-30), len(acc) - 1).astype(int)
    assign = np.empty(prob.n, dtype=np.int64)
    assign[order] = np.array(acc)[piece]
    return assign
