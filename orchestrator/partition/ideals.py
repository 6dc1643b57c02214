"""The ideals of a DAG of units (down-closed sets, as bitmasks): the states of a contiguous split. A chain's ideals
are its prefixes (``chain``); units that must move together (a cycle) are fused first (``scc``)."""

from __future__ import annotations

from collections import deque

import numpy as np

from orchestrator.graph.arrays import IntArray

IDEALS_LIMIT = 200_000


def scc(adj: list[set[int]]) -> IntArray:
    """Tarjan's strongly connected components, iterative; component ids in topological order."""
    n = len(adj)
    index, low, on, comp = [-1] * n, [0] * n, [False] * n, [-1] * n
    stack: list[int] = []
    counter, n_comp = 0, 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if index[nxt] < 0:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on[nxt] = True
                    work.append((nxt, iter(sorted(adj[nxt]))))
                elif on[nxt]:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp[w] = n_comp
                    if w == v:
                        break
                n_comp += 1
    comp_arr = np.array(comp, dtype=np.int64)
    return (n_comp - 1 - comp_arr) if n else comp_arr      # Tarjan emits sinks first


def chain(n: int) -> list[set[int]]:
    """The predecessors of a chain of ``n`` units (unit x after x - 1): its ideals are the prefixes."""
    return [set() if x == 0 else {x - 1} for x in range(n)]


def ideals(n_sup: int, preds: list[set[int]], limit: int = IDEALS_LIMIT) -> tuple[list[int], list[list[tuple[int, int]]]] | None:
    """All ideals as bitmasks, in nondecreasing size (BFS from the empty set), and per ideal the
    (unit added, ideal reached) steps; None past ``limit``."""
    pmask = [sum(1 << p for p in ps) for ps in preds]
    succ: list[list[int]] = [[] for _ in range(n_sup)]
    for x, ps in enumerate(preds):
        for p in ps:
            succ[p].append(x)
    ids = {0: 0}
    masks, frontier = [0], [frozenset(x for x in range(n_sup) if not pmask[x])]
    steps: list[list[tuple[int, int]]] = [[]]
    q = deque([0])
    while q:
        i = q.popleft()
        m = masks[i]
        for x in sorted(frontier[i]):
            nm = m | (1 << x)
            j = ids.get(nm)
            if j is None:
                if len(masks) >= limit:
                    return None
                j = ids[nm] = len(masks)
                masks.append(nm)
                steps.append([])
                frontier.append((frontier[i] - {x}) | {y for y in succ[x] if pmask[y] & ~nm == 0})
                q.append(j)
            steps[i].append((x, j))
    return masks, steps
