"""Study B's controlled membership table (``federated_control``): the preprocessing options, DP-CSP's privacy and
accounting, the attack − control statistics (planted preprocessing leak, planted training leak, no signal) and one
tiny SYNTHETIC cell end to end.

Synthetic data everywhere below is labelled SYNTHETIC: scores drawn here, or the ``synthetic_mi`` cohort."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _federated_params import tiny_federated_mia

from eegprivacy.federated import preprocessing as pp
from eegprivacy.studies.federated import control
from eegprivacy.studies.federated.config import FederatedMIAConfig

TINY = tiny_federated_mia()
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
    """A preprocessor that records every trial handed to it (``fit``, ``align``, ``class_sums``) and the shares a
    pooled fit receives; instances are made client by client, so ``made[k]`` is client k's."""

    made: list = []

    def __init__(self, **kwargs):
        self.seen, self.shares = [], None
        _Spy.made.append(self)

    def _record(self, X):
        if X is not None:
            self.seen.append(np.asarray(X).copy())

    def fit(self, X=None, y=None, *, shared=None):
        self._record(X)
        self.shares = shared
        return self

    def align(self, X):
        self._record(X)
        return self

    def class_sums(self, X, y):
        self._record(X)
        return {"owner": self}

    def transform(self, X):
        return np.asarray(X)[:, :4, :8].astype(np.float32)


@pytest.mark.parametrize("option", list(pp.PREPROCESSING))
def test_each_option_fits_only_on_the_rows_its_registry_entry_names(tiny, monkeypatch, option):
    """What every option reads, asserted on the trials' values through the real ``fit_clients``: no option ever
    sees a non-member; member-fitted options read the client's training members only, calibration options its
    calibration block only, fixed ones nothing; pooled options align on the client's own calibration block, share
    its members and calibration trials, and fit on the *other* clients' shares only."""
    import dataclasses

    training, trials, config = tiny
    from eegprivacy.studies.federated.mia import seed_split

    member = seed_split(trials, training, 0)
    calibration = pp.calibration_split(trials.y, trials.metadata["subject"], member, 0.2, 0)
    entry = pp.PREPROCESSING[option]
    monkeypatch.setitem(pp.PREPROCESSING, option, dataclasses.replace(entry, build=lambda **k: _Spy(**k)))
    _Spy.made = []
    model = entry.models[-1]
    control.client_preprocessing(trials, member, calibration, option, model, config, 4, 0)
    assert len(_Spy.made) == len(trials.subjects())
    flat = trials.X.reshape(len(trials.X), -1)
    subjects = trials.metadata["subject"].to_numpy()
    train = member & ~calibration  # the members the model trains on (calibration trials are taken out of them)
    allowed = {"members": train, "calibration": calibration, "other clients": member, "nothing": None}[entry.fits_on]
    for k, (spy, subject) in enumerate(zip(_Spy.made, trials.subjects())):
        if allowed is None:
            assert not spy.seen, f"{option} read trials"
        for X in spy.seen:
            rows = [int(np.flatnonzero((flat == x.reshape(1, -1)).all(1))[0]) for x in X]
            assert (subjects[rows] == subject).all(), f"{option} handed client {k} another client's trials"
            assert member[rows].all(), f"{option} read a non-member"
            assert allowed[rows].all(), f"{option} read a trial outside its {entry.fits_on}"
        if entry.fits_on == "other clients":
            assert len(spy.shares) == len(_Spy.made) - 1
            assert all(share["owner"] is not spy for share in spy.shares), f"{option} fitted on its own share"


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


def test_laplacian_band_power_reads_each_trial_alone_and_sees_a_lateral_mu_drop():
    """Fixed filters: a trial's features do not depend on the other trials; a mu-band rhythm at C3 only raises
    the C3 Laplacian's mu feature against the C4 one (SYNTHETIC trials)."""
    from eegprivacy.signal.spatial import LAPLACIANS

    names = tuple(dict.fromkeys([*LAPLACIANS, *(n for ring in LAPLACIANS.values() for n in ring), "Fz"]))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, len(names), 256))
    t = np.arange(256) / 128.0
    X[:3, names.index("C3")] += 3.0 * np.sin(2 * np.pi * 10.0 * t)
    lap = pp.LaplacianBandPower(output="logvar", sfreq=128.0, montage=names).fit()
    out = lap.transform(X)
    assert out.shape == (6, 6)
    np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(lap.transform(X[2:4]), out[2:4], rtol=1e-5)
    c3_mu, c4_mu = 0, 2  # mu features of C3, Cz, C4, then beta
    assert (out[:3, c3_mu] - out[:3, c4_mu]).min() > (out[3:, c3_mu] - out[3:, c4_mu]).max()
    assert pp.LaplacianBandPower(output="signals", montage=names).fit().transform(X).shape == (6, 3, 256)
    with pytest.raises(ValueError, match="no channel"):
        pp.LaplacianBandPower(montage=("Cz",)).fit()


