"""Stage optuna-study-a on the tiny SYNTHETIC rest/task cohort (12 subjects, 2 noise seeds, a few trials): the
Pareto front is non-dominated, the outputs exist, MLflow holds one parent with one child per trial carrying the
required tags, a rerun with a larger target only runs the new trials, and the same seed proposes the same trials.

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

from eegprivacy.cli import main
from eegprivacy.studies.release import table as _study_a
from eegprivacy.studies.release.config import OptunaStudyAConfig
from eegprivacy.studies.release.search import hypervolume
from eegprivacy.tracking import REQUIRED_TAGS, tracking_uri

REPO = Path(__file__).resolve().parents[1]

CONFIG = {"dataset": "synthetic_rest_task", "label": "alternating", "release_condition": "task",
          "auxiliary_condition": "rest", "delta": 1.0e-5,
          "search_space": {"mechanisms": ["gaussian_analytic", "laplace_formal"], "epsilon": [0.1, 100],
                           "clip_norm": [0.5, 50]},
          "noise_seeds": 2, "protocol": "optimistic", "n_jobs": 1, "n_trials": 4, "sampler": "tpe",
          "population_size": 4, "seed": 3, "storage": "sqlite:///unused.db", "heartbeat_interval": 20}


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
    client = mlflow.MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def _trials(path) -> pd.DataFrame:
    tidy = pd.read_csv(path)
    return tidy.pivot_table(index=["trial", "mechanism", "epsilon", "clip_norm", "pareto"], columns="metric",
                            values="value").reset_index().sort_values("trial")


@pytest.mark.slow
def test_search_front_tracking_resume_and_determinism(tmp_path, synthetic_features_dir):
    args = _args(tmp_path, synthetic_features_dir)
    assert main(args.argv) == 0

    front = json.loads(Path(args.metrics).read_text())
    assert front["n_trials"] == 4 and front["synthetic"] is True and front["n_subjects"] == 12
    assert front["front_size"] == len(front["front"]) >= front["front_distinct_points"] >= 1
    assert front["chance"] == {"balanced_accuracy": 0.5, "top1_accuracy": pytest.approx(1 / 12)}
    assert 0 <= front["hypervolume"] <= 0.5
    assert Path(args.figure).stat().st_size > 10_000
    trials = _trials(args.trials_csv)
    assert len(trials) == 4
    points = trials[["balanced_accuracy", "top1_accuracy"]].to_numpy()
    for entry in front["front"]:  # no trial is at least as good in both objectives and better in one
        p = np.array([entry["balanced_accuracy"], entry["top1_accuracy"]])
        dominated = (points[:, 0] >= p[0]) & (points[:, 1] <= p[1]) & ((points[:, 0] > p[0]) | (points[:, 1] < p[1]))
        assert not dominated.any()
    assert set(trials.loc[trials["pareto"], "trial"]) == {e["trial"] for e in front["front"]}
    per_seed = pd.read_csv(args.trials_csv)["per_seed"].map(json.loads)
    assert per_seed.map(len).eq(2).all()  # means over two noise seeds, each seed kept

    parents, children = _runs()
    assert len(parents) == 1 and len(children) == 4
    parent_id = parents[0].info.run_id
    for run in children:
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent_id
        assert all(tags.get(t) for t in REQUIRED_TAGS)
        assert tags["stage"] == "optuna_study_a" and tags["study"] == "a" and tags["synthetic"] == "true"
        assert tags["mechanism"] == run.data.params["mechanism"]
        assert float(tags["epsilon"]) == pytest.approx(float(run.data.params["epsilon"]))
        assert {"balanced_accuracy", "top1_accuracy"} <= set(run.data.metrics)
    artifacts = {a.path for a in mlflow.MlflowClient(tracking_uri()).list_artifacts(parent_id)}
    assert {"front.json", "trials.csv", "pareto.png"} <= artifacts

    # Resume: a larger target adds exactly the missing trials; the first four are not recomputed.
    args_more = _args(tmp_path, synthetic_features_dir, n_trials=6)
    assert main(args_more.argv) == 0
    parents, children = _runs()
    assert len(parents) == 2 and len(children) == 6
    resumed = _trials(args_more.trials_csv)
    pd.testing.assert_frame_equal(resumed.iloc[:4].drop(columns="pareto").reset_index(drop=True),
                                  trials.drop(columns="pareto").reset_index(drop=True))
    assert main(args_more.argv) == 0  # target reached: nothing new
    assert len(_runs()[1]) == 6

    # Same seed, fresh storage: the same trials with the same values.
    again = _args(tmp_path, synthetic_features_dir, name="again")
    assert main(again.argv) == 0
    pd.testing.assert_frame_equal(_trials(again.trials_csv).drop(columns="pareto").reset_index(drop=True),
                                  trials.drop(columns="pareto").reset_index(drop=True))


def test_hypervolume_of_a_two_point_front():
    # reference (0.5, 1.0): rectangles [0.1, 1] x [0.5, 0.6] and [0.4, 1] x [0.6, 0.8] overlap in [0.4, 1] x [.5, .6]
    assert hypervolume([(0.6, 0.1), (0.8, 0.4)]) == pytest.approx(0.9 * 0.1 + 0.6 * 0.2)
    assert hypervolume([(0.45, 0.1)]) == 0.0  # below chance utility adds nothing


def test_shipped_params_load_and_a_bad_range_is_refused(tmp_path):
    from eegprivacy.params import ParamsError

    assert OptunaStudyAConfig.load(REPO / "params/optuna.yaml", "optuna_study_a").sampler in ("tpe", "nsga2")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"optuna_study_a": {**CONFIG, "search_space": {
        **CONFIG["search_space"], "epsilon": [10, 0.1]}}}))
    with pytest.raises(ParamsError, match="epsilon"):
        OptunaStudyAConfig.load(bad, "optuna_study_a")
