"""Stage federated-lira end to end on a tiny SYNTHETIC motor-imagery cohort (4 subjects, 2 rounds, 1 local
epoch, 4 shadows, ε ∈ {∞, 1}): the shadow design, tidy rows for LiRA and RLA with chance levels, the pooled and
shadow-as-target scopes, the outputs, MLflow runs with the required tags, and identical numbers on a rerun."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.params import ParamsError
from eegprivacy.studies.federated.lira import (
    METRICS,
    POOLED_METRICS,
    pooled_rows,
    resolvable_fpr,
    shadow_loo,
    shadow_membership,
)
from eegprivacy.tracking import tracking_uri

TRAIN = {"federated_mia": {
    "datasets": {"synthetic_mi": {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
                                  "dataset": {"n_subjects": 4, "n_sessions": 1, "n_runs": 1,
                                              "n_trials_per_class": 10, "seed": 0}}},
    "models": ["simplenet"], "epsilons": [math.inf], "clip_norm": 1.0, "seeds": 1, "test_size": 0.2,
    "split_seed": 0, "csp_components": 4, "clients_per_round": 8, "num_rounds": 2, "local_epochs": 1,
    "learning_rate": 0.001, "batch_size": 32, "attackers": ["lr"], "rf_estimators": 20,
    "attack_test_size": 0.5, "cla_components": 16}}
LIRA = {"federated_lira": {"model": "simplenet", "epsilons": [math.inf, 1.0], "n_shadows": 4, "shadow_seed": 1000,
                           "target_seeds": 2, "lira_variance": "global", "attackers": ["lr", "rf", "mlp"],
                           "attack_folds": 2, "rf_estimators": 10, "bootstrap": 20, "workers": 1}}


def _args(tmp_path, lira=LIRA) -> dict:
    """The stage's command line (flag -> value) with every file under ``tmp_path``; no accounting rows."""
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(TRAIN))
    (tmp_path / "lira.yaml").write_text(yaml.safe_dump(lira))
    return {"dataset": "synthetic_mi", "params": str(tmp_path / "lira.yaml"),
            "training-params": str(tmp_path / "train.yaml"), "out": str(tmp_path / "lira.csv"),
            "json": str(tmp_path / "lira.json"), "report": str(tmp_path / "lira.md"),
            "figure": str(tmp_path / "fig" / "roc.png"), "cells": str(tmp_path / "cells"),
            "accounting": str(tmp_path / "no_accounting.csv")}


def _run(args: dict) -> int:
    return main(["federated-lira", "--no-progress", *(x for k, v in args.items() for x in (f"--{k}", v))])


def test_shadow_membership_is_balanced_per_trial_and_per_class():
    y = np.repeat([0, 1], 12)
    subjects = np.tile(["a", "b", "c"], 8)
    mask = shadow_membership(y, subjects, 6, seed=3)
    assert mask.shape == (6, 24) and (mask.sum(0) == 3).all()  # every trial IN in exactly half
    assert (mask[0::2] ^ mask[1::2]).all()  # complementary pairs
    for s in "abc":
        for c in (0, 1):
            rows = (subjects == s) & (y == c)
            assert set(mask[:, rows].sum(1)) == {2}  # a half of each (subject, class) group of 4
    np.testing.assert_array_equal(mask, shadow_membership(y, subjects, 6, seed=3))
    assert not np.array_equal(mask, shadow_membership(y, subjects, 6, seed=4))


def test_shadows_can_train_on_the_targets_member_share():
    y = np.repeat([0, 1], 30)
    subjects = np.tile(["a", "b", "c"], 20)  # 10 trials per (subject, class)
    mask = shadow_membership(y, subjects, 10, seed=1, in_fraction=0.8)
    for s in "abc":
        for c in (0, 1):
            rows = (subjects == s) & (y == c)
            assert set(mask[:, rows].sum(1)) == {8}  # every shadow keeps 80 % of every group, like the target
    assert set((~mask).sum(0)) == {2}  # blocks taken in turn: every trial OUT in exactly 2 of 10 shadows
    np.testing.assert_array_equal(mask, shadow_membership(y, subjects, 10, seed=1, in_fraction=0.8))
    with pytest.raises(ValueError, match="in_fraction"):
        shadow_membership(y, subjects, 10, seed=1, in_fraction=1.0)


def test_shadow_as_target_scores_every_shadow_with_its_pair_left_out():
    rng = np.random.default_rng(0)
    mask = shadow_membership(np.repeat([0, 1], 200), np.zeros(400), 8, seed=0)
    phis = {"inf": rng.normal(size=(8, 400)) + 2.0 * mask}
    loo = shadow_loo(phis, mask, "inf", "global")
    assert set(loo) == {("lira_online", ""), ("lira_offline", "")} and len(loo[("lira_online", "")]) == 8
    rows, _ = pooled_rows(loo, 50, 0, "shadow_loo_pooled")
    auc = {r["attack"]: r for r in rows if r["metric"] == "auroc"}
    assert auc["lira_online"]["value"] > 0.85 and auc["lira_online"]["ci_low"] <= auc["lira_online"]["value"]
    # 1600 pooled non-member scores, but only the 400 distinct trials are independent non-members.
    assert auc["lira_online"]["n_nonmembers"] == 8 * 200 and auc["lira_online"]["n_independent_nonmembers"] == 400
    phis["inf"] = rng.normal(size=(8, 400))  # no leak
    rows, _ = pooled_rows(shadow_loo(phis, mask, "inf", "global"), 0, 0, "x")
    assert all(abs(r["value"] - 0.5) < 0.05 for r in rows if r["metric"] == "auroc")
    assert not any(r["metric"] == "tpr_at_fpr_0.001" for r in rows)  # 400 < 1000: not resolvable
    low = [r for r in rows if r["metric"] == "tpr_at_resolvable_fpr"]
    assert all(r["fpr"] == 0.005 and r["value"] < 0.05 for r in low)  # near its chance of 0.005


