"""Study B's one-run audit and DP-SGD rows (``federated_audit``): the canaries, the server's update score, the
pooled bound beside the certificate (a null run at chance, a leaky run clearly positive, no bound above its
certificate), the accounting columns, and the committed results (no empirical ε above its certified ε).

Synthetic data below is labelled SYNTHETIC: a tiny ``synthetic_mi`` cohort and hand-made score arrays."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _federated_params import tiny_federated_mia

from eegprivacy.attacks.canaries import outlier_canaries
from eegprivacy.studies.federated import audit
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.control import FederatedControlConfig

ROOT = Path(__file__).resolve().parents[1]
CONTROL = {"dataset": "synthetic_mi", "models": ["simplenet"], "preprocessing": ["laplacian"],
           "epsilons": [math.inf], "seeds": 1, "num_rounds": 2, "local_epochs": 1, "control_folds": 2,
           "attack_folds": 2, "bootstrap": 100}
AUDIT = {"dataset": "synthetic_mi", "seeds": 1, "canaries_per_client": 8, "canary_radius": 12.0, "guesses": 6,
         "paper_preprocessing": "laplacian", "paper_epsilons": [math.inf, 1.0], "dp_sgd_preprocessing": "laplacian",
         "dp_sgd_epsilons": [math.inf, 1.0], "dp_sgd_num_rounds": 3, "bootstrap": 100}


@pytest.fixture(scope="module")
def tiny():
    """A SYNTHETIC 4-subject cohort trained 4 rounds x 10 local epochs with every client in every round."""
    from eegprivacy.studies.federated import mia

    training = FederatedMIAConfig.from_mapping(tiny_federated_mia(20, num_rounds=4, local_epochs=10,
                                                                  clients_per_round=4, learning_rate=0.01),
                                               "test", "federated_mia.")
    _, trials = mia.load_trials("synthetic_mi", training.datasets["synthetic_mi"])
    control = FederatedControlConfig.from_mapping(CONTROL, "test", "federated_control.")
    return training, trials, control, audit.FederatedAuditConfig.from_mapping(AUDIT, "test", "federated_audit.")


def test_outlier_canaries_are_far_seeded_balanced_and_planted_only_when_included():
    X = np.random.default_rng(0).normal(size=(200, 4))
    a = outlier_canaries(X, [0, 1], per_group=8, n_groups=4, radius=5.0, random_state=3)
    b = outlier_canaries(X, [0, 1], per_group=8, n_groups=4, radius=5.0, random_state=3)
    assert a.m == 32 and np.array_equal(a.X, b.X) and np.array_equal(a.included, b.included)
    assert np.bincount(a.owner).tolist() == [8] * 4 and set(np.unique(a.y)) <= {0, 1}
    distance = np.linalg.norm(a.X - X.mean(0), axis=1)
    assert distance.min() > 3 * np.linalg.norm(X - X.mean(0), axis=1).max() / 2
    Xp, _ = a.planted(2)
    assert len(Xp) == int((a.included & (a.owner == 2)).sum())
    with pytest.raises(ValueError, match="radius"):
        outlier_canaries(X, [0, 1], 1, 1, 0.0, 0)


def _audit(tiny, cell: dict, plant: bool) -> tuple[int, int, dict]:
    """One audited run of ``cell`` on the SYNTHETIC cohort; ``plant=False`` trains without any canary (null)."""
    from eegprivacy.attacks.one_run_audit import guesses

    training, trials, control, config = tiny
    clients = audit._clients(cell, 0, trials, training, control)
    fed = audit.training_of(cell, training, audit.mean_members(clients))
    arrays = audit.audit_arrays(cell, 0, clients, trials.y, fed, config, plant=plant)
    r, v = guesses(arrays["canary/score"], arrays["canary/coin"], config.guesses, config.guesses)
    return r, v, arrays


def test_canaries_never_trained_on_give_chance_and_planted_ones_are_found(tiny):
    """Through the real federation and score: with no canary in any training set the guesses are at chance (the
    bound refutes nothing); planted without DP they are clearly found."""
    from eegprivacy.attacks.one_run_audit import epsilon_lower_bound

    training, _, _, config = tiny
    cell = audit.settings(config, training)[0]
    assert cell["protocol"] == "paper_laplace" and not math.isfinite(cell["epsilon"])
    r, v, _ = _audit(tiny, cell, plant=False)
    assert epsilon_lower_bound(32, r, v, 1e-5) == 0.0 and abs(v - r / 2) <= 4
    r, v, _ = _audit(tiny, cell, plant=True)
    assert v >= r - 2 and epsilon_lower_bound(32, r, v, 1e-5) > 0.1


def test_dp_sgd_rows_are_calibrated_and_their_audit_stays_below_the_certificate(tiny):
    training, _, _, config = tiny
    cells = {(c["protocol"], c["epsilon"]): c for c in audit.settings(config, training)}
    cell = cells[("dp_sgd", 1.0)]
    steps = audit.dp_sgd_steps(config)
    assert steps == 3 * 1 * 2 and cell["noise_multiplier"] > 1 and cell["standardise"]
    certified = audit.certified_epsilons(cell, delta=1e-5, dim=450, n_members=10, batch_size=32, clip_norm=1.0,
                                         steps=steps)
    assert certified["certified_epsilon_pld"] <= certified["certified_epsilon_rdp"] <= 1.0
    _, _, arrays = _audit(tiny, cell, plant=True)
    summary = audit.audit_summary([(cell, 0, arrays)], config, {("dp_sgd", 1.0): certified})
    assert not summary["exceeds_certified"].any()
    assert summary["empirical_epsilon"].iloc[0] <= certified["certified_epsilon_pld"]


def test_summary_pools_runs_and_flags_a_bound_above_its_certificate():
    """SYNTHETIC score arrays: two runs of 40 canaries, perfectly separated, pooled into one bound."""
    config = audit.FederatedAuditConfig.from_mapping({**AUDIT, "guesses": 10}, "test", "federated_audit.")
    coin = np.arange(40) % 2 == 0
    arrays = {"canary/score": coin.astype(float) + np.linspace(0, 0.1, 40), "canary/coin": coin}
    cell = {"protocol": "dp_sgd", "preprocessing": "laplacian", "epsilon": 0.5, "epsilon_unit": "total_per_record",
            "mechanism": "gaussian_example", "noise_multiplier": 9.0, "num_rounds": 3, "local_epochs": 1}
    out = audit.audit_summary([(cell, 0, arrays), (cell, 1, arrays)], config,
                              {("dp_sgd", 0.5): {"certified_epsilon_rdp": 0.5, "certified_epsilon_pld": 0.45}})
    row = out.iloc[0]
    assert (row["guesses"], row["right"], row["canaries"], row["runs"]) == (40, 40, 80, 2)
    assert row["empirical_epsilon"] == pytest.approx(row["max_certifiable_epsilon"]) and row["empirical_epsilon"] > 2
    assert row["exceeds_certified"] and row["empirical_over_certified"] == pytest.approx(row["empirical_epsilon"] / .45)


def test_accounting_rows_carry_the_bound_beside_the_certificate():
    from eegprivacy.studies.federated.accounting import attach_audit

    head = pd.DataFrame({"dataset": ["d", "d"], "model": ["simplenet"] * 2, "calibration": ["certified"] * 2,
                         "unit": ["example"] * 2, "metric": ["epsilon_cumulative"] * 2, "accountant": ["rdp", "pld"],
                         "epsilon": [5.0, 5.0], "value": [170.0, 169.0]})
    rows = pd.DataFrame([{"protocol": "paper_laplace", "dataset": "d", "epsilon": 5.0, "empirical_epsilon": 0.8,
                          "confidence": 0.95, "certified_epsilon_rdp": 85.0, "certified_epsilon_pld": 84.0,
                          "right": 18, "guesses": 20, "canaries": 64},
                         {"protocol": "dp_sgd", "dataset": "d", "dataset_version": "v", "synthetic": True,
                          "epsilon": 8.0, "delta": 1e-5, "empirical_epsilon": 0.0, "confidence": 0.95,
                          "certified_epsilon_rdp": 8.0, "certified_epsilon_pld": 7.3, "right": 10, "guesses": 20,
                          "canaries": 64, "noise_multiplier": 2.2, "epsilon_excludes": "x", "num_rounds": 20},
                         {"protocol": "dp_sgd", "dataset": "other", "epsilon": 8.0}])
    out = attach_audit(head, rows)
    assert out.loc[0, "empirical_over_certified"] == pytest.approx(0.8 / 85.0)
    assert out.loc[1, "audit_certified_epsilon"] == 84.0 and out.loc[0, "value"] == 170.0
    assert out["protocol"].eq("dp_sgd").sum() == 2 and set(out["dataset"]) == {"d"}  # other cohorts left out
    assert set(out.loc[out["protocol"].eq("dp_sgd"), "round"]) == {20}


def test_committed_audit_never_exceeds_its_certificate_and_is_positive_without_dp():
    """``metrics/federated_audit.csv`` as the stage wrote it: no empirical ε above either certified ε, and the
    paper protocol's no-DP audit clearly positive (its canaries are strong enough to show a leak)."""
    path = ROOT / "metrics/federated_audit.csv"
    if not path.exists():
        pytest.fail("metrics/federated_audit.csv is missing: run `dvc repro federated_audit`")
    rows = pd.read_csv(path)
    finite = rows[np.isfinite(rows["certified_epsilon_rdp"])]
    assert (finite["empirical_epsilon"] <= finite[["certified_epsilon_rdp", "certified_epsilon_pld"]].min(1)).all()
    assert not rows["exceeds_certified"].any()
    no_dp = rows[rows["protocol"].eq("paper_laplace") & ~np.isfinite(rows["epsilon"])]
    assert len(no_dp) == 1 and no_dp["empirical_epsilon"].iloc[0] > 0.5


