"""Shared fixtures: the real-data root, a throw-away MLflow store, the synthetic feature tables, the small
pipeline profile, and the deterministic hypothesis profile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run and machine (derandomize), never time out on a loaded CI box
# (deadline=None) and write no example database into the checkout: CI never flakes on a lucky or unlucky draw.
settings.register_profile("eegprivacy", derandomize=True, deadline=None, max_examples=60, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("EEGPRIVACY_HYPOTHESIS_PROFILE", "eegprivacy"))


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
    from eegprivacy.signal.table import FeaturesParams, dataset_window_features, write_feature_table

    folder = tmp_path_factory.mktemp("features")
    params = FeaturesParams.load(Path(__file__).resolve().parents[1] / "params/features.yaml", "features")

    def make(name: str) -> Path:
        path = folder / f"{name}.parquet"
        if not path.exists():
            # the dataset and feature settings the features stage uses (params/features.yaml)
            dataset = get_dataset(name, **params.dataset_kwargs(name))
            config = params.pipeline(name)
            table = dataset_window_features(dataset, config, progress=False)
            write_feature_table(table, path, dataset_version=dataset.version(), config=config, synthetic=True)
        return folder

    return make


@pytest.fixture(scope="session")
def small_pipeline(synthetic_features_dir, tmp_path_factory):
    """``run(name) -> SimpleNamespace(root, key_hex)``: the small profile of every study-A stage
    (tests/_small_pipeline.py) run into its own folder under a fresh random linkage key; once per name per
    session, so the determinism and the leak tests share runs."""
    import secrets
    from types import SimpleNamespace

    from _small_pipeline import CLINICAL, REST_TASK, run_small_pipeline

    runs = {}

    def run(name: str):
        if name not in runs:
            features = synthetic_features_dir(CLINICAL)
            assert synthetic_features_dir(REST_TASK) == features
            secret_dir = tmp_path_factory.mktemp(f"secrets-{name}")
            key_hex = secrets.token_hex(32)
            key_file = secret_dir / "linkage.key"
            key_file.touch(mode=0o600)
            key_file.write_text(key_hex + "\n")
            root = run_small_pipeline(tmp_path_factory.mktemp(f"pipeline-{name}"), features, key_file)
            runs[name] = SimpleNamespace(root=root, key_hex=key_hex)
        return runs[name]

    return run


@pytest.fixture
def torch_one_thread():
    """torch limited to one intra-op thread for the test, restored after (torch imported only where used)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
