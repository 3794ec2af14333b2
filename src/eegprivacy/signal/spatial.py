"""Spatial features of motor imagery that a client can compute without fitting anything on its own member trials:
what study B's member-free preprocessing options are made of (:mod:`eegprivacy.federated.preprocessing`).

Every transformer here reads a trial's own samples, a fixed montage, or statistics fitted on trials the caller
names (a client's calibration block, other clients' shared class covariances); none of them has a ``fit`` that
reads the trials it is later asked to transform unless the caller passes them. Which trials those are — and so
what DP's ε leaves out — is the registry's business, not this module's.

- :class:`LaplacianBandPower` — fixed small (Hjorth) Laplacians at C3, Cz and C4 (the channel minus the mean of its
  four nearest neighbours), then the log power in the mu (8–13 Hz) and beta (13–30 Hz) bands, relative to the
  trial's own mean log power. Nothing is fitted.
- :func:`alignment_whitener` / :func:`aligned` — Euclidean alignment (He & Wu, IEEE TBME 2020): a subject's trials
  whitened by the inverse square root of the mean covariance of a reference set of its trials, so that every
  subject's reference covariance becomes the identity and filters learnt on other subjects transfer.
- :class:`PooledCSP` — CSP (single band, or a filter bank of sub-bands) whose class covariances are the sums other
  clients share (:meth:`PooledCSP.class_sums`), after each client's own alignment: the target client's trials never
  enter its filters.
- :class:`AlignedTangentSpace` — the Riemannian tangent-space map (pyriemann) of each aligned trial covariance at
  the identity, i.e. at the client's own reference mean.

Shapes: trials are (n_trials, n_channels, n_samples) at ``sfreq``; ``output="logvar"`` gives the feature vector a
fully connected model takes (n_trials, n_features); ``output="signals"`` the (n_trials, n_signals, n_samples)
signals a convolutional model takes.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["MOTOR21", "SENSORIMOTOR", "LAPLACIANS", "FILTER_BANK", "LaplacianBandPower", "PooledCSP",
           "AlignedTangentSpace", "alignment_whitener", "aligned", "channel_picks", "check_trials", "csp_filters",
           "alternate_order"]

# The 21 sensorimotor channels of the 10-10 system from FC5 to CP6 (eegmmidb's names): the rows over the hand and
# foot areas where motor imagery's lateralised mu/beta desynchronisation lives. Fixed before seeing any data.
MOTOR21 = ("FC5", "FC3", "FC1", "FCz", "FC2", "FC4", "FC6", "C5", "C3", "C1", "Cz", "C2", "C4", "C6",
           "CP5", "CP3", "CP1", "CPz", "CP2", "CP4", "CP6")
# The 11 sensorimotor channels over and around C3/Cz/C4: the fixed montage of DP-CSP, the channel signals and the
# tangent space (66 features; the 21 channels' 231 let a small model memorise its members).
SENSORIMOTOR = ("FC3", "FCz", "FC4", "C3", "C1", "Cz", "C2", "C4", "CP3", "CPz", "CP4")
# Small Laplacians: each centre minus the mean of its four nearest 10-10 neighbours.
LAPLACIANS = {"C3": ("FC3", "C5", "C1", "CP3"), "Cz": ("FCz", "C1", "C2", "CPz"), "C4": ("FC4", "C2", "C6", "CP4")}
MU_BETA = ((8.0, 13.0), (13.0, 30.0))
# The filter bank of FBCSP (Ang et al. 2008) restricted to the study's 8-30 Hz band: 4 sub-bands.
FILTER_BANK = ((8.0, 12.0), (12.0, 16.0), (16.0, 24.0), (24.0, 30.0))
SHRINKAGE = 1e-3  # of the mean eigenvalue, added to a reference covariance before it is inverted


def channel_picks(channels, montage, *, present_only: bool = False) -> np.ndarray | None:
    """Indices of ``channels`` in ``montage`` (None: ``montage`` unknown, the trials hold ``channels`` already).
    A missing channel is an error, unless ``present_only``: then the channels the montage holds (at least two),
    a choice made from the channel names alone, never from the data."""
    if montage is None:
        return None
    names = list(montage)
    missing = [c for c in channels if c not in names]
    if present_only and len(channels) - len(missing) >= 2:
        return np.array([names.index(c) for c in channels if c in names])
    if missing:
        raise ValueError(f"the recordings have no channel {', '.join(missing)}; their channels: {', '.join(names)}")
    return np.array([names.index(c) for c in channels])


def check_trials(X, picks: np.ndarray | None = None) -> np.ndarray:
    """Trials as float64 (n_trials, n_channels, n_samples), finite, restricted to ``picks`` (None: all)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"trials must be (n_trials, n_channels, n_samples), got {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("trials hold NaN or infinite samples")
    return X if picks is None else X[:, picks, :]


