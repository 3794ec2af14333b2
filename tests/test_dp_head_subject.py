"""Subject-level DP-SGD for the study C head (issue 20): ε per subject by default, per window only on request
(with its subject-level group-privacy bound beside it), and no standardisation statistics learned from the
private rows. Labelled synthetic: Gaussian embeddings of a few synthetic subjects."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eegprivacy.embeddings.dp_head import DPSGDHead, group_privacy

pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: tiny matrices, one intra-op thread


def subjects(n_subjects=8, per_subject=20, dim=12, seed=0):
    """Synthetic subjects: a subject offset plus a state shift, half the windows per state."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_subjects), per_subject)
    y = (np.arange(groups.size) % per_subject >= per_subject // 2).astype(int)
    Z = rng.standard_normal((groups.size, dim)) + rng.standard_normal((n_subjects, dim))[groups] + 1.0 * y[:, None]
    return Z, y, groups


def test_epsilon_is_per_subject_by_default():
    Z, y, groups = subjects()
    head = DPSGDHead(epsilon=2.0, epochs=3, random_state=0).fit(Z, y, groups=groups)
    assert head.privacy_unit == "subject" and head.eps_unit_ == "subject"
    assert 1.0 < head.epsilon_ <= 2.0 + 0.02 and head.noise_multiplier_ > 0
    assert head.n_units_ == 8 and head.group_size_ == 20
    assert head.subject_epsilon_ == head.epsilon_ and head.subject_delta_ == head.delta
    assert not head.subject_bound_vacuous_
    with pytest.raises(ValueError, match="needs groups"):
        DPSGDHead(epsilon=2.0).fit(Z, y)
    with pytest.raises(ValueError, match="groups"):
        DPSGDHead(epsilon=2.0).fit(Z, y, groups=groups[:-1])


def test_a_subject_counts_once_however_many_windows_it_has():
    """Subject-level clipping bounds a subject's whole contribution: repeating one subject's windows five times
    leaves the trained head unchanged (same sampling of subjects, same noise; full batches so the sampling rate
    does not depend on the window count). Per-window clipping lets the repeated subject weigh five times more."""
    Z, y, groups = subjects()
    heavy = np.concatenate([np.arange(len(Z))] + [np.flatnonzero(groups == 0)] * 4)
    kw = dict(epsilon=4.0, epochs=5, batch_size=10_000, learning_rate=0.5, random_state=1)

    def weights(unit, rows):
        head = DPSGDHead(privacy_unit=unit, **kw).fit(Z[rows], y[rows], groups=groups[rows])
        return head.model_[0].weight.numpy()

    base = np.arange(len(Z))
    np.testing.assert_allclose(weights("subject", base), weights("subject", heavy), atol=1e-5)
    assert not np.allclose(weights("window", base), weights("window", heavy), atol=1e-3)


def test_window_unit_reports_its_subject_level_bound():
    Z, y, groups = subjects(per_subject=25)
    head = DPSGDHead(epsilon=1.0, epochs=3, privacy_unit="window", random_state=0).fit(Z, y, groups=groups)
    assert head.eps_unit_ == "window" and head.group_size_ == 25
    k, eps, delta = 25, head.epsilon_, head.delta
    assert head.subject_epsilon_ == pytest.approx(k * eps)
    assert head.subject_delta_ == pytest.approx(k * math.exp((k - 1) * eps) * delta)
    assert head.subject_bound_vacuous_  # at ε ≈ 1 and 25 windows δ_k is far above 1: no subject guarantee
    no_groups = DPSGDHead(epsilon=1.0, epochs=1, privacy_unit="window", random_state=0).fit(Z, y)
    assert no_groups.group_size_ is None and math.isnan(no_groups.subject_epsilon_)
    assert group_privacy(0.01, 1e-5, 2) == pytest.approx((0.02, 2 * math.exp(0.01) * 1e-5))
    assert group_privacy(1.0, 1e-5, 1) == (1.0, 1e-5)
    assert math.isinf(group_privacy(50.0, 1e-5, 30)[1])


def test_standardisation_learns_nothing_from_the_training_rows():
    """The head standardises each window by its own coordinates: no mean/std of private rows ships inside it, so a
    per-window affine change of the input does not change the output."""
    Z, y, groups = subjects()
    head = DPSGDHead(epsilon=4.0, epochs=2, random_state=0).fit(Z, y, groups=groups)
    assert head.standardisation_ == "per_window"
    assert not hasattr(head, "mean_") and not hasattr(head, "scale_")
    np.testing.assert_allclose(head.transform(3.0 * Z + 5.0), head.transform(Z), atol=1e-4)
    with pytest.raises(ValueError, match="two columns"):
        DPSGDHead(epsilon=4.0).fit(Z[:, :1], y, groups=groups)
