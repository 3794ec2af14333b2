"""DP-SGD head (Study C defense): utility vs epsilon, accounting, determinism, representation, sklearn contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _audit_synth import single_thread_blas  # noqa: F401
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import balanced_accuracy_score

from eegprivacy.embeddings.dp_head import DELTA, EPSILONS, DPSGDHead
from eegprivacy.embeddings.endpoints.membership import membership_auc


def WindowHead(**kw):
    """The head at window level (every row its own unit, no groups needed): these tests check the estimator's
    mechanics; tests/test_dp_head_subject.py checks the subject-level unit."""
    return DPSGDHead(**{"privacy_unit": "window", **kw})


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny matrices: a second intra-op thread only contends (50x slower on a loaded 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def gaussian_classes(n=800, dim=32, shift=1.5, seed=0):
    """Two Gaussian classes, unequal per-dimension scales, class means +-shift along a random unit direction."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    direction = rng.standard_normal(dim)
    direction /= np.linalg.norm(direction)
    Z = rng.standard_normal((n, dim)) * rng.uniform(0.5, 2.0, dim) + np.outer(2 * y - 1, direction) * shift
    return Z, np.where(y == 1, "task", "rest")


@pytest.fixture(scope="module")
def grid():
    """One fit per protocol epsilon on the first 400 rows; held-out balanced accuracy on the other 400."""
    before = torch.get_num_threads()  # module-scoped: set up before the per-test thread fixture
    torch.set_num_threads(1)
    try:
        Z, y = gaussian_classes()
        fits = {}
        for eps in EPSILONS:
            head = WindowHead(epsilon=eps, random_state=0).fit(Z[:400], y[:400])
            fits[eps] = (head, balanced_accuracy_score(y[400:], head.predict(Z[400:])))
    finally:
        torch.set_num_threads(before)
    return Z, y, fits


def test_utility_and_accounting_across_epsilons(grid):
    _, _, fits = grid
    assert EPSILONS == (1.0, 4.0, 8.0, math.inf) and DELTA == 1e-5
    plain, ba_inf = fits[math.inf]
    assert ba_inf > 0.9
    assert plain.epsilon_ == math.inf and plain.noise_multiplier_ == 0.0
    assert fits[8.0][1] > 0.85
    assert fits[4.0][1] > 0.8
    assert fits[1.0][1] > 0.6  # DP at epsilon=1 may cost utility, but the signal is strong enough to survive
    for eps in (1.0, 4.0, 8.0):
        head = fits[eps][0]
        assert math.isfinite(head.epsilon_) and 0.5 * eps < head.epsilon_ <= eps + 0.02
        assert head.noise_multiplier_ > 0
        assert head.n_steps_ == plain.n_steps_ == head.epochs * math.ceil(400 / head.batch_size)
    assert fits[1.0][0].noise_multiplier_ > fits[4.0][0].noise_multiplier_ > fits[8.0][0].noise_multiplier_


def test_model_is_plain_torch_and_outputs_are_consistent(grid):
    Z, y, fits = grid
    head = fits[8.0][0]
    assert type(head.model_) is torch.nn.Sequential and not head.model_.training
    assert not any(hasattr(p, "grad_sample") for p in head.model_.parameters())
    assert not any(m._forward_hooks or m._backward_hooks for m in head.model_.modules())
    proba = head.predict_proba(Z[400:])
    assert proba.shape == (400, 2) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(head.predict(Z[400:]), head.classes_[proba.argmax(axis=1)])
    np.testing.assert_array_equal(head.decision_function(Z[400:]) > 0, proba[:, 1] > 0.5)
    assert set(head.predict(Z)) <= {"rest", "task"} and list(head.classes_) == ["rest", "task"]
    assert head.n_features_in_ == 32 and head.standardisation_ == "per_window"
    assert not hasattr(head, "mean_") and not hasattr(head, "scale_")  # nothing learned from private rows


def test_transform_is_the_hidden_relu_representation(grid):
    Z, y, fits = grid
    head = fits[8.0][0]
    H = head.transform(Z)
    assert H.shape == (800, head.hidden) and H.dtype == np.float64
    assert (H >= 0).all() and (H > 0).any()
    # the output layer applied to the released representation gives back the head's logits
    W, b = head.model_[2].weight.double().numpy(), head.model_[2].bias.double().numpy()
    logits = H @ W.T + b
    np.testing.assert_allclose(logits[:, 1] - logits[:, 0], head.decision_function(Z), atol=1e-4)
    assert WindowHead(hidden=7, epochs=2, random_state=0).fit_transform(Z[:100], y[:100]).shape == (100, 7)


