"""Stage optuna-study-b on a tiny SYNTHETIC motor-imagery cohort (4 subjects, 2 rounds, 1–2 local epochs, 2
seeds, a few trials): the Pareto front is non-dominated, the outputs exist, MLflow holds one parent with one
child per trial carrying the required tags, a rerun with a larger target only runs the new trials, and the same
seed proposes the same trials.

The cohort has 30 trials per class and a 50/50 member split, so the pooled non-members (120) can resolve a TPR
at 1 % FPR."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from _federated_params import tiny_federated_mia
from _optuna_search import assert_resume_adds_only_missing, assert_same_trials

from eegprivacy.cli import main
from eegprivacy.tracking import REQUIRED_TAGS, tracking_uri

REPO = Path(__file__).resolve().parents[1]

TRAIN = {"federated_mia": tiny_federated_mia(30, test_size=0.5, clients_per_round=4, attackers=["lr", "rf"])}
CONFIG = {"dataset": "synthetic_mi", "model": "simplenet", "num_rounds": 2,
          "search_space": {"mechanisms": ["laplace_gradient", "none"], "epsilon": [0.5, 50], "clip_norm": [0.1, 10],
                           "local_epochs": [1, 2]},
          "noise_seeds": 2, "n_jobs": 1, "n_trials": 4, "sampler": "tpe", "population_size": 4, "seed": 3,
          "storage": "sqlite:///unused.db", "heartbeat_interval": 20}


def _args(tmp_path, name="run", **overrides) -> Namespace:
    """The output paths of one invocation, and its command line (``argv``)."""
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(TRAIN))
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"optuna_study_b": {**CONFIG, **overrides}}))
    args = Namespace(metrics=str(tmp_path / name / "front.json"), trials_csv=str(tmp_path / name / "trials.csv"),
                     figure=str(tmp_path / name / "pareto.png"))
    args.argv = ["optuna-study-b", "--params", str(params), "--training-params", str(tmp_path / "train.yaml"),
                 "--storage", f"sqlite:///{tmp_path / name}.db", "--metrics", args.metrics,
                 "--trials-csv", args.trials_csv, "--figure", args.figure, "--no-progress"]
    return args


def _runs(experiment="study-b-federated-mia"):
    client = mlflow.MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=500)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def _trials(path) -> pd.DataFrame:
    tidy = pd.read_csv(path).fillna({"epsilon": np.inf, "clip_norm": np.nan})
    return tidy.pivot_table(index=["trial", "mechanism", "epsilon", "local_epochs", "pareto"], columns="metric",
                            values="value").reset_index().sort_values("trial")


def test_search_front_tracking_resume_and_determinism(tmp_path):
    args = _args(tmp_path)
    assert main(args.argv) == 0

    front = json.loads(Path(args.metrics).read_text())
    assert front["n_trials"] == 4 and front["synthetic"] is True and front["n_clients"] == 4
    assert front["front_size"] == len(front["front"]) >= front["front_distinct_points"] >= 1
    assert front["chance"] == {"utility_auroc": 0.5, "rla_tpr_at_fpr_0.01": 0.01, "rla_auroc": 0.5}
    assert 0 <= front["hypervolume"] <= 0.5
    assert Path(args.figure).stat().st_size > 10_000
    trials = _trials(args.trials_csv)
    assert len(trials) == 4
    points = trials[["utility_auroc", "rla_tpr_at_fpr_0.01"]].to_numpy()
    assert np.isfinite(points).all()
    for entry in front["front"]:  # no trial is at least as good in both objectives and better in one
        p = np.array([entry["utility_auroc"], entry["rla_tpr_at_fpr_0.01"]])
        dominated = (points[:, 0] >= p[0]) & (points[:, 1] <= p[1]) & ((points[:, 0] > p[0]) | (points[:, 1] < p[1]))
        assert not dominated.any()
    assert set(trials.loc[trials["pareto"], "trial"]) == {e["trial"] for e in front["front"]}
    per_seed = pd.read_csv(args.trials_csv)["per_seed"].map(json.loads)
    assert per_seed.map(len).eq(2).all()  # means over two seeds, each seed kept

    parents, children = _runs()
    assert len(parents) == 1 and len(children) == 4
    parent_id = parents[0].info.run_id
    for run in children:
        tags, params = run.data.tags, run.data.params
        assert tags["mlflow.parentRunId"] == parent_id
        assert all(tags.get(t) for t in REQUIRED_TAGS)
        assert tags["stage"] == "optuna_study_b" and tags["study"] == "b" and tags["synthetic"] == "true"
        assert tags["model"] == "simplenet" and tags["attack"] == "rla"
        assert tags["mechanism"] == params["mechanism"]
        if params["mechanism"] == "none":
            assert tags["epsilon"] == "inf" and "epsilon" not in params
        else:
            assert float(tags["epsilon"]) == pytest.approx(float(params["epsilon"]), rel=1e-5)
        assert {"utility_auroc", "rla_tpr_at_fpr_0.01", "rla_auroc"} <= set(run.data.metrics)
    artifacts = {a.path for a in mlflow.MlflowClient(tracking_uri()).list_artifacts(parent_id)}
    assert {"front.json", "trials.csv", "pareto.png"} <= artifacts

    # Resume: a larger target adds exactly the missing trials; the first four are not recomputed.
    assert_resume_adds_only_missing(_args(tmp_path, n_trials=6), trials, _runs, _trials)

    # Same seed, fresh storage: the same trials with the same values.
    again = _args(tmp_path, name="again")
    assert main(again.argv) == 0
    assert_same_trials(_trials(again.trials_csv), trials)


def test_shipped_params_load_and_a_bad_range_is_refused(tmp_path):
    from eegprivacy.params import ParamsError
    from eegprivacy.studies.federated.config import (
        FederatedMIAConfig,
        OptunaStudyBConfig,
    )

    shipped = OptunaStudyBConfig.load(REPO / "params/optuna.yaml", "optuna_study_b")
    assert shipped.dataset in FederatedMIAConfig.load(REPO / "params/federated_mia.yaml", "federated_mia").datasets
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"optuna_study_b": {**CONFIG, "search_space": {
        **CONFIG["search_space"], "local_epochs": [3, 1]}}}))
    with pytest.raises(ParamsError, match="local_epochs"):
        OptunaStudyBConfig.load(bad, "optuna_study_b")
