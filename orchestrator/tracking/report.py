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
import math
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from orchestrator.errors import ConfigError
from orchestrator.tracking import runs
from orchestrator.tracking.columns import (
    ALL_COLUMNS,
    COLUMNS,
    EXTRA,
    PLAN_COLUMNS,
    PROFILE_COLUMNS,
    SHOWN,
    is_plan,
    is_profile,
)

FORMATS = ("table", "md", "html", "csv", "json")


def rows(records) -> list[dict]:
    """One row per run; a placement's gap is to the tightest bound any run certified for its problem."""
    return [{k: fn(r) if fn else g for k, _, fn in ALL_COLUMNS} | {k: fn(r) for k, fn in EXTRA}
            for r, g in zip(records, runs.placement_gaps(records), strict=True)]


def groups(data: list[dict], records) -> list[tuple[list, list[dict]]]:
    """The rows as tables: trials with the trial columns, plan trials with the plan columns, profiler runs with
    the profile columns."""
    pairs = list(zip(data, records, strict=True))
    trial = [d for d, r in pairs if not is_plan(r) and not is_profile(r)]
    plan = [d for d, r in pairs if is_plan(r)]
    prof = [d for d, r in pairs if is_profile(r)]
    return [(cols, ds) for cols, ds in ((COLUMNS, trial), (PLAN_COLUMNS, plan), (PROFILE_COLUMNS, prof)) if ds] or [(COLUMNS, [])]


# what a plan trial's objective compares: (metric, direction, unit)
PLAN_OBJECTIVES = {"throughput": ("plan.samples_per_s", "maximize", "samples/s"),
                   "cost": ("plan.usd_per_iteration", "minimize", "USD per iteration"),
                   "budget": ("plan.samples_per_s", "maximize", "samples/s")}


def _admissible(r) -> bool:
    """A finished plan that fits and meets its objective's constraint (floor or ceiling)."""
    m = r.metrics
    if r.status != "FINISHED" or r.tags.get("plan.fits") != "true":
        return False
    if m.get("plan.min_samples_per_s") is not None and m.get("plan.samples_per_s", 0.0) < m["plan.min_samples_per_s"]:
        return False
    ceiling = m.get("plan.max_usd_per_hour")
    return ceiling is None or m.get("plan.usd_per_hour", 0.0) <= ceiling * (1 + 1e-9)


def plan_verdict(records) -> str:
    """One line on the plan objective: which plan trial won, by how much, and whether the figures compare."""
    plans = [r for r in records if is_plan(r)]
    kinds = sorted({r.tags.get("plan.objective", "throughput") for r in plans})
    if len(kinds) != 1:
        return f"verdict:  the plan trials optimise different objectives ({', '.join(kinds)}): compare one at a time"
    metric, direction, unit = PLAN_OBJECTIVES.get(kinds[0], PLAN_OBJECTIVES["throughput"])
    ok = [r for r in plans if _admissible(r) and r.metrics.get(metric) is not None]
    if not ok:
        meets = "" if kinds[0] == "throughput" else f" and meets its {kinds[0]} constraint"
        return f"verdict:  no plan trial gave a plan that fits{meets} ({len(plans)} plan trials)"
    sims = sorted({r.tags.get("plan.simulator", "?") for r in ok})
    if len(sims) > 1:
        return (f"verdict:  none: the plans were judged by different simulators ({', '.join(sims)}), whose figures do "
                "not compare; sweep with one planner.simulator")
    ok.sort(key=lambda r: r.metrics[metric], reverse=direction == "maximize")
    name = lambda r: f"{r.tags.get('planner', '?')} on {r.tags.get('plan.cluster', '?')}"  # noqa: E731
    line = _lead([(r.metrics[metric], name(r)) for r in ok], f"{kinds[0]}:", direction, f" {unit}",
                 f"simulated, {ok[0].tags.get('plan.simulator', '?')} simulator")
    return line + f"; {len(ok)} of {len(plans)} plan trials gave an admissible plan"