def test_same_seed_reproduces_and_leaves_global_rng_alone():
    Z, y = gaussian_classes(n=200)
    state = torch.get_rng_state()
    a = WindowHead(epsilon=4.0, epochs=5, random_state=3).fit(Z, y)
    assert torch.equal(state, torch.get_rng_state())
    b = WindowHead(epsilon=4.0, epochs=5, random_state=3).fit(Z, y)
    np.testing.assert_array_equal(a.predict_proba(Z), b.predict_proba(Z))
    c = WindowHead(epsilon=4.0, epochs=5, random_state=4).fit(Z, y)
    assert not np.allclose(a.model_[0].weight.numpy(), c.model_[0].weight.numpy())
    # the plain-SGD path (shuffled batches) is seeded as well
    p1 = WindowHead(epochs=5, random_state=3).fit(Z, y).predict_proba(Z)
    p2 = WindowHead(epochs=5, random_state=3).fit(Z, y).predict_proba(Z)
    np.testing.assert_array_equal(p1, p2)


def test_sample_losses_separate_members_without_dp():
    """Few rows, many dims, long training, no DP: the head memorises, so members have lower loss."""
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((80, 64))
    y = (Z[:, 0] + 1.5 * rng.standard_normal(80) > 0).astype(int)
    members, others = slice(0, 40), slice(40, 80)
    head = WindowHead(hidden=64, epochs=300, batch_size=8, learning_rate=0.1, random_state=0)
    head.fit(Z[members], y[members])
    lm, lo = head.sample_losses(Z[members], y[members]), head.sample_losses(Z[others], y[others])
    assert lm.shape == lo.shape == (40,)
    assert np.isfinite(lm).all() and (lm >= 0).all() and (lo > 0).all()
    assert lm.mean() < 0.5 * lo.mean()
    assert membership_auc(lm, lo).auc > 0.8
    # per-sample cross-entropy agrees with -log p(true label)
    proba = head.predict_proba(Z[others])
    np.testing.assert_allclose(lo, -np.log(proba[np.arange(40), y[others]]), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="labels not seen"):
        head.sample_losses(Z[:3], [0, 1, 2])
    with pytest.raises(ValueError, match="rows"):
        head.sample_losses(Z[:3], [0, 1])


def test_sklearn_contract():
    Z, y = gaussian_classes(n=120)
    head = WindowHead(epsilon=8.0, hidden=8, epochs=3, batch_size=32, learning_rate=0.2, random_state=1)
    with pytest.raises(NotFittedError):
        head.predict(Z)
    with pytest.raises(NotFittedError):
        head.transform(Z)
    params = head.get_params()
    assert params == dict(epsilon=8.0, delta=1e-5, max_grad_norm=1.0, hidden=8, epochs=3, batch_size=32,
                          learning_rate=0.2, privacy_unit="window", random_state=1)
    other = WindowHead().set_params(**params)
    assert other.get_params() == params
    twin = clone(head)
    assert twin is not head and twin.get_params() == params
    assert head.fit(Z, y) is head
    assert not hasattr(clone(head), "model_")
    np.testing.assert_array_equal(twin.fit(Z, y).predict_proba(Z), head.predict_proba(Z))
    assert 0.0 <= head.score(Z, y) <= 1.0


@pytest.mark.parametrize("param, value", [
    ("epsilon", 0.0), ("epsilon", -1.0), ("epsilon", float("nan")), ("delta", 0.0), ("delta", 1.0),
    ("max_grad_norm", 0.0), ("max_grad_norm", np.inf), ("hidden", 0), ("hidden", 2.5), ("epochs", 0),
    ("batch_size", 0), ("batch_size", True), ("learning_rate", -0.1), ("privacy_unit", "record"),
])
def test_bad_parameters_name_themselves(param, value):
    Z, y = gaussian_classes(n=20)
    with pytest.raises(ValueError, match=param):
        WindowHead(**{param: value}).fit(Z, y)


def test_bad_inputs():
    Z, y = gaussian_classes(n=20)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        WindowHead().fit(Z, np.arange(20) % 3)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        WindowHead().fit(Z, np.zeros(20))
    with pytest.raises(ValueError, match="rows"):
        WindowHead().fit(Z, y[:-1])
    bad = Z.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        WindowHead().fit(bad, y)
    with pytest.raises(ValueError, match="2-d"):
        WindowHead().fit(Z[:, 0], y)
    head = WindowHead(epochs=1, random_state=0).fit(Z, y)
    with pytest.raises(ValueError, match="features"):
        head.predict(Z[:, :5])
    with pytest.raises(ValueError, match="non-finite"):
        head.transform(bad)
