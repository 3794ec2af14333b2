"""Study B's DP step (clip bound, Laplace scale C/ε, determinism, ε = ∞ is a no-op) and the gradient views used
by the gradient-level attacks (per-sample norms against a backward-pass loop, update vectors round-trip)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from scipy.stats import kstest, laplace
from torch import nn

from eegprivacy.federated.dp import LaplaceGradientDP, laplace_noise
from eegprivacy.models.gradients import apply_update, per_sample_grad_norms, update_vector


def _model(seed: int = 0, n_in: int = 6, hidden: int = 8, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(n_in, hidden), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(hidden, 2)]
    return nn.Sequential(*layers)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def _global_norm(tensors) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))


def _with_gradient(seed: int = 0, scale: float = 10.0) -> nn.Module:
    """A tiny model whose gradient (from a real backward pass) has a global norm far above C = 1."""
    model = _model(seed)
    gen = torch.Generator().manual_seed(seed + 100)
    X = torch.randn(16, 6, generator=gen) * scale
    y = torch.randint(0, 2, (16,), generator=gen)
    nn.CrossEntropyLoss()(model(X), y).backward()
    return model


def _set_grads(model: nn.Module, grads) -> None:
    for p, g in zip(model.parameters(), grads):
        p.grad = g.clone()


def test_clipping_bound_holds_without_noise():
    model = _with_gradient()
    before = _grads(model)
    norm = LaplaceGradientDP(clip_norm=1.0, clip_only=True).privatise_(model.parameters())
    after = _grads(model)
    assert norm == pytest.approx(_global_norm(before), rel=1e-9)
    assert norm > 1.5  # the bound below is a real test, not a no-op
    assert _global_norm(after) <= 1.0 + 1e-6
    assert _global_norm(after) == pytest.approx(1.0, rel=1e-5)  # scaled onto the ball, not shrunk further
    for b, a in zip(before, after):  # direction kept: one common factor C/‖g‖
        torch.testing.assert_close(a, b / norm, rtol=1e-5, atol=1e-7)


def test_gradient_inside_the_ball_is_not_rescaled():
    model = _with_gradient(scale=0.01)
    before = _grads(model)
    norm = LaplaceGradientDP(clip_norm=100.0, clip_only=True).privatise_(model.parameters())
    assert norm < 100.0
    for b, a in zip(before, _grads(model)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_noise_scale_matches_c_over_epsilon():
    clip, eps = 1.0, 2.0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 50))  # 15,150 gradient coordinates
    raw = [torch.randn_like(p) for p in model.parameters()]
    _set_grads(model, raw)
    dp = LaplaceGradientDP(clip_norm=clip, epsilon=eps)
    assert dp.noise_scale == dp.calibration()["noise_scale"] == clip / eps
    norm = dp.privatise_(model.parameters(), torch.Generator().manual_seed(7))
    clipped = [g * (clip / norm) for g in raw]
    noise = torch.cat([(a - c).ravel() for a, c in zip(_grads(model), clipped)]).double().numpy()
    b = clip / eps
    assert noise.size == 15_150
    assert abs(noise.mean()) < 4 * b * math.sqrt(2 / noise.size)  # centred (sd of the mean: b·sqrt(2/n))
    assert np.abs(noise).mean() == pytest.approx(b, rel=0.05)  # E|X| = b for Laplace(0, b)
    assert kstest(noise, laplace(loc=0.0, scale=b).cdf).pvalue > 0.01
    # a scale off by 20 % is rejected on the same number of draws: the KS test has power here
    assert kstest(noise, laplace(loc=0.0, scale=1.2 * b).cdf).pvalue < 1e-6


def test_laplace_sampler_is_laplace_and_finite():
    draws = laplace_noise((200_000,), 0.3, torch.Generator().manual_seed(1), dtype=torch.float64).numpy()
    assert np.isfinite(draws).all()
    assert np.abs(draws).mean() == pytest.approx(0.3, rel=0.01)
    assert kstest(draws, laplace(scale=0.3).cdf).pvalue > 0.01


def test_same_generator_seed_gives_the_same_noise():
    dp = LaplaceGradientDP(clip_norm=1.0, epsilon=5.0)
    runs = []
    for seed in (3, 3, 4):
        model = _with_gradient()
        dp.privatise_(model.parameters(), torch.Generator().manual_seed(seed))
        runs.append(_grads(model))
    for a, b in zip(runs[0], runs[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a, c) for a, c in zip(runs[0], runs[2]))


def test_infinite_epsilon_leaves_gradients_untouched():
    model = _with_gradient()
    before = _grads(model)
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    norm = LaplaceGradientDP(clip_norm=1.0).privatise_(model.parameters(), gen)
    assert norm > 1.0  # clipping would have changed these gradients
    for b, a in zip(before, _grads(model)):
        assert torch.equal(a, b)
    assert torch.equal(gen.get_state(), state)  # no noise drawn either
    assert LaplaceGradientDP().noise_scale == 0.0


def test_parameters_without_gradient_are_skipped():
    model = _with_gradient()
    frozen = model[0].bias
    frozen.grad = None
    LaplaceGradientDP(epsilon=1.0).privatise_(model.parameters(), torch.Generator().manual_seed(0))
    assert frozen.grad is None


@pytest.mark.parametrize("kwargs", [dict(clip_norm=0.0), dict(clip_norm=-1.0), dict(clip_norm=math.inf),
                                    dict(epsilon=0.0), dict(epsilon=-1.0), dict(epsilon=math.nan),
                                    dict(epsilon=1.0, clip_only=True)])
def test_invalid_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        LaplaceGradientDP(**kwargs)


def test_misuse_is_an_error_not_a_silent_no_op():
    dp = LaplaceGradientDP(epsilon=1.0)
    with pytest.raises(ValueError, match="Generator"):
        dp.privatise_(_with_gradient().parameters(), None)
    with pytest.raises(ValueError, match="backward"):
        dp.privatise_(_model().parameters(), torch.Generator())
    model = _with_gradient()
    next(model.parameters()).grad[0, 0] = math.nan
    with pytest.raises(ValueError, match="nan"):
        dp.privatise_(model.parameters(), torch.Generator())


def test_calibration_states_the_scope_and_the_missing_l1_bound():
    d = 74  # the tiny model's parameter count
    cal = LaplaceGradientDP(clip_norm=1.0, epsilon=5.0).calibration(dim=d)
    assert cal["noise_scale"] == 0.2 and cal["clip_norm"] == 1.0 and cal["epsilon"] == 5.0
    note = cal["sensitivity_note"]
    assert "per mechanism application" in note and "not a cumulative guarantee" in note
    assert "NOT a formal" in note and "2*sqrt(d)*C" in note
    assert cal["formal_guarantee"] is False
    assert cal["l1_sensitivity"] == pytest.approx(2 * math.sqrt(d))
    assert cal["epsilon_certified_per_step"] == pytest.approx(2 * math.sqrt(d) * 5.0)
    assert "no DP" in LaplaceGradientDP().calibration()["sensitivity_note"]
    assert "clip_only" in LaplaceGradientDP(clip_only=True).calibration()["sensitivity_note"]


def test_dp_event_composes_the_certified_epsilon():
    d, eps = 10, 1.0
    dp = LaplaceGradientDP(clip_norm=1.0, epsilon=eps)
    one = dp.dp_event(d)
    assert isinstance(one, dp_accounting.LaplaceDpEvent)
    assert one.noise_multiplier == pytest.approx(1 / (2 * math.sqrt(d) * eps))
    many = dp.dp_event(d, steps=3)
    assert isinstance(many, dp_accounting.SelfComposedDpEvent) and many.count == 3
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(many)
    # pure-DP Laplace steps never cost more than basic composition of the certified per-step ε (up to the
    # PLD's pessimistic discretisation)
    assert accountant.get_epsilon(1e-6) <= 3 * 2 * math.sqrt(d) * eps * 1.001
    assert isinstance(LaplaceGradientDP().dp_event(d, steps=5), dp_accounting.NonPrivateDpEvent)


def test_to_dict_round_trips_including_infinity():
    for dp in (LaplaceGradientDP(0.5, 5.0), LaplaceGradientDP(), LaplaceGradientDP(clip_only=True)):
        params = dp.to_dict()
        assert params["dp_epsilon_scope"] == "per_step"
        assert LaplaceGradientDP.from_dict(params) == dp
        assert LaplaceGradientDP.from_dict({k: str(v) for k, v in params.items()}) == dp  # as MLflow stores them


def test_per_sample_grad_norms_match_a_backward_loop():
    model = _model(seed=1, dropout=0.5)
    model.train()
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(10, 6, generator=gen).numpy()
    y = torch.randint(0, 2, (10,), generator=gen).numpy()
    loss_fn = nn.CrossEntropyLoss()
    norms = per_sample_grad_norms(model, X, y, loss_fn, chunk_size=4)  # chunks of 4, 4, 2
    assert model.training and all(m.training for m in model.modules())  # mode restored
    assert all(p.grad is None for p in model.parameters())  # weights and .grad untouched

    model.eval()  # the reference: eval mode, one backward pass per trial
    expected = []
    for i in range(len(X)):
        model.zero_grad()
        loss_fn(model(torch.as_tensor(X[i:i + 1])), torch.as_tensor(y[i:i + 1])).backward()
        expected.append(_global_norm(p.grad for p in model.parameters()))
    assert norms.shape == (10,)
    np.testing.assert_allclose(norms, expected, rtol=1e-5)
    assert np.ptp(norms) > 0  # distinct per trial, not one batch norm repeated


def test_per_sample_grad_norms_with_batchnorm_use_running_statistics():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv1d(2, 3, 5), nn.BatchNorm1d(3), nn.ELU(), nn.Flatten(), nn.Linear(3 * 12, 2))
    model(torch.randn(32, 2, 16) * 3 + 1)  # a training-mode pass moves the running statistics off (0, 1)
    X = torch.randn(5, 2, 16)
    y = torch.tensor([0, 1, 1, 0, 1])
    buffers = {k: b.clone() for k, b in model.named_buffers()}
    norms = per_sample_grad_norms(model, X, y, nn.CrossEntropyLoss())
    for k, b in model.named_buffers():  # eval mode: computing norms never updates BatchNorm statistics
        assert torch.equal(b, buffers[k])
    model.eval()
    for i in range(5):
        model.zero_grad()
        nn.CrossEntropyLoss()(model(X[i:i + 1]), y[i:i + 1]).backward()
        assert norms[i] == pytest.approx(_global_norm(p.grad for p in model.parameters()), rel=1e-5)


def test_update_vector_round_trips():
    rng = np.random.default_rng(0)
    old = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
    new = [w + rng.normal(scale=0.01, size=w.shape).astype(np.float32) for w in old]
    vec = update_vector(new, old)
    assert vec.shape == (17,) and vec.dtype == np.float64
    np.testing.assert_array_equal(vec[:12], (new[0].astype(np.float64) - old[0]).ravel())  # order kept
    back = apply_update(old, vec)
    for b, n in zip(back, new):
        assert b.dtype == n.dtype and b.shape == n.shape
        np.testing.assert_array_equal(b, n)
    with pytest.raises(ValueError):
        update_vector(new[:1], old)
    with pytest.raises(ValueError):
        update_vector([new[0].T, new[1]], old)
    with pytest.raises(ValueError):
        apply_update(old, vec[:-1])
