"""Attacks on released tables: re-identification by nearest neighbour, membership inference, and the stage."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.base import clone

from eegprivacy.attacks.metrics import attack_summary, auroc, tpr_at_fpr
from eegprivacy.attacks.table import (
    NearestNeighbourReidentifier,
    TableMembershipInference,
    pairwise_distances,
    top_k_hits,
)
from eegprivacy.cli import main
from eegprivacy.privacy import DPFeatureReleaser, make_mechanism
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]


def _people(n=30, d=40, seed=0):
    """Two 'recordings' per person: a stable person-specific vector plus a small session effect."""
    rng = np.random.default_rng(seed)
    identity = rng.normal(size=(n, d)) * 3
    return identity + rng.normal(size=(n, d)) * 0.5, identity + rng.normal(size=(n, d)) * 0.5 + 2.0


def test_top_k_hits_counts_ties_against_the_attacker():
    distances = np.array([[0.0, 0.0, 1.0], [2.0, 1.0, 0.5]])
    assert top_k_hits(distances, np.array([0, 2]), 1).tolist() == [False, True]  # a tie is not a top-1 hit
    assert top_k_hits(distances, np.array([0, 0]), 2).tolist() == [True, False]


def test_pairwise_distances_match_brute_force():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(5, 7)), rng.normal(size=(4, 7))
    brute = np.linalg.norm(A[:, None] - B[None], axis=-1)
    np.testing.assert_allclose(pairwise_distances(A, B), brute, atol=1e-9)
    cos = 1 - (A @ B.T) / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    np.testing.assert_allclose(pairwise_distances(A, B, "cosine"), cos, atol=1e-12)
    with pytest.raises(ValueError, match="unknown metric"):
        pairwise_distances(A, B, "manhattan")


def test_reidentification_succeeds_without_noise_and_fails_under_heavy_noise():
    released_session, auxiliary = _people()
    attacker = NearestNeighbourReidentifier(clip_norm=2.0).fit(auxiliary)
    clean = DPFeatureReleaser(make_mechanism("gaussian_analytic", 1.0), clip_norm=2.0).fit(released_session)
    truth = np.arange(len(auxiliary))
    assert attacker.top_k_accuracy(clean.clipped_, truth, 1) > 0.9
    assert (attacker.predict(clean.clipped_) == truth).mean() > 0.9
    noisy = DPFeatureReleaser(make_mechanism("laplace_formal", 0.1), clip_norm=2.0, random_state=0)
    accuracies = [attacker.top_k_accuracy(noisy.fit_transform(released_session), truth, 1) for _ in range(20)]
    assert np.mean(accuracies) < 0.12  # chance is 1/30
    assert clone(attacker).get_params() == {"metric": "euclidean", "clip_norm": 2.0}


def test_membership_inference_separates_members_only_when_the_noise_is_small():
    population, _ = _people(n=40)
    rng = np.random.default_rng(3)
    for score in ("distance", "likelihood"):
        attacker = TableMembershipInference(score=score, clip_norm=2.0).fit(population)
        results = {}
        for epsilon in (1e4, 0.5):
            labels, scores = [], []
            for trial in range(30):
                members = rng.choice(40, size=20, replace=False)
                y = np.isin(np.arange(40), members).astype(int)
                releaser = DPFeatureReleaser(make_mechanism("gaussian_analytic", epsilon), clip_norm=2.0,
                                             random_state=trial)
                released = releaser.fit_transform(population[members])
                labels.append(y)
                scores.append(attacker.decision_function(released, population, releaser.calibration_))
            results[epsilon] = auroc(np.concatenate(labels), np.concatenate(scores))
        assert results[1e4] > 0.95, (score, results)
        assert abs(results[0.5] - 0.5) < 0.06, (score, results)
    with pytest.raises(ValueError, match="calibration"):
        TableMembershipInference(score="likelihood").fit(population).decision_function(population, population)


def test_attack_metrics_low_fpr_is_conservative_and_needs_enough_negatives():
    y = np.r_[np.ones(10), np.zeros(1000)]
    scores = np.r_[np.full(10, 5.0), np.linspace(0, 1, 1000)]
    assert tpr_at_fpr(y, scores, 0.001) == 1.0
    flipped = np.r_[np.full(10, 0.5), np.linspace(0, 1, 1000)]  # members sit mid-pack
    assert tpr_at_fpr(y, flipped, 0.01) == 0.0
    assert np.isnan(tpr_at_fpr(y[:510], scores[:510], 0.001))  # 500 negatives cannot resolve FPR 0.1%
    summary = attack_summary(y, scores)
    assert summary["auroc"] == 1.0 and summary["n_nonmembers"] == 1000
    with pytest.raises(ValueError):
        auroc([0, 1, 2], [0.1, 0.2, 0.3])


@pytest.fixture(scope="module")
def rest_task_features(synthetic_features_dir):
    return synthetic_features_dir("synthetic_rest_task")


def _small_params(folder, mechanism: str, epsilons: list) -> str:
    """A two-seed grid of one mechanism (plus the no-release baseline) and both attacks, written to folder."""
    params = {"table_attacks": {
        "mechanisms": [mechanism], "epsilons": epsilons, "noise_seeds": 2,
        "reidentification": {"release_condition": "task", "auxiliary_condition": "rest", "metrics": ["euclidean"],
                             "top_k": [1, 5]},
        "membership": {"member_fraction": 0.5, "trials": 10, "scores": ["distance", "likelihood"],
                       "fprs": [0.01]}}}
    path = folder / f"ta-{mechanism}.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def _stage_argv(out, params: str, features_dir, *extra: str) -> list[str]:
    """The stage's command line with every output under ``out``."""
    return ["table-attacks", "--dataset", "synthetic_rest_task", "--params", params,
            "--release-params", "params/dp_release.yaml", "--out", str(out / "rows.csv"),
            "--metrics", str(out / "ta.json"), "--figure", str(out / "ta.png"), "--cells", str(out / "cells"),
            "--features-dir", str(features_dir), "--no-progress", *extra]


