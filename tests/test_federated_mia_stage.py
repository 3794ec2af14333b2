"""Study B stages end to end on a tiny SYNTHETIC motor-imagery cohort (4 subjects, 2 rounds, 1 local epoch,
SimpleNet, ε ∈ {∞, 1}): tidy rows for utility and all four attacks, MLflow parent/child runs with the required
tags, the report's JSON/markdown/figures, and that the DP step really changes what clients send."""

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
from eegprivacy.federated.splits import member_split
from eegprivacy.models.gradients import update_vector
from eegprivacy.params import ParamsError
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.tracking import tracking_uri

TINY = {"federated_mia": {
    "datasets": {"synthetic_mi": {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
                                  "dataset": {"n_subjects": 4, "n_sessions": 1, "n_runs": 1,
                                              "n_trials_per_class": 10, "seed": 0}}},
    "models": ["simplenet"], "epsilons": [math.inf, 1.0], "clip_norm": 1.0, "seeds": 1, "test_size": 0.2,
    "split_seed": 0, "csp_components": 4, "clients_per_round": 8, "num_rounds": 2, "local_epochs": 1,
    "learning_rate": 0.001, "batch_size": 32, "attackers": ["lr", "rf"], "rf_estimators": 20,
    "attack_test_size": 0.5, "cla_components": 16}}


