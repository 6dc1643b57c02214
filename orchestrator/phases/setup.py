"""What a trial resolves before anything runs: the option chosen in each config group and the plugin
behind it (a bad name costs no MLflow run), the plugins built from their groups, the typed dataset
group and the training settings it completes, and the data set, loaded on first use."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator import plugins
from orchestrator.config import from_node, schema_of, validate
from orchestrator.config.model import MNISTDatasetConfig
from orchestrator.config.root import ObjectiveConfig, PlacementConfig
from orchestrator.errors import ConfigError, PluginError, number

GROUPS = ("placer", "sync", "hardware", "model", "planner")


def _choices() -> dict[str, str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}
    except Exception:  # not running under Hydra (tests, API use)
        return {}


def sweep_suffix() -> str:
    """In a sweep, `` #N [overrides]``: the job number and this trial's overrides that are not group
    choices (those are in the name), so that the trials of a sweep have different run names."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return ""
        task, num = list(hc.overrides.task), hc.job.get("num")
    except Exception:
        return ""
    groups = ("placer=", "sync=", "planner=", "hardware=", "model=", "experiment=", "dataset=")
    bookkeeping = ("tracking.", "progress=", "hydra.")       # where the run is recorded, not what it runs
    # what the command line gave every trial alike is not what tells them apart (model.path=<a long path> made names
    # 330 characters wide): only the swept keys' values, a path by its file name
    import sys

    alike = _fixed_keys(sys.argv[1:])
    varied = [_short(o) for o in task if not o.lstrip("+").startswith(groups + bookkeeping) and _key(o) not in alike]
    return (f" #{num}" if num is not None else "") + (f" [{' '.join(varied)}]"[:160] if varied else "")


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def _fixed_keys(args: list[str]) -> set[str]:
    """The keys the command line sets to one value for every trial, as Hydra's parser reads them (a list value
    such as ``speeds=[1,0.5]`` is one value; ``a=1,2``, ``range(..)``, ``choice(..)``, ``glob(..)`` sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), set()
    for a in args:
        try:
            if "=" in a and not parser.parse_overrides([a])[0].is_sweep_override():
                out.add(_key(a))
        except Exception:       # what Hydra cannot parse it has refused already; never let it name a run
            continue
    return out


def _short(override: str) -> str:
    key, _, value = override.partition("=")
    return f"{key}={value.rsplit('/', 1)[-1]}" if "/" in value else override


def _name(cfg: DictConfig, group: str) -> str | None:
    node = cfg.get(group)
    if node is None:
        return None
    if not isinstance(node, DictConfig) or "name" not in node:
        raise ConfigError(f"config group {group!r} has no 'name' (got {OmegaConf.to_yaml(node).strip()[:80]!r})")
    # an option whose 'name' means something else (model=llm: the model in the profile files) names
    # its plugin under 'plugin'
    return str(node.get("plugin") or node.name)


def group_names(cfg: DictConfig) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(plugin name, label) of each group. The option a user picked (hardware=sim_1cpu_4gpu) says more
    than the plugin behind it (simulated): tags and run names use the option where Hydra knows it."""
    names = {g: _name(cfg, g) for g in GROUPS}
    labels = dict(names)
    labels.update({g: c for g, c in _choices().items() if g in labels and c and names.get(g)})
    if names["hardware"] is None or names["model"] is None:
        raise ConfigError("the config needs a hardware and a model group")
    return names, labels


@dataclasses.dataclass(frozen=True)
class PluginClasses:
    hardware: Any
    model: Any
    placer: Any
    sync: Any
    planner: Any


def load_plugins(names: dict[str, str | None]) -> PluginClasses:
    """Every plugin the trial names, resolved before anything starts, and the combinations refused."""
    from orchestrator.sync.strategy import SyncStrategy

    def optional(kind: str) -> Any:
        name = names[kind]
        return plugins.load(kind, name) if name else None

    loaded = PluginClasses(plugins.load("hardware", names["hardware"]), plugins.load("model", names["model"]),
                           optional("placer"), optional("sync"), optional("planner"))
    if loaded.planner is not None and (loaded.placer is not None or loaded.sync is not None):
        raise ConfigError("+planner= plans a whole cluster (placement and data parallelism in one plan): "
                          "drop +placer= and +sync= from a planning trial")
    if loaded.sync is not None and not (isinstance(loaded.sync, type) and issubclass(loaded.sync, SyncStrategy)):
        raise PluginError(f"sync strategy {names['sync']!r} ({loaded.sync!r}) is not a subclass of "
                          "orchestrator.api.CollectiveStrategy or ServerStrategy")
    return loaded


