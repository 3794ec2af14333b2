"""Study B's client preprocessing as a named option of the protocol: which trials a client's spatial filters and
scaling are fitted on, and so whether the preprocessing itself can tell the client's members from its non-members.

The paper fits each client's CSP and scaling on its member trials (``member_csp``). Members then sit further from
the decision boundary in CSP space than non-members whatever model is applied afterwards, and that asymmetry lies
outside any DP guarantee of the training step. The options here keep the member split and the model the same and
change only what the preprocessing reads (:data:`PREPROCESSING`, one registry entry per option; tables, params
checking and the certified ε read it):

- ``member_csp`` — the paper's: :class:`~eegprivacy.signal.csp.ClientCSP` fitted on the client's members.
- ``calibration_csp`` — the same CSP fitted on the client's *calibration* trials: a stratified share of its
  trials (:func:`calibration_split`) that is neither a member (never trained on) nor a non-member (never
  attacked), as a BCI user records a short calibration block before use. Private data read outside ε, but not
  what the membership attacks ask about.
- ``dp_csp`` — :class:`DPClientCSP`: the client's member class covariances released with the Gaussian mechanism,
  calibrated for study B's neighbouring relation (replace one trial); composed into the certified ε
  (:func:`dp_csp_event`).
- ``laplacian`` — :class:`~eegprivacy.signal.spatial.LaplacianBandPower`: fixed small Laplacians at C3/Cz/C4 and
  their mu/beta log power. Fits nothing.
- ``pooled_csp`` / ``pooled_fbcsp`` — :class:`~eegprivacy.signal.spatial.PooledCSP`, single band or a 4-band filter
  bank: every client aligns its trials on its own calibration block (Euclidean alignment) and shares its class
  covariance sums (members and calibration trials); a client's filters come from the *other* clients' sums, never
  its own. Models a federation whose server pools the clients' class covariances in the clear: the target's
  members never shape its own features, but every member's covariance reaches the server un-noised and shapes
  the other clients' filters, so no ε is certified for these rows.
- ``tangent_space`` — :class:`~eegprivacy.signal.spatial.AlignedTangentSpace`: Riemannian tangent-space features
  of the 11 sensorimotor channels at the client's own calibration mean (pyriemann).
- ``channels`` — no spatial filter at all: the band-passed signals of the 11 sensorimotor channels, each trial
  scaled by its own RMS. EEGNet only.

Every montage (:data:`~eegprivacy.signal.spatial.SENSORIMOTOR`, :data:`~eegprivacy.signal.spatial.MOTOR21`, the
Laplacians' rings) is fixed before seeing any data: choosing it spends no privacy.

:func:`fit_clients` is the one place an option is fitted: it hands each client's preprocessor what its registry
entry names (its members, its calibration block, the other clients' shared sums, or nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from eegprivacy.signal.spatial import (
    FILTER_BANK,
    SENSORIMOTOR,
    AlignedTangentSpace,
    LaplacianBandPower,
    PooledCSP,
    alternate_order,
    channel_picks,
    check_trials,
)

__all__ = ["PREPROCESSING", "SENSORIMOTOR", "Preprocessing", "ClientTrials", "DPClientCSP", "ChannelSignals",
           "calibration_split", "fit_clients", "dp_csp_event", "dp_csp_sigma", "DP_CSP_SENSITIVITY"]

# One trial replaced (study B's neighbouring relation, as the training steps' 2C): two unit-trace PSD covariances
# are at most sqrt(2) apart in Frobenius norm, within a class or across the two classes' sums.
DP_CSP_SENSITIVITY = math.sqrt(2.0)


@dataclass(frozen=True)
class ClientTrials:
    """One client's trials as its preprocessing may see them: the members it trains on and its calibration block
    (each ``(X, y)``). Non-members are never handed to a fit."""

    members: tuple
    calibration: tuple

    def shared(self) -> tuple:
        """The trials a client contributes to pooled statistics: its members and calibration block."""
        return (np.concatenate([self.members[0], self.calibration[0]]),
                np.concatenate([self.members[1], self.calibration[1]]))


@dataclass(frozen=True)
class Preprocessing:
    """One registry entry.

    ``fits_on``: what a client's preprocessor is fitted on — ``members``, ``calibration``, ``other clients`` (the
    others' shared class sums; its own calibration block aligns it) or ``nothing``. ``models``: which models it can
    feed. ``outside_epsilon``: what ε leaves out, in words for the tables. ``certified``: False where a trial
    travels un-noised beyond its own client (the certified row then prints no guarantee). ``build(output,
    n_components, montage, sfreq, epsilon, delta, random_state)``: an unfitted preprocessor. ``n_features(output,
    n_components)``: what one trial becomes (SimpleNet's input size; EEGNet's signal count).
    ``outside_training``: what a certificate of the *training alone* leaves out, in a few words (the one-run audit's
    rows, whose canaries skip the preprocessing); required.
    """

    name: str
    label: str
    fits_on: str
    models: tuple[str, ...]
    outside_epsilon: str
    build: Callable
    n_features: Callable
    certified: bool = True
    spends_epsilon: bool = False
    outside_training: str = ""

    def __post_init__(self):
        if not self.outside_training:
            raise ValueError(f"preprocessing {self.name!r}: say what a training certificate leaves out "
                             "(outside_training)")


def _client_csp(output, n_components, **_):
    from eegprivacy.signal.csp import ClientCSP

    return ClientCSP(n_components=n_components, output=output)


def _dp_csp(output, n_components, montage, epsilon, delta, random_state, **_):
    return DPClientCSP(n_components=n_components, output=output, epsilon=epsilon, delta=delta, montage=montage,
                       random_state=random_state)


def _pooled(bands):
    def build(output, n_components, montage, sfreq, **_):
        return PooledCSP(n_components=n_components, output=output, bands=bands, sfreq=sfreq, montage=montage)
    return build


def _per_band(n_bands: int):
    return lambda output, n_components: n_bands * int(n_components)


def _channels(output, montage, **_):
    if output != "signals":
        raise ValueError("preprocessing 'channels' feeds raw signals: EEGNet only")
    return ChannelSignals(montage=montage)


_BOTH = ("simplenet", "eegnet")
_OWN_STEPS = "members enter only the steps whose batch holds them"
PREPROCESSING = {p.name: p for p in (
    Preprocessing("member_csp", "member-fitted CSP (paper)", "members", _BOTH,
                  "the CSP filters and scaling, fitted un-noised on all of the client's members: one trial moves "
                  "every other trial's features, so a trial's ε is its whole client's (every step of every round)",
                  _client_csp, _per_band(1),
                  outside_training="the member-fitted CSP (un-noised: no end-to-end guarantee)"),
    Preprocessing("calibration_csp", "calibration-fitted CSP", "calibration", _BOTH,
                  "the calibration trials the CSP and scaling are fitted on (un-noised; they are neither trained on "
                  f"nor attacked); {_OWN_STEPS}", _client_csp, _per_band(1),
                  outside_training="the CSP fitted on the client's calibration block"),
    Preprocessing("dp_csp", "DP-CSP", "members", _BOTH,
                  "nothing: the class covariances are released with the Gaussian mechanism (ε, δ per trial, "
                  "replace-one), composed into the certified ε", _dp_csp, _per_band(1), spends_epsilon=True,
                  outside_training="the DP-CSP release (its own ε, composed separately)"),
    Preprocessing("laplacian", "fixed Laplacians, mu/beta power", "nothing", _BOTH,
                  f"nothing: fixed spatial filters and per-trial normalisation read no other trial; {_OWN_STEPS}",
                  lambda output, montage, sfreq, **_: LaplacianBandPower(output=output, sfreq=sfreq, montage=montage),
                  lambda output, n_components: 6 if output == "logvar" else 3,
                  outside_training="nothing (fixed Laplacians fit no data)"),
    Preprocessing("pooled_csp", "pooled CSP (other clients, aligned)", "other clients", _BOTH,
                  "the calibration block each client aligns on (un-noised), and the class covariances of every "
                  "client's members and calibration trials, pooled in the clear by the server to fit the other "
                  "clients' filters: no ε is certified", _pooled(None), _per_band(1), certified=False,
                  outside_training="the pooled class covariances the server receives and the calibration block "
                                   "each client aligns on, both un-noised"),
    Preprocessing("pooled_fbcsp", "pooled filter-bank CSP (other clients, aligned)", "other clients", _BOTH,
                  "as pooled CSP (4 sub-bands of 8–30 Hz): calibration blocks un-noised, and every client's class "
                  "covariances pooled in the clear: no ε is certified", _pooled(FILTER_BANK),
                  _per_band(len(FILTER_BANK)), certified=False,
                  outside_training="the pooled class covariances the server receives and the calibration block "
                                   "each client aligns on, both un-noised"),
    Preprocessing("tangent_space", "tangent space (own calibration mean)", "calibration", ("simplenet",),
                  f"the calibration block whose mean covariance is the reference point (un-noised; neither trained "
                  f"on nor attacked); {_OWN_STEPS}",
                  lambda montage, **_: AlignedTangentSpace(montage=montage),
                  lambda output, n_components: len(SENSORIMOTOR) * (len(SENSORIMOTOR) + 1) // 2,
                  outside_training="the tangent space at the client's calibration mean"),
    Preprocessing("channels", "no CSP (11 sensorimotor channels)", "nothing", ("eegnet",),
                  f"nothing: a fixed montage and per-trial scaling read no other trial; {_OWN_STEPS}",
                  _channels, lambda output, n_components: len(SENSORIMOTOR),
                  outside_training="nothing (a fixed montage fits no data)"),
)}
FITS_ON = ("members", "calibration", "other clients", "nothing")


def fit_clients(name: str, clients: list[ClientTrials], *, output: str, n_components: int, montage=None,
                sfreq: float = 128.0, epsilon: float = 1.0, delta: float = 1e-5, seed: int = 0) -> list:
    """Every client's fitted preprocessor for option ``name`` (``output``: ``logvar`` for SimpleNet, ``signals``
    for EEGNet), each fitted on exactly what its registry entry names; client k's DP noise is seeded by (seed, k)."""
    from eegprivacy.federated.task import derive_seed

    if name not in PREPROCESSING:
        raise ValueError(f"unknown preprocessing {name!r}; known: {', '.join(PREPROCESSING)}")
    option = PREPROCESSING[name]
    pres = [option.build(output=output, n_components=int(n_components), montage=montage, sfreq=float(sfreq),
                         epsilon=epsilon, delta=delta, random_state=derive_seed(seed, k, 23))
            for k in range(len(clients))]
    if option.fits_on == "other clients":
        for pre, client in zip(pres, clients):
            pre.align(client.calibration[0])
        shares = [pre.class_sums(*client.shared()) for pre, client in zip(pres, clients)]
        for k, pre in enumerate(pres):
            pre.fit(shared=[share for j, share in enumerate(shares) if j != k])
        return pres
    for pre, client in zip(pres, clients):
        if option.fits_on == "nothing":
            pre.fit(None, None)
        else:
            pre.fit(*(client.members if option.fits_on == "members" else client.calibration))
    return pres