@pytest.fixture(scope="module")
def tiny_params(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fedmia") / "federated_mia.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture(scope="module")
def tiny_config(tiny_params) -> FederatedMIAConfig:
    return FederatedMIAConfig.load(tiny_params, "federated_mia")


def test_federated_mia_stage_end_to_end(tmp_path, tiny_params):
    out = tmp_path / "federated_mia_synthetic_mi.csv"
    argv = ["federated-mia", "--dataset", "synthetic_mi", "--params", str(tiny_params), "--out", str(out),
            "--cells", str(tmp_path / "cells"), "--no-progress",
            "--jobs", "2",  # two worker processes: the stage's default on 2 cores
            "--arrays", str(tmp_path / "arrays" / "synthetic_mi")]
    assert main(argv) == 0
    saved = sorted(p.name for p in (tmp_path / "arrays" / "synthetic_mi").glob("*.npz"))
    assert saved == ["simplenet-eps1-seed0.npz", "simplenet-epsinf-seed0.npz"]
    with np.load(tmp_path / "arrays" / "synthetic_mi" / "simplenet-eps1-seed0.npz") as arrays:
        assert set(arrays["rounds"]) == {1, 2} and len(arrays["clients"]) == len(arrays["updates"])
        assert arrays["replicates"].shape == (len(arrays["replicate_keys"]), 200)  # B = the default 200
        assert arrays["updates"].ndim == 2 and np.isfinite(arrays["updates"]).all()
        assert arrays["grad_norm_member"].shape[0] == 2 and (arrays["grad_norm_nonmember"] >= 0).all()
    rows = pd.read_csv(out)
    assert set(rows["epsilon"]) == {math.inf, 1.0} and set(rows["model"]) == {"simplenet"}
    assert set(rows["mechanism"]) == {"none", "laplace_gradient"} and rows["synthetic"].all()
    attacks = rows.dropna(subset=["attack"])
    assert set(attacks["attack"]) == {"rla", "fla", "gla_paper", "gla_sound", "cla", "rla_untrained_control",
                                      "fla_untrained_control", "gla_sound_control", "gla_sound_pooled",
                                      "gla_sound_pooled_control"}
    controls = attacks[attacks["attack"].str.endswith("_untrained_control")]
    assert (controls["round"] == 0).all() and controls["value"].notna().any()  # scored on the untrained model
    assert set(attacks["attacker"]) == {"lr", "rf"}
    per_round = attacks[~attacks["attack"].isin(["cla", "gla_sound_pooled", "gla_sound_pooled_control"])
                        & ~attacks["attack"].str.endswith("_untrained_control")]
    assert set(per_round["round"]) == {1, 2}  # every per-round attack ran in both rounds
    assert attacks["chance"].notna().all()
    auc = attacks[attacks["metric"] == "auroc"]["value"]
    assert auc.between(0, 1).all()
    utility = rows[rows["metric"] == "utility_accuracy"]
    assert len(utility) == 4 and utility["value"].between(0, 1).all()
    assert len(rows[(rows["metric"] == "client_accuracy")]) == 2 * 2 * 4  # ε × rounds × clients
    norms = rows[rows["metric"].str.startswith("grad_norm_member_q")]
    assert len(norms) == 2 * 21 and (norms["value"] >= 0).all()
    scale = rows[rows["metric"] == "noise_scale"].set_index("epsilon")["value"]
    assert scale[math.inf] == 0.0 and scale[1.0] == pytest.approx(1.0)  # b = C/ε

    client = mlflow.MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name("study-b-federated-mia").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 2 and len(children) == 2  # one parent per (model, ε), one child per seed
    for run in runs:
        tags = run.data.tags
        for key in ("study", "stage", "dataset", "dataset_version", "synthetic", "seed", "git_commit",
                    "dvc_stage", "model", "epsilon", "mechanism"):
            assert key in tags, key
        assert tags["synthetic"] == "true" and tags["study"] == "b" and tags["model"] == "simplenet"
    assert {r.data.tags["epsilon"] for r in children} == {"inf", "1"}
    assert {r.data.tags["mechanism"] for r in children} == {"none", "laplace_gradient"}
    assert all(r.data.metrics for r in children)

    report = tmp_path / "federated_mia.json"
    tables_md = tmp_path / "tables.md"
    assert main(["federated-mia-report", "--inputs", str(out), "--json", str(report),
                 "--summary", str(tmp_path / "federated_mia.csv"), "--tables", str(tables_md),
                 "--figures", str(tmp_path / "figures"), "--arrays", str(tmp_path / "arrays"),
                 "--accounting", str(tmp_path / "no_accounting.csv")]) == 0  # no cumulative ε: "n/a"
    summary = pd.read_csv(tmp_path / "federated_mia.csv", keep_default_na=False, na_values=[""])
    scored = summary[summary["attack"].isin(["rla", "fla", "gla_sound", "gla_sound_pooled"])
                     & summary["metric"].isin(["accuracy", "auroc"])]
    assert len(scored) and (scored["ci_over"] == "subjects+seeds").all()  # issue 33: over the privacy unit
    assert scored["ci_method"].eq("cluster bootstrap (200 resamples)").all()
    assert (summary.loc[summary["metric"] == "utility_accuracy", "ci_over"] == "subjects+seeds").all()
    assert (summary.loc[summary["attack"].isin(["cla", "gla_paper"]), "ci_over"] == "seeds").all()  # labelled
    controls = summary[summary["attack"].str.endswith("_control")]
    assert len(controls) and controls["p_value"].isna().all() and controls["p_holm"].isna().all()
    headline = json.loads(report.read_text())
    assert "not a cumulative guarantee" in headline["epsilon_scope"]
    for attack in ("rla", "fla", "gla_paper", "gla_sound", "cla"):
        entry = headline[f"synthetic_mi/simplenet/eps_1/{attack}/lr/auroc"]
        assert entry["chance"] == 0.5 and entry["synthetic"] is True and entry["mean"] is not None
    assert 0 <= headline["synthetic_mi/simplenet/eps_inf/utility/accuracy"]["mean"] <= 1
    tables = tables_md.read_text()
    assert "SYNTHETIC synthetic_mi" in tables and "FL-SimpleNet" in tables and "DP-FL-SimpleNet" in tables
    assert "GLA (sound) AUROC per round | control per round | pooled | pooled control" in tables
    assert "| chance |" in tables and "not a cumulative guarantee" in tables
    for name in ("rla_rounds", "grad_norms", "client_accuracy", "loss_gap"):
        assert (tmp_path / "figures" / f"federated_mia_{name}.png").stat().st_size > 0

    # Resume: a second run reads every cell from disk and gives the same rows.
    assert main(argv) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), rows)


