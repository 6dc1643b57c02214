"""The templates the joint planner splits (``orchestrator.planning.search``): one pipeline of ``dp`` replicas
per stage at micro-batch size ``mbs``, and a sequence of stage kinds (a GPU type with its TP degree): each
GPU type contributes a block of stages (``blocks``), the blocks arranged in every order (``arrangements``),
produced lazily per group ``(mbs, dp)`` (``template_groups``) so that the search expands only the groups
its bounds find promising."""

from __future__ import annotations

from itertools import permutations
from typing import Any, NamedTuple

from orchestrator.hardware.gpu_cluster import GpuCluster
from orchestrator.plan import LayeredProfile, Replica


class Kind(NamedTuple):
    """What one stage runs on: ``dp`` replicas (the template's) of a TP group of ``tp`` GPUs of ``gpu``
    (a named tuple: hashed in C, the search hashes kinds millions of times)."""

    gpu: str
    tp: int
    node_gpus: int
    zone: str

    def replica(self) -> Replica:
        return Replica(self.gpu, self.tp, self.node_gpus, self.zone)


def kinds_of(profile: LayeredProfile, cluster: GpuCluster, mbs: int) -> dict[tuple[str, str], list[Kind]]:
    """The kinds a stage can run on at micro-batch ``mbs``, per (GPU type, zone) with GPUs."""
    out: dict[tuple[str, str], list[Kind]] = {}
    for (gpu, zone), n in sorted(cluster.gpus.items()):
        if n <= 0 or gpu not in profile.times:
            continue
        per_node = cluster.gpu_type(gpu).gpus_per_node
        ks = [Kind(gpu, tp, per_node, zone) for tp in profile.tp_degrees(gpu, mbs) if tp <= per_node]
        if ks:
            out[(gpu, zone)] = ks
    return out


def blocks(kinds: list[Kind], units: int, cap: int, wide: bool = True) -> list[tuple[Kind, ...]]:
    """The stage sequences one GPU type can contribute to a template whose columns have ``units`` of its GPUs
    (its GPUs // dp): every multiset of at most two of its TP degrees that no stage of its smallest degree
    can be added to (or, with one degree, one stage less), at most ``cap`` stages; with two degrees in both
    orders (ascending and descending TP). The empty block (the type unused) is always one."""
    out: set[tuple[Kind, ...]] = {()}
    ks = sorted(kinds, key=lambda k: k.tp)
    if not ks:
        return [()]
    for i, a in enumerate(ks):
        na = min(units // a.tp, cap)
        for n in (na, na - 1):
            if n > 0:
                out.add((a,) * n)
        for b in ks[i + 1:] if wide else ():
            for nb in range(1, min(units // b.tp, cap) + 1):
                left = units - nb * b.tp
                n = min(left // a.tp, cap - nb)
                if n < 1 or (left - n * a.tp >= a.tp and n + nb < cap):
                    continue
                out.add((a,) * n + (b,) * nb)
                out.add((b,) * nb + (a,) * n)
    return sorted(out, key=lambda x: (len(x), [k.tp for k in x]))


def arrangements(chosen: list[tuple[Kind, ...]]):
    """The orders of the types' blocks: every permutation, and each with its first block split around the
    rest (its first stage at the head and the others at the tail, or all but its last at the head), as in
    Sailor's plans that put one type at both ends of the pipeline."""
    used = [b for b in chosen if b]
    for order in permutations(used):
        yield tuple(k for b in order for k in b)
        if len(order) > 1 and len(order[0]) > 1:
            head, rest = order[0], tuple(k for b in order[1:] for k in b)
            yield head[:1] + rest + head[1:]
            yield head[:-1] + rest + head[-1:]


def template_groups(profile: LayeredProfile, cluster: GpuCluster, global_batch: int, max_stages: int,
                    wide: bool = True):
    """(mbs, dp, generator of choices), one group per micro-batch size and data-parallel degree: a choice is
    one block per GPU type (``blocks``); its templates are the blocks' arrangements (``arrangements``).
    The groups are produced cheaply; the search expands only those whose lower bound is promising."""
    L = profile.num_layers
    cap = min(L, max_stages)
    mbss = sorted({mbs for (g, _) in cluster.gpus for mbs in profile.micro_batches(g)})
    for mbs in mbss:
        per_type = kinds_of(profile, cluster, mbs)
        if not per_type:
            continue
        for dp in dp_grid(global_batch // mbs):
            units = {key: cluster.gpus[key] // dp for key in per_type}
            if all(u < min(k.tp for k in per_type[key]) for key, u in units.items()):
                break                                    # dp too large for every type
            yield mbs, dp, _group(per_type, units, cap, wide)


def _group(per_type, units, cap, wide):
    """The choices of one block per type (at least one not empty, at most ``cap`` stages in all)."""
    options = [blocks(ks, units[key], cap, wide) for key, ks in per_type.items()]
    for choice in _product(options):
        if any(choice) and sum(len(b) for b in choice) <= cap:
            yield choice


def dp_grid(most: int) -> list[int]:
    """Data-parallel degrees tried: every one up to 16, then about 19% apart (2^(1/4)); local search and
    the neighbours of the best fill in between."""
    out, d = list(range(1, min(most, 16) + 1)), 16.0
    while d * 1.19 <= most:
        d *= 2 ** 0.25
        out.append(int(round(d)))
    return sorted(set(x for x in out if 1 <= x <= max(most, 1)))


def _product(options: list[list[Any]]):
    if not options:
        yield ()
        return
    for first in options[0]:
        for rest in _product(options[1:]):
            yield (first, *rest)