def _band_power(X: np.ndarray, sfreq: float, bands) -> np.ndarray:
    """Mean periodogram power (Hann window) of every channel in every band: (n_trials, n_channels, n_bands)."""
    window = np.hanning(X.shape[-1])
    power = np.abs(np.fft.rfft(X * window, axis=-1)) ** 2
    freqs = np.fft.rfftfreq(X.shape[-1], 1.0 / float(sfreq))
    out = []
    for low, high in bands:
        mask = (freqs >= low) & (freqs < high)
        if not mask.any():
            raise ValueError(f"no frequency bin in {low}-{high} Hz at {sfreq} Hz over {X.shape[-1]} samples")
        out.append(power[..., mask].mean(axis=-1))
    return np.stack(out, axis=-1)


class LaplacianBandPower(TransformerMixin, BaseEstimator):
    """Fixed small Laplacians at C3, Cz, C4 (:data:`LAPLACIANS`); fits nothing.

    ``output="logvar"``: the log mu and beta power of the three Laplacian signals (6 features), each minus the
    trial's mean over the six (a per-trial normalisation that reads no other trial and cancels the subject's
    overall amplitude). ``output="signals"``: the three Laplacian signals, each trial divided by its own RMS.
    """

    def __init__(self, output: str = "logvar", sfreq: float = 128.0, montage: tuple[str, ...] | None = None):
        self.output = output
        self.sfreq = sfreq
        self.montage = montage

    def fit(self, X=None, y=None):
        if self.output not in ("logvar", "signals"):
            raise ValueError(f"output must be logvar or signals, got {self.output!r}")
        if self.montage is None:
            raise ValueError("LaplacianBandPower needs the trials' channel names (montage)")
        channel_picks(tuple(LAPLACIANS) + tuple(n for ring in LAPLACIANS.values() for n in ring), self.montage)
        names = list(self.montage)
        self.centres_ = np.array([names.index(c) for c in LAPLACIANS])
        self.rings_ = [np.array([names.index(n) for n in ring]) for ring in LAPLACIANS.values()]
        return self

    def laplacians(self, X) -> np.ndarray:
        """(n_trials, 3, n_samples): each centre minus the mean of its ring."""
        check_is_fitted(self, "centres_")
        X = check_trials(X)
        return np.stack([X[:, c] - X[:, ring].mean(axis=1) for c, ring in zip(self.centres_, self.rings_)], axis=1)

    def transform(self, X) -> np.ndarray:
        signals = self.laplacians(X)
        if self.output == "signals":
            rms = np.sqrt((signals ** 2).mean(axis=(1, 2)))
            return (signals / np.where(rms > 0, rms, 1.0)[:, None, None]).astype(np.float32)
        logp = np.log(np.maximum(_band_power(signals, self.sfreq, MU_BETA), 1e-300)).reshape(len(signals), -1)
        return (logp - logp.mean(axis=1, keepdims=True)).astype(np.float32)


def alignment_whitener(X_reference) -> np.ndarray:
    """R^(-1/2) of the mean trial covariance R of ``X_reference`` (shrunk by :data:`SHRINKAGE` of its mean
    eigenvalue): the matrix Euclidean alignment multiplies a subject's trials by."""
    X = check_trials(X_reference)
    if len(X) == 0:
        raise ValueError("Euclidean alignment needs at least one reference trial")
    reference = np.einsum("nct,ndt->cd", X, X) / (X.shape[0] * X.shape[2])
    reference = reference + SHRINKAGE * np.trace(reference) / len(reference) * np.eye(len(reference))
    vals, vecs = np.linalg.eigh(reference)
    return (vecs / np.sqrt(vals)) @ vecs.T


