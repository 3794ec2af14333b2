"""Stage optuna-study-a on the tiny SYNTHETIC rest/task cohort (12 subjects, the task recording split in halves, 2
noise seeds, a few trials): the search-time front is non-dominated, every front trial is re-evaluated on fresh
seeds disjoint from the search's and reported with those values, the outputs exist, MLflow holds one parent with
one child per trial and per re-evaluated front trial carrying the required tags, a rerun with a larger target
only runs the new trials, and the same seed proposes the same trials. Without signal the utility objective (AUROC
of the release minus its matched null) is 0.

The cohort has no patient label, so the test registers one (alternating subjects) for the utility objective.
"""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from _optuna_search import assert_resume_adds_only_missing, assert_same_trials

from eegprivacy.cli import main
from eegprivacy.studies.release import search as study
from eegprivacy.studies.release import table as _study_a
from eegprivacy.studies.release.config import OptunaStudyAConfig
from eegprivacy.studies.release.search import hypervolume
from eegprivacy.tracking import REQUIRED_TAGS, tracking_uri

REPO = Path(__file__).resolve().parents[1]

CONFIG = {"dataset": "synthetic_rest_task", "label": "alternating", "condition": "task", "delta": 1.0e-5,
          "search_space": {"mechanisms": ["gaussian_analytic", "laplace_formal"], "epsilon": [0.1, 100],
                           "clip_norm": [0.5, 50]},
          "noise_seeds": 2, "reevaluation_seeds": 2, "reevaluation_seed_offset": 1000, "bootstrap": 200,
          "confidence": 0.95, "n_jobs": 1, "n_trials": 4, "sampler": "tpe", "population_size": 4, "seed": 3,
          "storage": "sqlite:///unused.db", "heartbeat_interval": 20}


@pytest.fixture(autouse=True)
def _alternating_label(monkeypatch):
    monkeypatch.setitem(_study_a.METADATA_LABELS, "alternating",
                        lambda meta: pd.Series(np.arange(len(meta)) % 2, index=meta.index))


def _args(tmp_path, synthetic_features_dir, name="run", **overrides) -> Namespace:
    """One run's params file, study database and outputs; ``argv`` is its command line."""
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"optuna_study_a": {**CONFIG, **overrides}}))
    args = Namespace(params=str(params), storage=f"sqlite:///{tmp_path / name}.db",
                     metrics=str(tmp_path / name / "front.json"), trials_csv=str(tmp_path / name / "trials.csv"),
                     figure=str(tmp_path / name / "pareto.png"),
                     features_dir=str(synthetic_features_dir("synthetic_rest_task")))
    args.argv = ["optuna-study-a", "--params", args.params, "--storage", args.storage, "--metrics", args.metrics,
                 "--trials-csv", args.trials_csv, "--figure", args.figure, "--features-dir", args.features_dir,
                 "--no-progress"]
    return args


def _runs(experiment="study-a-dp-release"):
    """(parents, search children, re-evaluation children) of the experiment."""
    client = mlflow.MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return (parents, [r for r in children if r.data.params.get("phase") == "search"],
            [r for r in children if r.data.params.get("phase") == "reevaluation"])


def _trials(path, phase="search") -> pd.DataFrame:
    tidy = pd.read_csv(path)
    tidy = tidy[tidy["phase"] == phase]
    return tidy.pivot_table(index=["trial", "mechanism", "epsilon", "clip_norm", "pareto"], columns="metric",
                            values="value").reset_index().sort_values("trial")


