"""Study B's client preprocessing as a named option of the protocol: which trials a client's spatial filters and
scaling are fitted on, and so whether the preprocessing itself can tell the client's members from its non-members.

The paper fits each client's CSP and scaling on its member trials (``member_csp``). Members then sit further from
the decision boundary in CSP space than non-members whatever model is applied afterwards, and that asymmetry lies
outside any DP guarantee of the training step. The options here keep the member split and the model the same and
change only what the preprocessing reads (:data:`PREPROCESSING`, one registry entry per option):

- ``member_csp`` — the paper's: :class:`~eegprivacy.signal.csp.ClientCSP` fitted on the client's members.
- ``calibration_csp`` — the same CSP fitted on the client's *calibration* trials: a stratified share of its
  trials (:func:`calibration_split`) that is neither a member (never trained on) nor a non-member (never
  attacked), as a BCI user records a short calibration block before use. It reads no member and no non-member,
  so it is symmetric between them; it is still private data read outside ε (the calibration trials are not
  protected by the DP step; they are not what the membership attacks ask about).
- ``dp_csp`` — :class:`DPClientCSP`: the class covariances of the client's members on a fixed sensorimotor
  montage, released with the Gaussian mechanism (each trial's covariance normalised to trace 1, so one trial moves
  the released sums by at most 1 in Frobenius norm); filters, ordering and scaling are post-processing of that
  release. Its (ε, δ) per trial composes with the training steps into the client's certified ε
  (:func:`dp_csp_event`).
- ``channels`` — no spatial filter at all: the band-passed signals of the same fixed montage, each trial scaled by
  its own RMS (a per-trial operation that reads no other trial). For EEGNet (its BatchNorm statistics stay local).

The montage (:data:`SENSORIMOTOR`) is fixed before seeing any data: the channels over the hand areas where motor
imagery's lateralised mu/beta desynchronisation lives, so choosing it spends no privacy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["PREPROCESSING", "SENSORIMOTOR", "Preprocessing", "DPClientCSP", "ChannelSignals", "calibration_split",
           "make_preprocessor", "dp_csp_event", "dp_csp_sigma"]

# The 11 sensorimotor channels of the 10-10 system over and around C3/Cz/C4 (eegmmidb's names).
SENSORIMOTOR = ("FC3", "FCz", "FC4", "C3", "C1", "Cz", "C2", "C4", "CP3", "CPz", "CP4")


@dataclass(frozen=True)
class Preprocessing:
    """One registry entry: which trials the client's preprocessing is fitted on (``fits_on``: members,
    calibration or none), which models it can feed, and what ε leaves out, in words for the tables."""

    name: str
    fits_on: str
    models: tuple[str, ...]
    outside_epsilon: str


PREPROCESSING = {p.name: p for p in (
    Preprocessing("member_csp", "members", ("simplenet", "eegnet"),
                  "the CSP filters and scaling, fitted un-noised on all of the client's members: one trial moves "
                  "every other trial's features, so a trial's ε is its whole client's (every step of every round)"),
    Preprocessing("calibration_csp", "calibration", ("simplenet", "eegnet"),
                  "the calibration trials the CSP and scaling are fitted on (un-noised; they are neither trained on "
                  "nor attacked); members enter only the steps whose batch holds them"),
    Preprocessing("dp_csp", "members", ("simplenet", "eegnet"),
                  "nothing: the class covariances are released with the Gaussian mechanism (ε, δ per trial), "
                  "composed into the certified ε; the class counts are the design's, treated as public"),
    Preprocessing("channels", "none", ("eegnet",),
                  "nothing: a fixed montage and per-trial scaling read no other trial"),
)}


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


def _pick(X: np.ndarray, picks: np.ndarray | None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"trials must be (n_trials, n_channels, n_samples), got {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("trials hold NaN or infinite samples")
    return X if picks is None else X[:, picks, :]


def _picks(channels: tuple[str, ...], montage) -> np.ndarray:
    names = list(montage)
    missing = [c for c in channels if c not in names]
    if missing:
        raise ValueError(f"the recordings have no channel {', '.join(missing)}; their channels: {', '.join(names)}")
    return np.array([names.index(c) for c in channels])


def _unit_trace(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each trial divided by sqrt(trace of its covariance): trace-1 covariances, and the per-trial scale."""
    power = np.sqrt(np.einsum("nct,nct->n", X, X))
    power = np.where(power > 0, power, 1.0)
    return X / power[:, None, None], power


def dp_csp_sigma(epsilon: float, delta: float) -> float:
    """σ of the analytic Gaussian mechanism for the class-covariance sums (L2 sensitivity 1 per trial)."""
    from eegprivacy.privacy.mechanisms import gaussian_sigma

    return gaussian_sigma(epsilon, delta, 1.0)


