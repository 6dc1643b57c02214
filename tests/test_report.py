"""The report CLI and the plots, on a store written the way trials write it (and, slow, by real trials)."""

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import QUICK, run_inprocess, store_runs

MLFLOW_ENV = {"MLFLOW_TRACKING_URI": ""}  # the tests choose the store; an inherited one must not leak in


def _trial(client, exp_id, name, tags, metrics, histories=(), params=None, parent=None):
    from mlflow.entities import Metric, Param

    all_tags = {"placer": "none", "sync": "none", "hardware": "local", "model": "cnn", "evaluator": "measured",
                "runtime": "local", **tags}
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    run = client.create_run(exp_id, run_name=name, tags=all_tags)
    items = [Metric(k, v, 0, 0) for k, v in metrics.items()]
    for key, values in histories:
        items += [Metric(key, v, i, step) for i, (step, v) in enumerate(values)]
    client.log_batch(run.info.run_id, metrics=items,
                     params=[Param(k, v) for k, v in (params or {}).items()])
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


@pytest.fixture(scope="module")
def store_template(tmp_path_factory):
    """Two experiments; a sweep of two 4-worker sync trials, a placement trial with an RL curve, a baseline.
    Built once (creating an MLflow store costs seconds); each test gets a copy."""
    from mlflow.tracking import MlflowClient

    tmp_path = tmp_path_factory.mktemp("report-store")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("orchestrator")
    other = client.create_experiment("placement")
    sweep = client.create_run(exp, run_name="sweep: x", tags={"orchestrator.kind": "sweep"}).info.run_id
    acc = [(10, 0.5), (20, 0.8), (30, 0.9)]
    for name, sync, speed in (("ssgd-run", "ssgd", 3.2), ("delay-run", "delay", 3.7)):
        _trial(client, exp, name, {"sync": sync, "runtime": "virtual", "evaluator": "simulated"},
               {"speedup": speed, "train.time_to_target_s": 1.5, "train.final_test_accuracy": 0.9},
               [("train.test_accuracy", acc), ("train.elapsed_s", [(10, 0.5), (20, 1.0), (30, 1.5)])],
               {"hardware.workers": "4", "train.target_accuracy": "0.8"}, parent=sweep)
    client.set_terminated(sweep, "FINISHED")
    _trial(client, exp, "baseline", {}, {"speedup": 1.0, "train.final_test_accuracy": 0.97},
           [("train.test_accuracy", [(25, 0.9)]), ("train.elapsed_s", [(25, 2.0)])], {"hardware.workers": "null"})
    _trial(client, other, "rl-run", {"placer": "rl", "hardware": "sim_1cpu_4gpu", "evaluator": "simulated"},
           {"placement.step_time_s": 0.25, "placement.lower_bound_s": 0.2, "speedup": 1.3,
            "rl.best_step_time_s": 0.25},
           [("rl.best_step_time_s", [(0, 0.4), (1, 0.3), (2, 0.25)]),
            ("rl.mean_step_time_s", [(0, 0.6), (1, 0.45), (2, 0.35)])])
    return tmp_path, sweep


@pytest.fixture
def store(store_template, tmp_path):
    """A copy of the template store in this test's directory: (directory, sweep run id)."""
    src, sweep = store_template
    shutil.copyfile(src / "mlflow.db", tmp_path / "mlflow.db")
    return tmp_path, sweep


def report(cwd, *args):
    return run_inprocess(cwd, *args, module="orchestrator.tracking.report", env=MLFLOW_ENV)


def test_table_lists_trials_not_sweeps(store):
    cwd, _ = store
    out = report(cwd)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "status", "placer"] and "speedup" in lines[0]
    body = {ln.split()[0]: ln.split() for ln in lines[2:]}
    assert set(body) == {"ssgd-run", "delay-run", "baseline", "rl-run"}
    assert body["delay-run"][:7] == ["delay-run", "FINISHED", "none", "delay", "local", "cnn", "4"]
    assert body["rl-run"][-2:] == ["simulated", "local"] and "0.25" in body["rl-run"]
    assert body["baseline"][6] == "1"  # no sync strategy: one worker
    assert "\r" not in out.stderr and "it/s" not in out.stderr  # no progress bar off a terminal


