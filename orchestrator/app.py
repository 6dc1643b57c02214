"""The Hydra entry point: ``python -m orchestrator [overrides]`` runs one trial (or, with ``-m``, a
sweep). Errors a user can cause print one line and exit non-zero; nothing here imports TensorFlow."""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import warnings
from pathlib import Path

from orchestrator.errors import Interrupt, UserError
from orchestrator.tracking.store import PARENT_ENV, disable_telemetry

GROUPS = ("placer", "sync", "planner", "hardware", "model", "dataset", "experiment")


def _group_options() -> dict[str, set[str]]:
    """Options of each config group: the packaged ones and those plugins put on the search path."""
    from importlib import resources

    from orchestrator.plugins import config_searchpath

    roots = [Path(str(resources.files("orchestrator_conf")))]
    for entry in config_searchpath():
        if entry.startswith("pkg://"):
            module = entry[len("pkg://"):].replace("/", ".")
            try:
                roots.append(Path(str(resources.files(module))))
            except ModuleNotFoundError:
                continue
        elif entry.startswith("file://"):
            roots.append(Path(entry[len("file://"):]))
    out: dict[str, set[str]] = {g: set() for g in GROUPS}
    for root in roots:
        for g in GROUPS:
            d = root / g
            if d.is_dir():
                out[g].update(p.stem for p in d.glob("*.yaml"))
    return out


