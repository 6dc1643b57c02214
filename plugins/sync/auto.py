"""``+sync=auto``: the strategy the measured regime map says wins on the trial's hardware (issue 44 item 7).

Where the trial checks its strategy (``check_config``, before any run), the regime of the validated hardware
group is placed on the map (``orchestrator.sync.regimes``); the chosen strategy is built from the sync group the
map measured it with (the user's own ``sync.*`` keys kept), the trial's config takes that group and the cell's
tuned ``train.lr``, and this object becomes that strategy: from there on the trial runs it exactly as
``+sync=<winner>`` would. The regime is read from the hardware config, not probed: on a real runtime
(``sync.runtime=mpi``) the line says so."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from orchestrator import plugins
from orchestrator.config import plain
from orchestrator.sync.core import SyncOptions
from orchestrator.sync.regimes import Choice, Regime, choose, regime_of
from orchestrator.sync.strategy import SyncStrategy
from orchestrator_plugins.sync.config import AutoSyncConfig

OWN_KEYS = ("name", "lr")     # AutoSyncConfig's own keys, not carried to the chosen strategy


def lr_on_command_line() -> bool:
    """Whether ``train.lr`` is among the Hydra run's overrides (False outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        task = list(HydraConfig.get().overrides.task)
    except Exception:
        return False
    return any(o.lstrip("+~").startswith("train.lr=") for o in task)


def decide(cfg: Any) -> tuple[Regime, Choice]:
    """The trial's regime and the map's choice for it (the dataset's map, else MNIST's)."""
    regime = regime_of(cfg.get("hardware"))
    dataset = str((cfg.get("dataset") or {}).get("name") or "mnist")
    return regime, choose(regime, frozenset(plugins.names("sync")), dataset)


def user_keys(config: AutoSyncConfig) -> dict:
    """The base ``sync.*`` keys the user set on ``+sync=auto`` (those that differ from the schema's defaults)."""
    default = AutoSyncConfig()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.name not in OWN_KEYS and getattr(config, f.name) != getattr(default, f.name)}


def tags(choice: Choice) -> dict[str, str]:
    return {"sync.auto.choice": choice.label, "sync.auto.cell": f"{choice.dataset}: {choice.cell['regime']}",
            "sync.auto.distance": f"{choice.distance:.4g}", "sync.auto.near": str(choice.near).lower(),
            "sync.auto.margin": "-" if choice.margin is None else f"{choice.margin:.4g}",
            "sync.auto.between": "; ".join(f"{c} ({d:.3g})" for c, d in choice.neighbours) or "-"}


class AutoSync(SyncStrategy):
    """Resolved in ``check_config`` into the chosen strategy (this instance takes its class and state); until
    then it cannot run."""

    name = "auto"
    Config = AutoSyncConfig

    def check_config(self, cfg: Any) -> SyncOptions:
        regime, choice = decide(cfg)
        node = {**choice.config, **plain(user_keys(self.config))}
        keep_lr = self.config.lr == "keep" or lr_on_command_line() or choice.entry is None
        lr = None if keep_lr else float(choice.entry["lr"])   # type: ignore[index]
        if isinstance(cfg, DictConfig):
            with open_dict(cfg):
                cfg.sync = OmegaConf.create(node)
                if lr is not None:
                    cfg.train.lr = lr
        else:
            cfg["sync"] = node
            if lr is not None:
                cfg.setdefault("train", {})["lr"] = lr
        chosen = plugins.load("sync", choice.sync)(cfg["sync"])
        runtime = str(chosen.config.runtime)
        probe = "" if runtime == "virtual" else (f" (sync.runtime={runtime}: the regime is the hardware config's; "
                                                 "a probe of the real workers is not implemented)")
        print(choice.why(regime) + ("" if lr is None else " (train.lr set to it)") + probe, flush=True)
        trial_tags = tags(choice)
        self.__class__ = type(chosen)      # from here on, the chosen strategy: +sync=<winner>'s object
        self.__dict__.clear()
        self.__dict__.update(chosen.__dict__, trial_tags=trial_tags)
        return self.check_config(cfg)

    def _unresolved(self) -> Exception:
        return RuntimeError("sync=auto runs the strategy it picks in check_config(cfg); call it first")

    def staleness_bound(self) -> float:
        raise self._unresolved()

    def samples_per_update(self, opts: SyncOptions, batch_size: int) -> float:
        raise self._unresolved()
