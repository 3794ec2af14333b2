"""Stage federated-lira end to end on a tiny SYNTHETIC motor-imagery cohort (4 subjects, 2 rounds, 1 local
epoch, 4 shadows, ε ∈ {∞, 1}): the balanced shadow design, tidy rows for LiRA and RLA with chance levels, the pooled
and shadow-as-target scopes, TPRs only where resolvable (no number in the rows, JSON or MLflow elsewhere),
the preprocessing-only control (fold federations without the attacked client, LiRA − control with its paired
interval, p-value and Holm), the outputs, MLflow runs with the required tags, and identical numbers on a rerun."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from _federated_params import tiny_federated_mia

from eegprivacy.attacks.metrics import auroc
from eegprivacy.attacks.reference import REFERENCE_ATTACKS
from eegprivacy.cli import main
from eegprivacy.params import ParamsError
from eegprivacy.reporting.lira import study_b_lines
from eegprivacy.studies.federated.lira import federations
from eegprivacy.studies.federated.lira.config import DIFF_METRIC, METRICS, POOLED_METRICS, FederatedLiRAConfig
from eegprivacy.studies.federated.lira.design import loo_feasible, loo_group_size, shadow_in_count, shadow_membership
from eegprivacy.studies.federated.lira.federations import control_models
from eegprivacy.studies.federated.lira.pooled import pooled_rows
from eegprivacy.studies.federated.lira.scoring import resolvable_fpr
from eegprivacy.studies.federated.lira.targets import attack_key, reference_counts, shadow_loo
from eegprivacy.tracking import tracking_uri

TRAIN = {"federated_mia": tiny_federated_mia(rf_estimators=20)}
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
    assert (mask[0::2] ^ mask[1::2]).all()  # complementary pairs: the balanced leave-out groups at 0.5
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
    assert set((~mask).sum(0)) == {2}  # balanced: every trial OUT in exactly 2 of 10 shadows
    np.testing.assert_array_equal(mask, shadow_membership(y, subjects, 10, seed=1, in_fraction=0.8))
    with pytest.raises(ValueError, match="in_fraction"):
        shadow_membership(y, subjects, 10, seed=1, in_fraction=1.0)


@pytest.mark.parametrize("n_shadows", [60, 20])
def test_balanced_masks_leave_the_in_count_nothing_to_say(n_shadows):
    """At the params' 0.8: every trial IN in exactly n·0.8 shadows, each shadow holding 80 % of every (subject,
    label) group to within one trial (groups of uneven sizes), and the IN count predicting a held-out shadow's
    membership with AUROC exactly 0.5 (it is constant); the shadows left once a balanced group leaves hold every
    trial IN equally often too."""
    sizes = {("a", 0): 7, ("a", 1): 11, ("b", 0): 22, ("b", 1): 23, ("c", 0): 3, ("c", 1): 40}
    subjects = np.concatenate([[s] * m for (s, _), m in sizes.items()])
    y = np.concatenate([[c] * m for (_, c), m in sizes.items()])
    mask = shadow_membership(y, subjects, n_shadows, seed=7, in_fraction=0.8)
    k = shadow_in_count(n_shadows, 0.8)
    assert k == 0.8 * n_shadows and set(mask.sum(0)) == {k}  # the per-trial IN count is constant
    for (s, c), m in sizes.items():
        share = mask[:, (subjects == s) & (y == c)].sum(1)
        assert (np.abs(share - 0.8 * m) < 1).all(), (s, c, share)  # within one trial of in_fraction
    count = mask.sum(0)
    for j in range(n_shadows):  # the IN count says nothing about a held-out shadow's membership
        assert auroc(mask[j].astype(int), count) == 0.5
    g = loo_group_size(n_shadows, k)
    assert g == 5 and loo_feasible(n_shadows, k)
    for group in range(n_shadows // g):
        rest = np.array([j for j in range(n_shadows) if j // g != group])
        assert len(set(mask[rest].sum(0))) == 1  # constant once the held-out group leaves, too
        for j in range(group * g, (group + 1) * g):
            assert auroc(mask[j].astype(int), mask[rest].sum(0)) == 0.5
    np.testing.assert_array_equal(mask, shadow_membership(y, subjects, n_shadows, seed=7, in_fraction=0.8))
    assert not np.array_equal(mask, shadow_membership(y, subjects, n_shadows, seed=8, in_fraction=0.8))


def test_sixty_four_shadows_at_eighty_percent_cannot_leave_a_balanced_group_out(tmp_path):
    assert shadow_in_count(64, 0.8) == 51 and loo_group_size(64, 51) == 64 and not loo_feasible(64, 51)
    bad = {"federated_lira": {**LIRA["federated_lira"], "n_shadows": 64, "shadow_in_fraction": 0.8}}
    with pytest.raises(ParamsError, match="federated_lira.n_shadows = 64 is invalid; it must be .* e.g. 60"):
        _run(_args(tmp_path, bad))
    with pytest.raises(ValueError, match="balanced masks"):  # unbalanced masks are refused, not scored
        shadow_loo({"inf": np.zeros((6, 3))}, np.array([[1, 1, 0]] * 3 + [[0, 1, 1]] * 3), "inf", "global")


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
    assert all(not r["resolvable"] and np.isnan(r["value"]) for r in rows if r["metric"] == "tpr_at_fpr_0.001")
    low = [r for r in rows if r["metric"] == "tpr_at_resolvable_fpr"]
    assert all(r["fpr"] == 0.05 and r["value"] < 0.12 for r in low)  # 400 x 0.05 = 20 beyond; chance 0.05


def test_federated_lira_stage_end_to_end(tmp_path):
    """The stage on a tiny SYNTHETIC federation: its rows, report, JSON, figure and MLflow runs; and, last, the same
    rows from 2 worker processes (one test, so the serial run is not paid twice)."""
    args = _args(tmp_path)
    assert _run(args) == 0
    rows = pd.read_csv(args["out"])
    assert rows["synthetic"].all() and set(rows["epsilon"]) == {math.inf, 1.0}
    scored = rows[rows["metric"].isin(METRICS)]
    per_seed = scored[scored["scope"] == "target_seed"]
    # Every registry attack on all 4 shadows and on the k = 1, 2 it can run on (LiRA online needs 4), each with its
    # preprocessing-only control; the untrained model and the RLAs beside.
    config = FederatedLiRAConfig.from_mapping(LIRA["federated_lira"])
    balanced = np.arange(4)[:, None] < shadow_in_count(4, 0.5)  # every trial IN in 2 of the 4 shadows
    attacks = {attack_key(name, k) for name in REFERENCE_ATTACKS for k in reference_counts(config, name, balanced)}
    assert "lira_online_k2" not in attacks and {"rmia_offline_k1", "lira_offline_k2", "loss"} <= attacks
    keys = ({(a, "") for a in attacks} | {(a + "_control", "") for a in attacks}
            | {("lira_online_untrained_control", ""), ("rla", "lr"), ("rla", "rf"), ("rla", "mlp")})
    assert set(zip(per_seed["attack"], per_seed["attacker"].fillna(""))) == keys
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
    assert (pooled["n_nonmembers"] == 32).all() and len(pooled) == 2 * len(keys) * len(POOLED_METRICS)
    # Each target on its own split: more distinct non-members than one target's 16, and the TPR only at the FPR
    # they resolve (named), never at 0.1 %.
    n_independent = pooled["n_independent_nonmembers"].iloc[0]
    assert 16 < n_independent <= 32 and (pooled["n_independent_nonmembers"] == n_independent).all()
    low = pooled[pooled["metric"] == "tpr_at_resolvable_fpr"]
    supported = resolvable_fpr(0.001, int(n_independent))  # 10 beyond: 0.5 from 20 independent non-members on
    assert (low["fpr"].fillna(-1) == (supported if np.isfinite(supported) else -1)).all()
    assert (low["resolvable"] == bool(np.isfinite(supported))).all()
    unresolvable = pooled[pooled["metric"].isin(["tpr_at_fpr_0.001", "tpr_at_zero_fpr"])]
    assert (~unresolvable["resolvable"].astype(bool)).all() and unresolvable["value"].isna().all()
    assert unresolvable["note"].str.startswith("not resolvable").all()
    assert set(pooled["ci_over"]) == {"subjects+seeds"} and (pooled["n_clusters"] == 4).all()
    assert set(pooled.loc[pooled["metric"] == "auroc", "ci_method"]) == {"two_way_bootstrap"}
    # The preprocessing-only control: per ε, every attack minus its control, paired, with the subjects+seeds
    # interval; on all references a two-sided p-value and Holm over 2 ε x the registry's attacks, on k references
    # an interval only; the controls are never tested.
    every = rows[rows["metric"] == DIFF_METRIC]
    assert set(every["attack"]) == attacks and every.loc[every["attack"].str.contains("_k"), "p_value"].isna().all()
    diff = every[every["p_value"].notna()]
    cells = 2 * len(REFERENCE_ATTACKS)
    assert len(diff) == cells and set(diff["attack"]) == set(REFERENCE_ATTACKS)
    assert set(diff["scope"]) == {"target_pooled"} and set(diff["ci_over"]) == {"subjects+seeds"}
    assert (diff["n_clusters"] == 4).all() and set(diff["ci_method"]) == {"paired_two_way_bootstrap"}
    assert diff["p_value"].between(0, 1).all() and (diff["p_holm"] >= diff["p_value"]).all()
    assert diff["family"].str.contains(f"Holm over {cells} cells").all()
    auc_pooled = pooled[pooled["metric"] == "auroc"].set_index(["epsilon", "attack"])["value"]
    for r in diff.to_dict("records"):
        attack, control = auc_pooled[(r["epsilon"], r["attack"])], auc_pooled[(r["epsilon"], r["attack"] + "_control")]
        assert r["value"] == pytest.approx(attack - control) and r["attack_auroc"] == pytest.approx(attack)
        # a percentile interval need not contain its estimate (here 3 of 4 subjects a resample), but a sign or
        # pairing error would put the estimate far outside it
        width = r["ci_high"] - r["ci_low"]
        assert width >= 0 and r["ci_low"] - width <= r["value"] <= r["ci_high"] + width
    assert rows.loc[rows["metric"] != DIFF_METRIC, "p_holm"].isna().all()  # controls are not hypotheses
    assert rows[rows["metric"] == "utility_accuracy_nonmembers_control"]["value"].between(0, 1).all()

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
    assert "## Attack − preprocessing-only control" in report and "of LiRA online's AUROC excess over 0.5" in report
    assert f"Holm over {cells} cells" in report and "untrained model (shown, not tested)" in report
    assert "## Attacks by number of reference models" in report and "| RMIA offline | 1 |" in report
    entry = summary["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online/auroc_minus_control"]
    assert entry["ci_over"] == "subjects+seeds" and entry["p_holm"] is not None and entry["n_clusters"] == 4
    assert "p_holm" not in summary["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online_control/auroc"]
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
    # Study B's report section reads the same numbers back from MLflow.
    section = "\n".join(study_b_lines(tracking_uri(), "study-b-federated-mia"))
    assert "## The strongest attacks at low FPR: RMIA, LiRA and the loss threshold" in section
    value = auc_pooled[(1.0, "rmia_offline_k1")]
    assert f"| 1 | RMIA offline | 1 | {100 * value:.1f} [" in section and "Strongest at low FPR" in section
    logged = [k for p in parents for k in p.data.metrics if k.startswith("target_pooled/")]
    assert not any(k.endswith(("tpr_at_fpr_0.001", "tpr_at_zero_fpr")) for k in logged)  # no number if unresolvable
    assert any(k.endswith("tpr_at_resolvable_fpr") for k in logged) == bool(np.isfinite(supported))
    for p in parents:  # each ε's attack − control cells, their p-value and Holm p-value
        for attack in ("lira_online", "lira_offline"):
            for suffix in ("", "_p_value", "_p_holm"):
                assert f"target_pooled/{attack}/auroc_minus_control{suffix}" in p.data.metrics
    entry = summary["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online/tpr_at_fpr_0.001"]
    assert entry["mean"] is None and entry["resolvable"] is False and entry["note"].startswith("not resolvable")

    # Rerun from the caches (shadows, cells, per-trial scores): the same numbers.
    assert _run(args) == 0
    pd.testing.assert_frame_equal(pd.read_csv(args["out"]), rows)

    # From scratch in 2 worker processes (shadows, target cells, bootstrap): the same rows.
    folder = tmp_path / "workers2"
    folder.mkdir()
    parallel = _args(folder, {"federated_lira": {**LIRA["federated_lira"], "workers": 2}})
    assert _run(parallel) == 0
    assert set(rows["seed"].dropna()) == {0, 1}
    pd.testing.assert_frame_equal(pd.read_csv(parallel["out"]), rows)


@pytest.mark.parametrize("key,value", [("n_shadows", 5), ("n_shadows", 2), ("shadow_in_fraction", 1.0),
                                       ("epsilons", [0]), ("attackers", ["svm"]), ("lira_variance", "median"),
                                       ("attack_folds", 1), ("model", "resnet"), ("workers", 0)])
def test_bad_lira_params_are_a_params_error(tmp_path, key, value):
    bad = {"federated_lira": {**LIRA["federated_lira"], key: value}}
    with pytest.raises(ParamsError, match=f"federated_lira.{key} = .* is invalid; it must be"):
        _run(_args(tmp_path, bad))
    assert not (tmp_path / "lira.csv").exists()


def test_control_federations_leave_the_attacked_clients_fold_out(monkeypatch):
    """Each fold federation trains on every client but its fold's, with their preprocessing unchanged (the very
    arrays the target trains on), under the target's seed and ε; client k is scored by the one that left k out."""
    calls = []

    def fake_federate(model, eps, seed, fed, training):
        calls.append((model, eps, seed, [id(c) for c in fed.clients]))
        return None, SimpleNamespace(weights=len(calls) - 1, initial_local=None)

    monkeypatch.setattr(federations, "_federate", fake_federate)
    clients = [(np.zeros((3, 2)), None, np.zeros((1, 2)), None) for _ in range(7)]
    fed = SimpleNamespace(clients=clients)
    weights, locals_, folds = control_models(None, fed, "simplenet", 5.0, 3, None, 3)
    assert len(calls) == 3 and all(c[:3] == ("simplenet", 5.0, 3) for c in calls)
    assert sorted(np.concatenate(folds).tolist()) == list(range(7))  # every client in exactly one fold
    for j, fold in enumerate(folds):
        kept = calls[j][3]
        assert kept == [id(clients[k]) for k in range(7) if k not in fold]  # the others, same arrays
        for k in fold:
            assert weights[k] == j and id(clients[k]) not in kept and locals_[k] is None