def _lead(scored: list[tuple[float, str]], what: str, direction: str, unit: str, kind: str) -> str:
    """The verdict's head: the best (sorted first) and its margin over the runner-up, or a tie where they are equal."""
    (v, best), rest = scored[0], scored[1:]
    tied = [n for x, n in rest if math.isclose(x, v, rel_tol=1e-9)]
    if tied:
        return f"verdict:  {best} and {', '.join(tied)} tie on {what} {v:.4g}{unit} ({kind})"
    line = f"verdict:  {best} wins on {what} {v:.4g}{unit} ({kind})"
    if rest:
        v2, second = rest[0]
        ratio = (v / v2 if direction == "maximize" else v2 / v) if v2 and v else float("nan")
        txt = f"{ratio:.4f}" if f"{ratio:.3g}" == "1" and ratio != 1.0 else f"{ratio:.3g}"   # 0.01779 vs 0.01774: not "1x"
        line += f", {txt}x the runner-up {second} ({v2:.4g})"
    return line


def comparison(records, metric: str, direction: str = "maximize") -> str:
    """The tables and the verdict a sweep ends with: plan trials on their plan objective."""
    text = "\n".join(table(ds, cols) for cols, ds in groups(rows(records), records))
    return text + "\n" + "\n".join(verdict_lines(records, metric, direction))


def verdict_lines(records, metric: str, direction: str = "maximize") -> list[str]:
    trials = [r for r in records if not is_plan(r) and not is_profile(r)]       # a profile is no trial to judge
    lines = [verdict(trials, metric, direction)] if trials or not records else []
    return lines + ([plan_verdict(records)] if any(is_plan(r) for r in records) else [])


def common_ground(records, metric: str, direction: str) -> tuple[str, str, str]:
    """(metric, direction, why) the trials are compared on: placements' speedups over different baselines (the
    manual placer's over the best single device, the others' over the expert split) do not compare, so they are
    judged on the placement's own time, which does."""
    if metric != "speedup":
        return metric, direction, ""
    finished = [r for r in records if r.status == "FINISHED"]
    done = [r for r in finished if r.metrics.get(metric) is not None]
    bases = {r.tags.get("placement.baseline", "") for r in done if "train.speedup" not in r.metrics}
    if not done and finished:          # placements without a baseline (none holds the model): their own time
        for m in ("placement.time_per_sample_s", "placement.step_time_s"):
            if all(m in r.metrics for r in finished):
                return m, "minimize", " (no trial has a baseline to report a speedup over)"
    if len(bases) > 1:
        for m in ("placement.time_per_sample_s", "placement.step_time_s"):
            if all(m in r.metrics for r in done):
                return m, "minimize", f" (their speedups are over different baselines: {'; '.join(sorted(bases))})"
    return metric, direction, ""


def verdict(records, metric: str, direction: str = "maximize") -> str:
    """One line: which trial won on ``metric`` (or on ``common_ground``) and by how much over the runner-up; a
    line per model where the sweep spans several (trials of two models do not compare)."""
    models = sorted({str(r.tags.get("model", "")) for r in records})
    if len(models) > 1:
        return "\n".join(verdict([r for r in records if str(r.tags.get("model", "")) == m], metric, direction)
                         .replace("verdict:  ", f"verdict (model={m}):  ", 1) for m in models)
    metric, direction, why = common_ground(records, metric, direction)
    scored = [(r.metrics[metric], r) for r in records if r.status == "FINISHED" and r.metrics.get(metric) is not None]
    if not scored:
        n = {s: sum(r.status == s for r in records) for s in ("KILLED", "FAILED", "FINISHED")}
        return (f"verdict:  no trial reported {metric} ({n['KILLED']} killed, {n['FAILED']} failed, {n['FINISHED']} "
                "finished without it: missed the target, or no baseline)")
    scored.sort(key=lambda x: x[0], reverse=direction == "maximize")
    line = _lead([(v, r.name) for v, r in scored], f"{metric} =", direction, "", runs.figures_kind(scored[0][1].tags))
    once = all(getattr(r, "params", {}).get("train.seeds", "1") in ("1", "null") and runs.figures_kind(r.tags) == "measured"
               for _, r in scored)
    return line + f"; {len(scored)} of {len(records)} trial{'s' * (len(records) != 1)} reported it{why}" + (
        "; measured wall-clock times of one run each: a margin within the machine's load is no difference "
        "(train.seeds=k repeats them)" if once and len(scored) > 1 else "")


def _cell(v, key: str = "") -> str:
    if v is None:
        return "-"
    return SHOWN[key](v) if key in SHOWN else f"{v:.4g}" if isinstance(v, float) else str(v)


