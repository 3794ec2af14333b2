"""Screenshot of the MLflow UI's run-comparison page for one sweep, taken with headless Chromium.

    python scripts/ui_screenshot.py --url http://127.0.0.1:5000 --experiment study-a-dp-release

finds the sweep's parent run (the newest top-level run, or ``--parent``) and its child runs, or the runs a
``--filter`` selects, opens their comparison page, prints the parallel-coordinates plot's axes and saves
``reports/figures/mlflow_compare_runs.png``. It talks to the tracking server through its REST API only, so it works
against any server, and needs a ``chromium`` binary (Debian: ``apt-get install -y --no-install-recommends
chromium``). :func:`browse` is the same headless visit for any page, over the DevTools protocol: it waits for the
page's load event and a settling time (the UI is a JavaScript app), and returns the console errors, a value read
from the page and the screenshot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "reports" / "figures" / "mlflow_compare_runs.png"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def rest(base: str, path: str, body: dict | None = None, timeout: float = 30):
    """GET ``path`` (query included) or, with ``body``, POST it as JSON; the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"{}")


def experiment_id(base: str, name: str) -> str:
    query = urllib.parse.urlencode({"experiment_name": name})
    return rest(base, f"/api/2.0/mlflow/experiments/get-by-name?{query}")["experiment"]["experiment_id"]


def search_runs(base: str, experiment: str, filter_string: str = "") -> list[dict]:
    """Every run of the experiment matching the filter (all pages)."""
    runs, token = [], None
    while True:
        body = {"experiment_ids": [experiment], "filter": filter_string, "max_results": 1000}
        if token:
            body["page_token"] = token
        page = rest(base, "/api/2.0/mlflow/runs/search", body)
        runs += page.get("runs", [])
        token = page.get("next_page_token")
        if not token:
            return runs


def run_tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def sweep_runs(base: str, experiment_name: str, parent: str | None = None) -> tuple[str, str, list[str]]:
    """(experiment id, parent run id, child run ids): the given parent, else the newest run without a parent."""
    experiment = experiment_id(base, experiment_name)
    if parent is None:
        tops = [r for r in search_runs(base, experiment) if "mlflow.parentRunId" not in run_tags(r)]
        if not tops:
            raise SystemExit(f"experiment {experiment_name!r} has no top-level run")
        parent = max(tops, key=lambda r: int(r["info"]["start_time"]))["info"]["run_id"]
    children = search_runs(base, experiment, f"tags.mlflow.parentRunId = '{parent}'")
    return experiment, parent, sorted(r["info"]["run_id"] for r in children)


def compare_url(base: str, run_ids: list[str], experiment_ids: list[str]) -> str:
    """The UI's comparison page, as the UI itself links to it (mlflow 3.x routes, hash router):
    ``<base>/#/compare-runs?runs=["id",...]&experiments=["id",...]`` with the JSON lists URL-encoded."""
    query = urllib.parse.urlencode({"runs": json.dumps(list(run_ids)), "experiments": json.dumps(list(experiment_ids))})
    return f"{base.rstrip('/')}/#/compare-runs?{query}"


def find_chromium() -> str | None:
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def _chromium_command(chromium: str, profile: str, size: tuple[int, int], *extra: str) -> list[str]:
    """Headless Chromium with a throwaway profile and no background traffic (the machine may have no network)."""
    command = [chromium, "--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
               "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", *extra]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
    return command


class PageCheck(NamedTuple):
    """What :func:`browse` saw: the console errors and uncaught exceptions, in order, the screenshot, and the value
    of the ``evaluate`` expression."""

    errors: list[str]
    screenshot: Path | None
    value: object = None


# The axis titles of the compare page's parallel-coordinates plot (the selector MLflow's own UI code uses).
COMPARE_AXES_JS = ("Array.from(document.querySelectorAll('.pcp-plot .parcoords .y-axis .axis-heading .axis-title'))"
                   ".map(e => e.textContent)")