def test_report_and_figure_render_from_the_committed_tables():
    from matplotlib.figure import Figure

    from eegprivacy.reporting.federated_audit import draw, metrics_of, report_md

    rows, dpsgd = (pd.read_csv(ROOT / f"metrics/{name}.csv") for name in ("federated_audit", "federated_audit_dpsgd"))
    meta = {"dataset": "eegmmidb", "dataset_version": "v", "profile": "default", "n_subjects": 16, "seeds": 3,
            "canaries_per_client": 4, "canaries_per_run": 64, "canary_radius": 12.0, "guesses": 10,
            "confidence": 0.95, "delta": 1e-5, "dp_sgd_sample_rate": 0.5, "dp_sgd_clip_norm": 1.0,
            "dp_sgd_num_rounds": 20, "dp_sgd_local_epochs": 1, "dp_sgd_steps": 40, "dp_sgd_learning_rate": 0.01}
    text = report_md(rows, dpsgd, meta)
    assert "No empirical bound exceeds its certified ε" in text and "Without DP this schedule reaches" in text
    draw(rows, dpsgd, Figure())
    metrics = metrics_of(rows, dpsgd)
    assert metrics and all(np.isfinite(v) for v in metrics.values())


def test_what_the_training_certificate_leaves_out_comes_from_the_preprocessing_registry():
    """One list of preprocessing names: each registry entry says what a training certificate leaves out (an entry
    that does not is an error), and the audit rows print it."""
    import dataclasses

    from eegprivacy.federated.preprocessing import PREPROCESSING

    assert all(entry.outside_training for entry in PREPROCESSING.values())
    with pytest.raises(ValueError, match="outside_training"):
        dataclasses.replace(PREPROCESSING["pooled_csp"], outside_training="")
    table = pd.read_csv(Path(__file__).resolve().parents[1] / "metrics" / "federated_audit.csv")
    for _, row in table.iterrows():
        assert row["epsilon_excludes"].startswith(PREPROCESSING[row["preprocessing"]].outside_training)
