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


@pytest.fixture(scope="session")
def synthetic_features_dir(tmp_path_factory):
    """``make(dataset_name) -> folder`` holding that synthetic cohort's window-feature table, as the features
    stage writes it; each cohort is computed once per session."""
    from eegprivacy.data import get_dataset
    from eegprivacy.signal.table import FeaturePipelineConfig, dataset_window_features, write_feature_table

    folder = tmp_path_factory.mktemp("features")

    def make(name: str) -> Path:
        path = folder / f"{name}.parquet"
        if not path.exists():
            dataset = get_dataset(name, **({"seed": 0} if name == "synthetic_clinical" else {}))
            config = FeaturePipelineConfig()
            table = dataset_window_features(dataset, config, progress=False)
            write_feature_table(table, path, dataset_version=dataset.version(), config=config, synthetic=True)
        return folder

    return make