def aligned(X, whitener: np.ndarray) -> np.ndarray:
    """Trials multiplied by ``whitener`` (:func:`alignment_whitener`)."""
    return np.einsum("cd,ndt->nct", whitener, check_trials(X))


def _bandpass(X: np.ndarray, band, sfreq: float) -> np.ndarray:
    from scipy.signal import butter, sosfiltfilt

    if band is None:
        return X
    sos = butter(4, band, btype="bandpass", fs=float(sfreq), output="sos")
    return sosfiltfilt(sos, X, axis=-1)


def _unit_trace_covariances(X: np.ndarray) -> np.ndarray:
    cov = np.einsum("nct,ndt->ncd", X, X)
    trace = np.trace(cov, axis1=1, axis2=2)
    return cov / np.where(trace > 0, trace, 1.0)[:, None, None]


def alternate_order(order: np.ndarray) -> np.ndarray:
    """Largest, smallest, second largest, second smallest, … of an eigenvalue order (ClientCSP's ``alternate``)."""
    out, lo, hi = [], 0, len(order) - 1
    while lo <= hi:
        out.append(order[lo])
        if lo != hi:
            out.append(order[hi])
        lo, hi = lo + 1, hi - 1
    return np.array(out)


def csp_filters(c0: np.ndarray, c1: np.ndarray, n_components: int) -> np.ndarray:
    """(n_components, n_channels) CSP filters of the class covariances ``c0``, ``c1``: solutions of
    c0 w = λ (c0 + c1) w (the sum shrunk by 1e-4 of its mean eigenvalue), in the alternate order."""
    from scipy.linalg import eigh

    total = c0 + c1
    total = total + 1e-4 * np.trace(total) / len(total) * np.eye(len(total))
    vals, vecs = eigh(c0, total)
    return vecs[:, alternate_order(np.argsort(vals)[::-1])[: int(n_components)]].T


