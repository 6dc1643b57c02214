"""A figure a sync trial puts its result beside (the comparison's time, the statistical limit), with what it is
and where it came from, and its cache: in the process and as tags of the trial's run (``compare.*``, ``limit.*``
with a key of everything the figure depends on), read back by a later trial with the same key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from orchestrator.sync.core import SyncOptions


@dataclass
class Figure:
    """A cached time to target with what it is and where it came from."""

    time_to_target_s: float | None
    label: str
    source: str = "computed"         # computed | process cache | store (run ID) | this trial
    spread: tuple[float, float] | None = None   # the fastest and slowest seed's time (the limit's)


_CACHE: dict[str, Figure] = {}


def key_hash(parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def lookup(sink: Any, tag: str, k: str) -> Figure | None:
    if k in _CACHE:
        return dataclasses.replace(_CACHE[k], source="process cache")
    client, exp = getattr(sink, "client", None), getattr(sink, "experiment_id", None)
    if client is None or exp is None:
        return None
    try:
        runs = client.search_runs([exp], filter_string=f"tags.`{tag}.key` = '{k}'", max_results=1)
    except Exception:  # a cache: a store that cannot answer means computing it
        return None
    if not runs:
        return None
    t = runs[0].data.tags
    try:
        v = t[f"{tag}.time_to_target_s"]
        spread = json.loads(t[f"{tag}.spread_s"]) if f"{tag}.spread_s" in t else None
        fig = Figure(None if v == "None" else float(v), t[f"{tag}.label"], f"store (run {runs[0].info.run_id})",
                     None if spread is None else (float(spread[0]), float(spread[1])))
    except (KeyError, ValueError):
        return None
    _CACHE[k] = fig
    return fig


def record(sink: Any, tag: str, k: str, fig: Figure) -> None:
    _CACHE.setdefault(k, dataclasses.replace(fig, source="computed"))
    sink.set_tags({f"{tag}.time_to_target_s": repr(fig.time_to_target_s), f"{tag}.label": fig.label,
                   f"{tag}.source": fig.source}
                  | ({f"{tag}.spread_s": json.dumps(list(fig.spread))} if fig.spread is not None else {}))
    sink.set_tags({f"{tag}.key": k})          # last: a run with the key has the whole figure


def speed_changes(opts: SyncOptions) -> list[tuple[int, float, float]]:
    return [(ch.worker, ch.at_s, ch.speed) for ch in opts.hardware.speed_changes]


def cluster_key(opts: SyncOptions, ctx: Any) -> list[Any]:
    ds = ctx.dataset
    hw = opts.hardware
    return [list(opts.speeds), opts.network, hw.stragglers.probability, hw.stragglers.slowdown, speed_changes(opts),
            str(getattr(ctx.model, "name", "?")), f"{getattr(ds, 'source', '?')}:{len(ds.y_train)}:{len(ds.y_test)}",
            sorted((ctx.worker_step_time_s or {}).items())]