def table(data: list[dict], columns=COLUMNS) -> str:
    """A plain aligned text table."""
    header = [h for _, h, _ in columns]
    body = [[_cell(d[k], k) for k, _, _ in columns] for d in data]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)]) + "\n"


def markdown_table(data: list[dict], columns=COLUMNS) -> str:
    out = ["| " + " | ".join(h for _, h, _ in columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_cell(d[k], k).replace("|", "\\|") for k, _, _ in columns) + " |" for d in data]
    return "\n".join(out) + "\n"


def html_table(data: list[dict], columns=COLUMNS) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(d[k], k))}</td>" for k, _, _ in columns) + "</tr>\n"
                   for d in data)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def to_csv(data: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[k for k, _, _ in ALL_COLUMNS] + [k for k, _ in EXTRA], lineterminator="\n")
    w.writeheader()
    w.writerows(data)
    return buf.getvalue()


TITLES = {"accuracy_vs_time": "Accuracy vs time", "speedup_vs_workers": "Speedup vs workers",
          "step_time_per_placer": "Step time per placer", "rl_learning_curve": "RL learning curve",
          "plan_comparison": "Plans compared"}


def _scope(args) -> str:
    if args.parent:
        return f"children of sweep run {args.parent}"
    return f"experiment {args.experiment}" if args.experiment else "all experiments"


def _plan_verdict_line(records) -> list[str]:
    """One sweep's trials: the verdicts it printed, on its objective; else the plan verdict (others are not ranked)."""
    parents = {r.tags.get("mlflow.parentRunId") for r in records}
    if records and len(parents) == 1 and None not in parents:
        p = records[0].params
        return verdict_lines(records, p.get("objective.metric", "speedup"), p.get("objective.direction", "maximize"))
    return [plan_verdict(records)] if any(is_plan(r) for r in records) else []


def markdown(data, plots: dict[str, str], scope: str, records=()) -> str:
    parts = [f"# Trial report: {scope}\n", f"{len(data)} run(s).\n"]
    parts += [markdown_table(ds, cols) for cols, ds in groups(data, records)] if records else [markdown_table(data)]
    parts += [f"\n{line}\n" for line in _plan_verdict_line(records)]
    for name, src in plots.items():
        parts.append(f"\n## {TITLES.get(name, name)}\n\n![{TITLES.get(name, name)}]({src})\n")
    if not plots:
        parts.append("\nNo plots: the runs have no data for any of them.\n")
    return "\n".join(parts)


def html_report(data, plots: dict[str, str], scope: str, records=()) -> str:
    figs = "".join(f'<h2>{html.escape(TITLES.get(n, n))}</h2>\n<img alt="{html.escape(TITLES.get(n, n))}" '
                   f'src="{src}">\n' for n, src in plots.items()) or "<p>No plots: the runs have no data for any of them.</p>"
    tables = "".join(html_table(ds, cols) for cols, ds in groups(data, records)) if records else html_table(data)
    verdicts = "".join(f"<p>{html.escape(line)}</p>\n" for line in _plan_verdict_line(records))
    style = "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:2px 6px;text-align:left}"
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Trial report</title>"
            f"<style>{style}</style></head>\n<body>\n<h1>Trial report: {html.escape(scope)}</h1>\n"
            f"<p>{len(data)} run(s).</p>\n{tables}{verdicts}{figs}</body></html>\n")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def render(fmt: str, records, args) -> str:
    data = rows(records)
    if fmt == "table":
        if not data:
            return "no runs\n"
        return "\n".join(table(ds, cols) for cols, ds in groups(data, records)) + "".join(
            f"\n{line}\n" for line in _plan_verdict_line(records))
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
        return markdown(data, {n: f"{plot_dir.name}/{p.name}" for n, p in made.items()}, scope, records)
    with tempfile.TemporaryDirectory(prefix="orchestrator-report-") as tmp:
        made = make_plots(records, tmp)
        inline = {n: _data_uri(p) for n, p in made.items()}
    return markdown(data, inline, scope, records) if fmt == "md" else html_report(data, inline, scope, records)


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
        if args.output:          # a missing folder is made (as the md report's plots folder is); a bad path is one line
            out = Path(args.output)
            if out.is_dir():
                raise ConfigError(f"--output {args.output} is a directory: name a file")
            out.parent.mkdir(parents=True, exist_ok=True)
        text = render(args.format, load(args), args)
        if args.output:
            out.write_text(text)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: --output {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
