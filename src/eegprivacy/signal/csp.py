"""CSP fitted by one client on its own training trials (study B): MNE's ``mne.decoding.CSP``, plus the scaling
that makes its output trainable with Adam at lr 1e-3.

The paper projects each subject's trials with spatial filters learnt from that subject's training trials only
and feeds "the projected components" to both models, without saying what SimpleNet, a fully connected net,
sees of them. The choice made here, by model:

- EEGNet (a CNN over channels × time): ``output="signals"`` — the projected signals, ``transform_into=
  "csp_space"``, first `n_components` filters: (n_trials, n_components, n_samples).
- SimpleNet: ``output="logvar"`` — the log-variance of each projected signal, the classic CSP feature
  (MNE's ``transform_into="average_power"`` with ``log=True``): (n_trials, n_components). ``output="flat"``
  (the projected signals flattened) is there for the other reading of the paper.

Scaling (``standardize=True``, fitted on the same training trials): volts put the projected signals around
1e-5 and their log-variances around -25, where a freshly initialised network and Adam at lr 1e-3 barely move;
signals are divided by each component's training RMS, log-variances z-scored per component.

Rank: the average reference leaves the trials one dimension short (the channels sum to zero). MNE's own rank
estimate reads the float32 rounding left in that direction as signal, and the CSP filters then carry an
arbitrarily large all-ones part that multiplies rounding noise into every component. ``rank="auto"`` (default)
counts the eigenvalues of the training covariance above 1e-10 of the largest (the null one sits near 1e-17,
real EEG above 1e-5) and passes that rank to MNE.

Component order: MNE's default ranks components by mutual information, separately for every client, so the
k-th input of the shared model means something different at each client and FedAvg averages weights for
unrelated features (on 8 eegmat clients, SimpleNet stayed at chance). ``component_order="alternate"`` (the
default here) takes the filters with the largest and smallest eigenvalue, then the next pair, and so on: at every
client component 2j is the j-th filter with the most class-0 variance relative to class 1, component 2j+1 the
j-th with the most class-1 variance. Log-variances are then comparable across clients; projected signals still
carry each filter's arbitrary sign.

Only the client's training trials (members) enter ``fit``; held-out trials are only transformed, so the split
between members and non-members is the same for CSP as for the model. Every client keeps its own filters (the
paper's design); the ordering above is what keeps their outputs comparable.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["ClientCSP", "MODEL_INPUT", "numerical_rank"]

OUTPUTS = ("signals", "logvar", "flat")
RANK_TOL = 1e-10
# Which CSP output each model of study B takes (see the module docstring).
MODEL_INPUT = {"eegnet": "signals", "simplenet": "logvar"}


class ClientCSP(TransformerMixin, BaseEstimator):
    """One client's CSP: ``fit`` on its training trials (n_trials, n_channels, n_samples) and labels, then
    ``transform`` any of its trials into `output` (see the module docstring).

    `reg`, `component_order` and `cov_est` go to ``mne.decoding.CSP`` unchanged, `rank` too unless it is
    ``"auto"`` (see the module docstring; ``rank_`` is what was used); ``filters_`` and ``patterns_`` are the
    first `n_components` of its filters and patterns.
    """

    def __init__(self, n_components: int = 4, output: str = "signals", reg=None,
                 component_order: str = "alternate", cov_est: str = "concat", rank="auto",
                 standardize: bool = True):
        self.n_components = n_components
        self.output = output
        self.reg = reg
        self.component_order = component_order
        self.cov_est = cov_est
        self.rank = rank
        self.standardize = standardize

    def _check_X(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3:
            raise ValueError(f"CSP needs trials shaped (n_trials, n_channels, n_samples), got {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("trials hold NaN or infinite samples")
        return X

    def fit(self, X, y):
        import mne
        from mne.decoding import CSP

        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        X = self._check_X(X)
        y = np.asarray(y).ravel()
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(f"CSP needs trials of exactly two classes, got {classes.tolist()}")
        rank = self.rank
        if isinstance(rank, str) and rank == "auto":
            r = numerical_rank(X)
            rank = "full" if r == X.shape[1] else {"eeg": r}
        self.rank_ = rank
        usable = X.shape[1] if not isinstance(rank, dict) else sum(rank.values())
        if not 1 <= int(self.n_components) <= usable:
            raise ValueError(f"n_components must be in [1, {usable}] (the data's rank), got {self.n_components}")
        csp = CSP(n_components=int(self.n_components), reg=self.reg, log=None, cov_est=self.cov_est,
                  transform_into="csp_space", component_order=self.component_order, rank=rank)
        with mne.utils.use_log_level("error"):
            csp.fit(X, y)
        self.csp_ = csp
        self.classes_ = classes
        self.n_channels_ = X.shape[1]
        self.filters_ = csp.filters_[: self.n_components]
        self.patterns_ = csp.patterns_[: self.n_components]
        signals = self._project(X)
        if self.output == "logvar":
            feats = _logvar(signals)
            self.mean_, self.scale_ = feats.mean(axis=0), _nonzero(feats.std(axis=0))
        else:
            self.mean_ = np.zeros(signals.shape[1])
            self.scale_ = _nonzero(np.sqrt((signals ** 2).mean(axis=(0, 2))))
        return self

    def _project(self, X: np.ndarray) -> np.ndarray:
        import mne

        with mne.utils.use_log_level("error"):
            return self.csp_.transform(X)

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "csp_")
        X = self._check_X(X)
        if X.shape[1] != self.n_channels_:
            raise ValueError(f"fitted on {self.n_channels_} channels, got {X.shape[1]}")
        signals = self._project(X)
        if self.output == "logvar":
            feats = _logvar(signals)
            return ((feats - self.mean_) / self.scale_ if self.standardize else feats).astype(np.float32)
        if self.standardize:
            signals = signals / self.scale_[None, :, None]
        signals = signals.astype(np.float32)
        return signals.reshape(len(signals), -1) if self.output == "flat" else signals


def numerical_rank(X: np.ndarray, tol: float = RANK_TOL) -> int:
    """Eigenvalues of the trials' mean channel covariance above `tol` times the largest."""
    X = np.asarray(X, dtype=np.float64)
    cov = np.einsum("nct,ndt->cd", X, X) / max(X.shape[0] * X.shape[2], 1)
    eig = np.linalg.eigvalsh(cov)
    return int(max(1, (eig > tol * eig.max()).sum())) if eig.max() > 0 else 0


def _logvar(signals: np.ndarray) -> np.ndarray:
    """log of the mean power over time: MNE's ``average_power`` with ``log=True``."""
    return np.log((signals ** 2).mean(axis=2))


def _nonzero(scale: np.ndarray) -> np.ndarray:
    return np.where(scale > 0, scale, 1.0)