def precheck(argv: list[str]) -> list[str]:
    """Reject unknown config-group options with one line; fill in sweep defaults. Returns argv."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise UserError(f"malformed override: {str(exc).splitlines()[0]}") from None
    options = None
    direction = "maximize"
    has_optuna = has_direction = False
    for ov in parsed:
        key = ov.key_or_group
        if key == "objective.direction":
            direction = str(ov.value())
        if key == "hydra/sweeper" and ov.value() == "optuna":
            has_optuna = True
        if key == "hydra.sweeper.direction":
            has_direction = True
        if key not in GROUPS or ov.is_delete():
            continue
        options = options or _group_options()
        values = list(ov.sweep_string_iterator()) if ov.is_sweep_override() else [ov.value()]
        for v in values:
            if v is None:
                continue
            if str(v) not in options[key]:
                raise UserError(f"unknown {key} {str(v)!r} (available: {', '.join(sorted(options[key])) or 'none'})")
    if has_optuna and not has_direction:
        argv = [*argv, f"hydra.sweeper.direction={direction}"]
    own = [(o, ov) for o, ov in zip(overrides, parsed) if not o.lstrip("+~").startswith("hydra")]
    flags = [a.split("=", 1)[0] for a in argv if a.startswith("-")]
    if not flags or (set(flags) <= {"--cfg", "-c", "--resolve"} and not any(a in ("-m", "--multirun") for a in argv)):
        _compose_check([o for o, _ in own])      # a trial, or the config it would print (--cfg job): checked alike
    elif any(a in ("-m", "--multirun") for a in argv):
        from orchestrator.config.sweep_keys import SWEEP_KEYS_ENV, sweep_wide

        wide = sweep_wide([o for o, ov in own if not ov.is_sweep_override()], GROUPS,   # for the options that have it
                          {ov.key_or_group for _, ov in own if ov.is_sweep_override() and ov.key_or_group in GROUPS})
        if wide:
            os.environ[SWEEP_KEYS_ENV] = ",".join(o.split("=", 1)[0] for o in wide)
            argv, own = [f"++{a}" if a in wide else a for a in argv], [(f"++{o}" if o in wide else o, ov) for o, ov in own]
        _sweep_check(own, [o for o in overrides if o.lstrip("+~").startswith("hydra")])
        argv = _optuna_resume(argv, [o for o, ov in zip(overrides, parsed) if not ov.is_sweep_override()])
        argv = _swept_group_keys(argv, parsed)
    return argv


def _swept_group_keys(argv: list[str], parsed: list) -> list[str]:
    """In a sweep over an optional group (``+placer=greedy,rl``), its keys given once (``placer.reward=simulated``)
    become ``++placer.reward=...``: Hydra composes the sweep's own config without the group, where a plain key
    of it does not exist (each trial's config has the group and takes the key as given)."""
    swept = {ov.key_or_group for ov in parsed if ov.is_sweep_override() and ov.key_or_group in GROUPS
             and ov.input_line.startswith("+") and not ov.input_line.startswith("++")}
    return [f"++{a}" if a.split(".", 1)[0] in swept and "=" in a and not a.startswith(("+", "~")) else a for a in argv]


_STUDY: dict[str, str] = {}  # the Optuna study of this sweep, if stored: its RUNNING trials fail on an interrupt


def _optuna_resume(argv: list[str], overrides: list[str]) -> list[str]:
    """An Optuna sweep on a stored study resumes it: trials left RUNNING are marked FAIL, and the
    sampler's seed moves on by the study's trial count, so the re-run proposes new points."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    try:
        with initialize_config_module("orchestrator_conf", version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
    except Exception:  # Hydra itself reports a bad sweep config when it runs
        return argv
    finally:
        GlobalHydra.instance().clear()
    sweeper = cfg.hydra.sweeper
    if "optuna" not in str(sweeper.get("_target_", "")) or not sweeper.get("storage"):
        return argv
    from orchestrator.tracking.sweep import resume_optuna

    _STUDY.update(storage=str(sweeper.storage), name=str(sweeper.study_name))
    import json

    from orchestrator.tracking.sweep import STUDY_ENV

    os.environ[STUDY_ENV] = json.dumps([_STUDY["storage"], _STUDY["name"]])  # trials note their values
    try:
        done = resume_optuna(str(sweeper.storage), str(sweeper.study_name))
    except Exception as exc:
        raise UserError(f"hydra.sweeper.storage={sweeper.storage}: cannot open the Optuna study ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    seed = (sweeper.get("sampler") or {}).get("seed")
    if done and seed is not None:
        print(f"resuming Optuna study {sweeper.study_name!r} ({done} trial{'s' * (done != 1)} stored): sampler seed {seed} -> {int(seed) + done}",
              file=sys.stderr, flush=True)
        argv = [a for a in argv if not a.startswith("hydra.sweeper.sampler.seed=")]
        argv.append(f"hydra.sweeper.sampler.seed={int(seed) + done}")
    return argv


def _compose_check(overrides: list[str], hydra: list[str] = ()):
    """Compose the config before Hydra runs and hold it to its schemas (``orchestrator.config``):
    a wrong type, range, choice or key is one line, and exit 2, before any run or output directory. ``hydra``:
    the command line's own ``hydra...`` overrides, composed into Hydra's config (an unknown sweeper or key of it)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from orchestrator.config import describe, validate
    from orchestrator.config.sweep_keys import drop_foreign

    try:
        with initialize_config_module("orchestrator_conf", version_base="1.3"):
            if hydra:
                compose("config", overrides=[*overrides, *hydra], return_hydra_config=True)
            cfg = compose("config", overrides=overrides)
        drop_foreign(cfg, GROUPS)          # a sweep-wide key of a group, where this option lacks it
        validate(cfg)
        return cfg
    except UserError:
        raise
    except Exception as exc:  # Hydra's and OmegaConf's errors: config a user wrote
        known = describe(exc)
        if known is not None:
            raise UserError(known) from None
        text = (f"{exc}\n{exc.__cause__}" if exc.__cause__ is not None else str(exc)).split("\nConfig search path")[0]
        optional = re.search(r"Could not override '(\w+)'\. No match in the defaults list", text)
        if optional:
            group = optional.group(1)
            given = next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{group}=")), "NAME")
            raise UserError(f"{group} is an optional group, not in the defaults: add it with a '+' "
                            f"(+{group}={given})") from None
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("full_key", "object_type", "To append"))]
        raise UserError(" ".join(lines) or type(exc).__name__) from None
    finally:
        GlobalHydra.instance().clear()