def test_dp_at_epsilon_one_changes_the_updates(tiny_config):
    config = tiny_config
    _, trials = mia.load_trials("synthetic_mi", config.datasets["synthetic_mi"])
    assert trials.synthetic
    member = member_split(trials.y, trials.metadata["subject"], config.test_size, config.split_seed)
    fed = mia.Federation(trials, member, "logvar", config.csp_components)
    updates = {}
    for eps in (math.inf, 1.0):
        _, result = mia.federate({"model": "simplenet", "epsilon": eps}, 0, fed, config)
        updates[eps] = np.stack([update_vector(result.updates[1][c], result.sent[1])
                                 for c in sorted(result.updates[1])])
    assert updates[math.inf].shape == updates[1.0].shape
    # Same seed, same initial weights and batches: only the clip + Laplace(0, C/ε) step differs.
    assert not np.allclose(updates[math.inf], updates[1.0])
    again = mia.federate({"model": "simplenet", "epsilon": 1.0}, 0, fed, config)[1]
    np.testing.assert_array_equal(update_vector(again.updates[1][0], again.sent[1]), updates[1.0][0])


def test_bad_epsilon_is_a_params_error(tmp_path):
    bad = {"federated_mia": {**TINY["federated_mia"], "epsilons": [0]}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ParamsError, match="epsilons"):
        main(["federated-mia", "--dataset", "synthetic_mi", "--params", str(path), "--out", str(tmp_path / "x.csv"),
              "--cells", str(tmp_path / "cells"), "--no-progress"])
    assert not (tmp_path / "x.csv").exists()


def test_each_seed_draws_its_own_member_split(tiny_config):
    _, trials = mia.load_trials("synthetic_mi", tiny_config.datasets["synthetic_mi"])
    splits = [mia.seed_split(trials, tiny_config, seed) for seed in (0, 1)]
    assert not np.array_equal(*splits)
    np.testing.assert_array_equal(splits[0], mia.seed_split(trials, tiny_config, 0))  # reproducible
    subjects = trials.metadata["subject"].to_numpy()
    for mask in splits:  # still 80/20 within every subject
        share = pd.Series(mask).groupby(subjects).mean()
        assert share.between(0.7, 0.9).all()


def test_attack_rounds_skip_attacks_without_moving_any_number(tiny_config):
    """``attack_rounds: [2]`` drops round 1's RLA/FLA/GLA rows only; every row it keeps equals the
    all-rounds cell's, bit for bit (utility, losses, gradient norms, CLA and round 2's attacks)."""
    _, trials = mia.load_trials("synthetic_mi", tiny_config.datasets["synthetic_mi"])
    cell = {"model": "simplenet", "epsilon": 1.0}
    every = pd.DataFrame(mia.cell_rows(cell, 0, trials, tiny_config))
    some = pd.DataFrame(mia.cell_rows(cell, 0, trials, tiny_config.replace(attack_rounds=[2])))
    def pooled(rows):  # the sound GLA's one test over the attacked rounds (and its round count): it differs
        return rows["attack"].isin(["gla_sound_pooled", "gla_sound_pooled_control"]) | (
            rows["metric"] == "gla_sound_pooled_n_rounds")

    per_round = every["attack"].isin(["rla", "fla", "gla_paper", "gla_sound", "gla_sound_control"])
    expected = every[~(per_round & (every["round"] == 1)) & ~pooled(every)].reset_index(drop=True)
    pd.testing.assert_frame_equal(some[~pooled(some)].reset_index(drop=True), expected)
    assert set(some.loc[some["attack"].isin(["rla", "gla_sound"]), "round"]) == {2}
    with pytest.raises(ParamsError, match="attack_rounds"):
        FederatedMIAConfig.from_mapping({**TINY["federated_mia"], "attack_rounds": [3]}, "tiny.yaml",
                                        "federated_mia.")


