"""Study B LiRA's pooled scores (SYNTHETIC scores, no federation): a TPR only at an FPR the independent
non-members resolve, a member split per target model, and a two-way (models x trials/subjects) bootstrap whose
interval covers chance when scores carry no membership signal."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from eegprivacy.federated.splits import member_split
from eegprivacy.reporting.lira import report_md
from eegprivacy.studies.federated import mia
from eegprivacy.studies.federated.lira import (
    independent_nonmembers,
    pooled_rows,
    resolvable_fpr,
    summarise,
    target_member,
)


def _trials(n_subjects: int = 6, per_class: int = 10):
    """Trial labels and subjects in the shape ``seed_split`` reads (SYNTHETIC)."""
    y = np.tile(np.repeat([0, 1], per_class), n_subjects)
    subjects = np.repeat([f"s{k}" for k in range(n_subjects)], 2 * per_class)
    return SimpleNamespace(y=y, metadata=pd.DataFrame({"subject": subjects}))


def test_resolvable_fpr_is_the_requested_one_only_with_enough_independent_nonmembers():
    assert resolvable_fpr(0.001, 1000) == 0.001 and resolvable_fpr(0.001, 5000) == 0.001
    assert resolvable_fpr(0.001, 138) == 0.01  # the old pooled LiRA: 138 distinct non-members
    assert resolvable_fpr(0.001, 643) == 0.002 and resolvable_fpr(0.001, 400) == 0.005
    assert resolvable_fpr(0.01, 50) == 0.02 and resolvable_fpr(0.01, 100) == 0.01
    for n in (7, 29, 138, 643, 999):
        fpr = resolvable_fpr(0.001, n)
        assert n * fpr >= 1 and fpr >= 0.001  # resolvable, never finer than asked
    with pytest.raises(ValueError, match="no independent non-member"):
        resolvable_fpr(0.001, 0)
    with pytest.raises(ValueError, match="fpr"):
        resolvable_fpr(0.0, 100)


def test_pooled_tpr_is_reported_only_at_the_fpr_its_distinct_nonmembers_resolve():
    """Ten target models on ONE split with 138 non-members pool 1,380 non-member scores but only 138 distinct
    trials: no TPR at 0.1 % FPR; the TPR is at 1 %, named, with 138 independent non-members printed."""
    rng = np.random.default_rng(0)
    member = np.ones(690, dtype=int)
    member[rng.choice(690, 138, replace=False)] = 0
    groups = {("lira_online", ""): [(member, rng.normal(size=690) + member) for _ in range(10)]}
    rows, _ = pooled_rows(groups, 0, 0, "target_pooled")
    metrics = {r["metric"]: r for r in rows}
    assert "tpr_at_fpr_0.001" not in metrics
    low = metrics["tpr_at_resolvable_fpr"]
    assert low["fpr"] == 0.01 and low["chance"] == 0.01
    assert low["n_independent_nonmembers"] == 138 and low["n_nonmembers"] == 1380
    # Each model on its own split: the non-members cover most trials, and a finer FPR becomes resolvable.
    splits = [rng.permutation(member) for _ in range(10)]
    rows, _ = pooled_rows({("lira_online", ""): [(m, rng.normal(size=690)) for m in splits]}, 0, 0, "x")
    low = next(r for r in rows if r["metric"] == "tpr_at_resolvable_fpr")
    assert low["n_independent_nonmembers"] == independent_nonmembers(np.stack(splits)) > 500
    assert low["fpr"] == resolvable_fpr(0.001, low["n_independent_nonmembers"]) < 0.01


def test_report_names_the_resolvable_fpr_and_prints_the_independent_count():
    rng = np.random.default_rng(1)
    member = np.ones(690, dtype=int)
    member[:138] = 0
    groups = {("lira_online", ""): [(member, rng.normal(size=690)) for _ in range(3)]}
    rows, _ = pooled_rows(groups, 20, 0, "target_pooled", clusters=np.repeat(np.arange(10), 69))
    per_seed = [{"metric": m, "value": 0.5, "chance": 0.5, "attack": "lira_online", "attacker": "",
                 "scope": "target_seed", "seed": s} for s in range(3) for m in ("auroc", "tpr_at_fpr_0.01")]
    tidy = pd.DataFrame(per_seed + rows).assign(epsilon=math.inf)
    tidy["attacker"] = tidy["attacker"].fillna("")
    summary = summarise(tidy)
    cum = SimpleNamespace(text=lambda *a, **k: "∞", note=lambda: "")
    meta = {"dataset": "synthetic_mi", "model": "simplenet", "synthetic": True, "split_seed": 0, "n_trials": 690,
            "n_members": 552, "n_nonmembers": 138, "n_independent_nonmembers": 138, "n_clients": 10,
            "target_seeds": 3, "n_shadows": 4, "shadow_in_fraction": 0.8, "lira_variance": "global",
            "attack_folds": 2, "epochs": [math.inf], "epsilons": [math.inf], "training": "",
            "bootstrap_unit": "subjects"}
    report = report_md(summary, meta, cum)
    row = next(line for line in report.splitlines() if line.startswith("| inf |") and "LiRA online" in line)
    assert "| 1 % | 138 | subjects+seeds |" in row
    assert "0.1 %FPR" not in report and "138 independent non-members" in report


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