def dp_csp_event(epsilon: float, delta: float):
    """The DP-CSP release as a dp_accounting event (one Gaussian mechanism, noise multiplier σ / sensitivity), to
    compose with the training steps' events into a client's certified ε."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(noise_multiplier=dp_csp_sigma(epsilon, delta))


class DPClientCSP(TransformerMixin, BaseEstimator):
    """CSP from Gaussian-noised class covariances (DP per trial), on a fixed channel montage.

    ``fit(X, y)``: every member trial is restricted to ``channels`` (names looked up in ``montage``) and scaled to
    unit trace, so its covariance Σᵢ = xᵢxᵢᵀ is PSD with trace 1 and ‖Σᵢ‖_F ≤ 1. The two class sums S₀, S₁ are
    released with i.i.d. N(0, σ²) noise on the √2-weighted upper triangle (an isometry of the Frobenius norm), so
    adding or removing one trial moves the released vector by at most 1 in L2: the analytic Gaussian mechanism at
    (``epsilon``, ``delta``) per trial. The class counts are the design's (a stratified split of a fixed number of
    cues per run) and are treated as public. Everything after the release is post-processing: the noisy means are
    projected onto the PSD cone, the filters solve S₀ w = λ (S₀ + S₁) w, components are taken as ClientCSP's
    ``alternate`` order, and the scaling comes from the released covariance (log-variance centred at
    log(wᵀ C̄ w), signals divided by sqrt(wᵀ C̄ w)) — no un-noised statistic of any member is used.
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
        picks = None if self.montage is None else _picks(tuple(self.channels), self.montage)
        X = _pick(X, picks)
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
        means = []
        for label in classes:
            rows = Xn[y == label]
            total = np.einsum("nct,ndt->cd", rows, rows)
            released = total[iu] * weight + rng.normal(0.0, self.sigma_, size=iu[0].size)
            noisy = np.zeros((n_ch, n_ch))
            noisy[iu] = released / weight
            noisy = noisy + np.triu(noisy, 1).T
            means.append(_psd(noisy / rows.shape[0]))
        c0, c1 = means
        vals, vecs = eigh(c0, c0 + c1)
        order = _alternate(np.argsort(vals)[::-1])
        self.filters_ = vecs[:, order[: int(self.n_components)]].T
        pooled = (c0 + c1) / 2.0
        self.center_ = np.log(np.maximum(np.einsum("kc,cd,kd->k", self.filters_, pooled, self.filters_), 1e-12)
                              / X.shape[2])
        self.scale_ = np.sqrt(np.exp(self.center_))
        self.picks_, self.classes_, self.n_samples_ = picks, classes, X.shape[2]
        return self

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "filters_")
        Xn, _ = _unit_trace(_pick(X, self.picks_))
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
        self.picks_ = None if self.montage is None else _picks(tuple(self.channels), self.montage)
        return self

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "picks_")
        X = _pick(X, self.picks_)
        rms = np.sqrt((X ** 2).mean(axis=(1, 2)))
        return (X / np.where(rms > 0, rms, 1.0)[:, None, None]).astype(np.float32)


def _psd(matrix: np.ndarray, floor: float = 1e-6) -> np.ndarray:
    """The nearest PSD matrix with eigenvalues at least ``floor`` × the mean eigenvalue (post-processing)."""
    vals, vecs = np.linalg.eigh((matrix + matrix.T) / 2.0)
    vals = np.maximum(vals, floor * max(float(np.mean(np.abs(vals))), 1e-12))
    return (vecs * vals) @ vecs.T


def _alternate(order: np.ndarray) -> np.ndarray:
    """Largest, smallest, second largest, second smallest, … of an eigenvalue order (ClientCSP's ``alternate``)."""
    out, lo, hi = [], 0, len(order) - 1
    while lo <= hi:
        out.append(order[lo])
        if lo != hi:
            out.append(order[hi])
        lo, hi = lo + 1, hi - 1
    return np.array(out)


def make_preprocessor(name: str, output: str, n_components: int, *, montage=None, epsilon: float = 1.0,
                      delta: float = 1e-5, random_state=None):
    """An unfitted preprocessor for option ``name`` feeding ``output`` (``logvar`` for SimpleNet, ``signals`` for
    EEGNet)."""
    from eegprivacy.signal.csp import ClientCSP

    if name not in PREPROCESSING:
        raise ValueError(f"unknown preprocessing {name!r}; known: {', '.join(PREPROCESSING)}")
    if name in ("member_csp", "calibration_csp"):
        return ClientCSP(n_components=n_components, output=output)
    if name == "dp_csp":
        return DPClientCSP(n_components=n_components, output=output, epsilon=epsilon, delta=delta,
                           montage=montage, random_state=random_state)
    if output != "signals":
        raise ValueError("preprocessing 'channels' feeds raw signals: EEGNet only")
    return ChannelSignals(montage=montage)