def browse(url: str, out: str | Path | None = None, *, chromium: str | None = None,
           size: tuple[int, int] = (1400, 1000), settle_s: float = 3.0, timeout: float = 60,
           evaluate: str | None = None, full_page: bool = True) -> PageCheck:
    """Open ``url`` in headless Chromium over the DevTools protocol, as a person would: wait for the page's load
    event and ``settle_s`` more, collect every console error, failed resource and uncaught exception, evaluate the
    JavaScript expression ``evaluate`` in the page (its JSON value is returned), and save a PNG of the page to
    ``out`` (the whole page height with ``full_page``, else the window). Unlike ``--screenshot``, this sees what
    the page's scripts report and hold, so a test can require a page to open cleanly and show what it should."""
    import base64
    import time

    from websockets.sync.client import connect

    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium binary; install it, e.g. apt-get install -y --no-install-recommends "
                                "chromium")
    errors: list[str] = []
    # Chromium's helper processes may still be writing to the profile for a moment after it is stopped: the whole
    # process group is stopped (its own session), and a file they leave behind does not fail the visit.
    with tempfile.TemporaryDirectory(prefix="chromium-profile-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(_chromium_command(chromium, profile, size, "--remote-debugging-port=0",
                                                     "about:blank"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            port_file = Path(profile) / "DevToolsActivePort"
            while not (port_file.exists() and port_file.read_text().strip()):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not open its DevTools port (exit code {process.poll()})")
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            pages = [t for t in rest(f"http://127.0.0.1:{port}", "/json/list") if t.get("type") == "page"]
            with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout) as socket:
                counter = iter(range(1, 1 << 30))

                def call(method: str, **params) -> dict:
                    ident = next(counter)
                    socket.send(json.dumps({"id": ident, "method": method, "params": params}))
                    while True:
                        message = json.loads(socket.recv(timeout=max(1.0, deadline - time.monotonic())))
                        if message.get("id") == ident:
                            if "error" in message:
                                raise RuntimeError(f"DevTools {method}: {message['error']}")
                            return message.get("result", {})
                        note(message)

                def note(message: dict) -> None:
                    method, params = message.get("method"), message.get("params", {})
                    if method == "Runtime.exceptionThrown":
                        details = params["exceptionDetails"]
                        errors.append((details.get("exception") or {}).get("description") or details["text"])
                    elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                        errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
                    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                        errors.append(f"{params['entry']['text']} ({params['entry'].get('url', '')})")
                    elif method == "Page.loadEventFired":
                        loaded.append(time.monotonic())

                loaded: list[float] = []
                for domain in ("Page", "Runtime", "Log"):
                    call(f"{domain}.enable")
                call("Page.navigate", url=url)
                while not loaded or time.monotonic() < loaded[0] + settle_s:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{url} did not finish loading within {timeout:.0f} s")
                    try:
                        note(json.loads(socket.recv(timeout=0.2)))
                    except TimeoutError:
                        pass
                value = None
                if evaluate is not None:
                    value = call("Runtime.evaluate", expression=evaluate, returnByValue=True)["result"].get("value")
                shot = None
                if out is not None:
                    height = size[1] if not full_page else call(
                        "Runtime.evaluate", expression="document.documentElement.scrollHeight",
                        returnByValue=True)["result"].get("value") or size[1]
                    # a viewport as tall as the page (capped), so the shot is the page as laid out, not a
                    # capture beyond the viewport (which can skew transformed images)
                    call("Emulation.setDeviceMetricsOverride", width=size[0], height=min(int(height), 8000),
                         deviceScaleFactor=1, mobile=False)
                    time.sleep(0.5)
                    image = call("Page.captureScreenshot", format="png")
                    shot = Path(out).resolve()
                    shot.parent.mkdir(parents=True, exist_ok=True)
                    shot.write_bytes(base64.b64decode(image["data"]))
        finally:
            stop(process, timeout=10, group=True)
    return PageCheck(errors, shot, value)


def stop(process: subprocess.Popen, timeout: float = 15, group: bool = False) -> None:
    """Terminate a process we started, and kill it if it has not exited after ``timeout`` seconds; with ``group``,
    its whole process group (it was started in a session of its own), so no child outlives it."""
    import signal

    def send(sig: int) -> None:
        try:
            os.killpg(process.pid, sig) if group else process.send_signal(sig)
        except ProcessLookupError:
            pass

    send(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    send(signal.SIGKILL)  # what is left of the group, or the process itself if it ignored SIGTERM
    process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
                        help="tracking server (default: $MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)")
    parser.add_argument("--experiment", required=True, help="experiment name, e.g. study-a-dp-release")
    parser.add_argument("--parent", help="parent run id (default: the newest top-level run)")
    parser.add_argument("--filter", help="compare the runs this MLflow search filter selects instead of a sweep's "
                                         "children, e.g. \"tags.stage = 'audit_cohort' and params.arm = 'release'\"")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="PNG to write (overwritten)")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"--url must be a tracking server (http://...), not {args.url!r}; start one with `make ui`")
    if args.filter:
        experiment = experiment_id(args.url, args.experiment)
        runs = sorted(r["info"]["run_id"] for r in search_runs(args.url, experiment, args.filter))
        if not runs:
            raise SystemExit(f"no run of {args.experiment!r} matches {args.filter!r}")
        print(f"{len(runs)} runs matching {args.filter!r}: {compare_url(args.url, runs, [experiment])}")
    else:
        experiment, parent, runs = sweep_runs(args.url, args.experiment, args.parent)
        if not runs:
            raise SystemExit(f"run {parent} has no child runs to compare")
        print(f"{len(runs)} child runs of {parent}: {compare_url(args.url, runs, [experiment])}")
    page = browse(compare_url(args.url, runs, [experiment]), args.out, size=(1600, 1000), settle_s=6.0,
                  evaluate=COMPARE_AXES_JS, full_page=False)
    print(f"parallel-coordinates axes: {page.value}")
    print(page.screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