@pytest.mark.slow
def test_table_attacks_stage_rows_runs_and_resume(tmp_path, rest_task_features, monkeypatch):
    monkeypatch.chdir(REPO)
    argv = _stage_argv(tmp_path, _small_params(tmp_path, "gaussian_analytic", [1, 1000]), rest_task_features)
    assert main(argv) == 0
    rows = pd.read_csv(tmp_path / "rows.csv")
    top1 = rows[(rows.metric == "top1_accuracy")].groupby(["mechanism", "epsilon"])["value"].mean()
    assert top1["none", np.inf] > top1["gaussian_analytic", 1.0]  # noise must cost the attacker something
    assert (rows.loc[rows.metric == "top1_accuracy", "chance"] == 1 / 12).all()
    assert rows.loc[rows.metric == "top1_accuracy", ["ci_low", "ci_high"]].notna().all().all()
    assert set(rows["attack"]) == {"reidentification", "membership"}
    headline = json.loads((tmp_path / "ta.json").read_text())
    assert "reidentification/nearest_neighbour_euclidean/none/none/top1_accuracy" in headline
    assert (tmp_path / "ta.png").stat().st_size > 10_000

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 * (1 + 2) * 2  # attacks × (none + 2 ε) × seeds
    for run in runs:
        assert run.data.tags["attack"] in {"reidentification", "membership"}
        assert run.data.tags["synthetic"] == "true"
    assert all("S01" not in json.dumps(run.data.params) for run in runs)

    before = len(runs)
    assert main(argv) == 0  # resumes: every cell on disk, only the parents are new
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    assert len([r for r in runs if "mlflow.parentRunId" in r.data.tags]) == len(children)
    assert len(runs) == before + 4
    assert pd.read_csv(tmp_path / "rows.csv").equals(rows)


@pytest.mark.slow
def test_table_attacks_rows_do_not_depend_on_the_number_of_processes(tmp_path, rest_task_features, monkeypatch):
    monkeypatch.chdir(REPO)
    params = _small_params(tmp_path, "laplace_implemented", [1, 10])
    tables = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        assert main(_stage_argv(out, params, rest_task_features, "--jobs", str(jobs))) == 0
        tables[jobs] = pd.read_csv(out / "rows.csv")
    assert tables[1].groupby(["attack", "mechanism", "epsilon"])["seed"].nunique().eq(2).all()
    assert len(tables[1].groupby(["attack", "mechanism", "epsilon"])) == 2 * (1 + 2)
    pd.testing.assert_frame_equal(tables[1], tables[2])
    assert (tmp_path / "jobs1" / "ta.json").read_text() == (tmp_path / "jobs2" / "ta.json").read_text()
