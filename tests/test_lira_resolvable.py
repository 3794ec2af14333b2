"""Study B LiRA's pooled scores (SYNTHETIC scores, no federation): a TPR only where at least 10 independent
non-members lie beyond its threshold ("not resolvable (…)" elsewhere, no number), a member split per target model,
a blocked threshold bootstrap that covers a known TPR, and a two-way (models x trials/subjects) bootstrap whose
AUROC interval covers chance when scores carry no membership signal."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from scipy.stats import norm

from eegprivacy.attacks.metrics import tpr_at_fpr
from eegprivacy.federated.splits import member_split
from eegprivacy.reporting.lira import headline, report_md
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.lira.config import DIFF_METRIC, MIN_BEYOND, POOLED_METRICS
from eegprivacy.studies.federated.lira.pooled import (
    cluster_bootstrap,
    control_difference_rows,
    control_share,
    holm_control_cells,
    paired_difference,
    pooled_rows,
    summarise,
)
from eegprivacy.studies.federated.lira.scoring import (
    ZERO_FPR_NOTE,
    independent_nonmembers,
    needed_nonmembers,
    not_resolvable_note,
    resolvable,
    resolvable_fpr,
    score_rows,
    tpr_at_threshold,
)
from eegprivacy.studies.federated.lira.targets import target_member


def _trials(n_subjects: int = 6, per_class: int = 10):
    """Trial labels and subjects in the shape ``seed_split`` reads (SYNTHETIC)."""
    y = np.tile(np.repeat([0, 1], per_class), n_subjects)
    subjects = np.repeat([f"s{k}" for k in range(n_subjects)], 2 * per_class)
    return SimpleNamespace(y=y, metadata=pd.DataFrame({"subject": subjects}))


def test_resolvable_fpr_needs_ten_independent_nonmembers_beyond_the_threshold():
    assert resolvable_fpr(0.001, 10_000) == 0.001 and resolvable_fpr(0.001, 50_000) == 0.001
    assert resolvable_fpr(0.001, 9_999) == 0.002 and resolvable_fpr(0.001, 5_000) == 0.002
    assert resolvable_fpr(0.001, 2_000) == 0.005 and resolvable_fpr(0.001, 1_000) == 0.01
    assert resolvable_fpr(0.001, 634) == 0.02 and resolvable_fpr(0.001, 720) == 0.02  # the pooled targets, shadows
    assert resolvable_fpr(0.001, 144) == 0.1  # one target's non-members
    assert resolvable_fpr(0.001, 20) == 0.5 and math.isnan(resolvable_fpr(0.001, 19))  # nothing below 100 %
    for n in (20, 29, 138, 643, 999, 12_345):
        fpr = resolvable_fpr(0.001, n)
        assert n * fpr >= 10 and fpr >= 0.001 and resolvable(fpr, n)  # resolvable, never finer than asked
    with pytest.raises(ValueError, match="no independent non-member"):
        resolvable_fpr(0.001, 0)
    with pytest.raises(ValueError, match="fpr"):
        resolvable_fpr(0.0, 100)


def test_resolvability_boundary_is_exactly_ten_beyond():
    assert MIN_BEYOND == 10
    assert resolvable(0.01, 1000) and not resolvable(0.01, 999) and not resolvable(0.01, 900)
    assert resolvable(0.001, 10_000) and not resolvable(0.001, 9_000)
    assert needed_nonmembers(0.001) == 10_000 and needed_nonmembers(0.01) == 1_000 and needed_nonmembers(0.02) == 500
    assert not_resolvable_note(0.001, 9_000) == ("not resolvable: needs ≥ 10,000 independent non-members, has "
                                                 "9,000; supports 0.2 % FPR")
    rng = np.random.default_rng(0)
    for n_nonmembers, beyond in ((10_000, 10), (9_000, 9)):  # one model: every non-member is independent
        member = np.r_[np.zeros(n_nonmembers, dtype=int), np.ones(2_000, dtype=int)]
        scores = rng.normal(size=member.size) + 2.0 * member
        rows, _ = pooled_rows({("lira_online", ""): [(member, scores)]}, 0, 0, "target_pooled")
        low = next(r for r in rows if r["metric"] == "tpr_at_fpr_0.001")
        assert int(low["fpr"] * low["n_independent_nonmembers"]) == beyond
        if beyond == 10:
            assert low["resolvable"] and 0 < low["value"] < 1 and low["note"] == ""
        else:
            assert not low["resolvable"] and math.isnan(low["value"]) and math.isnan(low["ci_low"])
            assert low["note"] == not_resolvable_note(0.001, 9_000) and low["ci_method"] == "none"
        # one model's rows: its TPR at 1 % FPR with 1,000 non-members (10 beyond), not with 999 (9.99)
        for n, ok in ((1_000, True), (999, False)):
            m = np.r_[np.zeros(n, dtype=bool), np.ones(500, dtype=bool)]
            row = next(r for r in score_rows(m, {("x", ""): rng.normal(size=m.size) + m}) if
                       r["metric"] == "tpr_at_fpr_0.01")
            assert np.isfinite(row["value"]) == ok


def test_tpr_at_threshold_is_the_roc_tpr_at_fpr_ties_included():
    rng = np.random.default_rng(3)
    for k in range(30):
        member = rng.integers(0, 2, 400)
        scores = np.round(rng.normal(size=400) + member, 1 if k % 2 else 6)  # ties at one decimal
        for fpr in (0.01, 0.02, 0.05, 0.1, 0.3):
            assert tpr_at_threshold(member, scores, fpr) == tpr_at_fpr(member, scores, fpr)


def test_threshold_bootstrap_covers_a_known_tpr():
    """A SYNTHETIC pool with a known TPR at its FPR: 20 subjects of 40 trials (8 non-members each), scores with a
    subject effect (τ = 0.5) plus N(0, 1) noise, members shifted by 1.5; FPR = 10 / 160, exactly 10 non-members
    beyond the threshold. The marginal scores are N(0, 1 + τ²) and N(1.5, 1 + τ²), so the true TPR is known; the
    blocked threshold bootstrap's 95 % interval covers it in most of 200 pools."""
    n_subjects, per, nonmembers, shift, tau = 20, 40, 8, 1.5, 0.5
    fpr = MIN_BEYOND / (n_subjects * nonmembers)
    truth = float(norm.sf(norm.isf(fpr) - shift / np.sqrt(1 + tau**2)))
    subject = np.repeat(np.arange(n_subjects), per)
    member = np.tile(np.r_[np.zeros(nonmembers), np.ones(per - nonmembers)], n_subjects).astype(int)
    covered, n_pools = 0, 200
    for k in range(n_pools):
        rng = np.random.default_rng(k)
        scores = tau * rng.normal(size=n_subjects)[subject] + rng.normal(size=member.size) + shift * member
        low, high = cluster_bootstrap(member[None], scores[None], subject, {"tpr": fpr}, 200, k,
                                      with_auroc=False)["tpr"]
        covered += low <= truth <= high
    assert covered >= 0.88 * n_pools, covered


