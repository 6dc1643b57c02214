"""A layered profile of a model: per layer, GPU type, micro-batch size and tensor-parallel degree, the
forward, backward and optimizer-update seconds; per layer and TP degree, the parameters one GPU holds, the
activation sent to the next stage and the activation memory kept per sample for the backward pass.

Read from a directory laid out like Sailor's public data (``profiles_tmp.json``, ``llm_info.json``,
``cluster/training_config_*.json``), for any model and GPU type those files hold; or derived from one of
the project's layer graphs and device profiles (``orchestrator.plan.derived.layered_profile``). A missing entry is an
error naming it, never a silent zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, WorkloadError
from orchestrator.hardware.units import parse_whole
from orchestrator.paths import read_json


class ProfileMissing(WorkloadError):
    """The profile has no entry for a (model, GPU type, micro-batch size, TP degree)."""


@dataclass(frozen=True)
class LayerSizes:
    """Per layer, for one TP degree: floats of the parameters one GPU holds, of the output activation
    (what a stage boundary sends per sample), and of the activation memory kept per sample."""

    params: tuple[float, ...]
    act_output: tuple[float, ...]
    act_mem: tuple[float, ...]
    transient: float = 0.0      # floats per sample a stage holds once beyond act_mem (the recomputed block's activations)


@dataclass
class LayeredProfile:
    model: str
    num_layers: int
    # times[gpu][mbs][tp] = ((fwd_s, bwd_s, update_s) per layer)
    times: dict[str, dict[int, dict[int, tuple[tuple[float, float, float], ...]]]]
    sizes: dict[int, LayerSizes]                     # per TP degree
    global_batch: int | None = None
    optimizer: str = "adam"
    float_bytes: int = 4                             # fp32 training (Sailor's published runs)
    hidden: int | None = None
    sequence: int | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    act_bytes: int | None = None                     # mixed precision: bytes of an activation (2), else float_bytes

    @property
    def act_float_bytes(self) -> int:
        """Bytes of one activation element (the sends between stages, activation memory, TP all-reduces): 2 under
        mixed precision (``plan.derive.at_precision``), else ``float_bytes``. Parameters, gradients, their
        all-reduce and the optimizer stay in ``float_bytes`` (fp32 master weights, as automatic mixed precision
        keeps them)."""
        return self.act_bytes or self.float_bytes

    @property
    def precision(self) -> str:
        """The precision of the layer times: as measured (``fp32`` for the shared profiles and this project's
        profiler) unless ``plan.derive.at_precision`` derived them for another."""
        return str((self.extra or {}).get("precision", "fp32"))

    @property
    def recompute(self) -> bool:
        """Whether the decoder blocks recompute their activations (``plan.derive.with_recompute``)."""
        return bool((self.extra or {}).get("recompute", False))

    # -- lookups ----------------------------------------------------------------------------------
    @property
    def gpu_types(self) -> list[str]:
        return sorted(self.times)

    def has(self, gpu: str, mbs: int, tp: int) -> bool:
        return tp in self.times.get(gpu, {}).get(mbs, {}) and tp in self.sizes

    def layer_times(self, gpu: str, mbs: int, tp: int) -> tuple[tuple[float, float, float], ...]:
        try:
            return self.times[gpu][mbs][tp]
        except KeyError:
            if gpu not in self.times:
                raise ProfileMissing(f"model {self.model} has no profile on GPU type {gpu!r} "
                                     f"(profiled: {', '.join(self.gpu_types) or 'none'})") from None
            if mbs not in self.times[gpu]:
                raise ProfileMissing(f"model {self.model} on {gpu}: no profile at micro-batch size {mbs} "
                                     f"(profiled: {sorted(self.times[gpu])})") from None
            raise ProfileMissing(f"model {self.model} on {gpu}, micro-batch {mbs}: no profile at TP degree {tp} "
                                 f"(profiled: {sorted(self.times[gpu][mbs])})") from None

    def layer_sizes(self, tp: int) -> LayerSizes:
        if tp not in self.sizes:
            raise ProfileMissing(f"model {self.model}: no layer sizes at TP degree {tp} (known: {sorted(self.sizes)})")
        return self.sizes[tp]

    def tp_allreduce_bytes(self, mbs: int) -> float:
        """Bytes of one tensor-parallel all-reduce of a layer's output: mbs x sequence x hidden x activation float."""
        if not self.hidden or not self.sequence:
            raise ProfileMissing(f"model {self.model}: a TP group across machines needs hidden_size and sequence_length "
                                 "(the training config)")
        return float(mbs * self.sequence * self.hidden * self.act_float_bytes)

    def transient_bytes(self, tp: int, mbs: int) -> float:
        """Bytes a stage holds once beyond its activations in flight: under recomputation, the block being
        recomputed (``LayerSizes.transient``); 0 otherwise. Both simulators' memory rules add it."""
        return self.layer_sizes(tp).transient * mbs * self.act_float_bytes

    def tp_allreduces(self, layer: int) -> int:
        """Megatron's all-reduces per micro-batch of one layer under TP (forward and backward): 2 for the
        embedding, 4 for a transformer block (attention and MLP, each way), 0 for the head."""
        if layer == 0:
            return 2
        return 4 if layer < self.num_layers - 1 else 0

    def micro_batches(self, gpu: str) -> list[int]:
        return sorted(self.times.get(gpu, {}))

    def tp_degrees(self, gpu: str, mbs: int) -> list[int]:
        return sorted(t for t in self.times.get(gpu, {}).get(mbs, {}) if t in self.sizes)

    # -- readers ----------------------------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | Path, model: str) -> LayeredProfile:
        """``model`` from a directory laid out like ``shared/workloads/sailor``."""
        root = Path(path)
        if not root.is_dir():
            raise ConfigError(f"model.data={str(path)!r} is not a directory")
        profiles = read_json(root / "profiles_tmp.json", top=dict)
        info = read_json(root / "llm_info.json", top=dict)
        if model not in profiles or model not in info:
            known = sorted(set(profiles) & set(info))
            raise ConfigError(f"unknown model.name {model!r} in {root} (profiled: {', '.join(known) or 'none'})")
        sizes: dict[int, LayerSizes] = {}
        num_layers = None
        for tp, layers in _mapping(info[model], root / "llm_info.json", model, "{tp: {layer: sizes}}").items():
            try:
                ids = sorted(int(k) for k in layers)
                rows = [layers[str(i)] for i in ids]
                sizes[int(tp)] = LayerSizes(tuple(float(r["params_floats"]) for r in rows),
                                            tuple(float(r["act_output_floats"]) for r in rows),
                                            tuple(float(r["act_mem_floats"]) for r in rows))
            except (KeyError, TypeError, ValueError, AttributeError):
                raise WorkloadError(f"{root / 'llm_info.json'}: {model} at TP {tp}: every layer needs params_floats, "
                                    "act_output_floats and act_mem_floats") from None
            bad_size = next((x for sz in (sizes[int(tp)].params, sizes[int(tp)].act_output, sizes[int(tp)].act_mem) for x in sz
                        if not (math.isfinite(x) and x >= 0)), None)
            if bad_size is not None:
                raise WorkloadError(f"{root / 'llm_info.json'}: {model} at TP {tp}: {bad_size!r} floats (every size must be a "
                                    "finite number >= 0)")
            if not ids or ids != list(range(len(ids))):
                raise WorkloadError(f"{root / 'llm_info.json'}: {model} at TP {tp}: layers must be 0..L-1, got {ids[:5]}...")
            num_layers = len(ids) if num_layers is None else num_layers
            if len(ids) != num_layers:
                raise WorkloadError(f"{root / 'llm_info.json'}: {model}: TP {tp} has {len(ids)} layers, not {num_layers}")
        times: dict[str, dict[int, dict[int, tuple[tuple[float, float, float], ...]]]] = {}
        where = root / "profiles_tmp.json"
        for gpu, per_mbs in _mapping(profiles[model], where, model, "{gpu: {mbs: {tp: layers}}}").items():
            for mbs, per_tp in _mapping(per_mbs, where, f"{model} on {gpu}", "{mbs: {tp: layers}}").items():
                for tp, layers in _mapping(per_tp, where, f"{model} on {gpu}, mbs {mbs}", "{tp: layers}").items():
                    if isinstance(layers, dict) and len(layers) != num_layers:
                        raise WorkloadError(f"{where}: {model} on {gpu}, mbs {mbs}, TP {tp}: {len(layers)} layers, where "
                                            f"llm_info.json has {num_layers} (a profile of another shape under this name?)")
                    try:
                        key = int(mbs), int(tp)
                        rows = tuple(tuple(float(x) for x in layers[str(i)][:3]) for i in range(num_layers or 0))
                    except (KeyError, TypeError, ValueError):
                        raise WorkloadError(f"{root / 'profiles_tmp.json'}: {model} on {gpu}, mbs {mbs}, TP {tp}: "
                                            f"needs whole-number keys and [fwd, bwd, update] for each of its {num_layers} "
                                            "layers") from None
                    if any(len(r) != 3 for r in rows):
                        raise WorkloadError(f"{root / 'profiles_tmp.json'}: {model} on {gpu}, mbs {mbs}, TP {tp}: "
                                            "each layer needs [fwd_s, bwd_s, update_s]")
                    bad = next(((i, x) for i, r in enumerate(rows) for x in r if not (math.isfinite(x) and x >= 0)), None)
                    if bad is not None:
                        raise WorkloadError(f"{root / 'profiles_tmp.json'}: {model} on {gpu}, mbs {mbs}, TP {tp}, layer "
                                            f"{bad[0]}: {bad[1]!r} seconds (every entry must be a finite number >= 0)")
                    times.setdefault(gpu, {}).setdefault(key[0], {})[key[1]] = rows  # type: ignore[assignment]
        train_path, train = _training_config(root, model)
        whole = {k: parse_whole(train[k], f"{train_path}: {k}", 1, WorkloadError)
                 for k in ("global_batch_size", "hidden_size", "sequence_length") if k in train}
        return cls(model=model, num_layers=int(num_layers or 0), times=times, sizes=sizes,
                   global_batch=whole.get("global_batch_size"), optimizer=str(train.get("optimizer", "adam")).lower(),
                   hidden=whole.get("hidden_size"), sequence=whole.get("sequence_length"),
                   source=str(root), extra={"training_config": train})


def _mapping(value: Any, path: Path, what: str, shape: str) -> dict:
    if not isinstance(value, dict):
        raise WorkloadError(f"{path}: {what} needs a mapping {shape}, got {type(value).__name__}")
    return value


def _training_config(root: Path, model: str) -> tuple[Path | None, dict[str, Any]]:
    """The ``cluster/training_config_*.json`` whose ``model`` is ``model``, and its path ((None, {}) when none)."""
    for p in sorted((root / "cluster").glob("training_config_*.json")):
        doc = read_json(p, top=dict)
        if doc.get("model") == model:
            return p, doc
    return None, {}
