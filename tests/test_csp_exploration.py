"""The study B CSP exploration stage on a tiny SYNTHETIC motor-imagery cohort: correlation table, figure, run."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import yaml

from eegprivacy.cli import main
from eegprivacy.studies.federated.exploration import TOP, correlations
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]


def test_correlations_rank_by_strength_and_find_the_informative_feature():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(50), np.ones(50)]
    channels = rng.normal(size=(100, 3))
    channels[:, 2] += 2 * y  # only the third channel carries the label
    table = correlations(channels, ["Fz", "Cz", "Pz"], rng.normal(size=(100, 2)), y)
    assert table["feature"].iloc[0] == "logvar:Pz" and table["r"].iloc[0] > 0.6
    assert table["abs_r"].is_monotonic_decreasing and len(table) == 5


def test_stage_writes_top_correlations_figure_and_a_tagged_run(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    params = yaml.safe_load((REPO / "params/federated_mia.yaml").read_text())
    params["federated_mia"]["datasets"]["synthetic_mi"]["dataset"] = {
        "n_subjects": 3, "n_sessions": 1, "n_runs": 1, "n_trials_per_class": 10, "seed": 0}
    path = tmp_path / "fm.yaml"
    path.write_text(yaml.safe_dump(params))
    assert main(["csp-exploration", "--dataset", "synthetic_mi", "--params", str(path),
                 "--correlations", str(tmp_path / "c.csv"), "--figure", str(tmp_path / "pca.png")]) == 0
    table = pd.read_csv(tmp_path / "c.csv")
    assert len(table) == TOP and table["synthetic"].all()
    assert table["feature"].str.startswith("csp_").any()
    assert (tmp_path / "pca.png").stat().st_size > 10_000
    client = mlflow.MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name("study-b-federated-mia").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["synthetic"] == "true"
    assert runs[0].data.tags["dvc_stage"] == "csp_exploration@synthetic_mi"