def test_csv_json_and_scopes(store):
    cwd, sweep = store
    rows = list(csv.DictReader(io.StringIO(report(cwd, "--format", "csv").stdout)))
    assert {r["run_name"] for r in rows} == {"ssgd-run", "delay-run", "baseline", "rl-run"}
    data = json.loads(report(cwd, "--format", "json", "--parent", sweep).stdout)
    assert sorted(d["run_name"] for d in data) == ["delay-run", "ssgd-run"]
    assert all(d["parent_run_id"] == sweep and d["workers"] == 4 for d in data)
    assert {d["sync"]: d["speedup"] for d in data} == {"ssgd": 3.2, "delay": 3.7}
    only = json.loads(report(cwd, "--format", "json", "--experiment", "placement").stdout)
    assert [d["run_name"] for d in only] == ["rl-run"] and only[0]["step_time_s"] == 0.25


def test_one_sweeps_report_ends_with_the_sweeps_verdict(store):
    """Probe G: ``report --parent`` printed no verdict for trials other than plans, though the sweep's last lines
    say it prints the comparison as the report does; runs of unrelated commands are still not ranked."""
    cwd, sweep = store
    out = report(cwd, "--parent", sweep).stdout
    assert "verdict:  delay-run wins on speedup = 3.7" in out and "1.16x the runner-up ssgd-run (3.2)" in out, out
    assert "verdict" in report(cwd, "--parent", sweep, "--format", "md").stdout
    assert "verdict" not in report(cwd).stdout


