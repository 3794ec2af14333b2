"""Study B's controlled membership table (``federated_control``): the preprocessing options, DP-CSP's privacy and
accounting, the attack − control statistics (planted preprocessing leak, planted training leak, no signal) and one
tiny SYNTHETIC cell end to end.

Synthetic data everywhere below is labelled SYNTHETIC: scores drawn here, or the ``synthetic_mi`` cohort."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from eegprivacy.federated import preprocessing as pp
from eegprivacy.studies.federated import control
from eegprivacy.studies.federated.config import FederatedMIAConfig

TINY = {"datasets": {"synthetic_mi": {"paradigm": "left_right_imagery", "epoch_s": 2.0, "resample": 64.0,
                                     "dataset": {"n_subjects": 4, "n_sessions": 1, "n_runs": 1,
                                                 "n_trials_per_class": 10, "seed": 0}}},
        "models": ["simplenet"], "epsilons": [math.inf], "clip_norm": 1.0, "seeds": 1, "test_size": 0.2,
        "split_seed": 0, "csp_components": 4, "clients_per_round": 8, "num_rounds": 2, "local_epochs": 1,
        "learning_rate": 0.001, "batch_size": 32, "attackers": ["lr"], "rf_estimators": 10,
        "attack_test_size": 0.5, "cla_components": 16}
CONTROL = {"dataset": "synthetic_mi", "models": ["simplenet", "eegnet"],
           "preprocessing": ["member_csp", "calibration_csp", "dp_csp", "channels"], "epsilons": [math.inf],
           "seeds": 1, "num_rounds": 2, "local_epochs": 1, "control_folds": 2, "attack_folds": 2,
           "bootstrap": 200}


@pytest.fixture(scope="module")
def tiny():
    from eegprivacy.studies.federated import mia

    training = FederatedMIAConfig.from_mapping(TINY, "test", "federated_mia.")
    _, trials = mia.load_trials("synthetic_mi", training.datasets["synthetic_mi"])
    return training, trials, control.FederatedControlConfig.from_mapping(CONTROL, "test", "federated_control.")


# ---- what each preprocessing option reads ------------------------------------------------------------------

class _Spy:
    """A preprocessor that records every trial it is fitted on (by identity of the rows' values)."""

    fitted: list = []

    def __init__(self, *args, **kwargs):
        pass

    def fit(self, X, y):
        _Spy.fitted.append(None if X is None else np.asarray(X).copy())
        return self

    def transform(self, X):
        return np.asarray(X)[:, :4, :8].astype(np.float32)


@pytest.mark.parametrize("option, reads", [("calibration_csp", "calibration"), ("member_csp", "members"),
                                           ("channels", "nothing")])
def test_each_option_fits_only_on_the_rows_it_names(tiny, monkeypatch, option, reads):
    """The calibration-fitted CSP reads no member and no non-member trial (asserted on the trials' values: every
    fitted row must be one of the calibration rows); the member CSP reads members only; channels read nothing."""
    training, trials, config = tiny
    from eegprivacy.studies.federated.mia import seed_split

    member = seed_split(trials, training, 0)
    calibration = pp.calibration_split(trials.y, trials.metadata["subject"], member, 0.2, 0)
    monkeypatch.setattr(pp, "make_preprocessor", lambda *a, **k: _Spy())
    _Spy.fitted = []
    model = "eegnet" if option == "channels" else "simplenet"
    control.client_preprocessing(trials, member, calibration, option, model, config, 4, 0)
    assert len(_Spy.fitted) == len(trials.subjects())
    flat = trials.X.reshape(len(trials.X), -1)
    train = member & ~calibration  # the members the model trains on (calibration trials are taken out of them)
    allowed = {"calibration": calibration, "members": train}.get(reads)
    for X in _Spy.fitted:
        if reads == "nothing":
            assert X is None
            continue
        rows = [int(np.flatnonzero((flat == x.reshape(1, -1)).all(1))[0]) for x in X]
        assert allowed[rows].all(), f"{option} read a trial outside its {reads}"
        assert not train[rows].any() or reads == "members", f"{option} read a member"
        assert not (~member)[rows].any(), f"{option} read a non-member"


def test_calibration_split_takes_a_stratified_share_of_members_only(tiny):
    training, trials, _ = tiny
    from eegprivacy.studies.federated.mia import seed_split

    member = seed_split(trials, training, 0)
    cal = pp.calibration_split(trials.y, trials.metadata["subject"], member, 0.2, 0)
    assert not (cal & ~member).any()
    subjects = trials.metadata["subject"].to_numpy()
    for s in trials.subjects():
        rows = subjects == s
        assert cal[rows].sum() == round(0.2 * rows.sum())
        assert set(trials.y[rows & cal]) == {0, 1}
    again = pp.calibration_split(trials.y, trials.metadata["subject"], member, 0.2, 0)
    assert (again == cal).all()


def test_channel_signals_scale_each_trial_by_itself_only():
    rng = np.random.default_rng(0)  # SYNTHETIC trials
    X = rng.normal(size=(5, 3, 50)) * np.array([1, 10, 100, 1000, 1e-5])[:, None, None]
    one = pp.ChannelSignals(channels=("a", "c"), montage=("a", "b", "c")).fit()
    out = one.transform(X)
    assert out.shape == (5, 2, 50)
    np.testing.assert_allclose(np.sqrt((out.astype(float) ** 2).mean(axis=(1, 2))), 1.0, rtol=1e-5)
    np.testing.assert_allclose(one.transform(X[:1]), out[:1])  # a trial's output does not depend on the others
    with pytest.raises(ValueError, match="no channel"):
        pp.ChannelSignals(channels=("z",), montage=("a",)).fit()


# ---- DP-CSP ------------------------------------------------------------------------------------------------

def test_dp_csp_bounds_one_trial_and_recovers_csp_at_large_epsilon():
    """One unit-trace trial moves the released (√2-weighted upper-triangle) vector by ≤ 1; at a very large ε the
    filters separate a SYNTHETIC two-class variance difference as well as the noise-free CSP."""
    rng = np.random.default_rng(1)
    n, c, t = 40, 4, 200
    y = np.repeat([0, 1], n // 2)
    scale = np.where(y[:, None] == 0, [3.0, 1, 1, 1], [1, 1, 1, 3.0])
    X = rng.normal(size=(n, c, t)) * scale[:, :, None]
    Xn, _ = pp._unit_trace(X)
    iu = np.triu_indices(c)
    weight = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    for x in Xn:
        cov = x @ x.T
        assert np.linalg.norm(cov[iu] * weight) <= 1.0 + 1e-12
        assert np.isclose(np.linalg.norm(cov[iu] * weight), np.linalg.norm(cov))
    dp = pp.DPClientCSP(n_components=2, output="logvar", epsilon=1e6, delta=1e-5, channels=("a", "b", "c", "d"),
                        montage=("a", "b", "c", "d"), random_state=0).fit(X, y)
    feats = dp.transform(X)
    assert feats.shape == (n, 2)
    # component 0: most class-0 variance, component 1: most class-1 variance (ClientCSP's alternate order)
    assert feats[y == 0, 0].mean() > feats[y == 1, 0].mean()
    assert feats[y == 1, 1].mean() > feats[y == 0, 1].mean()
    noisy = pp.DPClientCSP(n_components=2, epsilon=0.5, montage=None, random_state=0).fit(X, y)
    assert noisy.sigma_ > dp.sigma_
    with pytest.raises(ValueError, match="positive finite"):
        pp.DPClientCSP(epsilon=math.inf).fit(X, y)


def test_dp_csp_sigma_is_the_analytic_gaussian_dp_accounting_certifies():
    """The Gaussian release alone, read by dp_accounting's PLD accountant, spends the stated ε at δ (the analytic
    calibration is tight: within 2 %)."""
    import dp_accounting

    for eps in (1.0, 5.0):
        event = pp.dp_csp_event(eps, 1e-5)
        accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        accountant.compose(event)
        assert accountant.get_epsilon(1e-5) == pytest.approx(eps, rel=0.02)


def test_dp_csp_epsilon_composes_into_the_certified_epsilon():
    """``certified_epsilon`` of dp_csp is dp_accounting's RDP ε of the training steps composed with the Gaussian
    release, built here independently; larger than the steps alone."""
    import dp_accounting

    from eegprivacy.privacy.accounting import FederatedSchedule, federated_event

    kw = dict(dim=50, num_rounds=3, local_epochs=2, n_members=27, batch_size=32, clip_norm=1.0, csp_epsilon=2.0,
              csp_delta=1e-5, delta=1e-5, accountant="rdp")
    got = control.certified_epsilon(10.0, preprocessing="dp_csp", **kw)
    steps = federated_event(10.0, calibration="certified", unit="example", dim=50,
                            schedule=FederatedSchedule.for_client(3, 2, 27, 32))
    expected = dp_accounting.rdp.RdpAccountant()
    expected.compose(dp_accounting.ComposedDpEvent([steps, pp.dp_csp_event(2.0, 1e-5)]))
    assert got == pytest.approx(expected.get_epsilon(1e-5), rel=1e-9)
    alone = control.certified_epsilon(10.0, preprocessing="calibration_csp", **kw)
    assert got > alone
    assert control.certified_epsilon(math.inf, preprocessing="dp_csp", **kw) == math.inf


# ---- the statistics: pair counts, planted leaks, no signal ----------------------------------------------------

def _synthetic_arrays(rng, n_clients: int, per_client: int, leak: float, train_leak: float) -> dict:
    """SYNTHETIC per-row scores of the three arms for one seed. ``leak``: a member shift the preprocessing puts
    into every model's scores (the attack's and the control's alike, through the shared features); ``train_leak``:
    a shift only the trained model adds (memorisation). The attack and control scores share the features."""
    out = {}
    client = np.repeat(np.arange(n_clients), per_client)
    member = np.tile((np.arange(per_client) < 0.75 * per_client).astype(int), n_clients)
    features = rng.normal(size=client.size) + leak * member
    scores = {"attack": features + train_leak * member + 0.05 * rng.normal(size=client.size),
              "control": features + 0.05 * rng.normal(size=client.size),
              "untrained": 0.01 * rng.normal(size=client.size)}
    for arm, s in scores.items():
        out[f"{arm}/loss/scores"], out[f"{arm}/loss/client"], out[f"{arm}/loss/member"] = s, client, member
        out[f"{arm}/accuracy"] = np.full(n_clients, 0.5)
    return out


def _summary(leak: float, train_leak: float, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cells = [({"model": "simplenet", "preprocessing": "member_csp", "epsilon": math.inf}, s,
              _synthetic_arrays(rng, 16, 12, leak, train_leak)) for s in range(3)]
    return control.summarise(cells, 16, n_resamples=1000)


def _row(summary, arm, attack="loss"):
    return summary[(summary["arm"] == arm) & (summary["attack"] == attack)].iloc[0]


def test_a_planted_preprocessing_leak_is_attributed_to_the_preprocessing():
    """Members separated by the preprocessing, a model that learns nothing from them: the raw attack is far above
    0.5 (its interval excludes it), but attack − control is ≈ 0 with an interval covering 0, not significant."""
    summary = _summary(leak=1.5, train_leak=0.0)
    attack, diff = _row(summary, "attack"), _row(summary, "attack_minus_control")
    assert attack["ci_low"] > 0.7
    assert diff["ci_low"] <= 0.0 <= diff["ci_high"]
    assert abs(diff["value"]) < 0.02
    assert not diff["significant"]
    assert diff["control_share"] == pytest.approx(1.0, abs=0.05)
    assert summary.loc[summary["arm"] != "attack_minus_control", "p_holm"].isna().all()  # controls never tested


def test_a_planted_training_leak_shows_as_a_positive_difference():
    summary = _summary(leak=1.5, train_leak=1.0)
    diff = _row(summary, "attack_minus_control")
    assert diff["value"] > 0.05 and diff["ci_low"] > 0.0
    assert diff["significant"]
    assert diff["family"].startswith("simplenet")


def test_no_signal_gives_chance_for_every_arm_and_no_difference():
    summary = _summary(leak=0.0, train_leak=0.0, seed=4)
    for arm in ("attack", "control"):
        row = _row(summary, arm)
        assert row["ci_low"] <= 0.5 <= row["ci_high"]
    assert not _row(summary, "attack_minus_control")["significant"]


# ---- config, a tiny SYNTHETIC cell, the report -------------------------------------------------------------

def test_config_per_model_protocol_and_options():
    config = control.FederatedControlConfig.from_mapping(
        {**CONTROL, "per_model": {"eegnet": {"seeds": 3, "num_rounds": 1}}}, "test", "federated_control.")
    assert config.for_model("eegnet") == {"seeds": 3, "num_rounds": 1, "local_epochs": 1}
    assert config.for_model("simplenet") == {"seeds": 1, "num_rounds": 2, "local_epochs": 1}
    assert "channels" not in control.preprocessing_options(config, "simplenet")
    assert "channels" in control.preprocessing_options(config, "eegnet")
    from eegprivacy.params import ParamsError

    with pytest.raises(ParamsError, match="preprocessing"):
        control.FederatedControlConfig.from_mapping({**CONTROL, "preprocessing": ["pca"]}, "test",
                                                    "federated_control.")


@pytest.mark.parametrize("model, option", [("simplenet", "dp_csp"), ("eegnet", "channels")])
def test_one_synthetic_cell_scores_every_arm(tiny, torch_one_thread, tmp_path, model, option):
    training, trials, config = tiny
    cell = {"model": model, "preprocessing": option, "epsilon": math.inf}
    rows = control.cell_rows(cell, 0, trials, training, config, arrays_dir=tmp_path)
    metrics = {r["metric"]: r["value"] for r in rows}
    for arm in control.ARMS:
        assert 0.0 <= metrics[f"{arm}/utility_accuracy"] <= 1.0
        for attack in ("loss", "rla_lr", "fla_lr", "gla_lr"):
            assert 0.0 <= metrics[f"{arm}/{attack}/auroc"] <= 1.0
    (npz,) = tmp_path.glob("*.npz")
    with np.load(npz) as data:
        n = len(trials.subjects())
        assert data["control/accuracy"].shape == (n,)
        assert set(data["attack/loss/client"]) == set(range(n))


def test_report_round_trips_through_mlflow_metrics():
    from eegprivacy.reporting import federated_control as rep

    summary = _summary(leak=1.5, train_leak=1.0)
    summary["certified_epsilon"] = math.inf
    metrics = rep.metrics_of(summary)
    run = pd.Series({f"metrics.{k}": v for k, v in metrics.items()})
    back = rep.tidy_run(run)
    diff = back[(back["arm"] == "attack_minus_control")].iloc[0]
    assert diff["value"] == pytest.approx(_row(summary, "attack_minus_control")["value"])
    assert bool(diff["significant"])
    lines = "\n".join(rep.lead_lines(back, {"protocols": {"simplenet": {"seeds": 3, "num_rounds": 20,
                                                                        "local_epochs": 20}}}))
    assert "attack − control" in lines and " *" in lines
    assert "of the excess over 0.5" in lines