@pytest.mark.slow
def test_search_front_reevaluation_tracking_resume_and_determinism(tmp_path, synthetic_features_dir):
    args = _args(tmp_path, synthetic_features_dir)
    assert main(args.argv) == 0

    front = json.loads(Path(args.metrics).read_text())
    assert front["n_trials"] == 4 and front["synthetic"] is True and front["n_subjects"] == 12
    assert front["front_size"] == len(front["front"]) >= front["front_distinct_points"] >= 1
    assert front["chance"][study.UTILITY] == 0.0 and front["chance"]["top1_accuracy"] == pytest.approx(1 / 12)
    assert front["reidentification"].startswith("same-session") and front["eps_unit"] == "subject"
    assert front["noise_seeds"] == [0, 1] and front["reevaluation_seeds"] == [1000, 1001]
    assert -1 <= front["hypervolume"] <= 1 and -1 <= front["hypervolume_reevaluated"] <= 1
    assert Path(args.figure).stat().st_size > 10_000
    trials, reevaluated = _trials(args.trials_csv), _trials(args.trials_csv, "reevaluation")
    assert len(trials) == 4
    points = trials[[study.UTILITY, "top1_accuracy"]].to_numpy()
    for entry in front["front"]:  # no trial is at least as good in both search objectives and better in one
        p = np.array([entry[f"search_{study.UTILITY}"], entry["search_top1_accuracy"]])
        dominated = (points[:, 0] >= p[0]) & (points[:, 1] <= p[1]) & ((points[:, 0] > p[0]) | (points[:, 1] < p[1]))
        assert not dominated.any()
        # the reported values are the re-evaluation's, with intervals around them and the winner's curse beside
        assert entry["n_seeds"] == 2
        assert entry[f"{study.UTILITY}_ci_low"] <= entry[study.UTILITY] <= entry[f"{study.UTILITY}_ci_high"]
        assert entry[study.UTILITY] == pytest.approx(entry["auroc_release"] - entry["auroc_null"])
        assert entry["utility_shrinkage"] == pytest.approx(entry[f"search_{study.UTILITY}"] - entry[study.UTILITY])
        assert 0 <= entry["p_value"] <= entry["p_holm"] <= 1
    assert set(trials.loc[trials["pareto"], "trial"]) == {e["trial"] for e in front["front"]}
    tidy = pd.read_csv(args.trials_csv)
    per_seed = tidy["per_seed"].map(json.loads)
    assert per_seed[tidy["phase"] == "search"].map(len).eq(2).all()  # means over two noise seeds, each kept
    again = tidy[tidy["phase"] == "reevaluation"]
    assert set(again["trial"]) == {e["trial"] for e in front["front"]} and per_seed[again.index].map(len).eq(2).all()
    assert set(again.loc[again["metric"] == study.UTILITY, "ci_over"]) == {"subjects+seeds"}
    assert set(again.loc[again["metric"] == "top1_accuracy", "ci_over"]) == {"subjects"}

    parents, children, reevaluations = _runs()
    assert len(parents) == 1 and len(children) == 4 and len(reevaluations) == front["front_size"]
    parent_id = parents[0].info.run_id
    for run in children + reevaluations:
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent_id
        assert all(tags.get(t) for t in REQUIRED_TAGS)
        assert tags["stage"] == "optuna_study_a" and tags["study"] == "a" and tags["synthetic"] == "true"
        assert tags["mechanism"] == run.data.params["mechanism"]
        assert float(tags["epsilon"]) == pytest.approx(float(run.data.params["epsilon"]))
        assert {study.UTILITY, "top1_accuracy", "auroc_null"} <= set(run.data.metrics)
    assert {float(r.data.params["trial_number"]) for r in reevaluations} == {e["trial"] for e in front["front"]}
    artifacts = {a.path for a in mlflow.MlflowClient(tracking_uri()).list_artifacts(parent_id)}
    assert {"front.json", "trials.csv", "pareto.png"} <= artifacts

    # Resume: a larger target adds exactly the missing trials; the first four are not recomputed.
    assert_resume_adds_only_missing(_args(tmp_path, synthetic_features_dir, n_trials=6), trials, _runs, _trials)

    # Same seed, fresh storage: the same trials with the same values, and the same re-evaluation.
    again_args = _args(tmp_path, synthetic_features_dir, name="again")
    assert main(again_args.argv) == 0
    assert_same_trials(_trials(again_args.trials_csv), trials)
    pd.testing.assert_frame_equal(_trials(again_args.trials_csv, "reevaluation"), reevaluated)


def test_front_is_reported_with_fresh_seed_values(tmp_path, synthetic_features_dir, monkeypatch):
    """With the scoring replaced by a seed-labelled fake, the search sees only seeds 0..noise_seeds-1, the front
    only the re-evaluation seeds, and the JSON and CSV carry the re-evaluation's values beside the search's; a
    rerun recomputes neither."""
    calls = []

    def fake(X, y, auxiliary, mechanism, epsilon, delta, clip_norm, seed):
        calls.append((float(epsilon), seed))
        fresh = seed >= CONFIG["reevaluation_seed_offset"]
        proba = np.linspace(0, 1, len(y))  # any scores: the bootstrap needs per-patient values
        utility = 0.01 * epsilon - (0.5 if fresh else 0.0)  # fresh seeds shrink every trial's utility by 0.5
        return {"auroc_release": 0.5 + utility, "auroc_null": 0.5, study.UTILITY: utility,
                "proba_release": proba, "proba_null": proba[::-1], "top1_accuracy": 0.25 if fresh else 0.125,
                "top1_accuracy_shuffled_control": 0.0}

    monkeypatch.setattr(study, "evaluate_seed", fake)
    args = _args(tmp_path, synthetic_features_dir)
    assert main(args.argv) == 0
    front = json.loads(Path(args.metrics).read_text())
    front_eps = {e["epsilon"] for e in front["front"]}
    search_seeds = {seed for _, seed in calls[:4 * CONFIG["noise_seeds"]]}
    fresh_seeds = {seed for eps, seed in calls[4 * CONFIG["noise_seeds"]:]}
    assert search_seeds == {0, 1} and fresh_seeds == {1000, 1001} and not search_seeds & fresh_seeds
    assert {eps for eps, _ in calls[4 * CONFIG["noise_seeds"]:]} == front_eps  # only front trials re-evaluated
    for entry in front["front"]:
        assert entry[f"search_{study.UTILITY}"] == pytest.approx(0.01 * entry["epsilon"])
        assert entry[study.UTILITY] == pytest.approx(0.01 * entry["epsilon"] - 0.5)
        assert entry["utility_shrinkage"] == pytest.approx(0.5)
        assert entry["search_top1_accuracy"] == 0.125 and entry["top1_accuracy"] == 0.25
    tidy = pd.read_csv(args.trials_csv)
    rows = tidy[(tidy["phase"] == "reevaluation") & (tidy["metric"] == study.UTILITY)]
    assert sorted(rows["value"]) == pytest.approx(sorted(e[study.UTILITY] for e in front["front"]))
    assert (rows["ci_over"] == "subjects+seeds").all()

    # A rerun on the same study scores nothing again: trials and re-evaluations are both kept in the study.
    calls.clear()
    assert main(args.argv) == 0
    assert calls == [] and json.loads(Path(args.metrics).read_text())["front"] == front["front"]