def test_three_seed_intervals_are_marked_t2_and_clipped():
    """Issue 20: an across-seed interval over 3 seeds is a t(2) interval and says so; a score's interval that
    the t quantile pushes past [0, 1] is clipped and marked (SYNTHETIC per-seed values)."""
    from eegprivacy.reporting.federated import _cell
    from eegprivacy.studies.federated.report import across_rounds

    values = [0.05, 0.95, 0.5]  # 3 seeds spread over the whole range: the raw t(2) interval leaves [0, 1]
    tidy = pd.DataFrame([{"dataset": "d", "synthetic": True, "model": "simplenet", "epsilon": 1.0, "attack": "rla",
                          "attacker": "lr", "metric": "auroc", "seed": s, "round": r, "value": v, "chance": 0.5}
                         for s, v in enumerate(values) for r in (1, 2)])
    summary = across_rounds(tidy)
    row = summary.iloc[0]
    assert row["ci_method"] == "t(2)" and row["ci_over"] == "seeds" and bool(row["ci_clipped"])
    assert 0.0 <= row["ci_low"] and row["ci_high"] <= 1.0
    text = _cell(summary, "d", "simplenet", 1.0, "auroc", "rla", "lr")
    assert "t(2), 3 seeds" in text and "clipped" in text


def test_a_cell_saves_its_client_bootstrap_replicates(tiny_config, tmp_path, monkeypatch):
    """Issue 33: a cell's npz holds one replicate vector per summary key, its mean over rounds. With a design of
    identity resamples (every client once) every replicate equals the cell's mean over rounds of that key's rows;
    a resample of client 0 alone gives client 0's own accuracy. CLA and GLA (paper) keep none (SYNTHETIC cohort)."""
    from eegprivacy.evaluation import client_bootstrap
    from eegprivacy.studies.federated.replicates import replicate_key

    n_clients = 4

    def design(n, b, seed=0):
        counts = np.ones((b, n), dtype=int)
        counts[-1] = 0
        counts[-1, 0] = n  # the last resample: client 0, n times
        return counts

    monkeypatch.setattr(client_bootstrap, "client_resample_counts", design)
    _, trials = mia.load_trials("synthetic_mi", tiny_config.datasets["synthetic_mi"])
    rows = pd.DataFrame(mia.cell_rows({"model": "simplenet", "epsilon": 1.0}, 0, trials,
                                      tiny_config.replace(subject_bootstrap=5), arrays_dir=tmp_path))
    (path,) = tmp_path.glob("*.npz")
    with np.load(path) as arrays:
        reps = dict(zip((str(k) for k in arrays["replicate_keys"]), arrays["replicates"]))
    assert all(v.shape == (5,) for v in reps.values())
    rows[["attack", "attacker"]] = rows[["attack", "attacker"]].fillna("")
    means = rows.groupby(["attack", "attacker", "metric"])["value"].mean()
    kept = 0
    for (attack, attacker, metric), mean in means.items():
        key = replicate_key(attack, attacker, metric)
        if attack in ("cla", "gla_paper") or not attack and metric in ("noise_scale", "n_clients",
                                                                          "unnoised_channels"):
            assert key not in reps
            continue
        if key not in reps:
            assert metric in ("min_detectable_auroc", "gla_sound_pooled_n_rounds"), key  # counts, not data
            continue
        # replicates are stored as float32
        np.testing.assert_allclose(reps[key][:-1], mean, rtol=1e-6, atol=1e-7, equal_nan=True, err_msg=key)
        kept += 1
    assert kept > 100
    assert {replicate_key(a, w, "auroc") for a in ("rla", "fla", "gla_sound", "gla_sound_pooled",
                                                   "rla_untrained_control") for w in ("lr", "rf")} <= set(reps)
    own = rows[(rows["metric"] == "client_accuracy") & (rows["client"] == 0)]["value"].mean()
    assert reps[replicate_key("", "", "utility_accuracy")][-1] == pytest.approx(own)
    assert n_clients == len(set(rows.loc[rows["metric"] == "client_accuracy", "client"]))
