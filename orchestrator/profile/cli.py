"""``python -m orchestrator.profile layers|links``: the command line (arguments, one-line errors with exit 2,
the MLflow run); the measuring is ``layers`` / ``links``, the files ``writer``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from orchestrator.errors import ConfigError, Interrupt, UserError, WorkerFailedError

PROG = "python -m orchestrator.profile"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:                     # one line, exit 2 (argparse prints its usage too)
        print(f"error: {PROG}: {message}", file=sys.stderr)
        sys.exit(2)


def key_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of a model option, the value read as YAML (``64`` an int, ``[1, 2]`` a list), as Hydra would."""
    import yaml

    key, eq, value = str(text).partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not valid YAML") from None


def int_list(text: str) -> list[int]:
    try:
        out = [int(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not out or any(v < 1 for v in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every entry must be a whole number >= 1")
    return sorted(set(out))


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="directory to write (laid out like shared/workloads/sailor); a profile already there is "
                   "merged with: other models and device types kept, a model's (mbs, tp) entries not measured again kept")
    p.add_argument("--device-type", default=None,
                   help="the name the profile and the cluster give the device (default: CPU, or the GPU's name)")
    p.add_argument("--devices-per-node", type=int, default=2, help="devices of this type in one machine (cluster file)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before the timed ones")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per entry (the median is kept)")
    p.add_argument("--intra-gbps", type=float, default=10.0, help="stated GB/s inside a machine, unless a link profile measured it")
    p.add_argument("--inter-gbps", type=float, default=1.25, help="stated GB/s between machines, unless measured")
    p.add_argument("--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    p.add_argument("--experiment", default="profile", help="MLflow experiment of the run")
    p.add_argument("--progress", default="auto", choices=("auto", "true", "false"), help="a progress bar (auto: on a terminal)")


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    lay = sub.add_parser("layers", help="per layer, micro-batch and TP degree: forward, backward, update seconds")
    lay.add_argument("--model", default="gpt", help="gpt (a GPT-style decoder, sizes below), or a model of the model group "
                     "that builds a Keras model: cnn, resnet50, inception_v3, a plugin's, keras (your own, --factory)")
    lay.add_argument("--factory", default=None, help="--model keras: package.module:function returning (keras_model, "
                     "input_spec), as model.factory")
    lay.add_argument("--set", type=key_value, action="append", default=[], metavar="KEY=VALUE", dest="model_options",
                     help="a model option, as model.KEY=VALUE on a trial (resnet50: input_size=64, classes=10; a factory's "
                     "own keys); repeatable")
    lay.add_argument("--name", default=None, help="the model's name in the files (model.name=; letters, digits, - _ .; default: "
                     "gpt-L<layers>-H<hidden>, or the model's own name)")
    lay.add_argument("--layers", type=int, default=4, help="gpt: decoder blocks")
    lay.add_argument("--hidden", type=int, default=256, help="gpt: hidden size")
    lay.add_argument("--heads", type=int, default=4, help="gpt: attention heads")
    lay.add_argument("--sequence", type=int, default=128, help="gpt: tokens per sample")
    lay.add_argument("--vocab", type=int, default=2048, help="gpt: vocabulary size")
    lay.add_argument("--mbs", type=int_list, default=[1, 2, 4], help="micro-batch sizes, e.g. 1,2,4")
    lay.add_argument("--tp", type=int_list, default=None, help="tensor-parallel degrees, e.g. 1,2 (default: 1,2; "
                     "a Keras model, which has no tensor-parallel form here: 1)")
    lay.add_argument("--global-batch", type=int, default=32, help="samples per iteration (training config)")
    lay.add_argument("--statistic", default="median", choices=("median", "min"),
                     help="what the profile holds of each entry's repeats (min: the least contended run)")
    lay.add_argument("--device", default=None, help="TensorFlow device (default: /GPU:0 where TensorFlow sees one, else /CPU:0)")
    lay.add_argument("--memory-gb", type=float, default=None, help="memory per device in GiB (2**30 bytes; default: this machine's / devices per node)")
    common(lay)
    lnk = sub.add_parser("links", help="point-to-point and all-reduce seconds against message size between MPI ranks")
    lnk.add_argument("--ranks", type=int, default=2, help="MPI ranks (one per host on emulated hosts)")
    lnk.add_argument("--sizes", default="1e5,3e5,1e6,3e6,1e7,3e7", help="message bytes, comma-separated")
    lnk.add_argument("--hostfile", default=None, help="ranks on these hosts: the link between machines (inter)")
    lnk.add_argument("--netlab", default=None, metavar="RATE",
                     help="emulated hosts (root): bring up --ranks hosts at this tc rate (e.g. 200mbit), measure, take them down")
    lnk.add_argument("--timeout", type=float, default=300.0, help="seconds before the MPI job is stopped")
    common(lnk)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    made = not Path(args.out).exists()
    # SIGTERM as Ctrl-C (orchestrator.app's handler): the run ends KILLED, the MPI job and emulated hosts go
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, Interrupt.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    Interrupt.signal = None
    try:
        if args.device_type is not None:
            from orchestrator.profile.writer import check_device_type

            check_device_type(args.device_type)
        for key in ("intra_gbps", "inter_gbps"):
            if not 0 < getattr(args, key) < float("inf"):
                raise ConfigError(f"--{key.replace('_', '-')}={getattr(args, key)}: must be a number > 0")
        for key in ("devices_per_node", "warmup", "repeats"):
            if getattr(args, key) < (0 if key == "warmup" else 1):
                raise ConfigError(f"--{key.replace('_', '-')}={getattr(args, key)}: must be >= {0 if key == 'warmup' else 1}")
        if args.cmd == "layers":
            from orchestrator.profile.run import profile_layers

            return int(profile_layers(args))
        from orchestrator.profile.links import profile_links

        return profile_links(args)
    except (UserError, WorkerFailedError) as exc:    # 2: bad input or file; 3: the MPI job failed
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, Exception) as exc:  # its MLflow run is marked KILLED on the way out
        if not isinstance(exc, KeyboardInterrupt) and Interrupt.signal is None:
            raise                          # a plain error; after a signal, any error is the signal's (Interrupt.check)
        print("interrupted: the profile was not written", file=sys.stderr)
        return Interrupt.exit_code()       # 130 for Ctrl-C, 143 for SIGTERM
    finally:                               # an interrupted or failed profile leaves no empty --out it made
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        out = Path(args.out)
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
