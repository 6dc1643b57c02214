"""The MLflow UI shows our trials: two real quick trials, ``mlflow server`` on their store, and headless
Chromium driven through its DevTools protocol. The screenshot goes to ./test-artifacts/."""

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import QUICK, run_inprocess, store_runs

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
RUN_NAMES = ("ui-baseline", "ui-manual-placement")

pytestmark = pytest.mark.browser


def _chromium() -> str:
    path = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if path:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"Chromium is missing ({CHROMIUM}); CI must run this test: install it with .ci/system-deps")
    pytest.skip(f"Chromium not found at {CHROMIUM} (install Debian's chromium, e.g. .ci/system-deps); "
                "not CI, so the MLflow UI browser check is skipped")


def _wait_http(url: str, timeout: float, proc: subprocess.Popen) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no answer from {url} in {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    """End a process we started in its own session, and everything it spawned."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    try:  # workers left in the group after the leader exited
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def ui_store(workdir):
    _chromium()  # skip (or, under CI, fail) before spending a minute on trials
    for name, extra in zip(RUN_NAMES, ([], ["+placer=manual"])):
        out = run_inprocess(workdir, *extra, *QUICK, f"tracking.run_name={name}", timeout=600,
                      env={"MLFLOW_TRACKING_URI": ""})
        assert out.returncode == 0, out.stderr[-3000:]
    runs = store_runs(workdir)
    assert sorted(r.info.run_name for r in runs) == sorted(RUN_NAMES)
    assert all("speedup" in r.data.metrics for r in runs)
    return workdir, runs[0].info.experiment_id


@pytest.fixture
def mlflow_server(ui_store):
    import portpicker

    workdir, exp_id = ui_store
    port = portpicker.pick_unused_port()
    log = open(workdir / "mlflow-server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{workdir / 'mlflow.db'}", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", 90, proc)
        yield f"http://127.0.0.1:{port}", exp_id
    finally:
        _stop(proc)
        log.close()


class DevTools:
    """Minimal Chrome DevTools protocol client over one page's websocket."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def text(self) -> str:
        return self.js("document.body ? document.body.innerText : ''") or ""

    def click(self, x: float, y: float) -> None:
        """A real mouse click (React ignores synthetic element.click() on some widgets)."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def wait_for(self, expression: str, timeout: float = 60):
        """Poll a JS expression until it is truthy; its last value."""
        deadline, value = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                break
            time.sleep(1)
        return value


@pytest.fixture
def browser(tmp_path):
    exe = _chromium()
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "--window-size=1800,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not open its DevTools port (exit code {proc.poll()})")
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        targets = json.loads(_wait_http(f"http://127.0.0.1:{port}/json/list", 30, proc))
        page = next(t for t in targets if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        yield tools
        tools.ws.close()
    finally:
        _stop(proc)


# The centre of the innermost element whose text is exactly TEXT (inside SCOPE), scrolled into view.
FIND = """(() => {{ const t = {text!r}; const e = [...document.querySelectorAll({scope!r})].find(
  e => e.innerText && e.innerText.trim() === t && ![...e.children].some(c => c.innerText && c.innerText.trim() === t));
  if (!e) return null; e.scrollIntoView({{block: 'center', inline: 'center'}});
  const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"""
HEADERS = "[...document.querySelectorAll('[role=columnheader]')].map(e => e.innerText.trim()).filter(t => t)"
SPEEDUP_CELLS = "[...document.querySelectorAll('[role=gridcell][col-id*=speedup]')].map(e => e.innerText.trim())"


@pytest.mark.slow
def test_experiment_page_shows_runs_and_speedup(mlflow_server, browser):
    url, exp_id = mlflow_server
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.store import VIEW_ID, ui_link

    tags = MlflowClient(url).get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development" and f"mlflow.sharedViewState.{VIEW_ID}" in tags
    browser.call("Page.enable")
    # The link a trial prints: the model-training view (MLflow 3.17's global GenAI / Model training switch
    # overrides the experiment's kind tag) with the saved view of the comparison columns.
    browser.call("Page.navigate", url=ui_link(exp_id, url))
    names = "[" + ",".join(repr(n) for n in RUN_NAMES) + "]"
    shown = browser.wait_for(f"{names}.every(n => document.body && document.body.innerText.includes(n))")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "mlflow_ui_experiment.png"
    try:
        assert shown, f"the runs table did not show {RUN_NAMES} within 60 s; page text: {browser.text()[:1500]!r}"
        # No click: the saved view's metric columns are there when the page opens.
        want = ["speedup", "train.time_to_target_s", "train.final_test_accuracy", "placement.step_time_s", "workers"]
        headers = browser.wait_for(f"(() => {{ const h = {HEADERS}; return {want!r}.every(w => h.includes(w)) ? h : null; }})()", 30)
        assert headers, f"the comparison columns are not shown; headers: {browser.js(HEADERS)}"
        cells = browser.wait_for(f"(() => {{ const c = {SPEEDUP_CELLS}; return c.length >= 2 ? c : null; }})()", 20)
        assert cells and all(c not in ("", "-") for c in cells), f"speedup cells: {browser.js(SPEEDUP_CELLS)}"
        # Scroll the grid body (the header follows it) so that the screenshot shows the values.
        browser.js("document.querySelector('[role=gridcell][col-id*=speedup]')"
                   ".scrollIntoView({block: 'nearest', inline: 'center'})")
        time.sleep(2)  # let the grid paint the scrolled columns before the screenshot
    finally:
        shot.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"]))