def test_federated_lira_stage_end_to_end(tmp_path):
    args = _args(tmp_path)
    assert _run(args) == 0
    rows = pd.read_csv(args["out"])
    assert rows["synthetic"].all() and set(rows["epsilon"]) == {math.inf, 1.0}
    scored = rows[rows["metric"].isin(METRICS)]
    per_seed = scored[scored["scope"] == "target_seed"]
    assert set(zip(per_seed["attack"], per_seed["attacker"].fillna(""))) == {
        ("lira_online", ""), ("lira_offline", ""), ("lira_online_untrained_control", ""),
        ("rla", "lr"), ("rla", "rf"), ("rla", "mlp")}
    assert set(per_seed["seed"]) == {0, 1} and scored["chance"].notna().all()
    auc = scored[scored["metric"] == "auroc"]["value"]
    assert auc.between(0, 1).all()
    chance = scored.drop_duplicates("metric").set_index("metric")["chance"]
    assert chance["auroc"] == 0.5 and chance["tpr_at_fpr_0.01"] == 0.01 and chance["tpr_at_fpr_0.001"] == 0.001
    # 16 non-members per target: TPR at 1 % and 0.1 % FPR are unresolvable (NaN), not a made-up number.
    assert per_seed[per_seed["metric"] == "tpr_at_fpr_0.01"]["value"].isna().all()
    n = rows[rows["metric"].isin(["n_members", "n_nonmembers"])].groupby("metric")["value"].first()
    assert n["n_members"] == 64 and n["n_nonmembers"] == 16
    # 4 shadows leave one pair (one IN, one OUT value per trial) once a pair is the target: no shadow-as-target.
    assert set(rows["scope"].dropna()) == {"target_seed", "target_pooled"}
    pooled = rows[(rows["scope"] == "target_pooled") & rows["metric"].isin(POOLED_METRICS)]
    assert (pooled["n_nonmembers"] == 32).all() and len(pooled) == 2 * 6 * len(POOLED_METRICS)
    # Each target on its own split: more distinct non-members than one target's 16, and the TPR only at the FPR
    # they resolve (named), never at 0.1 %.
    n_independent = pooled["n_independent_nonmembers"].iloc[0]
    assert 16 < n_independent <= 32 and (pooled["n_independent_nonmembers"] == n_independent).all()
    low = pooled[pooled["metric"] == "tpr_at_resolvable_fpr"]
    assert (low["fpr"] == resolvable_fpr(0.001, int(n_independent))).all() and (low["fpr"] > 0.001).all()
    assert set(pooled["ci_over"]) == {"subjects+seeds"}

    summary = json.loads(Path(args["json"]).read_text())
    assert summary["synthetic"] is True and summary["n_members"] == 64 and summary["n_nonmembers"] == 16
    assert summary["n_independent_nonmembers"] == n_independent
    entry = summary["synthetic_mi/simplenet/eps_inf/target_seed/lira_online/auroc"]
    assert entry["chance"] == 0.5 and 0 <= entry["mean"] <= 1
    assert "not a cumulative guarantee" in summary["epsilon_scope"]
    report = Path(args["report"]).read_text()
    assert "SYNTHETIC synthetic_mi" in report and "64 members and 16 non-members" in report
    assert "| chance |" in report and f"{int(n_independent)} independent non-members" in report
    assert "Shadows: 4 federations" in report
    assert Path(args["figure"]).stat().st_size > 0

    client = mlflow.MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name("study-b-federated-mia").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 2 and len(children) == 4  # one parent per ε, one child per target seed
    for run in runs:
        tags = run.data.tags
        for key in ("study", "stage", "dataset", "dataset_version", "synthetic", "seed", "git_commit",
                    "dvc_stage", "model", "epsilon", "mechanism", "attack"):
            assert key in tags, key
        assert tags["synthetic"] == "true" and tags["stage"] == "federated_lira"
    assert any(k.startswith("target_pooled/") for p in parents for k in p.data.metrics)

    # Rerun from the caches (shadows, cells, per-trial scores): the same numbers.
    assert _run(args) == 0
    pd.testing.assert_frame_equal(pd.read_csv(args["out"]), rows)


@pytest.mark.parametrize("key,value", [("n_shadows", 5), ("n_shadows", 2), ("shadow_in_fraction", 1.0),
                                       ("epsilons", [0]), ("attackers", ["svm"]), ("lira_variance", "median"),
                                       ("attack_folds", 1), ("model", "resnet"), ("workers", 0)])
def test_bad_lira_params_are_a_params_error(tmp_path, key, value):
    bad = {"federated_lira": {**LIRA["federated_lira"], key: value}}
    with pytest.raises(ParamsError, match=f"federated_lira.{key} = .* is invalid; it must be"):
        _run(_args(tmp_path, bad))
    assert not (tmp_path / "lira.csv").exists()


def test_federated_lira_rows_do_not_depend_on_the_number_of_workers(tmp_path):
    tables = {}
    for workers in (1, 2):
        folder = tmp_path / f"workers{workers}"
        folder.mkdir()
        args = _args(folder, {"federated_lira": {**LIRA["federated_lira"], "workers": workers}})
        assert _run(args) == 0
        tables[workers] = pd.read_csv(args["out"])
    assert set(tables[1]["seed"].dropna()) == {0, 1}
    pd.testing.assert_frame_equal(tables[1], tables[2])
