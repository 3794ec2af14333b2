"""Study A stages end to end on the synthetic clinical cohort with a tiny grid: per-seed rows, parent/child MLflow
runs with the required tags and noise_scale, resume without recomputation, aggregation, and no identifiers."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.data import get_dataset
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import write_rows
from eegprivacy.studies.release.utility import utility_sweeps
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]

SMALL = {
    "dp_release": {"clip_norm": 2.0, "delta": 1.0e-5, "epsilons": [1, 10],
                   "mechanisms": ["gaussian_analytic", "laplace_implemented"], "noise_seeds": 2,
                   "datasets": {"synthetic_clinical": {"label": "label"}}},
    "dp_utility": {"mechanisms": ["gaussian_analytic", "laplace_implemented"], "baseline_mlp_seeds": 2,
                   "nested_seeds": 1, "nested_inner_folds": 3, "permutations": 2, "n_jobs": 1, "figure_epsilon": 10,
                   "bootstrap": 200},
}


@pytest.fixture(scope="module")
def features_dir(synthetic_features_dir):
    """Window features of the default synthetic clinical cohort (what the features stage writes)."""
    return synthetic_features_dir("synthetic_clinical")


@pytest.mark.slow
def test_study_a_sweep_end_to_end(tmp_path, features_dir, monkeypatch):
    monkeypatch.chdir(REPO)  # stages read params/features.yaml for the dataset's constructor arguments
    params = tmp_path / "dp.yaml"
    params.write_text(yaml.safe_dump(SMALL))
    common = ["--dataset", "synthetic_clinical", "--params", str(params), "--cells", str(tmp_path / "cells"),
              "--features-dir", str(features_dir), "--no-progress"]
    for stage in ("dp_release", "dp_utility"):  # the folders dp-aggregate reads (dvc.yaml's outs)
        assert main([stage.replace("_", "-"), "--out", str(tmp_path / stage / f"{stage}_synthetic_clinical.csv"),
                     *common]) == 0

    release_rows = pd.read_csv(tmp_path / "dp_release" / "dp_release_synthetic_clinical.csv")
    assert set(release_rows["seed"]) == {0, 1} and release_rows["config_key"].nunique() == 4
    snr = release_rows[(release_rows.metric == "snr_db")].groupby(["mechanism", "epsilon"])["value"].mean()
    assert snr["gaussian_analytic", 10.0] > snr["gaussian_analytic", 1.0]  # less noise, better SNR
    utility_rows = pd.read_csv(tmp_path / "dp_utility" / "dp_utility_synthetic_clinical.csv")
    assert set(utility_rows["mechanism"]) == {"none", "permuted_labels", "gaussian_analytic", "laplace_implemented"}
    assert set(utility_rows["arm"]) == {"baseline", "clipped", "permuted", "release", "matched_null"}
    assert set(utility_rows[utility_rows.metric == "auroc"]["protocol"]) == {"threshold_free"}
    nested = utility_rows[utility_rows.protocol == "nested"]
    assert set(nested["seed"]) == {0}  # the nested protocol runs on the first `nested_seeds` seeds only
    ba = utility_rows[utility_rows.metric == "balanced_accuracy"]
    assert ba["value"].between(0, 1).all() and (ba["chance"] == 0.5).all()

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # dp_release per mechanism; dp_utility per mechanism (releases and their nulls) + baseline + scaled-and-clipped
    # + control + summary
    assert len(parents) == 2 + 5 + 1
    summary_run = next(p for p in parents if p.info.run_name == "dp_utility-synthetic_clinical-summary")
    assert {"utility_horizon/gaussian_analytic/auroc", "utility_horizon/laplace_implemented/auroc"} <= set(
        summary_run.data.tags)
    # one nested seed: no balanced-accuracy horizon; the test and what ε covers travel with the horizons
    assert summary_run.data.tags["utility_horizon/gaussian_analytic/balanced_accuracy"] == "not tested"
    assert summary_run.data.tags["utility_horizon_test"].startswith("fixed sequence from the largest ε")
    assert summary_run.data.tags["eps_covers"] == "features" and "in the clear" in summary_run.data.tags[
        "eps_covers_note"]
    assert "baseline/threshold_free/auroc_ci_low" in summary_run.data.metrics
    for child in children:
        tags = child.data.tags
        assert tags["dataset_version"].startswith("synthetic-") and tags["synthetic"] == "true"
        assert tags["seed"] in {"0", "1"} and tags["mechanism"]
        if tags["mechanism"] != "none":
            assert float(tags["epsilon"]) in (1.0, 10.0)
            assert float(child.data.params["noise_scale"]) > 0
    assert any(k.endswith("balanced_accuracy_mean") for p in parents for k in p.data.metrics)

    # a second run finds every cell on disk and recomputes nothing
    assert main(["dp-utility", "--out", str(tmp_path / "again.csv"), *common]) == 0
    latest = client.search_runs([experiment.experiment_id], "attributes.run_name = 'dp_utility-synthetic_clinical-"
                                "laplace_implemented'", order_by=["attributes.start_time DESC"], max_results=1)[0]
    assert latest.data.metrics["cells_resumed"] == latest.data.metrics["cells"]
    assert pd.read_csv(tmp_path / "again.csv")["value"].equals(utility_rows["value"])

    # aggregation: mean and CI per (mechanism, ε, protocol), headline JSON, figures
    assert main(["dp-aggregate", "--params", str(params), "--metrics-dir", str(tmp_path), "--figures-dir",
                 str(tmp_path / "fig"), "--plots-dir", str(tmp_path / "plots")]) == 0
    summary = json.loads((tmp_path / "dp_release.json").read_text())["synthetic_clinical"]
    assert summary["synthetic"] is True and summary["n_patients"] == 17 and summary["eps_unit"] == "subject"
    assert summary["baseline"]["auroc"]["n_seeds"] == 2 and summary["baseline"]["auroc"]["ci_over"] == "subjects+seeds"
    assert summary["negative_control_permuted_labels"]["auroc"]["n_seeds"] == 2
    assert summary["paper_protocol_optimistic"]["baseline_balanced_accuracy"]["n"] == 2
    assert set(summary["epsilon_10"]) == {"gaussian_analytic", "laplace_implemented"}
    assert set(summary["epsilon_10"]["gaussian_analytic"]["auroc"]) == {"release", "matched_null",
                                                                        "release_minus_null"}
    assert set(summary["utility_horizons"]) == {"gaussian_analytic", "laplace_implemented"}
    assert summary["utility_horizons"]["gaussian_analytic"]["balanced_accuracy"] == "not tested"
    assert summary["utility_horizons_test"]["eps_covers"] == "features"
    assert summary["clipped_no_noise"]["auroc"]["n_seeds"] == 2
    assert "in the clear" in summary["labels"]
    assert len(list((tmp_path / "fig").glob("dp_*.png"))) == 3

    # no patient identifier reaches any table the sweep wrote
    ids = set(get_dataset("synthetic_clinical", seed=0).subjects())
    for csv in tmp_path.glob("*.csv"):
        text = csv.read_text()
        assert not any(f",{pid}," in text or f"{pid}\n" in text for pid in ids), csv


@pytest.mark.slow
def test_dp_utility_rows_do_not_depend_on_the_number_of_processes(tmp_path):
    """Cells computed in 2 processes (one fit at a time in each) give the rows of a serial run, nested included.

    One ε (10) instead of SMALL's two: every arm, both mechanisms, both noise seeds and both nested seeds still
    run, 14 cells shared out over 2 processes; a second ε only adds cells of the same kind (another noise scale),
    which the end-to-end test above covers serially."""
    from _patient_tables import synthetic_patient_table

    table = synthetic_patient_table(8, 5, 4, seed=3)
    release = DPReleaseConfig.from_mapping({**SMALL["dp_release"], "epsilons": [10]})
    tables = {}
    for n_jobs in (1, 2):
        folder = tmp_path / f"jobs{n_jobs}"
        utility = DPUtilityConfig.from_mapping({**SMALL["dp_utility"], "nested_seeds": 2, "nested_inner_folds": 3,
                                                "n_jobs": n_jobs})
        _, frames = utility_sweeps(table, release, utility, "label", cells_dir=folder / "cells", progress=False)
        write_rows(frames, folder / "rows.csv")
        tables[n_jobs] = pd.read_csv(folder / "rows.csv")
    assert set(tables[1][tables[1].protocol == "nested"]["seed"]) == {0, 1}
    assert set(tables[1]["mechanism"]) == {"none", "permuted_labels", "gaussian_analytic", "laplace_implemented"}
    pd.testing.assert_frame_equal(tables[1], tables[2])