def _sweep_check(overrides: list, hydra: list[str] = ()) -> None:
    """A sweep's command line, checked before Hydra launches it: the fixed overrides, then each value
    of each swept key (``placer.budget_evaluations=100,-5``) on that config, so a bad value is one
    line and no sweep starts. A swept group (``placer=greedy,rl``) is composed once per option.
    Sweeps Hydra expands itself (``interval(...)``, recipes' sweeper params) are checked per trial
    (``Trial`` validates its config before its run starts)."""
    import copy

    from omegaconf import OmegaConf

    from orchestrator.config import describe, validate

    fixed = [o for o, ov in overrides if not ov.is_sweep_override()]
    swept = [(o.split("=", 1)[0], ov) for o, ov in overrides if ov.is_sweep_override()]
    groups = [(p, ov) for p, ov in swept if ov.key_or_group in GROUPS or p[0] in "+~"]
    keys = [(p, ov) for p, ov in swept if (p, ov) not in groups]
    try:
        options = [[f"{p}={v}" for v in ov.sweep_string_iterator()] for p, ov in groups]
    except Exception:
        return
    first = _compose_check(fixed + [o[0] for o in options if o], hydra)    # Hydra's own keys too (hydra.sweeper...)
    try:
        values = [list(ov.sweep_iterator()) for _, ov in keys]
    except Exception:  # a sweep Hydra enumerates itself (interval, ...): its values are checked per trial, its key here
        for p, ov in keys:
            if p[0] not in "+~" and OmegaConf.select(first, ov.key_or_group, default="<missing>") == "<missing>":
                raise UserError(f"{ov.key_or_group}: no such key to sweep (a new key takes a '+')") from None
        return
    bases = [fixed + [o[0] for o in options]]      # each option of each swept group, the others' first
    for i, opts in enumerate(options):
        bases += [fixed + [o[0] for o in options[:i]] + [v] + [o[0] for o in options[i + 1:]] for v in opts[1:]]
    for i, base in enumerate(bases):
        cfg = first if i == 0 else _compose_check(base)     # the first base is the config composed above
        trial = copy.deepcopy(cfg)
        for (_, ov), vals in zip(keys, values):
            key = ov.key_or_group
            for v in vals:
                try:
                    OmegaConf.update(trial, key, v, merge=False)
                except Exception as exc:  # a wrong type or a key the config lacks
                    raise UserError(describe(exc) or f"{key}={v!r}: {str(exc).splitlines()[0]}") from None
                validate(trial)
            OmegaConf.update(trial, key, OmegaConf.select(cfg, key), merge=False)


