"""The templates the joint planner splits (``orchestrator.planning.search``): one pipeline of ``dp`` replicas
per stage at micro-batch size ``mbs``, and a sequence of stage kinds (a GPU type with its TP degree)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Any

from orchestrator.plan import GpuCluster, LayeredProfile, Replica


@dataclass(frozen=True)
class Kind:
    """What one stage runs on: ``dp`` replicas (the template's) of a TP group of ``tp`` GPUs of ``gpu``."""

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


def templates(profile: LayeredProfile, cluster: GpuCluster, global_batch: int, max_stages: int):
    """(mbs, dp, kinds) for one pipeline: each GPU type used contributes ``n`` consecutive stages of one
    TP degree (``n`` = all its GPUs allow at this dp, or one less), in every order of the types."""
    L = profile.num_layers
    mbss = sorted({mbs for (g, _) in cluster.gpus for mbs in profile.micro_batches(g)})
    for mbs in mbss:
        per_type = kinds_of(profile, cluster, mbs)
        if not per_type:
            continue
        for dp in dp_grid(global_batch // mbs):
            options: list[list[tuple[Kind, int]]] = []
            for (gpu, zone), ks in per_type.items():
                n_gpus = cluster.gpus[(gpu, zone)]
                opts: list[tuple[Kind, int]] = []
                for k in ks:
                    nmax = min(n_gpus // (dp * k.tp), L, max_stages)
                    opts += [(k, n) for n in sorted({nmax, nmax - 1}) if n > 0]
                options.append(opts + [(ks[0], 0)])
            if all(o == [(o[0][0], 0)] for o in options):
                break                                    # dp too large for every type
            for choice in _product(options):
                used = [(k, n) for k, n in choice if n > 0]
                if not used or sum(n for _, n in used) > min(L, max_stages):
                    continue
                for order in permutations(used):
                    yield mbs, dp, tuple(k for k, n in order for _ in range(n))


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