def _label_free_table(n=16, d=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), np.arange(n) % 2, rng.normal(size=(n, d))


def test_utility_objective_is_zero_without_signal():
    """A zero-signal table: the release IS its matched null (same mechanism, same noise draw, same MLP seed), so
    the objective is exactly 0, not the LOSO AUROC the protocol reaches on noise alone."""
    X, y, auxiliary = _label_free_table()
    for mechanism in ("gaussian_analytic", "laplace_formal"):
        result = study.evaluate_seed(np.zeros_like(X), y, auxiliary, mechanism, 1.0, 1e-5, 5.0, seed=3)
        assert result[study.UTILITY] == pytest.approx(0.0, abs=1e-12)
        assert result["auroc_release"] == pytest.approx(result["auroc_null"], abs=1e-12)


@pytest.mark.slow
def test_utility_objective_is_near_zero_on_label_free_features():
    """Features unrelated to the label: the raw LOSO AUROC sits away from 0.5 (the protocol's noise floor), the
    difference from the matched null stays near 0."""
    X, y, auxiliary = _label_free_table(n=20, d=8, seed=1)
    results = [study.evaluate_seed(X, y, auxiliary, "gaussian_analytic", 50.0, 1e-5, 5.0, seed) for seed in range(4)]
    difference, raw = (np.mean([r[key] for r in results]) for key in (study.UTILITY, "auroc_release"))
    assert abs(difference) < 0.1 and abs(difference) < abs(raw - 0.5)


def test_reevaluated_values_pair_release_and_null():
    y = np.arange(20) % 2
    proba = np.linspace(0, 1, 20)
    same = [{"proba_release": proba, "proba_null": proba, "auroc_release": 0.6, "auroc_null": 0.6,
             study.UTILITY: 0.0, "top1_accuracy": 0.25, "top1_accuracy_shuffled_control": 0.05}] * 3
    values = study.reevaluated_values(same, y, 200, 0.95)
    assert values[study.UTILITY] == 0.0 and values[f"{study.UTILITY}_ci_low"] == values[f"{study.UTILITY}_ci_high"] == 0
    assert values["p_value"] == 1.0  # no replicate above 0: no evidence of utility
    assert values["auroc_release_ci_low"] < values["auroc_release_ci_high"]  # the patient resampling moves each arm
    assert values["top1_accuracy_ci_low"] <= 0.25 <= values["top1_accuracy_ci_high"]


def test_hypervolume_of_a_two_point_front():
    # reference (0, 1): rectangles [0.1, 1] x [0, 0.1] and [0.4, 1] x [0, 0.3] overlap in [0.4, 1] x [0, 0.1]
    assert hypervolume([(0.1, 0.1), (0.3, 0.4)]) == pytest.approx(0.3 * 0.1 + 0.6 * 0.3)
    assert hypervolume([(-0.05, 0.1)]) == 0.0  # below the matched null adds nothing


def test_non_dominated():
    assert study.non_dominated([(0.2, 0.5), (0.1, 0.6), (0.3, 0.5), (0.0, 0.1)]) == [False, False, True, True]


def test_shipped_params_load_and_bad_values_are_refused(tmp_path):
    from eegprivacy.params import ParamsError

    shipped = OptunaStudyAConfig.load(REPO / "params/optuna.yaml", "optuna_study_a")
    assert shipped.sampler in ("tpe", "nsga2") and shipped.reevaluation_seed_offset >= shipped.noise_seeds
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"optuna_study_a": {**CONFIG, "search_space": {
        **CONFIG["search_space"], "epsilon": [10, 0.1]}}}))
    with pytest.raises(ParamsError, match="epsilon"):
        OptunaStudyAConfig.load(bad, "optuna_study_a")
    bad.write_text(yaml.safe_dump({"optuna_study_a": {**CONFIG, "reevaluation_seed_offset": 1}}))
    with pytest.raises(ParamsError, match="reevaluation_seed_offset.*fresh"):
        OptunaStudyAConfig.load(bad, "optuna_study_a")