class PooledCSP(TransformerMixin, BaseEstimator):
    """CSP whose filters come from class covariances other clients share, after each client's own alignment.

    The three steps a deployment runs, in order:

    1. :meth:`align` — the client's Euclidean-alignment whitener from its reference trials (its calibration block).
    2. :meth:`class_sums` — what a client shares: per band, the sums of its aligned, unit-trace trial covariances
       per class, and the class counts. Computed by every *other* client on the trials it shares.
    3. :meth:`fit` — the target client's filters from the pooled sums it receives (its own are never among them):
       per band, :func:`csp_filters` of the pooled class means; ``n_components`` filters a band.

    ``channels``: those of the montage it names that the recordings hold (all of :data:`MOTOR21` on eegmmidb).
    ``bands``: None for one band (the trials' own, 8–30 Hz in study B), else sub-bands (e.g. :data:`FILTER_BANK`),
    each band-passed (4th-order Butterworth, zero phase) after alignment. ``output="logvar"``: per band, the log
    variance of each component relative to the band's total over its components (a per-trial normalisation);
    ``output="signals"``: the projected signals of every band stacked, each component divided by its pooled
    standard deviation.
    """

    def __init__(self, n_components: int = 4, output: str = "logvar", bands=None, sfreq: float = 128.0,
                 channels: tuple[str, ...] = MOTOR21, montage: tuple[str, ...] | None = None):
        self.n_components = n_components
        self.output = output
        self.bands = bands
        self.sfreq = sfreq
        self.channels = channels
        self.montage = montage

    def _bands(self) -> list:
        return [None] if self.bands is None else [tuple(float(f) for f in b) for b in self.bands]

    def _banded(self, X) -> list[np.ndarray]:
        check_is_fitted(self, "whitener_")
        base = aligned(check_trials(X, self.picks_), self.whitener_)
        return [_bandpass(base, band, self.sfreq) for band in self._bands()]

    def align(self, X_reference) -> PooledCSP:
        """Fit the whitener on the client's reference trials (its calibration block; labels are not read)."""
        if self.output not in ("logvar", "signals"):
            raise ValueError(f"output must be logvar or signals, got {self.output!r}")
        self.picks_ = channel_picks(tuple(self.channels), self.montage, present_only=True)
        self.whitener_ = alignment_whitener(check_trials(X_reference, self.picks_))
        return self

    def class_sums(self, X, y) -> dict:
        """This client's share: ``{"sums": (n_bands, 2, c, c), "counts": (2,)}`` over trials ``X`` with labels
        ``y`` (two classes, in sorted order), after :meth:`align`."""
        y = np.asarray(y).ravel()
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(f"CSP needs trials of exactly two classes, got {classes.tolist()}")
        covs = [_unit_trace_covariances(band) for band in self._banded(X)]
        sums = np.stack([[cov[y == c].sum(axis=0) for c in classes] for cov in covs])
        return {"sums": sums, "counts": np.array([np.count_nonzero(y == c) for c in classes], dtype=float)}

    def fit(self, X=None, y=None, *, shared: list[dict]):
        """Filters from the pooled ``shared`` sums of other clients (after :meth:`align`; ``X`` and ``y`` are not
        read: the target's own trials never enter its filters)."""
        check_is_fitted(self, "whitener_")
        if not shared:
            raise ValueError("PooledCSP needs the class sums of at least one other client")
        sums = np.sum([s["sums"] for s in shared], axis=0)
        counts = np.sum([s["counts"] for s in shared], axis=0)
        n_ch = sums.shape[-1]
        if not 1 <= int(self.n_components) <= n_ch:
            raise ValueError(f"n_components must be in [1, {n_ch}], got {self.n_components}")
        means = sums / counts[None, :, None, None]
        self.filters_ = np.stack([csp_filters(m[0], m[1], self.n_components) for m in means])
        pooled = means.mean(axis=1)  # (bands, c, c): the mean unit-trace covariance
        self.scale_ = np.sqrt(np.maximum(np.einsum("bkc,bcd,bkd->bk", self.filters_, pooled, self.filters_),
                                         1e-12))
        return self

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "filters_")
        out = []
        for W, band, scale in zip(self.filters_, self._banded(X), self.scale_):
            if self.output == "signals":
                trace = np.sqrt(np.einsum("nct,nct->n", band, band))
                unit = band / np.where(trace > 0, trace, 1.0)[:, None, None]
                out.append(np.einsum("kc,nct->nkt", W, unit) / scale[None, :, None])
            else:
                var = (np.einsum("kc,nct->nkt", W, band) ** 2).mean(axis=2)
                var = np.maximum(var, 1e-300)
                out.append(np.log(var / var.sum(axis=1, keepdims=True)))
        return np.concatenate(out, axis=1).astype(np.float32)


class AlignedTangentSpace(TransformerMixin, BaseEstimator):
    """Riemannian tangent-space features (pyriemann) at the client's own reference mean.

    ``fit`` reads only the reference trials it is given (the client's calibration block; labels are not read):
    their mean covariance R. A trial's feature vector is the tangent vector of its covariance whitened by R
    (trace-normalised to the channel count) at the identity — pyriemann's ``tangent_space`` (upper triangle of the
    matrix logarithm, off-diagonal entries × √2): n(n+1)/2 features for n channels.
    """

    def __init__(self, channels: tuple[str, ...] = SENSORIMOTOR, montage: tuple[str, ...] | None = None):
        self.channels = channels
        self.montage = montage

    def fit(self, X_reference, y=None):
        self.picks_ = channel_picks(tuple(self.channels), self.montage)
        self.whitener_ = alignment_whitener(check_trials(X_reference, self.picks_))
        return self

    def transform(self, X) -> np.ndarray:
        from pyriemann.utils.tangentspace import tangent_space

        check_is_fitted(self, "whitener_")
        Xa = aligned(check_trials(X, self.picks_), self.whitener_)
        cov = np.einsum("nct,ndt->ncd", Xa, Xa)
        n_ch = cov.shape[1]
        cov = cov / np.trace(cov, axis1=1, axis2=2)[:, None, None] * n_ch
        cov = cov + 1e-6 * np.eye(n_ch)  # keep every covariance strictly positive definite
        return tangent_space(cov, np.eye(n_ch)).astype(np.float32)