def test_pooled_tpr_is_reported_only_at_the_fpr_its_distinct_nonmembers_resolve():
    """Ten target models on ONE split with 138 non-members pool 1,380 non-member scores but only 138 distinct
    trials: no TPR at 0.1 % FPR (a "not resolvable" row); the TPR is at 10 %, named, with 138 independent
    non-members, 10 subject clusters and its interval method beside; TPR at zero FPR never a number."""
    rng = np.random.default_rng(0)
    member = np.ones(690, dtype=int)
    member[rng.choice(690, 138, replace=False)] = 0
    groups = {("lira_online", ""): [(member, rng.normal(size=690) + member) for _ in range(10)]}
    rows, _ = pooled_rows(groups, 20, 0, "target_pooled", clusters=np.repeat(np.arange(10), 69))
    metrics = {r["metric"]: r for r in rows}
    assert set(metrics) == set(POOLED_METRICS)
    assert all(r["n_clusters"] == 10 and r["ci_over"] == "subjects+seeds" for r in rows)
    assert not metrics["tpr_at_fpr_0.001"]["resolvable"] and math.isnan(metrics["tpr_at_fpr_0.001"]["value"])
    assert metrics["tpr_at_fpr_0.001"]["note"].startswith("not resolvable: needs ≥ 10,000 independent "
                                                          "non-members, has 138")
    zero = metrics["tpr_at_zero_fpr"]
    assert not zero["resolvable"] and math.isnan(zero["value"]) and zero["note"] == ZERO_FPR_NOTE
    low = metrics["tpr_at_resolvable_fpr"]
    assert low["fpr"] == 0.1 and low["chance"] == 0.1 and low["resolvable"]
    assert low["n_independent_nonmembers"] == 138 and low["n_nonmembers"] == 1380
    assert low["ci_method"] == "blocked_threshold_bootstrap" and low["ci_low"] <= low["value"] <= low["ci_high"]
    assert metrics["auroc"]["ci_method"] == "two_way_bootstrap"
    # Each model on its own split: the non-members cover most trials, and a finer FPR becomes resolvable.
    splits = [rng.permutation(member) for _ in range(10)]
    rows, _ = pooled_rows({("lira_online", ""): [(m, rng.normal(size=690)) for m in splits]}, 0, 0, "x")
    low = next(r for r in rows if r["metric"] == "tpr_at_resolvable_fpr")
    assert low["n_independent_nonmembers"] == independent_nonmembers(np.stack(splits)) > 500
    assert low["fpr"] == resolvable_fpr(0.001, low["n_independent_nonmembers"]) == 0.02
    assert low["n_clusters"] == 690  # no subjects given: every trial its own cluster


