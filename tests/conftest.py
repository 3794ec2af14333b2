"""Shared fixtures: the real-data root and a throw-away MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mirror() -> Path | None:
    env = os.environ.get("EEGPRIVACY_DATA")
    if env and Path(env).exists():
        return Path(env)
    beside = REPO.parent / "shared" / "data"  # CI clones the repo beside a copy of shared/
    return beside if (beside / "MANIFEST.tsv").exists() else None


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The local mirror of the public EEG data; skips (with the reason) only when there is none at all."""
    root = _mirror()
    if root is None:
        pytest.skip("no local EEG mirror: set EEGPRIVACY_DATA (CI sets it in .ci/run)")
    return root


@pytest.fixture(autouse=True)
def _isolated_stores(tmp_path, monkeypatch):
    """Every test gets its own MLflow store and derived-data cache, so tests never touch the repo's."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("EEGPRIVACY_CACHE", str(tmp_path / "cache"))
    mirror = _mirror()
    if mirror is not None:
        monkeypatch.setenv("EEGPRIVACY_DATA", str(mirror))
