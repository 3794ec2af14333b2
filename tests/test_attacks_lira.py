"""LiRA (online and offline) on constructed shadow statistics: it finds a per-example IN shift, sits at chance
without one, survives examples with few IN/OUT shadows, and refuses malformed input with a clear message."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from eegprivacy.attacks.lira import LiRA, logit_confidence, logit_confidence_from_proba
from eegprivacy.attacks.metrics import attack_summary


def _game(shift: float, n_shadows: int = 16, n_examples: int = 4000, seed: int = 0):
    """Per-example difficulty (a mean φ that varies a lot across examples) plus model noise; membership adds
    `shift`. Returns shadow φ, the shadows' IN mask, the target's φ and its membership labels."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 3.0, n_examples)
    in_mask = rng.random((n_shadows, n_examples)) < 0.5
    phi_shadow = difficulty + shift * in_mask + rng.normal(0.0, 0.5, (n_shadows, n_examples))
    member = rng.random(n_examples) < 0.5
    phi_target = difficulty + shift * member + rng.normal(0.0, 0.5, n_examples)
    return phi_shadow, in_mask, phi_target, member.astype(int)


@pytest.mark.parametrize("mode", ["online", "offline"])
@pytest.mark.parametrize("variance", ["global", "per_example"])
def test_lira_finds_a_per_example_shift_hidden_by_example_difficulty(mode, variance):
    phi_shadow, in_mask, phi_target, member = _game(shift=1.5)
    scores = LiRA(mode=mode, variance=variance).fit(phi_shadow, in_mask).score_samples(phi_target)
    out = attack_summary(member, scores)
    assert out["auroc"] > 0.85
    assert out["tpr_at_fpr_0.001"] > 0.05  # chance is 0.001
    # The raw statistic, blind to example difficulty, is far weaker: the calibration per example is the point.
    assert attack_summary(member, phi_target)["auroc"] < 0.7


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_lira_without_leakage_is_at_chance(mode):
    phi_shadow, in_mask, phi_target, member = _game(shift=0.0, n_examples=6000, seed=1)
    scores = LiRA(mode=mode).fit(phi_shadow, in_mask).decision_function(phi_target)
    out = attack_summary(member, scores)
    assert abs(out["auroc"] - 0.5) < 0.03
    assert out["tpr_at_fpr_0.001"] < 0.01  # chance ≈ 0.001


def test_online_beats_offline_and_both_are_deterministic():
    phi_shadow, in_mask, phi_target, member = _game(shift=1.0, seed=2)
    online = LiRA("online").fit(phi_shadow, in_mask).score_samples(phi_target)
    offline = LiRA("offline").fit(phi_shadow, in_mask).score_samples(phi_target)
    assert attack_summary(member, online)["auroc"] >= attack_summary(member, offline)["auroc"] - 0.01
    np.testing.assert_array_equal(online, LiRA("online").fit(phi_shadow, in_mask).score_samples(phi_target))
    assert clone(LiRA("offline", variance="per_example")).get_params()["variance"] == "per_example"


def test_examples_with_few_in_or_out_shadows_fall_back_to_pooled_statistics():
    phi_shadow, in_mask, phi_target, member = _game(shift=1.5, n_shadows=8, seed=3)
    in_mask[:, :50] = True   # 50 examples never OUT
    in_mask[:, 50:100] = False  # 50 never IN
    in_mask[1:, 100:150] = False  # 50 IN once
    lira = LiRA("online", variance="per_example").fit(phi_shadow, in_mask)
    assert lira.n_fallback_out_ >= 50 and lira.n_fallback_in_ >= 100
    scores = lira.score_samples(phi_target)
    assert np.isfinite(scores).all() and attack_summary(member, scores)["auroc"] > 0.8
    # the missing means are the other side's plus the average IN − OUT shift (≈ 1.5 here)
    assert lira.global_shift_ == pytest.approx(1.5, abs=0.1)
    np.testing.assert_allclose(lira.mean_in_[50:100], lira.mean_out_[50:100] + lira.global_shift_)
    offline = LiRA("offline").fit(phi_shadow, in_mask)
    assert np.isfinite(offline.score_samples(phi_target)).all()


def test_degenerate_inputs_raise_clear_errors():
    phi_shadow, in_mask, phi_target, _ = _game(shift=1.0, n_shadows=4, n_examples=20)
    with pytest.raises(ValueError, match="must match"):
        LiRA().fit(phi_shadow, in_mask[:, :10])
    with pytest.raises(ValueError, match="at least 2 shadow"):
        LiRA().fit(phi_shadow[:1], in_mask[:1])
    with pytest.raises(ValueError, match="finite"):
        LiRA().fit(np.where(in_mask, np.inf, phi_shadow), in_mask)
    with pytest.raises(ValueError, match="boolean"):
        LiRA().fit(phi_shadow, in_mask * 2)
    with pytest.raises(ValueError, match="IN shadows"):
        LiRA("online").fit(phi_shadow, np.zeros_like(in_mask))
    LiRA("offline").fit(phi_shadow, np.zeros_like(in_mask))  # offline needs no IN shadow at all
    with pytest.raises(ValueError, match="OUT distribution"):
        LiRA("offline").fit(phi_shadow, np.ones_like(in_mask))
    with pytest.raises(ValueError, match="mode"):
        LiRA("sideways").fit(phi_shadow, in_mask)
    with pytest.raises(ValueError, match="same examples"):
        LiRA().fit(phi_shadow, in_mask).score_samples(phi_target[:5])
    with pytest.raises(ValueError, match="1-D|n_shadows"):
        LiRA().fit(phi_shadow.ravel(), in_mask.ravel())


def test_logit_confidence_is_the_log_odds_of_the_true_label_and_stays_finite():
    logits = np.array([[2.0, -1.0], [0.0, 0.0], [800.0, -800.0]])
    phi = logit_confidence(logits, [0, 1, 1])
    np.testing.assert_allclose(phi, [3.0, 0.0, -1600.0])  # z_y − z_other for two classes; no overflow
    three = np.array([[0.3, 1.2, -0.5]])
    p = np.exp(three) / np.exp(three).sum()
    np.testing.assert_allclose(logit_confidence(three, [1]), np.log(p[0, 1]) - np.log1p(-p[0, 1]))
    np.testing.assert_allclose(logit_confidence_from_proba(p, [1]), logit_confidence(three, [1]))
    with pytest.raises(ValueError, match="targets"):
        logit_confidence(logits, [0, 2, 1])