def test_report_names_the_resolvable_fpr_and_prints_not_resolvable_cells():
    rng = np.random.default_rng(1)
    member = np.ones(690, dtype=int)
    member[:138] = 0
    groups = {("lira_online", ""): [(member, rng.normal(size=690)) for _ in range(3)]}
    rows, _ = pooled_rows(groups, 20, 0, "target_pooled", clusters=np.repeat(np.arange(10), 69))
    per_seed = [{"metric": m, "value": v, "chance": 0.5, "attack": "lira_online", "attacker": "",
                 "scope": "target_seed", "seed": s} for s in range(3)
                for m, v in (("auroc", 0.5), ("tpr_at_fpr_0.01", np.nan))]
    per_seed += [{"metric": "n_nonmembers", "value": 138.0, "seed": s} for s in range(3)]
    tidy = pd.DataFrame(per_seed + rows).assign(epsilon=math.inf)
    tidy["attacker"] = tidy["attacker"].fillna("")
    summary = summarise(tidy)
    t1 = summary[(summary["scope"] == "target_seed") & (summary["metric"] == "tpr_at_fpr_0.01")].iloc[0]
    assert not t1["resolvable"] and t1["note"].startswith("not resolvable: needs ≥ 1,000 independent "
                                                          "non-members per model, has 138")
    cum = SimpleNamespace(text=lambda *a, **k: "∞", note=lambda: "")
    meta = {"dataset": "synthetic_mi", "model": "simplenet", "synthetic": True, "split_seed": 0, "n_trials": 690,
            "n_members": 552, "n_nonmembers": 138, "n_independent_nonmembers": 138, "n_clients": 10,
            "target_seeds": 3, "n_shadows": 60, "shadow_in_fraction": 0.8, "shadow_in_count": 48, "loo_group": 5,
            "lira_variance": "global", "attack_folds": 2, "epochs": [math.inf], "epsilons": [math.inf],
            "training": "", "bootstrap_unit": "subjects"}
    report = report_md(summary, meta, cum)
    row = next(line for line in report.splitlines() if line.startswith("| inf |") and "LiRA online" in line)
    assert "| 10 % | blocked_threshold_bootstrap | 10 | 138 | subjects+seeds |" in row
    assert "not resolvable (needs ≥ 10,000 independent non-members, has 138; supports 10 % FPR)" in row
    assert "not resolvable (needs ≥ 1,000 independent non-members per model, has 138" in row
    assert "138 independent non-members" in report and "IN in exactly 48 of the 60 shadows" in report
    assert "the 5 shadows of its balanced group" in report and "TPR@0 FP" not in report
    entries = headline(summary, meta)
    low = entries["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online/tpr_at_fpr_0.001"]
    assert low["mean"] is None and low["ci_low"] is None and not low["resolvable"] and "10,000" in low["note"]
    zero = entries["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online/tpr_at_zero_fpr"]
    assert zero["mean"] is None and not zero["resolvable"]
    res = entries["synthetic_mi/simplenet/eps_inf/target_pooled/lira_online/tpr_at_resolvable_fpr"]
    assert res["mean"] is not None and res["ci_method"] == "blocked_threshold_bootstrap" and res["n_clusters"] == 10


