"""A real ``mlflow server`` on loopback for the tests that need one, and the UI screenshot script as a module
(``ui``: REST queries, the compare-page URL, headless Chromium).

Used by tests/test_mlflow_server.py (sqlite store), tests/test_postgres_tracking.py (PostgreSQL store) and
tests/test_audit_cohort.py (the compare page of an audit's runs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("ui_screenshot", REPO / "scripts" / "ui_screenshot.py")
ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ui)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base: str, process: subprocess.Popen, stderr: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    tail = stderr.read_text(errors="replace")[-3000:]
    state = f"exited with {process.returncode}" if process.poll() is not None else f"not healthy after {timeout:.0f} s"
    pytest.fail(f"mlflow server at {base} {state}; its stderr ends with:\n{tail}")


@contextlib.contextmanager
def serve(backend_store_uri: str, folder: Path, env: dict | None = None):
    """``mlflow server`` on a free loopback port over ``backend_store_uri``, artifacts served from ``folder``;
    yields its base URL once healthy, stops it on exit."""
    port = free_port()
    executable = Path(sys.executable).with_name("mlflow")
    command = [str(executable) if executable.exists() else shutil.which("mlflow") or "mlflow", "server",
               "--backend-store-uri", backend_store_uri, "--artifacts-destination", str(folder / "artifacts"),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    stderr = folder / "server.stderr"
    env = {**(env or os.environ), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job-runner workers to start
    with open(stderr, "wb") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                   start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process, stderr)
        yield base
    finally:
        ui.stop(process)