def _task(cfg) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from orchestrator.errors import WorkerFailedError
    from orchestrator.trial import Trial

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        if multirun:
            from orchestrator.tracking.sweep import claim_trial

            try:
                claim_trial(cfg)
            except Exception as exc:  # the study is a convenience for resuming; the trial still runs
                print(f"could not claim the Optuna trial: {type(exc).__name__}: {exc}", file=sys.stderr)
        trial = Trial(cfg, Path(hc.runtime.output_dir))
        value = trial.run()
        from orchestrator.summary import trial_summary

        print(trial_summary(trial.outcome, trial.objective_metric, value), flush=True)
        return value
    except (UserError, WorkerFailedError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        if multirun:  # the sweep goes on; this trial's run is marked FAILED
            _record_failure(cfg, exc)
            return math.nan
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted: a trial run that had started is marked KILLED", file=sys.stderr, flush=True)
        from orchestrator.tracking.slurm import trial_is_job

        if multirun and trial_is_job():  # a sweep's trial as a Slurm job: the sweep goes on, counts it killed
            return math.nan
        raise
    except Exception as exc:
        Interrupt.check(exc)
        plugin = _plugin_failure(exc, Path(hc.runtime.output_dir))
        if multirun:
            if plugin is None:
                import traceback

                traceback.print_exc()
            print(f"error: trial failed: {plugin or f'{type(exc).__name__}: {exc}'}", file=sys.stderr, flush=True)
            _record_failure(cfg, exc)
            return math.nan
        if plugin is None:
            raise
        print(f"error: {plugin}", file=sys.stderr, flush=True)
        sys.exit(1)


def _plugin_failure(exc: BaseException, out_dir: Path) -> str | None:
    """A third-party plugin's exception in one line, its traceback saved in the trial's output folder; None
    when no plugin's code raised it (the tool's own bug: its traceback is printed as it is)."""
    import traceback

    from orchestrator.plugins import culprit

    where = culprit(exc)
    if where is None:
        return None
    saved = out_dir / "traceback.txt"
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text("".join(traceback.format_exception(exc)))
    except OSError:
        return " ".join(where.split())[:600]
    return " ".join(f"{where}; the traceback is in {saved}".split())[:900]


def _record_failure(cfg, exc: BaseException) -> None:
    """Give a sweep trial that failed before its run started a FAILED run (if it has none)."""
    from orchestrator.phases.setup import sweep_suffix
    from orchestrator.tracking import store as tracking

    if getattr(exc, "run_recorded", False):
        return
    choices = {g: (cfg.get(g) or {}).get("name", "none") if cfg.get(g) is not None else "none"
               for g in ("placer", "sync", "hardware", "model", "planner")}
    planner = choices.pop("planner")
    name = "/".join(choices.values()) if planner == "none" else f"plan:{planner}/{choices['hardware']}/{choices['model']}"
    if planner != "none":                  # a plan trial: its sweep's plan table and verdict hold it
        choices.update(planner=planner, runtime="plan")
    try:
        tracking.record_failed_trial(cfg, (name + sweep_suffix())[:250], choices, f"{type(exc).__name__}: {exc}")
    except Exception as store_exc:  # the store itself may be what failed
        print(f"error: could not record the failed trial: {store_exc}", file=sys.stderr)


def _kill_parent_run(attempts: int = 5) -> None:
    """Close an interrupted sweep's parent run KILLED. A trial's process may still hold the store (a
    SQLite file is locked while it closes its own run), so a failed attempt is retried; if every attempt
    fails, one line says so (the next trial or report on the store marks it FAILED, abandoned)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    import time

    from mlflow.tracking import MlflowClient

    error: Exception | None = None
    for attempt in range(attempts):
        try:
            client = MlflowClient()
            client.set_terminated(parent, status="KILLED")
            if client.get_run(parent).info.status == "KILLED":
                return
        except Exception as exc:  # a locked or busy store: try again shortly
            error = exc
        time.sleep(0.1 * (attempt + 1))        # 1.5 s at most: a scheduler's SIGKILL follows its SIGTERM
    print(f"error: could not mark the sweep's parent run {parent} KILLED: {error}", file=sys.stderr, flush=True)


def main() -> None:
    # We ask for 1.3 semantics on purpose (the config's defaults rely on them).
    warnings.filterwarnings("ignore", message=r"(?s).*version_base parameter is deprecated")
    # Our own callback is the only _target_ instantiated from config by Hydra here.
    warnings.filterwarnings("ignore", message=r"(?s).*_execution_whitelist_")
    disable_telemetry()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    signal.signal(signal.SIGTERM, Interrupt.handle)
    signal.signal(signal.SIGINT, Interrupt.handle)
    try:
        from orchestrator.plugins import entries

        entries()                    # a broken plugin registration: one line here, not Hydra's traceback (--help too)
        sys.argv = [sys.argv[0], *precheck(sys.argv[1:])]
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)

    import hydra

    @hydra.main(config_path="pkg://orchestrator_conf", config_name="config", version_base="1.3")
    def _hydra_main(cfg) -> float:
        return _task(cfg)

    from orchestrator.tracking.sweep import OUTCOME, guard_optuna_best_trial

    if {"-m", "--multirun"} & set(sys.argv[1:]):
        guard_optuna_best_trial()
    try:
        _hydra_main()
    except (KeyboardInterrupt, SystemExit) as exc:
        # A signal that cut into Hydra's or OmegaConf's own code (composing the next trial) can surface as another
        # error, which Hydra reports and turns into exit 1: with a signal received, the sweep ends as interrupted.
        if isinstance(exc, SystemExit) and Interrupt.signal is None:
            raise
        if _STUDY:  # first: what a resumed sweep depends on (a scheduler's SIGKILL may follow soon)
            try:
                from orchestrator.tracking.sweep import resume_optuna

                resume_optuna(_STUDY["storage"], _STUDY["name"], interrupted_here=True)  # FAIL, not RUNNING
            except Exception:
                pass
        _kill_parent_run()
        sys.exit(Interrupt.exit_code())  # 130 for Ctrl-C, 143 for SIGTERM
    if OUTCOME.get("empty"):
        sys.exit(2)  # a sweep without a trial (the error line is printed)
    if OUTCOME.get("failed") or OUTCOME.get("no_value"):
        sys.exit(1)  # a sweep with a failed trial (the summary line is printed)