def test_every_target_draws_its_own_member_split():
    trials = _trials()
    training = SimpleNamespace(test_size=0.2, split_seed=0)
    masks = np.stack([target_member(trials, training, seed) for seed in range(5)])
    assert len({m.tobytes() for m in masks}) == 5  # five targets, five splits
    subjects = trials.metadata["subject"].to_numpy()
    for mask in masks:  # each still 80/20 within every subject and class
        for s in np.unique(subjects):
            for c in (0, 1):
                assert mask[(subjects == s) & (trials.y == c)].sum() == 8
    np.testing.assert_array_equal(masks[3], mia.seed_split(trials, training, 3))  # federated_mia's seed-3 split
    np.testing.assert_array_equal(masks[3], target_member(trials, training, 3))  # reproducible
    assert not np.array_equal(masks[0], member_split(trials.y, subjects, 0.2, 0))  # not the one fixed split
    assert independent_nonmembers(masks) > (~masks[0]).sum()


@pytest.mark.parametrize("clusters", ["subjects", "trials"])
def test_no_membership_signal_gives_an_auroc_interval_that_covers_chance(clusters):
    """Scores with a subject effect and a per-trial effect that persists across models but nothing of
    membership (SYNTHETIC): the two-way bootstrap interval of the pooled AUROC covers 0.5 in most datasets."""
    trials = _trials(n_subjects=10, per_class=15)
    subjects = trials.metadata["subject"].to_numpy()
    codes = np.unique(subjects, return_inverse=True)[1]
    training = SimpleNamespace(test_size=0.2, split_seed=0)
    masks = [target_member(trials, training, seed).astype(int) for seed in range(6)]
    covered, n_data = 0, 20
    for k in range(n_data):
        rng = np.random.default_rng(100 + k)
        persistent = rng.normal(size=10)[codes] + rng.normal(size=codes.size)  # easy/hard trials, no membership
        groups = {("lira_online", ""): [(m, persistent + 0.3 * rng.normal(size=codes.size)) for m in masks]}
        rows, _ = pooled_rows(groups, 60, k, "target_pooled", clusters=codes if clusters == "subjects" else None)
        auc = next(r for r in rows if r["metric"] == "auroc")
        assert auc["ci_over"] == f"{clusters}+seeds"
        covered += auc["ci_low"] <= 0.5 <= auc["ci_high"]
    assert covered >= 0.8 * n_data, covered


def _leak_groups(training_leak: float, preprocessing_leak: float, seed: int) -> tuple[dict, np.ndarray]:
    """SYNTHETIC scores of 8 targets (each on its own split) over 12 subjects: a subject effect, a per-trial
    effect, a membership shift the control shares (``preprocessing_leak``: member-fitted CSP moves members
    whatever model follows) and one only the trained model has (``training_leak``); attack and control each add
    their own noise. Returns {(attack, ""): [(member, scores)]} with the online attack, its control and an
    untrained model (no signal), and the subject codes."""
    trials = _trials(n_subjects=12, per_class=15)
    codes = np.unique(trials.metadata["subject"].to_numpy(), return_inverse=True)[1]
    training = SimpleNamespace(test_size=0.2, split_seed=0)
    rng = np.random.default_rng(seed)
    subject, trial = rng.normal(size=12)[codes], rng.normal(size=codes.size)
    groups: dict = {}
    for t in range(8):
        m = target_member(trials, training, t).astype(int)
        shared = 0.5 * subject + trial + preprocessing_leak * m
        groups.setdefault(("lira_online", ""), []).append(
            (m, shared + training_leak * m + 0.3 * rng.normal(size=m.size)))
        groups.setdefault(("lira_online_control", ""), []).append((m, shared + 0.3 * rng.normal(size=m.size)))
        groups.setdefault(("lira_online_untrained_control", ""), []).append((m, 1e-3 * rng.normal(size=m.size)))
    return groups, codes