def calibration_split(y, subjects, member: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of calibration trials: a stratified ``fraction`` of every subject's trials taken from its
    members (so non-members stay exactly the paper's held-out trials), seeded per subject id.

    The returned trials must leave the member set: ``member & ~calibration`` are the trials the model trains on.
    """
    from sklearn.model_selection import train_test_split

    from eegprivacy.federated.splits import subject_seed

    y, subjects, member = np.asarray(y).ravel(), np.asarray(subjects).ravel(), np.asarray(member, dtype=bool)
    if not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"the calibration fraction must lie in (0, 1), got {fraction!r}")
    calibration = np.zeros(y.size, dtype=bool)
    for subject in dict.fromkeys(subjects.tolist()):
        rows = np.flatnonzero((subjects == subject) & member)
        n_cal = int(round(float(fraction) * np.count_nonzero(subjects == subject)))
        if n_cal < 2 or n_cal > rows.size - 2:
            raise ValueError(f"subject {subject}: {rows.size} members cannot give {n_cal} calibration trials and "
                             "keep members of both classes")
        cal, _ = train_test_split(rows, train_size=n_cal, stratify=y[rows],
                                  random_state=subject_seed(seed, f"calibration/{subject}"))
        calibration[cal] = True
    return calibration


def _unit_trace(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each trial divided by sqrt(trace of its covariance): trace-1 covariances, and the per-trial scale."""
    power = np.sqrt(np.einsum("nct,nct->n", X, X))
    power = np.where(power > 0, power, 1.0)
    return X / power[:, None, None], power


def dp_csp_sigma(epsilon: float, delta: float) -> float:
    """σ of the analytic Gaussian mechanism for the class-covariance sums at (ε, δ) per trial under replace-one
    (L2 sensitivity :data:`DP_CSP_SENSITIVITY` = √2)."""
    from eegprivacy.privacy.mechanisms import gaussian_sigma

    return gaussian_sigma(epsilon, delta, DP_CSP_SENSITIVITY)


def dp_csp_event(epsilon: float, delta: float):
    """The DP-CSP release as a dp_accounting event (one Gaussian mechanism, noise multiplier σ / sensitivity under
    replace-one, the relation the training steps' events use), to compose with them into a client's certified ε."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(noise_multiplier=dp_csp_sigma(epsilon, delta) / DP_CSP_SENSITIVITY)


class DPClientCSP(TransformerMixin, BaseEstimator):
    """CSP from Gaussian-noised class covariances (DP per trial), on a fixed channel montage.

    ``fit(X, y)``: every member trial is restricted to ``channels`` (names looked up in ``montage``) and scaled to
    unit trace, so its covariance Σᵢ = xᵢxᵢᵀ is PSD with trace 1. The two class sums S₀, S₁ are released with i.i.d.
    N(0, σ²) noise on the √2-weighted upper triangle (an isometry of the Frobenius norm). Replacing one trial (study
    B's neighbouring relation) moves the released pair by at most √2 in L2: within a class ‖Σₐ − Σ_b‖_F² =
    ‖Σₐ‖² + ‖Σ_b‖² − 2⟨Σₐ, Σ_b⟩ ≤ 2 (PSD), across the classes √(1 + 1). σ is the analytic Gaussian mechanism's at
    (``epsilon``, ``delta``) per trial for that sensitivity. Class counts change when a replaced trial changes its
    label, so none is used: the released sums are divided by the client's total trial count n (the same in every
    neighbouring data set under replace-one), which leaves the CSP eigenproblem unchanged and only sets the scale.
    Everything after the release is post-processing: the noisy matrices are projected onto the PSD cone, the
    filters solve S₀ w = λ (S₀ + S₁) w, components are taken in ClientCSP's ``alternate`` order, and the scaling
    comes from the released covariance (log-variance centred at log(wᵀ C̄ w), signals divided by sqrt(wᵀ C̄ w)) —
    no un-noised statistic of any member is used.
    """

    def __init__(self, n_components: int = 4, output: str = "logvar", epsilon: float = 1.0, delta: float = 1e-5,
                 channels: tuple[str, ...] = SENSORIMOTOR, montage: tuple[str, ...] | None = None,
                 random_state=None):
        self.n_components = n_components
        self.output = output
        self.epsilon = epsilon
        self.delta = delta
        self.channels = channels
        self.montage = montage
        self.random_state = random_state

    def fit(self, X, y):
        from scipy.linalg import eigh

        if self.output not in ("logvar", "signals"):
            raise ValueError(f"output must be logvar or signals, got {self.output!r}")
        if not (math.isfinite(float(self.epsilon)) and float(self.epsilon) > 0):
            raise ValueError(f"epsilon must be a positive finite number, got {self.epsilon!r}")
        picks = channel_picks(tuple(self.channels), self.montage)
        X = check_trials(X, picks)
        y = np.asarray(y).ravel()
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(f"CSP needs trials of exactly two classes, got {classes.tolist()}")
        n_ch = X.shape[1]
        if not 1 <= int(self.n_components) <= n_ch:
            raise ValueError(f"n_components must be in [1, {n_ch}], got {self.n_components}")
        Xn, _ = _unit_trace(X)
        rng = np.random.default_rng(self.random_state)
        self.sigma_ = dp_csp_sigma(float(self.epsilon), float(self.delta))
        iu = np.triu_indices(n_ch)
        weight = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
        released = []
        for label in classes:
            rows = Xn[y == label]
            total = np.einsum("nct,ndt->cd", rows, rows)
            vector = total[iu] * weight + rng.normal(0.0, self.sigma_, size=iu[0].size)
            noisy = np.zeros((n_ch, n_ch))
            noisy[iu] = vector / weight
            noisy = noisy + np.triu(noisy, 1).T
            released.append(_psd(noisy / len(Xn)))  # n = the client's trial count, public under replace-one
        c0, c1 = released
        vals, vecs = eigh(c0, c0 + c1)
        order = alternate_order(np.argsort(vals)[::-1])
        self.filters_ = vecs[:, order[: int(self.n_components)]].T
        pooled = c0 + c1  # the released mean trial covariance (each class sum over n)
        self.center_ = np.log(np.maximum(np.einsum("kc,cd,kd->k", self.filters_, pooled, self.filters_), 1e-12)
                              / X.shape[2])
        self.scale_ = np.sqrt(np.exp(self.center_))
        self.picks_, self.classes_, self.n_samples_ = picks, classes, X.shape[2]
        return self

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "filters_")
        Xn, _ = _unit_trace(check_trials(X, self.picks_))
        signals = np.einsum("kc,nct->nkt", self.filters_, Xn)
        if self.output == "logvar":
            return (np.log(np.maximum((signals ** 2).mean(axis=2), 1e-300)) - self.center_).astype(np.float32)
        return (signals / self.scale_[None, :, None]).astype(np.float32)


class ChannelSignals(TransformerMixin, BaseEstimator):
    """No spatial filter: the trials' ``channels`` (looked up in ``montage``), each trial divided by its own RMS
    over channels and time. Fitting reads nothing (``fit`` only checks the montage)."""

    def __init__(self, channels: tuple[str, ...] = SENSORIMOTOR, montage: tuple[str, ...] | None = None):
        self.channels = channels
        self.montage = montage

    def fit(self, X=None, y=None):
        self.picks_ = channel_picks(tuple(self.channels), self.montage)
        return self

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "picks_")
        X = check_trials(X, self.picks_)
        rms = np.sqrt((X ** 2).mean(axis=(1, 2)))
        return (X / np.where(rms > 0, rms, 1.0)[:, None, None]).astype(np.float32)


def _psd(matrix: np.ndarray, floor: float = 1e-6) -> np.ndarray:
    """The nearest PSD matrix with eigenvalues at least ``floor`` × the mean eigenvalue (post-processing)."""
    vals, vecs = np.linalg.eigh((matrix + matrix.T) / 2.0)
    vals = np.maximum(vals, floor * max(float(np.mean(np.abs(vals))), 1e-12))
    return (vecs * vals) @ vecs.T