def test_html_embeds_plots_and_md_writes_them_beside(store):
    cwd, _ = store
    assert report(cwd, "--format", "html", "--output", "r.html").returncode == 0
    page = (cwd / "r.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4 and "rl-run" in page
    assert report(cwd, "--format", "md", "--output", "r.md").returncode == 0
    md = (cwd / "r.md").read_text()
    for name in ("accuracy_vs_time", "speedup_vs_workers", "step_time_per_placer", "rl_learning_curve"):
        assert f"](r_plots/{name}.png)" in md
        assert (cwd / "r_plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, words", [
    (["--experiment", "nope"], "no experiment 'nope'"),
    (["--parent", "0123abc"], "no run '0123abc'"),
    (["--format", "csv", "--output", "."], "--output . is a directory: name a file"),
])
def test_errors_are_one_line(store, args, words):
    cwd, _ = store
    out = report(cwd, *args)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and words in out.stderr, out.stderr


def test_output_into_a_new_folder_makes_it(store):
    cwd, _ = store
    for fmt in ("table", "csv"):
        out = report(cwd, "--format", fmt, "--output", f"new/{fmt}/r.{fmt}")
        assert out.returncode == 0 and (cwd / "new" / fmt / f"r.{fmt}").read_text(), out.stderr


def test_no_store_is_an_error_and_creates_none(tmp_path):
    out = report(tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: no MLflow store") and "\n" not in out.stderr.strip()
    assert not (tmp_path / "mlflow.db").exists()


def test_report_imports_no_tensorflow(store):
    cwd, _ = store
    code = ("import sys\nfrom orchestrator import report\nrc = report.main(['--format', 'html', '--output', 'x.html'])\n"
            "print('TF_LOADED' if 'tensorflow' in sys.modules else 'TF_ABSENT', rc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert "TF_ABSENT 0" in out.stdout, out.stdout + out.stderr


def test_plots_say_simulated_or_measured(store, tmp_path, monkeypatch):
    from matplotlib import pyplot as plt
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking import plots, runs

    cwd, sweep = store
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    titles, real_save = {}, plots._save

    def save(fig, path):
        titles[path.stem] = fig.axes[0].get_title()
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", save)
    made = plots.make_plots(runs.load(client), tmp_path / "p")
    assert set(made) == set(plots.PLOTS)
    assert titles["rl_learning_curve"].endswith("(simulated)")
    assert titles["accuracy_vs_time"].endswith("(measured and simulated)")
    assert not plt.get_fignums()  # figures are closed
    logged = plots.log_sweep_plots(client, sweep)
    names = {Path(a.path).name for a in client.list_artifacts(sweep, "plots")}
    assert names == {"accuracy_vs_time.png", "speedup_vs_workers.png"} == {p.name for p in logged.values()}
    placements = [r for r in runs.load(client) if r.workers == 1]      # one worker each: no scaling plot
    assert placements and plots.speedup_vs_workers(placements, tmp_path / "one.png") is None


def test_plots_of_models_far_apart_use_a_log_axis_and_unequal_workers_show_their_capacity(tmp_path, monkeypatch):
    """Probe G: Inception-V3 (~0.5 s) and NMT (~0.0016 s) on one linear axis put NMT flat at 0; and workers of
    speeds 1 and 0.5 were drawn against 'ideal = 2', with the capacity 1.5 and the limit absent."""
    from orchestrator.tracking import plots
    from orchestrator.tracking.runs import RunRecord

    axes = {}

    def save(fig, path):
        axes[path.stem] = fig.axes[0]
        return path

    monkeypatch.setattr(plots, "_save", save)
    placed = [RunRecord(n, n, "FINISHED", "e", {"placer": "rl", "model": m, "evaluator": "simulated"}, {},
                        {"placement.step_time_s": t}) for n, m, t in (("a", "inception_v3", 0.5), ("b", "nmt", 0.0016))]
    plots.step_time_per_placer(placed, tmp_path / "s.png")
    assert axes["s"].get_yscale() == "log" and "log scale" in axes["s"].get_ylabel()
    sync = [RunRecord(str(w), str(w), "FINISHED", "e", {"sync": "delay", "evaluator": "simulated"}, {},
                      {"workers": float(w), "speedup": 0.9 * w, "hardware.capacity": 0.75 * w, "limit.speedup": 0.6 * w})
            for w in (2, 4)]
    plots.speedup_vs_workers(sync, tmp_path / "w.png")
    labels = [line.get_label() for line in axes["w"].get_lines()]
    assert "capacity (sum of the workers' speeds)" in labels and "statistical limit of synchronous DP" in labels


@pytest.mark.slow
def test_real_sweep_logs_plots_on_parent_and_reports(workdir):
    out = run_inprocess(workdir, "-m", "train.lr=0.05,0.1", *QUICK, env=MLFLOW_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "\r" not in out.stderr and "update/s" not in out.stderr  # no bars off a terminal
    runs = store_runs(workdir)
    (parent,) = [r for r in runs if r.data.tags.get("orchestrator.kind") == "sweep"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    names = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert "accuracy_vs_time.png" in names and "orchestrator.plots_error" not in parent.data.tags
    data = json.loads(report(workdir, "--format", "json", "--parent", parent.info.run_id).stdout)
    assert len(data) == 2 and all(d["status"] == "FINISHED" and d["final_test_accuracy"] for d in data)


def test_placements_over_different_baselines_are_judged_on_their_own_time():
    """The manual placer's speedup is over the best single device, the others' over the expert split: a verdict on
    speedup would crown the slowest; on the placement's own time it does not."""
    from types import SimpleNamespace as NS

    from orchestrator.tracking.report import verdict

    def run(name, speedup, step, base):
        return NS(name=name, status="FINISHED", metrics={"speedup": speedup, "placement.time_per_sample_s": step},
                  tags={"placement.baseline": base, "evaluator": "simulated"})

    runs = [run("optimal", 1.242, 0.03979, "expert split"), run("greedy", 1.183, 0.04175, "expert split"),
            run("manual", 4.409, 0.0494, "best single accelerator acc:0")]
    line = verdict(runs, "speedup")
    assert line.startswith("verdict:  optimal wins on placement.time_per_sample_s = 0.03979") and "1.05x the runner-up greedy" in line
    assert "their speedups are over different baselines" in line
    assert verdict(runs[:2], "speedup").startswith("verdict:  optimal wins on speedup = 1.242")     # one baseline: as before
    # no trial has a baseline (none holds the model): judged on their own time, not "no trial reported speedup"
    bare = [NS(name=n, status="FINISHED", metrics={"placement.time_per_sample_s": t}, tags={"evaluator": "simulated"})
            for n, t in (("greedy", 0.07863), ("random", 0.1495))]
    line = verdict(bare, "speedup")
    assert line.startswith("verdict:  greedy wins on placement.time_per_sample_s = 0.07863"), line
    assert "no trial has a baseline to report a speedup over" in line
    close = [NS(name=n, status="FINISHED", metrics={"placement.step_time_s": t}, tags={"evaluator": "simulated"})
             for n, t in (("rl", 0.01774), ("greedy", 0.01779))]
    assert "1.0028x the runner-up greedy" in verdict(close, "speedup")        # not "1x"


def test_a_sweep_over_models_gets_a_verdict_per_model():
    from types import SimpleNamespace as NS

    from orchestrator.tracking.report import verdict

    runs = [NS(name=f"{p}/{m}", status="FINISHED", metrics={"speedup": s}, tags={"model": m, "evaluator": "simulated"})
            for p, m, s in (("greedy", "nmt", 1.4), ("rl", "nmt", 1.5), ("greedy", "inception_v3", 1.2), ("rl", "inception_v3", 1.3))]
    lines = verdict(runs, "speedup").splitlines()
    assert [ln.split(" wins")[0] for ln in lines] == ["verdict (model=inception_v3):  rl/inception_v3", "verdict (model=nmt):  rl/nmt"]


def test_machine_readable_formats_keep_numbers_and_booleans_the_tables_show_them():
    """json and csv carry the plan's gap to its bound as a fraction and 'fits' as a boolean; the tables for people
    show 21.5% and yes/NO."""
    from orchestrator.tracking.report import PLAN_COLUMNS, markdown_table, rows, table
    from orchestrator.tracking.runs import RunRecord

    runs = [RunRecord(run_id=f"r{i}", name=f"plan{i}", status="FINISHED", experiment="e",
                      tags={"runtime": "plan", "plan.fits": fits}, params={},
                      metrics={"plan.optimality_gap": gap, "plan.iteration_s": 1.5})
            for i, (fits, gap) in enumerate((("true", 0.215), ("false", 0.0)))]
    data = rows(runs)
    assert [(d["plan_gap_to_bound"], d["plan_fits"]) for d in data] == [(0.215, True), (0.0, False)]
    failed = RunRecord(run_id="f", name="early", status="FAILED", experiment="e", tags={"runtime": "plan"}, params={},
                       metrics={})
    assert [rows([failed])[0][k] for k in ("plan_profile", "plan_training")] == [None, None]   # not 'measured', 'fp32'
    assert json.loads(json.dumps(data))[0]["plan_gap_to_bound"] == 0.215
    text = table(data, PLAN_COLUMNS)
    assert "21.5%" in text and "0.0%" in text and " yes " in text and " NO " in text
    assert "| 21.5% | yes |" in markdown_table(data, PLAN_COLUMNS)


def test_equal_figures_tie_and_plans_of_different_simulators_are_not_ranked():
    from types import SimpleNamespace as NS

    from orchestrator.tracking.report import plan_verdict, verdict

    runs = [NS(name=n, status="FINISHED", metrics={"placement.step_time_s": 0.001635409745465112}, tags={"evaluator": "simulated"})
            for n in ("greedy", "rl")]
    assert verdict(runs, "placement.step_time_s", "minimize").startswith(
        "verdict:  greedy and rl tie on placement.step_time_s = 0.001635 (simulated)")     # was 'wins ..., 1x the runner-up'

    def plan(planner, sim, value):
        return NS(name=planner, status="FINISHED", metrics={"plan.samples_per_s": value},
                  tags={"runtime": "plan", "planner": planner, "plan.simulator": sim, "plan.fits": "true",
                        "plan.cluster": "8 A100-40"})
    line = plan_verdict([plan("joint", "sailor", 104.0), plan("amp", "project", 100.0)])
    assert line.startswith("verdict:  none: the plans were judged by different simulators (project, sailor)")
    assert plan_verdict([plan("joint", "sailor", 104.0), plan("amp", "sailor", 100.0)]).startswith(
        "verdict:  joint on 8 A100-40 wins on throughput: 104 samples/s (simulated, sailor simulator), 1.04x the runner-up")


def test_the_report_keeps_what_the_summary_said():
    """auto's choice, an MPI speedup's estimated reference, a placement's gap to its bound; a run that logged
    nothing has no figures kind (it said 'measured')."""
    from orchestrator.tracking.report import rows
    from orchestrator.tracking.runs import RunRecord

    def rec(name, status="FINISHED", tags=None, metrics=None):
        return RunRecord(run_id=name, name=name, status=status, experiment="e", tags=tags or {}, params={},
                         metrics=metrics or {})

    auto = rec("a", tags={"sync": "auto", "sync.auto.choice": "backup b=2", "runtime": "mpi", "train.clock": "wall",
                          "train.reference_method": "tuned"}, metrics={"speedup": 1.2, "train.speedup": 1.2,
                                                                       "train.reference_time_to_target_s": 1.404})
    placed = rec("p", tags={"evaluator": "simulated"}, metrics={"placement.step_time_s": 0.55, "placement.lower_bound_s": 0.44})
    failed = rec("f", status="FAILED", tags={"sync": "delay", "train.clock": "wall"}, metrics={"workers": 4.0})
    a, p, f = rows([auto, placed, failed])
    assert a["sync"] == "auto: backup b=2" and a["speedup_over"] == "tuned 1 worker (estimated), 1.404 s"
    assert p["placement_gap_to_bound"] == pytest.approx(0.25) and a["placement_gap_to_bound"] is None
    assert f["figures"] is None and a["figures"] == "measured"
    # two placers on one problem: each gap is to the tighter of their certified bounds (probe G: milp 0.03979 beside
    # config_lp 0.03969 put the gaps of one table on two bounds); another model keeps its own
    same = {"model.path": "bert24.json", "hardware": "auto"}
    manual = RunRecord("m", "m", "FINISHED", "e", {"evaluator": "simulated", "placement.objective": "pipeline"}, same,
                       {"placement.time_per_sample_s": 0.0418, "placement.lower_bound_s": 0.03979})
    rl = RunRecord("r", "r", "FINISHED", "e", {"evaluator": "simulated", "placement.objective": "pipeline"}, same,
                   {"placement.time_per_sample_s": 0.0399, "placement.lower_bound_s": 0.03969})
    other = RunRecord("o", "o", "FINISHED", "e", {"evaluator": "simulated", "placement.objective": "pipeline"},
                      {**same, "model.path": "gnmt.json"}, {"placement.time_per_sample_s": 0.02, "placement.lower_bound_s": 0.01})
    m_row, r_row, o_row = rows([manual, rl, other])
    assert r_row["placement_gap_to_bound"] == pytest.approx(0.0399 / 0.03979 - 1)
    assert m_row["placement_gap_to_bound"] == pytest.approx(0.0418 / 0.03979 - 1)
    assert o_row["placement_gap_to_bound"] == pytest.approx(1.0)
    # a median over seeds says so, with the spread (probe G: train.seeds=2 showed 0.8225 alone)
    seeds = RunRecord("s", "s", "FINISHED", "e", {"sync": "delay"}, {"train.seeds": "3"},
                      {"speedup": 1.2, "train.speedup": 1.2, "train.speedup_min": 1.1, "train.speedup_max": 1.4})
    assert rows([seeds])[0]["speedup_spread"] == "median of 3, 1.1 to 1.4" and a["speedup_spread"] is None


def test_the_docs_list_every_column_of_the_report():
    """docs/index.md's list of the report's columns had fallen behind the code (probe G)."""
    from orchestrator.tracking.report import COLUMNS, PLAN_COLUMNS, PROFILE_COLUMNS

    text = " ".join((Path(__file__).parents[1] / "docs" / "index.md").read_text().split())
    assert [h for _, h, _ in COLUMNS + PLAN_COLUMNS + PROFILE_COLUMNS if f"`{h}`" not in text] == []


def test_profiler_runs_are_a_table_of_their_own_and_not_judged():
    """Probe F: a profile run was a row of the trial table, every column '-'."""
    from orchestrator.tracking.report import comparison
    from orchestrator.tracking.runs import RunRecord

    layers = RunRecord("l", "profile-layers", "FINISHED", "e", {"profile.kind": "layers", "model": "tiny",
                       "profile.device_type": "CPU", "profile.links": "intra: stated, inter: stated"}, {},
                       {"profile.step_s.mbs2.tp1": 0.02, "profile.step_s.mbs1.tp2": 0.007, "profile.step_s.mbs1.tp1": 0.01,
                        "profile.seconds": 9.0})
    links = RunRecord("k", "profile-links", "FINISHED", "e", {"profile.kind": "links", "profile.device_type": "CPU",
                      "profile.link": "inter"}, {}, {"links.fit_error_median": 0.031, "links.held_out_error_max": 0.08})
    text = comparison([layers, links], "speedup")
    assert "mbs 1,2 x tp 1,2" in text and "0.01 " in text and "3.1%" in text and "8.0%" in text, text
    assert "verdict" not in text and "placer" not in text, text


def test_a_sync_trials_row_shows_its_comparison_on_the_same_workers():
    """A recipe's table of equal-batch trials also shows what balanced allreduce reached on each row's workers."""
    from orchestrator.tracking.runs import versus

    tags = {"compare.label": "allreduce, sync.balance=static, fixed batch hybrid G <= 256, its tuned defaults adam lr=0.008"}
    assert versus(tags, {"compare.speedup": 1.6583}) == "allreduce, sync.balance=static: 1.658"
    assert versus(tags, {"speedup": 1.0}) is None                 # no comparison ran (a placement, a baseline)