def test_lira_minus_control_separates_a_training_leak_from_a_preprocessing_leak():
    """A planted preprocessing leak (attack and control share the member shift) gives LiRA − control ≈ 0, an
    interval covering 0 and no significance after Holm, although the attack alone is far above chance; a planted
    training leak (the shift in the attack only) gives a positive, significant difference. Controls and the
    untrained model carry no p-value; the Holm family is the two attack − control cells."""
    frames = []
    for eps, (train, prep) in ((math.inf, (0.0, 1.0)), (5.0, (1.0, 0.0))):
        groups, codes = _leak_groups(train, prep, seed=int(train))
        rows, _ = pooled_rows(groups, 200, 0, "target_pooled", clusters=codes)
        diff = control_difference_rows(groups, 200, 0, "target_pooled", clusters=codes, subjects=codes)
        assert len(diff) == 1  # lira_online only: no offline attack here
        frames.append(pd.DataFrame(rows + diff).assign(epsilon=eps))
    tidy = holm_control_cells(pd.concat(frames, ignore_index=True))
    tidy["attacker"] = tidy["attacker"].fillna("")
    cells = tidy[tidy["metric"] == DIFF_METRIC].set_index("epsilon")
    assert set(cells["ci_over"]) == {"subjects+seeds"} and set(cells["ci_method"]) == {"paired_two_way_bootstrap"}
    assert (cells["n_clusters"] == 12).all() and (cells["n_models"] == 8).all()
    assert cells["family"].str.contains("2 cells").all()
    prep, train = cells.loc[math.inf], cells.loc[5.0]
    assert prep["attack_auroc"] > 0.7 and prep["control_auroc"] > 0.7  # the attack alone looks like a leak
    assert abs(prep["value"]) < 0.03 and prep["ci_low"] <= 0 <= prep["ci_high"]
    assert prep["p_value"] > 0.05 and not prep["significant"] and prep["control_share"] > 0.85
    assert train["value"] > 0.15 and train["ci_low"] > 0 and train["p_holm"] < 0.05 and train["significant"]
    assert abs(train["control_auroc"] - 0.5) < 0.05 and abs(train["control_share"]) < 0.2
    assert abs(train["untrained_auroc"] - 0.5) < 0.05 and 0 < train["p_mc_error"] < 0.01
    assert train["value"] == pytest.approx(train["attack_auroc"] - train["control_auroc"])
    others = tidy[tidy["metric"] != DIFF_METRIC]  # controls, attacks, the untrained model: not in the family
    assert others["p_holm"].isna().all() and others["p_value"].isna().all() and (others["family"] == "").all()
    summary = summarise(tidy)
    tested = summary[summary["metric"] == DIFF_METRIC]
    assert len(tested) == 2 and tested["p_holm"].notna().all()
    assert summary.loc[summary["attack"].str.endswith("control"), "p_holm"].isna().all()


def test_paired_difference_uses_the_two_way_resamples_of_each_arm():
    """The same resamples for attack and control: a control identical to the attack differs by exactly 0 on
    every resample (p = 1), and each arm's AUROC interval from :func:`cluster_bootstrap` is the interval of the
    AUROCs the paired bootstrap differences."""
    groups, codes = _leak_groups(1.0, 0.0, seed=3)
    members = np.stack([m for m, _ in groups[("lira_online", "")]])
    attack = np.stack([s for _, s in groups[("lira_online", "")]])
    same = paired_difference(members, attack, attack.copy(), codes, 100, 7)
    assert same["value"] == 0 and same["ci_low"] == same["ci_high"] == 0 and same["p_value"] == 1.0
    flat = paired_difference(members, attack, np.zeros_like(attack), codes, 100, 7)  # control AUROC 0.5 always
    flipped = paired_difference(members, np.zeros_like(attack), attack, codes, 100, 7)  # control above attack
    assert flipped["value"] == pytest.approx(-flat["value"]) and flipped["p_value"] == pytest.approx(flat["p_value"])
    low, high = cluster_bootstrap(members, attack, codes, {}, 100, 7)["auroc"]
    assert flat["ci_low"] == pytest.approx(low - 0.5) and flat["ci_high"] == pytest.approx(high - 0.5)
    assert math.isnan(paired_difference(members, attack, attack, codes, 0, 7)["p_value"])  # no bootstrap, no p
    assert control_share(0.8, 0.65) == pytest.approx(0.5) and math.isnan(control_share(0.45, 0.5))
    with pytest.raises(ValueError, match="same members"):
        bad = dict(groups)
        bad[("lira_online_control", "")] = [(1 - m, s) for m, s in groups[("lira_online_control", "")]]
        control_difference_rows(bad, 10, 0)