@dataclasses.dataclass(frozen=True)
class Groups:
    """The trial's own groups, each validated once into its object where the trial starts (the plugins'
    groups are their plugins' to read): the training settings (``train``, completed by the dataset's
    target, cadence and budget), the ``dataset``, ``placement`` and ``objective`` groups, and ``progress``."""

    settings: Any                     # execution.training.TrainSettings
    dataset: MNISTDatasetConfig
    placement: PlacementConfig
    objective_metric: str
    direction: str
    show_progress: bool


def validated(cfg: DictConfig, classes: PluginClasses) -> Groups:
    """Every typed key of ``cfg`` checked (type, range, choices, no unknown key: one line, before any run),
    then each group the trial reads as its object."""
    from orchestrator.config.sweep_keys import drop_foreign
    from orchestrator.execution.training import TrainSettings
    from orchestrator.progress import enabled as progress_enabled

    for note in drop_foreign(cfg, GROUPS):             # a sweep-wide key of a group this trial's option lacks
        print(note, flush=True)
    validate(cfg)
    settings = TrainSettings.from_cfg(cfg.get("train"), seed=cfg.get("seed"))
    if classes.sync is not None:
        from orchestrator.sync.reference import check_grid

        check_grid((cfg.get("train") or {}).get("reference_grid"))
        other = (cfg.get("train") or {}).get("compare_with")
        if other and str(other) not in plugins.names("sync"):            # before the training, not after it
            raise ConfigError(f"train.compare_with={other!r}: unknown sync strategy (available: "
                              f"{', '.join(plugins.names('sync'))}; null: no comparison)")
    objective = from_node(ObjectiveConfig, cfg.get("objective"), "objective")
    metric = objective.metric
    if classes.planner is not None and metric == "speedup":   # the default: a plan's own figure
        metric = "plan.samples_per_s"
    show_progress = progress_enabled(cfg.get("progress", "auto"))
    ds = dataset_config(cfg)   # null / auto train.*: the dataset's target, cadence and budget
    settings = with_dataset_defaults(settings, cfg.get("train"), ds)
    placement = from_node(PlacementConfig, cfg.get("placement"), "placement")
    return Groups(settings, ds, placement, metric, objective.direction, show_progress)


def build(group: str, cls: Any, cfg: DictConfig) -> Any:
    """A plugin built from its config group (None when the group has no plugin). Its values were checked
    against its schema (``orchestrator.config.validate``) before; a plugin without a schema that cannot
    convert a value (``float('abc')``) is still a one-line ``ConfigError``, naming the group."""
    if cls is None:
        return None
    node = cfg.get(group)
    try:
        return cls(node)
    except (ValueError, TypeError) as exc:
        name = node.get("name") if isinstance(node, DictConfig) else None
        raise ConfigError(f"{group}={name}: a {group}.* value cannot be used by its plugin "
                          f"({str(exc).splitlines()[0][:200]})") from None


def dataset_config(cfg: DictConfig) -> MNISTDatasetConfig:
    """The trial's ``dataset`` group, typed: MNIST-format IDX files (MNIST, Fashion-MNIST)."""
    node = cfg.get("dataset")
    typed = schema_of(node)
    return from_node(typed if typed is not None and issubclass(typed, MNISTDatasetConfig) else MNISTDatasetConfig,
                     node, "dataset")


def with_dataset_defaults(settings: Any, train: Any, ds: MNISTDatasetConfig) -> Any:
    """The training settings with the dataset's target, cadence and budget where ``train`` leaves them
    null / auto."""
    raw = train or {}
    from_dataset = {"target_accuracy": float(ds.target_accuracy) if raw.get("target_accuracy") is None else None,
                    "eval_every": int(ds.eval_every) if raw.get("eval_every") is None else None,
                    "budget_updates": int(ds.budget_updates) if raw.get("budget_updates", "auto") == "auto" else None}
    return dataclasses.replace(settings, **{k: v for k, v in from_dataset.items() if v is not None})


class LazyDataset:
    """The trial's data set, loaded on the first call (a trial that only places a cost graph never loads it)."""

    def __init__(self, ds: MNISTDatasetConfig, cfg: DictConfig) -> None:
        self.ds, self.cfg = ds, cfg
        self.loaded: Any = None

    def __call__(self) -> Any:
        if self.loaded is None:
            from orchestrator.data import load_mnist

            ds = self.ds
            self.loaded = load_mnist(ds.path, seed=number(self.cfg.get("seed", 0), "seed", int),
                                     test_fraction=ds.test_fraction, limit=ds.limit)
        return self.loaded