def test_pooled_csp_fits_on_the_other_clients_shares_only():
    """A client's filters are a function of the shares it receives, never of its own trials; from the shares of
    clients with a planted class-variance difference they separate the target's classes (SYNTHETIC trials)."""
    from eegprivacy.signal.spatial import PooledCSP

    rng = np.random.default_rng(1)
    names = tuple(f"ch{i}" for i in range(6))

    def client(n=30):
        y = np.repeat([0, 1], n // 2)
        scale = np.where(y[:, None] == 0, [3.0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 3.0])
        mixing = np.eye(6) + 0.1 * rng.normal(size=(6, 6))
        return np.einsum("cd,ndt->nct", mixing, rng.normal(size=(n, 6, 200)) * scale[:, :, None]), y

    others = [client() for _ in range(4)]
    (Xt, yt), (Xu, _) = client(), client()
    shares = []
    for X, y in others:
        sharer = PooledCSP(n_components=2, channels=names, montage=names).align(X)
        shares.append(sharer.class_sums(X, y))
    a = PooledCSP(n_components=2, channels=names, montage=names).align(Xt).fit(shared=shares)
    b = PooledCSP(n_components=2, channels=names, montage=names).align(Xt).fit(Xu, 1 - yt, shared=shares)
    np.testing.assert_array_equal(a.filters_, b.filters_)  # the trials passed to fit are never read
    feats = a.transform(Xt)
    assert feats.shape == (len(yt), 2)
    assert feats[yt == 0, 0].mean() > feats[yt == 1, 0].mean()
    bank = PooledCSP(n_components=2, bands=((8, 12), (12, 30)), sfreq=128.0, channels=names, montage=names)
    bank.align(Xt).fit(shared=[PooledCSP(n_components=2, bands=((8, 12), (12, 30)), sfreq=128.0, channels=names,
                                         montage=names).align(X).class_sums(X, y) for X, y in others])
    assert bank.transform(Xt).shape == (len(yt), 4)
    assert bank.set_params(output="signals").transform(Xt).shape == (len(yt), 4, 200)
    with pytest.raises(ValueError, match="at least one other client"):
        PooledCSP(channels=names, montage=names).align(Xt).fit(shared=[])


def test_alignment_whitens_the_reference_block_and_tangent_space_reads_only_it():
    from eegprivacy.signal.spatial import AlignedTangentSpace, aligned, alignment_whitener

    rng = np.random.default_rng(2)  # SYNTHETIC trials with a subject-specific mixing
    X = np.einsum("cd,ndt->nct", 2 * np.eye(11) + 0.3 * rng.normal(size=(11, 11)), rng.normal(size=(40, 11, 300)))
    Xa = aligned(X[:10], alignment_whitener(X[:10]))
    reference = np.einsum("nct,ndt->cd", Xa, Xa) / (10 * 300)
    np.testing.assert_allclose(reference, np.eye(11), atol=2e-2)
    ts = AlignedTangentSpace(channels=tuple(map(str, range(11))), montage=tuple(map(str, range(11)))).fit(X[:10])
    out = ts.transform(X)
    assert out.shape == (40, 66) and np.isfinite(out).all()
    np.testing.assert_allclose(ts.transform(X[20:25]), out[20:25], rtol=1e-4, atol=1e-5)


# ---- DP-CSP ------------------------------------------------------------------------------------------------

def test_dp_csp_bounds_one_trial_and_recovers_csp_at_large_epsilon():
    """One unit-trace trial has a released (√2-weighted upper-triangle) vector of norm ≤ 1; at a very large ε the
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


def test_dp_csp_is_calibrated_for_replacing_one_trial():
    """Study B's neighbouring relation replaces one trial (signal and label). Two orthogonal rank-one unit-trace
    trials move the released class sums by exactly √2, within a class or across the classes, and no pair moves
    them more; σ is the analytic Gaussian mechanism's for that √2, so dp_accounting (PLD) reads the stated ε off
    the event at noise multiplier σ / √2 (the event carries the replace-one distance itself, as the training steps'
    events do: dp_accounting's own REPLACE_ONE relation would assume twice an add/remove distance of 1, i.e. 2).
    The old calibration (sensitivity 1) spends about 1.5 × the stated ε."""
    import dp_accounting

    from eegprivacy.privacy.mechanisms import gaussian_sigma

    c = 4
    iu = np.triu_indices(c)
    weight = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))

    def released(trials, labels):  # the vector DPClientCSP noises: both class sums' weighted upper triangles
        Xn, _ = pp._unit_trace(trials)
        return np.concatenate([np.einsum("nct,ndt->cd", Xn[labels == k], Xn[labels == k])[iu] * weight
                               for k in (0, 1)])

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(10, c, 50)), np.repeat([0, 1], 5)
    e0, e1 = np.zeros((1, c, 50)), np.zeros((1, c, 50))
    e0[0, 0, :], e1[0, 1, :] = 1.0, 1.0
    worst = []
    for new_label in (0, 1):  # replace trial 0 (class 0) by an orthogonal trial of either class
        a, b = X.copy(), X.copy()
        a[0], b[0] = e0[0], e1[0]
        labels = y.copy()
        labels[0] = new_label
        worst.append(np.linalg.norm(released(a, y) - released(b, labels)))
    np.testing.assert_allclose(worst, math.sqrt(2.0), rtol=1e-12)
    for _ in range(200):
        b, labels = X.copy(), y.copy()
        b[0], labels[0] = rng.normal(size=(c, 50)), rng.integers(2)
        assert np.linalg.norm(released(X, y) - released(b, labels)) <= pp.DP_CSP_SENSITIVITY + 1e-12
    for eps in (1.0, 5.0):
        sigma = pp.dp_csp_sigma(eps, 1e-5)
        assert sigma == pytest.approx(gaussian_sigma(eps, 1e-5, math.sqrt(2.0)))
        accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / pp.DP_CSP_SENSITIVITY))
        assert accountant.get_epsilon(1e-5) == pytest.approx(eps, rel=0.02)
    old = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    old.compose(dp_accounting.GaussianDpEvent(noise_multiplier=gaussian_sigma(5.0, 1e-5, 1.0) / math.sqrt(2.0)))
    assert old.get_epsilon(1e-5) > 7.0


def test_dp_csp_uses_no_class_count():
    """A label change moves the class counts, so DP-CSP divides the released sums by the client's trial count,
    which replace-one never changes: at a huge ε its released mean covariance is the mean over all trials."""
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(12, 3, 40)), np.r_[np.zeros(3, int), np.ones(9, int)]
    dp = pp.DPClientCSP(n_components=2, epsilon=1e9, montage=None, random_state=0).fit(X, y)
    Xn, _ = pp._unit_trace(X)
    mean = np.einsum("nct,ndt->cd", Xn, Xn) / len(Xn)
    expected = np.log(np.einsum("kc,cd,kd->k", dp.filters_, mean, dp.filters_) / X.shape[2])
    np.testing.assert_allclose(dp.center_, expected, rtol=1e-6)


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
        {**CONTROL, "epsilons": [math.inf, 5.0], "per_model": {"eegnet": {"seeds": 3, "num_rounds": 1,
                                                                          "epsilons": [math.inf]}}},
        "test", "federated_control.")
    assert config.for_model("eegnet") == {"seeds": 3, "num_rounds": 1, "local_epochs": 1, "epsilons": [math.inf]}
    assert config.for_model("simplenet") == {"seeds": 1, "num_rounds": 2, "local_epochs": 1,
                                             "epsilons": [math.inf, 5.0]}
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


def test_a_control_above_its_attack_is_a_failed_control_not_no_leak():
    """Two-sided: a control that separates members better than the trained model (SYNTHETIC scores) is
    significant, flagged ``failed_control`` and printed with ▼ and a line naming it — never "not significant"."""
    from eegprivacy.reporting import federated_control as rep

    summary = _summary(leak=1.5, train_leak=-1.0)
    diff = _row(summary, "attack_minus_control")
    assert diff["value"] < -0.05 and diff["significant"] and diff["failed_control"]
    summary["certified_epsilon"] = math.nan  # an option whose trials travel un-noised: no guarantee to print
    back = rep.tidy_run(pd.Series({f"metrics.{k}": v for k, v in rep.metrics_of(summary).items()}))
    assert bool(back[back["arm"] == "attack_minus_control"].iloc[0]["failed_control"])
    text = "\n".join(rep.lead_lines(back, {}))
    assert "▼" in text and "**failed control**" in text and "0 `*` and 1 `▼`" in text
    headline = "\n".join(rep.headline_table(back, "simplenet"))
    assert "accuracy 0.500" in headline and "loss attack − control" in headline
    assert rep._certified(math.nan, 5.0) == "not certified" and rep._certified(math.nan, math.inf) == "∞"
