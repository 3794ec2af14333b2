"""Screenshot of the MLflow UI's run-comparison page for one sweep, taken with headless Chromium.

    python scripts/ui_screenshot.py --url http://127.0.0.1:5000 --experiment study-a-dp-release

finds the sweep's parent run (the newest top-level run, or ``--parent``), its child runs, and saves
``reports/figures/mlflow_compare_runs.png``. It talks to the tracking server through its REST API only, so it works
against any server, and needs a ``chromium`` binary (Debian: ``apt-get install -y --no-install-recommends
chromium``). The UI is a JavaScript app: Chromium is given a virtual-time budget so the page has rendered its
tables before the shot is taken.
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

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "reports" / "figures" / "mlflow_compare_runs.png"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def rest(base: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
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


def screenshot(url: str, out: str | Path, *, chromium: str | None = None, size: tuple[int, int] = (1600, 1000),
               budget_ms: int = 15000, timeout: float = 120) -> Path:
    """Save a PNG of ``url`` as headless Chromium renders it after ``budget_ms`` of virtual time."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium binary; install it, e.g. apt-get install -y --no-install-recommends "
                                "chromium")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:  # no state kept between shots
        command = [chromium, "--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                   "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
                   f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={budget_ms}",
                   f"--screenshot={out}", url]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0 or not out.exists():
        raise RuntimeError(f"chromium failed ({result.returncode}): {result.stderr[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
                        help="tracking server (default: $MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)")
    parser.add_argument("--experiment", required=True, help="experiment name, e.g. study-a-dp-release")
    parser.add_argument("--parent", help="parent run id (default: the newest top-level run)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="PNG to write (overwritten)")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"--url must be a tracking server (http://...), not {args.url!r}; start one with `make ui`")
    experiment, parent, children = sweep_runs(args.url, args.experiment, args.parent)
    if not children:
        raise SystemExit(f"run {parent} has no child runs to compare")
    url = compare_url(args.url, children, [experiment])
    print(f"{len(children)} child runs of {parent}: {url}")
    print(screenshot(url, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
