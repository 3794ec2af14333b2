"""`dvc repro` smoke run in a temporary copy of the repo: the features stage runs, writes its outputs, logs an
MLflow run tagged with the dataset version, and is skipped when nothing changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SKIP = ("data/", "metrics/", "reports/", "mlflow.db", "mlartifacts/", ".venv/")


def _copy_repo(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for rel in listed:
        if rel.startswith(SKIP) or not (REPO / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, check=True, env=env, capture_output=True)


def _repro(cwd: Path, *targets: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(Path(sys.executable).parent / "dvc"), "repro", *targets], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_dvc_repro_features_on_a_small_synthetic_cohort(tmp_path):
    repo = tmp_path / "repo"
    _copy_repo(repo)
    params_path = repo / "params" / "features.yaml"
    params = yaml.safe_load(params_path.read_text())
    small = {"seed": 0, "n_patients": 4, "n_positive": 1, "n_recordings": None,
             "recordings_per_patient": [2, 2], "duration_s": [12.0, 14.0]}
    params["features"]["datasets"]["synthetic_clinical"] = small
    params_path.write_text(yaml.safe_dump(params))

    result = _repro(repo, "features@synthetic_clinical")
    assert result.returncode == 0, result.stdout + result.stderr

    version = json.loads((repo / "data/versions/synthetic_clinical.json").read_text())
    assert version["synthetic"] is True and version["subjects"] == 4
    table = pd.read_parquet(repo / "data/features/synthetic_clinical.parquet")
    assert sum(":" in c for c in table.columns) == 33 * 11
    metrics = json.loads((repo / "metrics/features_synthetic_clinical.json").read_text())
    assert metrics["all_finite"] and metrics["n_recordings"] == 8
    assert metrics["dataset_version"] == version["version"]
    assert (repo / "reports/figures/features_synthetic_clinical.png").stat().st_size > 10_000

    client = mlflow.MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("shared-features")
    versions = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'dataset_version'")
    assert [r.data.tags["dvc_stage"] for r in versions] == ["dataset_version@synthetic_clinical"]
    assert versions[0].data.metrics["subjects"] == 4
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'features'")
    assert len(runs) == 1
    tags = runs[0].data.tags
    assert tags["dataset_version"] == version["version"]
    assert tags["synthetic"] == "true" and tags["seed"] == "0" and tags["dvc_stage"] == "features@synthetic_clinical"
    assert runs[0].data.metrics["n_feature_columns"] == 363

    again = _repro(repo, "features@synthetic_clinical")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "didn't change, skipping" in again.stdout
    assert len(client.search_runs([experiment.experiment_id])) == 2  # the version and the features run, not again
