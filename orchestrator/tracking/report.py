"""Summarise the trials of an MLflow store: a table, a markdown/HTML report with plots, CSV or JSON.

    python -m orchestrator.report [--experiment NAME | --parent RUN_ID] [--format table|md|html|csv|json]
                                  [--output PATH] [--tracking-uri URI]

Store: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``. Sweep parent runs are
not rows. Errors (no store, unknown experiment or parent) print one line and exit 2. No TensorFlow.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from orchestrator.errors import ConfigError
from orchestrator.tracking.runs import figures_kind, speedup_over

# (key, header, value function); the order of the table's columns.
COLUMNS = [
    ("run_name", "run", lambda r: r.name),
    ("status", "status", lambda r: r.status),
    ("placer", "placer", lambda r: r.tag("placer")),
    ("sync", "sync", lambda r: r.tag("sync")),
    ("hardware", "hardware", lambda r: r.tag("hardware")),
    ("model", "model", lambda r: r.tag("model")),
    ("planner", "planner", lambda r: r.tag("planner", "")),
    ("workers", "workers", lambda r: None if r.tag("runtime") == "plan" else r.workers),
    ("step_time_s", "step time (s)", lambda r: r.metric("placement.step_time_s")),
    ("time_per_sample_s", "time per sample (s)", lambda r: r.metric("placement.time_per_sample_s")),
    ("plan_iteration_s", "s/iteration (plan)", lambda r: r.metric("plan.iteration_s")),
    ("plan_gpus", "GPUs (plan)", lambda r: r.metric("plan.gpus")),
    ("speedup", "speedup", lambda r: r.metric("speedup")),
    ("speedup_over", "speedup over", lambda r: speedup_over(r.tags, r.metrics)),
    ("time_to_target_s", "time to target (s)", lambda r: r.metric("train.time_to_target_s")),
    ("final_test_accuracy", "final accuracy", lambda r: r.metric("train.final_test_accuracy")),
    ("figures", "figures", lambda r: figures_kind(r.tags)),
    ("evaluator", "evaluator", lambda r: r.tag("evaluator", "")),
    ("runtime", "runtime", lambda r: r.tag("runtime", "")),
]
EXTRA = [("run_id", lambda r: r.run_id), ("experiment", lambda r: r.experiment),
         ("parent_run_id", lambda r: r.tags.get("mlflow.parentRunId")), ("start_time_ms", lambda r: r.start_time)]
FORMATS = ("table", "md", "html", "csv", "json")


def rows(records) -> list[dict]:
    return [{k: fn(r) for k, _, fn in COLUMNS} | {k: fn(r) for k, fn in EXTRA} for r in records]


def verdict(records, metric: str, direction: str = "maximize") -> str:
    """One line: which trial won on ``metric`` and by how much over the runner-up."""
    scored = [(r.metrics[metric], r) for r in records if r.status == "FINISHED" and r.metrics.get(metric) is not None]
    if not scored:
        return f"verdict:  no trial reported {metric} (each failed or missed its target)"
    scored.sort(key=lambda x: x[0], reverse=direction == "maximize")
    (v, best), rest = scored[0], scored[1:]
    kind = figures_kind(best.tags)
    line = f"verdict:  {best.name} wins on {metric} = {v:.4g} ({kind})"
    if rest:
        v2, second = rest[0]
        ratio = (v / v2 if direction == "maximize" else v2 / v) if v2 and v else float("nan")
        line += f", {ratio:.3g}x the runner-up {second.name} ({v2:.4g})"
    return line + f"; {len(scored)} of {len(records)} trials reported it"


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(data: list[dict]) -> str:
    """A plain aligned text table."""
    header = [h for _, h, _ in COLUMNS]
    body = [[_cell(d[k]) for k, _, _ in COLUMNS] for d in data]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)]) + "\n"


def markdown_table(data: list[dict]) -> str:
    out = ["| " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_cell(d[k]).replace("|", "\\|") for k, _, _ in COLUMNS) + " |" for d in data]
    return "\n".join(out) + "\n"


def html_table(data: list[dict]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(d[k]))}</td>" for k, _, _ in COLUMNS) + "</tr>\n"
                   for d in data)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def to_csv(data: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[k for k, _, _ in COLUMNS] + [k for k, _ in EXTRA], lineterminator="\n")
    w.writeheader()
    w.writerows(data)
    return buf.getvalue()


TITLES = {"accuracy_vs_time": "Accuracy vs time", "speedup_vs_workers": "Speedup vs workers",
          "step_time_per_placer": "Step time per placer", "rl_learning_curve": "RL learning curve"}


def _scope(args) -> str:
    if args.parent:
        return f"children of sweep run {args.parent}"
    return f"experiment {args.experiment}" if args.experiment else "all experiments"


def markdown(data, plots: dict[str, str], scope: str) -> str:
    parts = [f"# Trial report: {scope}\n", f"{len(data)} run(s).\n", markdown_table(data)]
    for name, src in plots.items():
        parts.append(f"\n## {TITLES.get(name, name)}\n\n![{TITLES.get(name, name)}]({src})\n")
    if not plots:
        parts.append("\nNo plots: the runs have no data for any of them.\n")
    return "\n".join(parts)


def html_report(data, plots: dict[str, str], scope: str) -> str:
    figs = "".join(f'<h2>{html.escape(TITLES.get(n, n))}</h2>\n<img alt="{html.escape(TITLES.get(n, n))}" '
                   f'src="{src}">\n' for n, src in plots.items()) or "<p>No plots: the runs have no data for any of them.</p>"
    style = "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:2px 6px;text-align:left}"
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Trial report</title>"
            f"<style>{style}</style></head>\n<body>\n<h1>Trial report: {html.escape(scope)}</h1>\n"
            f"<p>{len(data)} run(s).</p>\n{html_table(data)}{figs}</body></html>\n")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def render(fmt: str, records, args) -> str:
    data = rows(records)
    if fmt == "table":
        return table(data) if data else "no runs\n"
    if fmt == "csv":
        return to_csv(data)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    from orchestrator.tracking.plots import make_plots

    scope = _scope(args)
    if fmt == "md" and args.output:
        # The PNGs go beside the report, in OUTPUT_STEM_plots/, linked relatively.
        out = Path(args.output)
        plot_dir = out.parent / f"{out.stem}_plots"
        made = make_plots(records, plot_dir)
        return markdown(data, {n: f"{plot_dir.name}/{p.name}" for n, p in made.items()}, scope)
    with tempfile.TemporaryDirectory(prefix="orchestrator-report-") as tmp:
        made = make_plots(records, tmp)
        inline = {n: _data_uri(p) for n, p in made.items()}
    return markdown(data, inline, scope) if fmt == "md" else html_report(data, inline, scope)


def _client(uri: str | None):
    from orchestrator.tracking.store import DEFAULT_URI, disable_telemetry, open_store

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
    parsed = urlparse(uri)
    # Opening a missing sqlite/file store would create an empty one: refuse instead.
    if parsed.scheme == "sqlite":
        db = uri.split("sqlite:///", 1)[-1]
        if db not in ("", ":memory:") and not Path(db).exists():
            raise ConfigError(f"no MLflow store at {db} (run a trial first, or pass --tracking-uri / set MLFLOW_TRACKING_URI)")
    elif parsed.scheme in ("", "file") and not Path(parsed.path or uri).exists():
        raise ConfigError(f"no MLflow store at {uri}")
    disable_telemetry()
    from mlflow.tracking import MlflowClient

    open_store(uri)  # a corrupt store is one line; runs whose process died are marked FAILED
    return MlflowClient(uri)


def load(args):
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking import runs

    client = _client(args.tracking_uri)
    try:
        if args.parent:
            try:
                client.get_run(args.parent)
            except MlflowException:
                raise ConfigError(f"no run {args.parent!r} in the store (--parent)") from None
            return runs.load(client, parent_run_id=args.parent)
        if args.experiment:
            exp = client.get_experiment_by_name(args.experiment)
            if exp is None:
                known = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
                raise ConfigError(f"no experiment {args.experiment!r} in the store (known: {known})")
            return runs.load(client, [exp.experiment_id])
        return runs.load(client)
    except ConfigError:
        raise
    except Exception as exc:  # MlflowException, SQLAlchemy's errors, OSError: the store, not a bug here
        from orchestrator.tracking.store import store_error

        raise store_error(args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db", exc) from None


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m orchestrator.report", description=__doc__.splitlines()[0])
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--experiment", help="only this experiment's runs (by name)")
    scope.add_argument("--parent", metavar="RUN_ID", help="only the trials of this sweep (parent run id)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--output", metavar="PATH", help="write here instead of standard output")
    p.add_argument("--tracking-uri", help="the MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    try:
        text = render(args.format, load(args), args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
