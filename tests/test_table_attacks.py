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


# How the two re-identification tables are formed per synthetic cohort: the rest/task cohort as eegmat (task
# released, rest held), the clinical cohort (one condition per patient) as MSU (first vs second half of each
# recording).
PAIRINGS = {"synthetic_rest_task": {"release_condition": "task", "auxiliary_condition": "rest"},
            "synthetic_clinical": {"split": "halves"}}


def _small_params(folder, mechanism: str, epsilons: list, **pairings) -> str:
    """A two-seed grid of one mechanism (plus the no-release baseline) and both attacks, written to folder."""
    params = {"table_attacks": {
        "mechanisms": [mechanism], "epsilons": epsilons, "noise_seeds": 2,
        "reidentification": {"datasets": pairings or PAIRINGS, "metrics": ["euclidean"], "top_k": [1, 5]},
        "membership": {"member_fraction": 0.5, "trials": 10, "scores": ["distance", "likelihood"],
                       "fprs": [0.01]}}}
    path = folder / f"ta-{mechanism}.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def _stage_argv(out, params: str, features_dir, *extra: str, dataset: str = "synthetic_rest_task") -> list[str]:
    """The stage's command line with every output under ``out``."""
    return ["table-attacks", "--dataset", dataset, "--params", params,
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


# ---- Same-session halves (a cohort with one recording per subject, as MSU) ------------------------------------
def _one_recording_windows(n_subjects=5, n_windows=59, step_s=1.0):
    """A window table as the features stage writes it: one recording per subject, windows every ``step_s``; the
    feature holds subject × 1000 + window start, so every half's mean says whose and which windows it is."""
    from eegprivacy.studies.release.table import WindowTable

    subjects = np.repeat([f"P{i:02d}" for i in range(n_subjects)], n_windows)
    starts = np.tile(np.arange(n_windows) * step_s, n_subjects)
    index = np.repeat(np.arange(n_subjects), n_windows)
    frame = pd.DataFrame({"dataset": "toy", "subject": subjects, "recording": "rec1", "condition": "rest",
                          "label": index % 2, "window": np.tile(np.arange(n_windows), n_subjects),
                          "t_start": starts, "sfreq": 128.0, "flags": "", "F3:rms": index * 1000.0 + starts})
    return WindowTable("toy", "v", "h", True, frame.sample(frac=1.0, random_state=0), pd.DataFrame())


def test_recording_halves_share_no_sample_and_align_by_subject():
    from eegprivacy.studies.release.table_attacks import half_recording_tables, recording_halves

    windows = _one_recording_windows()
    first, second = recording_halves(windows.frame, window_s=2.0)  # 2-s windows at 1-s steps over 60 s
    assert sorted(first["t_start"].unique()) == list(np.arange(0.0, 29.0))   # windows 0-2 s ... 28-30 s
    assert sorted(second["t_start"].unique()) == list(np.arange(30.0, 59.0))  # windows 30-32 s ... 58-60 s
    assert (first["t_start"] + 2.0).max() <= second["t_start"].min()  # no sample in both halves
    released, auxiliary = half_recording_tables(windows, window_s=2.0)
    subject = np.arange(5) * 1000.0
    np.testing.assert_allclose(released[:, 0], subject + 14.0)  # row i: subject i's first half (mean start 14)
    np.testing.assert_allclose(auxiliary[:, 0], subject + 44.0)  # and its second half (mean start 44)
    # Without the window length: the median split (cohort_audit's, windows at the middle may overlap)
    first, second = recording_halves(windows.frame)
    assert first["t_start"].max() == 28.0 and second["t_start"].min() == 29.0


def test_halves_need_three_subjects_and_one_condition_per_subject(synthetic_features_dir):
    from eegprivacy.studies.release.config import TablePairing
    from eegprivacy.studies.release.table_attacks import half_recording_tables, load_attack_tables

    with pytest.raises(ValueError, match="only 2 subjects have windows in both halves"):
        half_recording_tables(_one_recording_windows(n_subjects=2), window_s=2.0)
    with pytest.raises(ValueError, match="more than one condition"):  # rest + task per subject: not one session
        load_attack_tables("synthetic_rest_task", TablePairing(split="halves"),
                           synthetic_features_dir("synthetic_rest_task"))


@pytest.mark.parametrize("pairing,message", [
    ({"split": "halves", "release_condition": "rest"}, "takes no release_condition"),
    ({"release_condition": "task"}, "needs two different conditions"),
    ({"release_condition": "rest", "auxiliary_condition": "rest"}, "needs two different conditions"),
    ({"split": "thirds"}, "must be one of conditions, halves"),
])
def test_pairing_params_are_checked(pairing, message):
    from eegprivacy.params import ParamsError
    from eegprivacy.studies.release.config import TablePairing

    with pytest.raises(ParamsError, match=message):
        TablePairing.from_mapping(pairing, "params/table_attacks.yaml", "table_attacks.reidentification.datasets.x.")


def test_a_dataset_without_a_pairing_stops_the_stage_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    params = _small_params(tmp_path, "gaussian_analytic", [1], eegmat=PAIRINGS["synthetic_rest_task"])
    with pytest.raises(ValueError, match="reidentification.datasets has no entry for 'synthetic_rest_task'"):
        main(_stage_argv(tmp_path, params, tmp_path / "no-features"))
    assert not (tmp_path / "rows.csv").exists()


@pytest.mark.slow
def test_same_session_halves_stage_labels_its_attack_kind(tmp_path, synthetic_features_dir, monkeypatch):
    monkeypatch.chdir(REPO)
    argv = _stage_argv(tmp_path, _small_params(tmp_path, "gaussian_analytic", [0.5]),
                       synthetic_features_dir("synthetic_clinical"), dataset="synthetic_clinical")
    assert main(argv) == 0
    rows = pd.read_csv(tmp_path / "rows.csv")
    reid = rows[rows.attack == "reidentification"]
    assert (reid["attack_kind"] == "same-session halves").all() and rows.loc[rows.attack == "membership",
                                                                              "attack_kind"].isna().all()
    K = 17
    assert (reid["n"] == K).all() and (reid.loc[reid.metric == "top1_accuracy", "chance"] == 1 / K).all()
    top1 = reid[reid.metric == "top1_accuracy"].groupby("mechanism")["value"].mean()
    control = reid[reid.metric == "top1_accuracy_shuffled_control"].groupby("mechanism")["value"].mean()
    # Halves of one session link far above chance without noise; the no-signal control (the same distances
    # scored against a random identity map) does not, and the noise at ε = 0.5 costs the attacker its lead.
    assert top1["none"] > 0.5 and top1["none"] > top1["gaussian_analytic"]
    assert control["none"] < 0.25 and control["gaussian_analytic"] < 0.25
    headline = json.loads((tmp_path / "ta.json").read_text())
    entry = headline["reidentification/nearest_neighbour_euclidean/none/none/top1_accuracy"]
    assert entry["attack_kind"] == "same-session halves" and entry["wilson_over"] == "subjects"
    assert entry["ci_over"] == "seeds"
    assert "attack_kind" not in headline["membership/distance/none/none/auroc"]
    assert headline["membership/likelihood/gaussian_analytic/eps_0.5/auroc"]["eps_unit"] == "subject"

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    kinds = {(r.data.tags["attack"], r.data.tags.get("split")) for r in runs}
    assert kinds == {("reidentification", "same-session halves"), ("membership", None)}
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert all(r.data.params["attack_kind"] == "same-session halves" for r in parents)


def test_release_noise_is_independent_per_mechanism_and_epsilon(monkeypatch):
    """Two mechanisms or two ε at one seed never reuse one noise draw rescaled (their rows would move in
    lockstep); common random numbers, the named option, does exactly that."""
    from eegprivacy.studies.release import table_attacks
    from eegprivacy.studies.release.config import MembershipSettings, ReidentificationSettings

    released_base, auxiliary = _people(n=30, d=40)
    clean, _ = table_attacks.release_rows(released_base, "none", float("inf"), 1e-5, 2.0, None)
    reid = ReidentificationSettings.from_mapping({"datasets": {}, "metrics": ["euclidean"], "top_k": [1]})
    mia = MembershipSettings.from_mapping({"member_fraction": 0.5, "trials": 2, "scores": ["distance"],
                                           "fprs": [0.01]})
    drawn = []
    monkeypatch.setattr(table_attacks, "reidentification_rows", lambda released, *a, **k: drawn.append(released))

    def noise(mechanism, epsilon, crn, seed=0):
        config = {"attack": "reidentification", "mechanism": mechanism, "epsilon": epsilon,
                  "common_random_numbers": crn}
        table_attacks.attack_cell(config, seed, released_base, auxiliary, released_base, reid, mia, 2.0, 1e-5)
        return (drawn[-1] - clean).ravel()

    def correlation(a, b):
        return float(np.corrcoef(a, b)[0, 1])

    for crn, expected in ((False, 0.0), (True, 1.0)):
        assert abs(correlation(noise("gaussian_analytic", 2.0, crn), noise("gaussian_classic", 2.0, crn))
                   - expected) < 0.1
        assert abs(correlation(noise("gaussian_analytic", 2.0, crn), noise("gaussian_analytic", 20.0, crn))
                   - expected) < 0.1
    assert abs(correlation(noise("gaussian_analytic", 2.0, False), noise("gaussian_analytic", 2.0, False, 1))) < 0.1
