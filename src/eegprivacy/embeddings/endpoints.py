"""Study C audit endpoints on embedding matrices, each with the control that could falsify it.

Encoder-agnostic: every function takes embeddings ``Z`` (n_windows, dim) plus the per-window metadata it
needs (subject ``groups``, attribute ``A``), never the encoder. Operational choices the protocol leaves open
are marked **(ours)** and restated where they are implemented:

- attribute leakage is scored on the pooled out-of-fold predictions (all test windows of all folds), each
  fold's predictions and truths centred on that fold's test means: the mean over attribute dimensions of the
  Pearson r between predicted and true attribute (centring removes the between-fold intercept artefact that
  otherwise drives the controls far below 0);
- the subject-level bootstrap resamples subjects with replacement and recomputes the real and both control
  scores on the same resample, so L_A's interval carries the controls' uncertainty too;
- the split-local permutation control uses one seeded permutation; the permutation p-value compares the real
  score with ``n_permutations`` further split-local permutations, p = (1 + #null >= real) / (1 + n);
- every interval is over the privacy unit, the subject: membership AUC, BPID@1 and AEDS resample subjects with
  replacement (multinomial counts over subjects,
  :func:`~eegprivacy.evaluation.cluster_bootstrap.subject_counts`) exactly as L_A does, and each result says so
  in ``ci_over``. Windows of one subject are not independent (a subject random effect moves all of them),
  so a window bootstrap is far too narrow: on null data it excluded chance in most datasets.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.model_selection import GroupKFold, KFold
from sklearn.utils import check_random_state

from eegprivacy.attacks.metrics import auroc
from eegprivacy.embeddings.heads import default_head, weighted_balanced_accuracy
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = [
    "AttributeDecoder",
    "LeakageResult",
    "attribute_leakage",
    "raw_copy_fraction",
    "SubjectLabelResult",
    "subject_label_leakage",
    "BPIDResult",
    "bpid_at_1",
    "MembershipResult",
    "membership_auc",
    "membership_residual",
    "membership_difference",
    "identity_residual",
    "ReconstructionResult",
    "reconstruction_r2",
    "AEDSResult",
    "aeds",
    "DEFAULT_ALPHAS",
]

DEFAULT_ALPHAS = np.logspace(-3, 5, 17)


# ---------------------------------------------------------------------------------------------------------------
# ridge with standardised inputs and an inner-CV alpha


def _standardise_fit(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = Z.mean(axis=0)
    scale = Z.std(axis=0)
    scale[scale < 1e-12] = 1.0  # constant coordinates carry nothing; keep them finite
    return mean, scale


def _ridge_coef_path(Xtr: np.ndarray, Ytr: np.ndarray, alphas) -> np.ndarray:
    """Centred ridge coefficients (n_alphas, dim, n_targets) for every alpha from one eigendecomposition.

    Uses the smaller of the two Gram matrices (X^T X when n >= dim, X X^T otherwise): an eigh of it is far
    cheaper than an SVD of X and gives every alpha for free.
    """
    alphas = np.asarray(alphas, float)
    n, d = Xtr.shape
    if n >= d:
        lam, V = np.linalg.eigh(Xtr.T @ Xtr)
        VtXtY = V.T @ (Xtr.T @ Ytr)  # (d, k)
        inv = 1.0 / (np.clip(lam, 0.0, None)[None, :] + alphas[:, None])  # (a, d)
        return np.einsum("dr,ar,rk->adk", V, inv, VtXtY, optimize=True)
    lam, U = np.linalg.eigh(Xtr @ Xtr.T)
    XtU = Xtr.T @ U  # (d, n)
    UtY = U.T @ Ytr
    inv = 1.0 / (np.clip(lam, 0.0, None)[None, :] + alphas[:, None])
    return np.einsum("dr,ar,rk->adk", XtU, inv, UtY, optimize=True)


def _ridge_path_predict(Xtr: np.ndarray, Ytr: np.ndarray, Xte: np.ndarray, alphas) -> np.ndarray:
    """Predictions (n_alphas, n_test, n_targets) of centred ridge for every alpha."""
    return np.einsum("td,adk->atk", Xte, _ridge_coef_path(Xtr, Ytr, alphas), optimize=True)


class AttributeDecoder(RegressorMixin, BaseEstimator):
    """Ridge from standardised embeddings to the attribute; alpha by inner CV on the training subjects only.

    The inner CV is grouped by subject (``GroupKFold``) whenever ``fit`` receives ``groups`` with at least two
    subjects, so alpha is never tuned on windows of a subject it is later tested on; without groups it falls
    back to a seeded ``KFold``. The criterion is the mean squared error summed over attribute dimensions.
    All alphas are solved from one eigendecomposition per fold, which keeps the permutation null affordable.
    """

    def __init__(self, alphas=None, inner_splits: int = 3, random_state=None):
        self.alphas = alphas
        self.inner_splits = inner_splits
        self.random_state = random_state

    def _alphas(self) -> np.ndarray:
        return np.asarray(DEFAULT_ALPHAS if self.alphas is None else self.alphas, float)

    def fit(self, Z, A, groups=None):
        Z = np.asarray(Z, float)
        A = np.asarray(A, float)
        self._single_output = A.ndim == 1
        A2 = A[:, None] if self._single_output else A
        if Z.ndim != 2 or Z.shape[0] != A2.shape[0]:
            raise ValueError(f"Z must be (n, dim) with one row per attribute row: {Z.shape} vs {A.shape}")
        alphas = self._alphas()
        if alphas.size == 1:
            self.alpha_ = float(alphas[0])
            self.cv_mse_ = np.array([np.nan])
        else:
            if groups is not None and np.unique(groups).size >= 2:
                inner = GroupKFold(n_splits=min(self.inner_splits, np.unique(groups).size))
                folds = inner.split(Z, A2, groups)
            else:
                inner = KFold(n_splits=self.inner_splits, shuffle=True,
                              random_state=check_random_state(self.random_state).randint(2**31 - 1))
                folds = inner.split(Z)
            sse = np.zeros(alphas.size)
            for tr, va in folds:
                m, sc = _standardise_fit(Z[tr])
                ybar = A2[tr].mean(axis=0)
                pred = _ridge_path_predict((Z[tr] - m) / sc, A2[tr] - ybar, (Z[va] - m) / sc, alphas) + ybar
                sse += ((pred - A2[va][None]) ** 2).sum(axis=(1, 2))
            self.cv_mse_ = sse / Z.shape[0]
            self.alpha_ = float(alphas[int(np.argmin(self.cv_mse_))])
        self.mean_, self.scale_ = _standardise_fit(Z)
        Xs = (Z - self.mean_) / self.scale_
        self.intercept_ = A2.mean(axis=0)
        self.coef_ = _ridge_coef_path(Xs, A2 - self.intercept_, [self.alpha_])[0]  # (dim, n_targets)
        self.n_features_in_ = Z.shape[1]
        return self

    def predict(self, Z):
        Z = np.asarray(Z, float)
        out = ((Z - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        return out[:, 0] if self._single_output else out


# ---------------------------------------------------------------------------------------------------------------
# the subject (cluster) bootstrap every interval uses: its resamples are drawn by
# eegprivacy.evaluation.cluster_bootstrap.subject_counts


def _percentile_ci(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = np.asarray(draws, float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return (float("nan"), float("nan"))
    a = 1.0 - confidence
    return tuple(float(q) for q in np.quantile(finite, [a / 2, 1 - a / 2]))


def _codes(groups, n: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(unique subjects, each row's index into them) of one group array, checked against ``n`` rows."""
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"{name} must name the subject of every row: {groups.shape} vs {n} rows")
    return np.unique(groups, return_inverse=True)


def _unit_keys(units) -> list:
    """Subject ids as plain Python values: ``0`` and ``"0"`` stay two subjects (no dtype coercion), while
    ``np.int64(3)`` and ``3`` are one."""
    return [u.item() if isinstance(u, np.generic) else u for u in np.asarray(units, dtype=object).ravel().tolist()]


def _union_units(*unit_arrays) -> np.ndarray:
    """The union of several parts' subject ids (an object array, sorted by type name then value), the columns
    of a joint subject bootstrap."""
    keys = dict.fromkeys(k for units in unit_arrays for k in _unit_keys(units))
    out = np.empty(len(keys), dtype=object)
    out[:] = sorted(keys, key=lambda k: (type(k).__name__, k))
    return out


def _unit_columns(units, own, name: str) -> np.ndarray:
    """Column of each of ``own``'s subjects in ``units`` (the columns of a multiplicity matrix)."""
    keys = _unit_keys(units)
    column = {k: i for i, k in enumerate(keys)}
    if len(column) != len(keys):
        raise ValueError("units must name each subject once")
    own = _unit_keys(own)
    missing = [k for k in own if k not in column]
    if missing:
        raise ValueError(f"{len(missing)} subject(s) of {name} are not in units (e.g. {missing[0]!r}): their "
                         "multiplicities are unknown")
    return np.array([column[k] for k in own], dtype=int)


def _unit_weights(units, counts, own, name: str) -> np.ndarray:
    """Multiplicities (B, len(own)) of ``own``'s subjects taken from ``counts`` (B, len(units))."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] != len(_unit_keys(units)):
        raise ValueError(f"counts must be (n_bootstrap, len(units)), got {counts.shape} for {len(units)} units")
    return counts[:, _unit_columns(units, own, name)].astype(float)


# ---------------------------------------------------------------------------------------------------------------
# attribute leakage with negative controls


def _fit_predict(decoder, Z_fit, Z_test, A, groups, folds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled out-of-fold predictions: (test row indices, predictions, chosen alpha per fold)."""
    rows, preds, alphas = [], [], []
    for train, test in folds:
        model = clone(decoder)
        model.fit(Z_fit[train], A[train], groups[train])
        rows.append(test)
        preds.append(np.asarray(model.predict(Z_test[test]), float).reshape(len(test), -1))
        alphas.append(getattr(model, "alpha_", np.nan))
    return np.concatenate(rows), np.concatenate(preds), np.asarray(alphas, float)


def _subject_moments(pred: np.ndarray, true: np.ndarray, subj: np.ndarray, subjects: np.ndarray) -> np.ndarray:
    """Per-subject sufficient statistics of Pearson r: (n_subjects, 6, n_dims) of n, Sp, St, Spp, Stt, Spt."""
    index = np.searchsorted(subjects, subj)
    stats = np.stack([np.ones_like(pred), pred, true, pred * pred, true * true, pred * true], axis=1)
    out = np.zeros((subjects.size,) + stats.shape[1:])
    np.add.at(out, index, stats)
    return out


def _pearson_from_moments(m: np.ndarray) -> np.ndarray:
    """Mean-over-dims Pearson r from summed moments (..., 6, n_dims); NaN dims (no variance) are ignored."""
    n, sp, st, spp, stt, spt = (m[..., k, :] for k in range(6))
    cov = spt - sp * st / n
    vp = spp - sp * sp / n
    vt = stt - st * st / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(vp * vt)
    r = np.where((vp > 1e-12 * np.maximum(spp, 1)) & (vt > 1e-12 * np.maximum(stt, 1)), r, np.nan)
    with np.errstate(all="ignore"):
        return np.nanmean(r, axis=-1) if np.isfinite(r).any() else np.full(r.shape[:-1], np.nan)


def _fold_centred(pred: np.ndarray, true: np.ndarray, fold_sizes) -> tuple[np.ndarray, np.ndarray]:
    """Subtract each fold's test means from predictions and truths before pooling the folds.

    Without this, pooled out-of-fold r is biased far below 0 for a decoder that has learned nothing: it
    predicts its training mean, which is anti-correlated with the held-out fold's mean (on 12 subjects in 4
    folds a Gaussian control reads about -0.57). Centring per fold keeps only within-fold covariation, so
    the controls read about 0 **(ours)**.
    """
    pred, true = pred.copy(), true.copy()
    start = 0
    for size in fold_sizes:
        sl = slice(start, start + size)
        pred[sl] -= pred[sl].mean(axis=0)
        true[sl] -= true[sl].mean(axis=0)
        start += size
    return pred, true


def _per_dim_r(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    out = np.full(true.shape[1], np.nan)
    for j in range(true.shape[1]):
        if pred[:, j].std() > 1e-12 and true[:, j].std() > 1e-12:
            out[j] = np.corrcoef(pred[:, j], true[:, j])[0, 1]
    return out


def _leakage_draws(W: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """L_A = r(real) - max(r(Gaussian), r(permuted)) of every resample: subjects weighted by ``W`` (B, n_subjects),
    ``moments`` (3, n_subjects, 6, n_dims)."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a resample without these subjects: NaN
        boot = _pearson_from_moments(np.einsum("bs,msij->bmij", W, moments))  # (B, 3)
    return boot[:, 0] - np.maximum(boot[:, 1], boot[:, 2])


def _permuted_scores(decoder, Z_fit, Z, A, groups, folds, rng):
    """Split-local permutation: train rows shuffled among train rows, test rows among test rows, per fold."""
    rows, preds = [], []
    for train, test in folds:
        model = clone(decoder)
        model.fit(Z_fit[rng.permutation(train)], A[train], groups[train])
        rows.append(test)
        preds.append(np.asarray(model.predict(Z[rng.permutation(test)]), float).reshape(len(test), -1))
    return np.concatenate(rows), np.concatenate(preds)


@dataclass
class LeakageResult:
    """Attribute leakage of one (embedding, split) cell with its negative controls.

    ``gain`` is L_A = score - max(control_gaussian, control_permuted); ``ci`` its subject-level bootstrap
    interval; ``draws`` the bootstrap draws of L_A. ``subjects`` (the test subjects) and ``moments`` (their
    per-subject Pearson moments, (3 models: real / Gaussian / permuted, n_subjects, 6, n_dims)) recompute L_A
    under any subject multiplicities (:meth:`draws_for`), so AEDS can resample subjects once for all its parts.
    """

    score: float
    control_gaussian: float
    control_permuted: float
    gain: float
    ci: tuple[float, float]
    p_value: float
    per_dim_r: np.ndarray
    alphas: np.ndarray
    n_test_windows: int
    n_subjects: int
    draws: np.ndarray = field(repr=False)
    null_scores: np.ndarray = field(repr=False)
    ci_over: str = "subjects"
    subjects: np.ndarray = field(default=None, repr=False, compare=False)
    moments: np.ndarray = field(default=None, repr=False, compare=False)

    def draws_for(self, units, counts) -> np.ndarray:
        """L_A of each subject resample: ``counts`` (B, len(units)) are multiplicities of the subjects ``units``;
        this result's test subjects take theirs (each must be in ``units``), the others are ignored. With
        :func:`attribute_leakage`'s own multiplicities it reproduces ``draws`` exactly. A resample without any of
        its test subjects is NaN."""
        if self.moments is None or self.subjects is None:
            raise ValueError("this leakage result carries no per-subject moments (computed by older code?)")
        return _leakage_draws(_unit_weights(units, counts, self.subjects, "the leakage result"), self.moments)

    def as_dict(self) -> dict:
        return {"score": self.score, "control_gaussian": self.control_gaussian,
                "control_permuted": self.control_permuted, "gain": self.gain, "ci_low": self.ci[0],
                "ci_high": self.ci[1], "p_value": self.p_value, "n_test_windows": self.n_test_windows,
                "n_subjects": self.n_subjects}


def attribute_leakage(Z, A, groups, splitter, decoder=None, Z_fit=None, n_bootstrap: int = 1000,
                      n_permutations: int = 100, confidence: float = 0.95, random_state=0) -> LeakageResult:
    """Leakage gain L_A of the attribute ``A`` from embeddings ``Z`` under ``splitter``, with its controls.

    ``decoder`` is any regressor with ``fit(Z, A, groups)`` / ``predict``; default ``AttributeDecoder``.
    ``Z_fit`` (same rows as ``Z``) optionally gives the embeddings the decoder is *trained* on while ``Z`` is
    what it is *tested* on -- e.g. clean shadow embeddings for training and released (noised) embeddings for
    testing in the adaptive-attacker setting. The controls replace the embeddings by (i) i.i.d. Gaussian noise
    of the same shape (fit and test on it) and (ii) the same embeddings permuted across windows within each
    split (train rows among train rows, test rows among test rows); both use the same splits and decoder.
    """
    Z = np.asarray(Z, float)
    Z_fit = Z if Z_fit is None else np.asarray(Z_fit, float)
    A = np.asarray(A, float)
    A = A[:, None] if A.ndim == 1 else A
    groups = np.asarray(groups)
    if not (Z.shape[0] == A.shape[0] == groups.shape[0] == Z_fit.shape[0]):
        raise ValueError(f"row counts differ: Z {Z.shape[0]}, Z_fit {Z_fit.shape[0]}, A {A.shape[0]}, "
                         f"groups {groups.shape[0]}")
    if int(n_bootstrap) < 1000:
        raise ValueError(f"the protocol asks for >= 1000 bootstrap resamples, got {n_bootstrap}")
    rng = check_random_state(random_state)
    if decoder is None:
        decoder = AttributeDecoder(random_state=rng.randint(2**31 - 1))

    folds = list(splitter.split(Z, A, groups))  # materialised once: real and controls share the folds
    rows, pred, alphas = _fit_predict(decoder, Z_fit, Z, A, groups, folds)
    G = rng.standard_normal(Z.shape)
    rows_g, pred_g, _ = _fit_predict(decoder, G, G, A, groups, folds)
    rows_p, pred_p = _permuted_scores(decoder, Z_fit, Z, A, groups, folds, rng)

    subjects = np.unique(groups[rows])
    fold_sizes = [len(test) for _, test in folds]
    moments = np.stack([
        _subject_moments(*_fold_centred(p, A[r], fold_sizes), groups[r], subjects)
        for r, p in ((rows, pred), (rows_g, pred_g), (rows_p, pred_p))
    ])  # (3 models, n_subjects, 6, n_dims)
    real, ctrl_g, ctrl_p = _pearson_from_moments(moments.sum(axis=1))
    gain = real - max(ctrl_g, ctrl_p)

    counts = subject_counts(subjects.size, n_bootstrap, rng)
    draws = _leakage_draws(counts.astype(float), moments)
    a = 1.0 - confidence
    finite = draws[np.isfinite(draws)]
    ci = tuple(float(q) for q in np.quantile(finite, [a / 2, 1 - a / 2])) if finite.size else (np.nan, np.nan)

    null = np.empty(int(n_permutations))
    for k in range(null.size):
        r_k, p_k = _permuted_scores(decoder, Z_fit, Z, A, groups, folds, rng)
        null[k] = _pearson_from_moments(
            _subject_moments(*_fold_centred(p_k, A[r_k], fold_sizes), groups[r_k], subjects).sum(axis=0))
    p_value = float((1 + np.sum(null >= real)) / (1 + null.size)) if null.size else float("nan")

    per_dim = _per_dim_r(*_fold_centred(pred, A[rows], fold_sizes))
    return LeakageResult(score=float(real), control_gaussian=float(ctrl_g), control_permuted=float(ctrl_p),
                         gain=float(gain), ci=ci, p_value=p_value, per_dim_r=per_dim,
                         alphas=alphas, n_test_windows=int(rows.size), n_subjects=int(subjects.size),
                         draws=draws, null_scores=null, subjects=subjects, moments=moments)


# ---------------------------------------------------------------------------------------------------------------
# subject-level label leakage (a diagnosis) with its controls


@dataclass
class SubjectLabelResult:
    """Held-out-subject decodability of a subject-level label (e.g. a diagnosis), with its matched nulls.

    ``balanced_accuracy`` is over held-out *subjects* (the headline), ``ci`` its subject-bootstrap percentile
    interval and ``draws`` the bootstrap draws behind it (NaN where a resample lost a class; dropped from ``ci``).
    ``window_balanced_accuracy`` / ``window_ci`` score the same held-out windows one by one, subjects still
    resampled. ``control_gaussian`` is the subject-level balanced accuracy of the same protocol on i.i.d. Gaussian
    embeddings; ``control_permuted`` / ``control_permuted_q95`` are the mean and 95th percentile of
    ``null_scores``, the whole cross-fitted protocol rerun with the subjects' labels permuted across all subjects
    (fitted on and scored against the permuted labels; see :func:`subject_label_leakage`). ``p_value`` is the
    upper tail, (1 + #null >= observed) / (1 + n_permutations) (the label is decodable); ``p_value_lower`` the
    lower one, (1 + #null <= observed) / (1 + n_permutations) (the score lies below its null); and
    :attr:`p_value_two_sided` = min(1, 2 · min(upper, lower)). All are NaN without permutations. ``shift_ci``
    inverts the permutation test (:func:`permutation_shift_interval`): the interval the claims print, since the
    subject bootstrap ``ci`` keeps the fitted heads and covered chance only 0.87 of the time on MSU-shaped nulls.
    """

    balanced_accuracy: float
    ci: tuple[float, float]
    window_balanced_accuracy: float
    window_ci: tuple[float, float]
    control_gaussian: float
    control_permuted: float
    control_permuted_q95: float
    p_value: float
    n_subjects: int
    n_windows: int
    draws: np.ndarray = field(repr=False)
    null_scores: np.ndarray = field(default=None, repr=False)
    ci_over: str = "subjects"
    p_value_lower: float = float("nan")
    shift_ci: tuple[float, float] = (float("nan"), float("nan"))

    @property
    def p_value_two_sided(self) -> float:
        """Twice the smaller tail, at most 1 (NaN when either tail is): the score is extreme in either direction."""
        if not (np.isfinite(self.p_value) and np.isfinite(self.p_value_lower)):
            return float("nan")
        return float(min(1.0, 2.0 * min(self.p_value, self.p_value_lower)))

    def as_dict(self) -> dict:
        return {"balanced_accuracy": self.balanced_accuracy, "ci_low": self.ci[0], "ci_high": self.ci[1],
                "window_balanced_accuracy": self.window_balanced_accuracy, "window_ci_low": self.window_ci[0],
                "window_ci_high": self.window_ci[1], "control_gaussian": self.control_gaussian,
                "control_permuted": self.control_permuted, "control_permuted_q95": self.control_permuted_q95,
                "p_value": self.p_value, "p_value_lower": self.p_value_lower,
                "p_value_two_sided": self.p_value_two_sided, "n_subjects": self.n_subjects,
                "n_windows": self.n_windows, "ci_over": self.ci_over}


def _subject_label_codes(y, groups, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(classes, each window's class code, each window's subject index, each subject's class code).

    Raises when a subject carries more than one label: the label must belong to the subject, not the window.
    """
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y must hold one label per window: {y.shape} vs {n} windows")
    subjects, s_index = _codes(groups, n, "groups")
    classes, y_code = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"a subject-level label needs at least 2 classes, got {classes.size}")
    pairs = np.unique(np.c_[s_index, y_code], axis=0)  # distinct (subject, label) pairs
    mixed = int(np.sum(np.bincount(pairs[:, 0], minlength=subjects.size) > 1))
    if mixed:
        raise ValueError(f"{mixed} of {subjects.size} subjects have windows with different labels: y must be a "
                         "subject-level label (constant over each subject's windows)")
    subject_code = np.empty(subjects.size, int)
    subject_code[s_index] = y_code
    return classes, y_code, s_index, subject_code


def _check_held_out(folds, s_index: np.ndarray) -> None:
    """Every fold tests subjects it did not train on, and no subject is tested in two folds."""
    tested = np.zeros(s_index.max() + 1, int)
    for k, (train, test) in enumerate(folds):
        if np.intersect1d(s_index[train], s_index[test]).size:
            raise ValueError(f"fold {k} trains and tests on the same subject(s): subject-level label leakage "
                             "needs a subject-disjoint splitter")
        tested[np.unique(s_index[test])] += 1
    if (tested > 1).any():
        raise ValueError(f"{int(np.sum(tested > 1))} subject(s) are tested in more than one fold: each held-out "
                         "subject needs one score")


def _oof_subject_probabilities(estimator, Z, fit_labels, folds, s_index, n_subjects: int, n_classes: int,
                               prior_corrected: bool, window_predictions: bool = False):
    """Per-subject sums of out-of-fold class scores (n_subjects, n_classes) and, if asked, the pooled test rows
    with their window-level predictions. ``fit_labels[k]`` are the class codes fold k trains on.

    The scores are ``predict_proba``, divided by the fold's training class fractions when ``prior_corrected``
    (then the window predictions are their argmax; ``predict`` otherwise). Each subject is tested in one fold, so
    the argmax of its summed scores is its most probable class relative to its fold's prior."""
    score_sum = np.zeros((n_subjects, n_classes))
    rows, pred = [], []
    for (train, test), labels in zip(folds, fit_labels):
        model = clone(estimator).fit(Z[train], labels)
        score = np.zeros((test.size, n_classes))
        score[:, np.asarray(model.classes_, int)] = model.predict_proba(Z[test])  # a class absent in training: 0
        if prior_corrected:
            prior = np.bincount(labels, minlength=n_classes) / labels.size
            score /= np.where(prior > 0, prior, 1.0)
        np.add.at(score_sum, s_index[test], score)
        if window_predictions:
            rows.append(test)
            pred.append(np.argmax(score, axis=1) if prior_corrected else np.asarray(model.predict(Z[test]), int))
    if window_predictions:
        return score_sum, np.concatenate(rows), np.concatenate(pred)
    return score_sum


def _subject_ba(score_sum: np.ndarray, tested: np.ndarray, subject_code: np.ndarray):
    """Balanced accuracy over the ``tested`` subjects of the argmax of their summed class scores.

    ``score_sum`` (n_subjects, n_classes) with ``subject_code`` (n_subjects,) gives a float; stacked label sets,
    ``score_sum`` (P, n_subjects, n_classes) with ``subject_code`` (P, n_subjects) -- each permutation scored
    against its own subjects' labels -- give (P,). The mean recall over the classes present among the tested
    subjects, as :func:`eegprivacy.embeddings.heads.weighted_balanced_accuracy` with unit weights; the real
    score and the null go through this one function, so a tie between them is an exact tie."""
    # argmax of the subject's mean score; uncorrected and two classes: "mean P(class 1) > 0.5", a tie to class 0
    pred = np.argmax(score_sum[..., tested, :], axis=-1)
    truth = np.broadcast_to(np.asarray(subject_code)[..., tested], pred.shape)
    hits = np.stack([np.sum((truth == c) & (pred == c), axis=-1) for c in range(score_sum.shape[-1])], axis=-1)
    tries = np.stack([np.sum(truth == c, axis=-1) for c in range(score_sum.shape[-1])], axis=-1)
    present = tries > 0
    recall = np.where(present, hits / np.where(present, tries, 1), 0.0)
    ba = recall.sum(axis=-1) / present.sum(axis=-1)
    return float(ba) if ba.ndim == 0 else ba


def _ba_draws(classes: np.ndarray, hits: np.ndarray, tries: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Balanced accuracy of every resample at once: per-unit hits / tries of units of class ``classes[i]``,
    units weighted by their multiplicities ``W`` (n_bootstrap, n_units). A resample missing a class is NaN."""
    recalls = []
    for c in np.unique(classes):
        m = classes == c
        with np.errstate(invalid="ignore", divide="ignore"):
            recalls.append((W[:, m] @ hits[m]) / (W[:, m] @ tries[m]))
    return np.mean(recalls, axis=0)


_MAX_REJECTED_PER_PERMUTATION = 100  # redraws allowed per requested permutation (plus 1,000) before giving up


def _permuted_subject_codes(subject_code: np.ndarray, s_index: np.ndarray, folds, tested: np.ndarray,
                            n_permutations: int, rng) -> np.ndarray:
    """(n_permutations, n_subjects): each row the subjects' labels permuted across all subjects.

    Every subject keeps one label and the multiset of labels is the observed one; a row is the label vector the
    whole cross-fitted protocol is rerun with (each fold fits on its training subjects' row labels and its
    held-out subjects are scored against theirs). Rejection sampling: a draw is kept only when every fold's
    training subjects hold at least min(2, observed) classes (a fit needs two; the batched solver refuses one) and
    the scored subjects hold as many classes as they do under the observed labels; the observed labels satisfy
    both, so the null is exact conditional on them. Draws are ``rng.permutation(n_subjects)``, one after another,
    so a seed gives the same rows. ValueError after ``1000 + 100 · n_permutations`` rejected draws: then almost
    no arrangement of the labels can be fitted in every fold (too few subjects of a class for these folds)."""
    n_subjects, n_classes = subject_code.size, int(subject_code.max()) + 1
    members = np.zeros((len(folds) + 1, n_subjects))  # each fold's training subjects, then the scored subjects
    for k, (train, _) in enumerate(folds):
        members[k, np.unique(s_index[train])] = 1.0
    members[-1, tested] = 1.0
    onehot = np.eye(n_classes)

    def classes_seen(codes: np.ndarray) -> np.ndarray:
        return np.count_nonzero(members @ onehot[codes] > 0, axis=1)

    need = classes_seen(subject_code)
    need[:-1] = np.minimum(need[:-1], 2)
    out = np.empty((int(n_permutations), n_subjects), subject_code.dtype)
    budget = 1000 + _MAX_REJECTED_PER_PERMUTATION * int(n_permutations)
    rejected = 0
    for p in range(out.shape[0]):
        while True:
            codes = subject_code[rng.permutation(n_subjects)]
            if np.all(classes_seen(codes) >= need):
                out[p] = codes
                break
            rejected += 1
            if rejected > budget:
                raise ValueError(
                    f"only {p} of {rejected + p} permutations of the subjects' labels left every training fold with "
                    f"{'both classes' if n_classes == 2 else 'two classes or more'} (and the scored subjects with "
                    "their classes): too few subjects of a class for these folds to build the permuted-label null; "
                    "use fewer folds")
    return out


_STRATIFIED_SPLITTERS = ("StratifiedKFold", "StratifiedGroupKFold", "StratifiedShuffleSplit",
                         "RepeatedStratifiedKFold")


def _check_label_free_folds(splitter, pristine, Z, groups, subject_code: np.ndarray, s_index: np.ndarray,
                            folds) -> None:
    """ValueError when ``splitter``'s folds depend on the labels: the null keeps the materialised folds, which
    equals rerunning the splitter per permutation only for a splitter that ignores ``y``.

    scikit-learn's stratified splitters are refused by class. Any other splitter is probed on ``pristine`` (a copy
    of ``splitter`` taken before its folds were drawn, so a generator it holds is not advanced; numpy's global one
    is restored): rerun with the true labels it must give the same folds (else it is not reproducible and the probe
    cannot tell), and rerun with a fixed rearrangement of the subjects' labels it must give them again.
    ``SubjectDisjointSplit`` (what ``Context.splitter("subject_disjoint", seed)`` returns; ``TemporalGapSplit``,
    its other answer, is not subject-disjoint and refused earlier) deals shuffled subjects into folds and never
    reads ``y``."""
    stratified = {c.__name__ for c in type(splitter).__mro__} & set(_STRATIFIED_SPLITTERS)
    if stratified:
        raise ValueError(f"{type(splitter).__name__} stratifies its folds by the label: the permuted-label null "
                         "would have to rerun it for every permutation, which subject_label_leakage does not do; use "
                         "a splitter whose folds ignore y (e.g. SubjectDisjointSplit)")
    if pristine is None:
        return

    def same(a, b) -> bool:
        return len(a) == len(b) and all(np.array_equal(np.asarray(tr), np.asarray(tr2))
                                        and np.array_equal(np.asarray(te), np.asarray(te2))
                                        for (tr, te), (tr2, te2) in zip(a, b))

    other = subject_code[np.random.RandomState(0).permutation(subject_code.size)]  # fixed; not the caller's rng
    if np.array_equal(other, subject_code):
        other = np.roll(subject_code, 1)  # differs: the label has two classes
    state = np.random.get_state()  # a splitter seeded with None draws from numpy's global generator: put it back
    try:
        rerun = list(copy.deepcopy(pristine).split(Z, subject_code[s_index], groups))
        relabelled = list(copy.deepcopy(pristine).split(Z, other[s_index], groups))
    except Exception:  # noqa: BLE001 -- a splitter that cannot be copied or rerun: nothing to probe
        return
    finally:
        np.random.set_state(state)
    if not same(rerun, folds):
        return  # not reproducible from its state (e.g. random_state=None): the probe cannot tell
    if not same(relabelled, folds):
        raise ValueError(f"{type(splitter).__name__}'s folds change when the labels are rearranged: the "
                         "permuted-label null keeps the observed folds, which is exact only for a splitter that "
                         "ignores y; rerunning the splitter per permutation is not supported")


def _batched_head_C(estimator, subject_code: np.ndarray, s_index: np.ndarray, folds, n_classes: int) -> float | None:
    """``C`` when every fit of :func:`subject_label_leakage` can go to the batched solver: the head is a
    standardised L2 logistic regression (:func:`eegprivacy.batched.logistic.logistic_C`, e.g. the default head),
    the label has two classes and every fold trains on both (the null only keeps permutations under which every
    fold still does: :func:`_permuted_subject_codes`). None otherwise: the head is refitted one fit at a time."""
    from eegprivacy.batched.logistic import logistic_C

    if n_classes != 2 or any(np.unique(subject_code[s_index[train]]).size != 2 for train, _ in folds):
        return None  # a fold that trains on one class: the one-at-a-time path raises as scikit-learn does
    return logistic_C(estimator)


def _batched_subject_probabilities(estimator, C: float, Z, fit_labels, folds, s_index, n_subjects: int,
                                   n_classes: int, prior_corrected: bool, window_predictions: bool = False):
    """:func:`_oof_subject_probabilities` for P label sets at once: ``fit_labels[k]`` is (P, fold k's training
    rows) of class codes; returns (P, n_subjects, n_classes) score sums and, if asked, the pooled test rows with
    (P, rows) window predictions.

    Why: the default head refitted per fold and permutation costs up to ~0.3 s at 512 dimensions on MSU, so the
    1,000-permutation null took hours per encoder cell; within a fold only the labels change, which
    :func:`eegprivacy.batched.logistic.logistic_proba` exploits. Each fit is the exact optimum of the head's
    objective (scikit-learn's L-BFGS, at its tol 1e-4, stops short of it by up to 0.15 in probability at 512
    dimensions), so the real fit, the Gaussian control and the null all go through here together: the p-value
    then compares one estimator with itself. Scores and predictions are formed exactly as the one-at-a-time path
    forms them. A fit the solver does not converge is refitted with ``estimator`` itself, with a warning (a
    safety net; not seen on synthetic or real-like cohorts)."""
    from eegprivacy.batched.logistic import logistic_proba

    P = fit_labels[0].shape[0]
    score_sum = np.zeros((P, n_subjects, n_classes))
    rows, pred, refits = [], [], 0
    for (train, test), labels in zip(folds, fit_labels):
        fits = logistic_proba(Z[train], labels, Z[test], C=C)
        proba, decision = fits.proba, fits.decision
        for p in np.flatnonzero(~fits.converged):
            model = clone(estimator).fit(Z[train], labels[p])
            proba[p], decision[p] = model.predict_proba(Z[test])[:, 1], model.decision_function(Z[test])
            refits += 1
        score = np.stack([1 - proba, proba], axis=2)  # (P, test rows, classes), as predict_proba
        if prior_corrected:
            count1 = labels.sum(axis=1, dtype=int)
            prior = np.stack([train.size - count1, count1], axis=1) / train.size  # bincount / size, per label set
            score /= np.where(prior > 0, prior, 1.0)[:, None, :]
        np.add.at(score_sum, (slice(None), s_index[test]), score)
        if window_predictions:
            rows.append(test)
            pred.append(np.argmax(score, axis=2) if prior_corrected else (decision > 0).astype(int))  # as predict
    if refits:
        import warnings

        warnings.warn(f"{refits} logistic fit(s) did not converge in the batched solver and were refitted with "
                      f"{type(estimator).__name__}", RuntimeWarning, stacklevel=3)
    if window_predictions:
        return score_sum, np.concatenate(rows), np.concatenate(pred, axis=1)
    return score_sum


def subject_label_leakage(Z, y, groups, splitter, estimator=None, n_bootstrap: int = 1000,
                          n_permutations: int = 50, confidence: float = 0.95, random_state=0,
                          prior_corrected: bool = True) -> SubjectLabelResult:
    """Is a subject-level label (e.g. schizophrenia vs healthy) decodable from held-out subjects' embeddings?

    Parameters
    ----------
    Z : array (n_windows, dim)
        Embeddings, one row per window.
    y : array (n_windows,)
        The label of each window's subject; it must be constant within each subject (ValueError naming how
        many subjects are mixed otherwise) and have at least two classes.
    groups : array (n_windows,)
        The subject of each window.
    splitter
        A subject-disjoint cross-validator (``split(Z, y, groups)``), e.g. ``SubjectDisjointSplit``; a fold
        that tests a subject it trains on, or a subject tested twice, is an error. Its folds must not depend on
        ``y`` (see Matched nulls); a label-stratified splitter is a ValueError when ``n_permutations`` > 0.
    estimator : classifier with ``predict_proba``, optional
        The head, cloned per fold and fitted on integer class codes; default
        :func:`eegprivacy.embeddings.heads.default_head` (standardised logistic regression). A standardised
        L2 logistic regression on a two-class label (the default head included;
        :func:`eegprivacy.batched.logistic.logistic_C` says which) is not refitted fit by fit: every fit (real,
        Gaussian control, each permutation) is the exact optimum of its objective, all permutations of a fold
        solved at once (:func:`_batched_subject_probabilities`). scikit-learn's L-BFGS at its default ``tol``
        stops short of that optimum (by up to 0.15 in probability at 512 dimensions), so a held-out subject near
        the decision rule can read differently than under ``estimator.fit``; real and null fits stay the same
        estimator either way.
    n_bootstrap, confidence : int, float
        Subject-bootstrap resamples and the percentile interval's level.
    n_permutations : int
        Reruns of the protocol under permuted labels (the null); 0 skips it (its fields and the p-values are then
        NaN). ValueError when almost no permutation leaves every training fold with both classes.
    random_state : int or RandomState
        One generator draws, in this order, the Gaussian control's embeddings, the bootstrap multiplicities and
        the label permutations (redrawn ones included), so the same inputs and seed give the same result.
    prior_corrected : bool, default True
        **(ours)** Decide relative to the training fold's class prior: a subject is predicted class 1 when its
        mean P(class 1) exceeds the fold's training fraction of class-1 windows (in general: the argmax of mean
        probability / training class fraction), the Bayes rule for balanced accuracy; windows alike. ``False``
        gives the plain rule (mean P(class 1) > 0.5; ``predict`` for windows).

    Returns
    -------
    SubjectLabelResult

    Notes
    -----
    Why subject-level: the label belongs to the subject, not to the window, and the windows of one subject are
    not independent (a subject random effect moves all of them), so window-level scores and intervals would count
    one subject's diagnosis many times. Each held-out subject's score is its mean predicted probability over its
    windows and its prediction the class that score favours (see ``prior_corrected``); the headline is balanced
    accuracy over held-out subjects, the privacy unit and the clinical unit alike. The interval resamples
    held-out subjects with replacement (:func:`~eegprivacy.evaluation.cluster_bootstrap.subject_counts`); the
    window-level balanced accuracy is resampled the same way, each window weighted by its subject's multiplicity.

    Why the prior correction: a head that has learned nothing still learns its training fold's class balance,
    which is anti-correlated with the held-out fold's balance (the subjects are split, the classes are not).
    With the plain 0.5 rule the pooled subject-level balanced accuracy then reads below chance on label-free data
    (about 0.42 for 40 subjects with balanced labels in 5 folds, its 95 % interval covering 0.5 in about 70 % of
    such datasets); deciding relative to the training prior removes that bias (about 0.50).

    Matched nulls: (a) the same protocol on i.i.d. standard-normal embeddings of ``Z``'s shape; (b) the
    permuted-label null: the subjects' labels permuted once across all subjects (every subject keeps one label,
    the multiset of labels is the observed one), and the whole cross-fitted protocol rerun with them,
    ``n_permutations`` times: each fold fits on its training subjects' permuted labels *and* its held-out
    subjects are scored against their permuted labels. Under the null hypothesis (the embeddings carry nothing
    about the label, i.e. the subjects' labels are exchangeable given the embeddings) the observed labels are one
    more draw of that permutation, so the observed score is exchangeable with the null ones and the add-one
    p-values are exact (valid at every level). Both halves matter. A null that permutes labels only among each
    fold's training subjects and keeps the held-out subjects' true labels is not exchangeable with the observed
    arrangement -- there one subject carries the same label into every fold it trains in and is scored against
    it where it is held out, which the per-fold shuffles break. An independent review measured it rejecting 0.082
    [0.069, 0.096] of true nulls at alpha = 0.05 on MSU-shaped null data (84 subjects, 39/45, 5 folds), against
    0.043 for this one (issue 46; ``tests/test_audit_endpoints.py`` measures this one's size on small null
    cohorts). A window-level shuffle would instead give every training subject mixed labels, a null the real
    label can never look like.

    What the null keeps fixed: the embeddings, the folds and the set of subjects. Keeping the materialised folds
    equals rerunning the splitter per permutation only because the splitter ignores ``y``
    (``SubjectDisjointSplit`` deals shuffled subjects into folds); a splitter whose folds depend on ``y`` (e.g.
    a label-stratified one) would have to be rerun for every permutation, so it is refused
    (:func:`_check_label_free_folds`). A permutation under which some training fold holds a single class cannot be
    fitted (the batched solver and scikit-learn refuse it): it is redrawn, so the test is exact conditional on
    "every training fold sees both classes" (in general: at least min(2, observed) classes per training fold, and
    the scored subjects all the classes they hold), an event the observed labels satisfy
    (:func:`_permuted_subject_codes`). ``p_value`` is the upper tail (decodable), ``p_value_lower`` the lower one
    and ``p_value_two_sided`` combines them; a null score equal to the observed one, up to rounding, counts in
    both tails.
    """
    Z = np.asarray(Z, float)
    if Z.ndim != 2:
        raise ValueError(f"Z must be (n_windows, dim), got shape {Z.shape}")
    n = Z.shape[0]
    classes, _, s_index, subject_code = _subject_label_codes(y, groups, n)
    if estimator is None:
        estimator = default_head()
    if not hasattr(estimator, "predict_proba"):
        raise TypeError(f"{type(estimator).__name__} has no predict_proba: subject scores average probabilities")
    rng = check_random_state(random_state)
    y_code = subject_code[s_index]
    try:
        pristine = copy.deepcopy(splitter)  # before its folds are drawn: the label-free probe reruns this copy
    except Exception:  # noqa: BLE001 -- a splitter that cannot be copied is not probed
        pristine = None
    folds = list(splitter.split(Z, y_code, np.asarray(groups)))  # materialised once: real and nulls share them
    _check_held_out(folds, s_index)
    if int(n_permutations) > 0:  # the null keeps these folds: they must not depend on y
        _check_label_free_folds(splitter, pristine, Z, np.asarray(groups), subject_code, s_index, folds)
    n_subjects, n_classes = subject_code.size, classes.size
    true_labels = [y_code[train] for train, _ in folds]
    C = _batched_head_C(estimator, subject_code, s_index, folds, n_classes)  # None: fit one at a time

    def oof(Zm, fit_labels, window_predictions=False):
        """:func:`_oof_subject_probabilities`, or for a logistic head its batched twin (one label set per fold)."""
        if C is None:
            return _oof_subject_probabilities(estimator, Zm, fit_labels, folds, s_index, n_subjects, n_classes,
                                              prior_corrected, window_predictions)
        out = _batched_subject_probabilities(estimator, C, Zm, [labels[None] for labels in fit_labels], folds,
                                             s_index, n_subjects, n_classes, prior_corrected, window_predictions)
        return (out[0][0], out[1], out[2][0]) if window_predictions else out[0]

    prob_sum, rows, window_pred = oof(Z, true_labels, window_predictions=True)
    tested = np.unique(s_index[rows])
    value = _subject_ba(prob_sum, tested, subject_code)
    window_value = weighted_balanced_accuracy(y_code[rows], window_pred)

    G = rng.standard_normal(Z.shape)
    control_g = _subject_ba(oof(G, true_labels), tested, subject_code)

    W = subject_counts(tested.size, n_bootstrap, rng).astype(float)  # (B, held-out subjects)
    subject_hit = (np.argmax(prob_sum[tested], axis=1) == subject_code[tested]).astype(float)
    draws = _ba_draws(subject_code[tested], subject_hit, np.ones(tested.size), W)
    position = np.searchsorted(tested, s_index[rows])
    window_hits = np.bincount(position, weights=(window_pred == y_code[rows]), minlength=tested.size)
    window_tries = np.bincount(position, minlength=tested.size).astype(float)
    window_draws = _ba_draws(subject_code[tested], window_hits, window_tries, W)

    null = np.empty(0)
    if int(n_permutations) > 0:
        # (P, n_subjects): the labels every permutation fits on (per fold) and scores against (held-out subjects)
        codes = _permuted_subject_codes(subject_code, s_index, folds, tested, int(n_permutations), rng)
        if C is not None:  # every permutation of a fold in one batched fit
            fit_labels = [codes[:, s_index[train]].astype(np.int8) for train, _ in folds]
            score_sums = _batched_subject_probabilities(estimator, C, Z, fit_labels, folds, s_index, n_subjects,
                                                        n_classes, prior_corrected)
        else:
            score_sums = np.stack([
                _oof_subject_probabilities(estimator, Z, [labels[s_index[train]] for train, _ in folds], folds,
                                           s_index, n_subjects, n_classes, prior_corrected)
                for labels in codes])
        null = np.asarray(_subject_ba(score_sums, tested, codes), float)
    if null.size and np.isfinite(value):
        tol = 1e-10 * max(1.0, abs(value))  # a null score equal to the observed one up to rounding is a tie
        p_value = float((1 + np.sum(null >= value - tol)) / (1 + null.size))
        p_value_lower = float((1 + np.sum(null <= value + tol)) / (1 + null.size))
    else:
        p_value = p_value_lower = float("nan")
    finite_null = null[np.isfinite(null)]
    return SubjectLabelResult(
        balanced_accuracy=float(value), ci=_percentile_ci(draws, confidence),
        window_balanced_accuracy=float(window_value), window_ci=_percentile_ci(window_draws, confidence),
        control_gaussian=float(control_g),
        control_permuted=float(finite_null.mean()) if finite_null.size else float("nan"),
        control_permuted_q95=float(np.quantile(finite_null, 0.95)) if finite_null.size else float("nan"),
        p_value=p_value, n_subjects=int(tested.size), n_windows=int(rows.size), draws=draws, null_scores=null,
        p_value_lower=p_value_lower,
        shift_ci=permutation_shift_interval(float(value), finite_null, 1.0 / n_classes, confidence))


def permutation_shift_interval(value: float, null: np.ndarray, chance: float,
                               confidence: float = 0.95) -> tuple[float, float]:
    """The interval that inverts a permutation test under a shift model: every θ for which ``value`` − θ + chance
    lies inside the null's central ``confidence`` range, i.e. (value + chance − q_high, value + chance − q_low).

    Why: the subject bootstrap of a cross-fitted score resamples the held-out subjects but keeps the fitted heads,
    so it leaves out how much the score moves when the heads are refitted; on null data shaped like the cohorts it
    covered chance 0.87 of the time (issue 46, ``reports/calibration.md``). The permutation null refits the whole
    protocol, so its spread holds both parts: at the null the interval covers ``chance`` exactly when the
    two-sided test does not reject (coverage = 1 − size); away from the null it assumes the score's spread does
    not grow with the effect (for a balanced accuracy it shrinks, so the interval is then conservative). (NaN,
    NaN) without a finite null."""
    finite = np.asarray(null, float)
    finite = finite[np.isfinite(finite)]
    if not (finite.size and np.isfinite(value)):
        return float("nan"), float("nan")
    a = 1.0 - confidence
    low, high = np.quantile(finite, [a / 2, 1 - a / 2])
    return float(value + chance - high), float(value + chance - low)


@dataclass
class WindowLabelResult:
    """Held-out decodability of a label that belongs to a recording (e.g. rest vs arithmetic, one state per
    recording), with its permuted-label null (:func:`window_label_leakage`).

    ``balanced_accuracy``: window-level, over held-out subjects' windows; ``ci`` its interval by
    :func:`permutation_shift_interval` (``ci_over = "label permutations"``) and ``subject_ci`` the subject
    bootstrap's percentile interval (the heads fixed; kept for comparison, it undercovers). ``null_scores``: the
    whole cross-fitted protocol rerun with each subject's recording labels permuted among its recordings;
    ``p_value`` / ``p_value_lower`` the add-one upper / lower tails and :attr:`p_value_two_sided` twice the
    smaller. ``control_gaussian``: the same protocol on i.i.d. Gaussian embeddings. ``n_arrangements``: how many
    distinct label arrangements the permutation draws from (1 when no subject has recordings of two labels: the
    test then cannot reject)."""

    balanced_accuracy: float
    ci: tuple[float, float]
    subject_ci: tuple[float, float]
    control_gaussian: float
    control_permuted: float
    p_value: float
    p_value_lower: float
    n_subjects: int
    n_windows: int
    n_arrangements: float
    null_scores: np.ndarray = field(repr=False)
    ci_over: str = "label permutations"

    @property
    def p_value_two_sided(self) -> float:
        """Twice the smaller tail, at most 1 (NaN when either tail is)."""
        if not (np.isfinite(self.p_value) and np.isfinite(self.p_value_lower)):
            return float("nan")
        return float(min(1.0, 2.0 * min(self.p_value, self.p_value_lower)))


def _within_stratum_unit_labels(unit_label: np.ndarray, unit_stratum: np.ndarray, n_permutations: int,
                                rng) -> np.ndarray:
    """(n_permutations, n_units): each row the units' labels permuted among the units of each stratum (a stratum
    keeps its multiset of labels: a subject its count of rest and arithmetic recordings, a run its cues)."""
    out = np.repeat(unit_label[None], int(n_permutations), axis=0)
    for s in np.unique(unit_stratum):
        members = np.flatnonzero(unit_stratum == s)
        if members.size < 2 or np.unique(unit_label[members]).size < 2:
            continue  # nothing to rearrange
        order = np.argsort(rng.random((out.shape[0], members.size)), axis=1)
        out[:, members] = unit_label[members][order]
    return out


def _balanced_accuracy_rows(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Balanced accuracy of each row of (P, n) class codes ``truth`` against (P, n) ``pred``; NaN for a row
    missing a class."""
    recalls = []
    for c in np.unique(truth):
        m = truth == c
        with np.errstate(invalid="ignore", divide="ignore"):
            recalls.append(np.sum(m & (pred == c), axis=1) / np.sum(m, axis=1))
    return np.mean(recalls, axis=0)


def window_label_leakage(Z, y, groups, units, splitter, estimator=None, n_bootstrap: int = 1000,
                         n_permutations: int = 1000, confidence: float = 0.95, random_state=0,
                         strata=None) -> WindowLabelResult:
    """Is a label of a subject's windows (a recording's state: rest vs arithmetic; a cue's side: left vs right)
    decodable from held-out subjects' embeddings? The window-level balanced accuracy of a cross-fitted head,
    tested against a null that permutes the labels among the units of each stratum (a subject's recordings; a
    run's cues) and reruns the whole cross-fitted pipeline.

    Parameters
    ----------
    Z : array (n_windows, dim)
        Embeddings, one row per window.
    y : array (n_windows,)
        Each window's label, two classes.
    groups, units : array (n_windows,)
        Each window's subject and the unit its label belongs to (its recording; the window itself for a cue's
        label); the label must be constant within a unit (ValueError otherwise).
    splitter
        A subject-disjoint cross-validator whose folds ignore ``y`` (as :func:`subject_label_leakage`).
    estimator : classifier, optional
        The head (default :func:`eegprivacy.embeddings.heads.default_head`); a standardised L2 logistic
        regression goes to the batched exact solver, real fit, Gaussian control and every permutation alike.
    n_bootstrap, confidence : int, float
        Subject-bootstrap resamples (``subject_ci``) and the intervals' level.
    n_permutations : int
        Reruns of the protocol under permuted labels (≥ 1).
    random_state : int or RandomState
        Draws, in this order, the Gaussian control, the bootstrap and the permutations.
    strata : array (n_windows,), optional
        Within what the units' labels are permuted (default ``groups``: a subject's recordings); each unit must
        lie in one stratum (ValueError otherwise). eegmmidb's cues: units = windows, strata = runs.

    Notes
    -----
    Why this null: the windows of one recording share more than its label (electrode contact, drowsiness, the
    minutes it was taken in), so a window-level shuffle, or an interval against the largest of chance and two
    noisy controls, is not exchangeable with the observed arrangement: the earlier claim test (subject-bootstrap
    interval against max(chance, controls), normal approximation) rejected 0.31 of true nulls at α = 0.05 on
    eegmat-shaped data (issue 46). Under the null hypothesis that a subject's recordings are exchangeable
    (nothing in the embeddings tells which state a recording was taken in), any rearrangement of a subject's
    recording labels is as likely as the observed one, so the add-one p-values are exact. Each subject keeps its
    count of each label, so every training fold keeps its class counts and is always fittable. What the test
    cannot separate: a state that always comes second in the session is confounded with the time it was
    recorded at (eegmat records rest before arithmetic); a rejection says the recordings differ, the state being
    one reason.
    """
    Z = np.asarray(Z, float)
    y, groups, units = np.asarray(y), np.asarray(groups), np.asarray(units)
    if Z.ndim != 2 or not (y.shape == groups.shape == units.shape == (Z.shape[0],)):
        raise ValueError(f"Z must be (n_windows, dim) and y, groups, units (n_windows,); got {Z.shape}, "
                         f"{y.shape}, {groups.shape}, {units.shape}")
    if int(n_permutations) < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    classes, y_code = np.unique(y, return_inverse=True)
    if classes.size != 2:
        raise ValueError(f"the label needs two classes, got {classes.size}")
    unit_keys, u_index = np.unique(np.char.add(np.char.add(groups.astype(str), "\x1f"), units.astype(str)),
                                   return_inverse=True)
    subjects, s_index = np.unique(groups, return_inverse=True)
    strata = groups if strata is None else np.asarray(strata)
    if strata.shape != groups.shape:
        raise ValueError(f"strata must be (n_windows,), got {strata.shape}")
    _, t_index = np.unique(strata.astype(str), return_inverse=True)
    unit_label = np.full(unit_keys.size, -1)
    unit_stratum = np.empty(unit_keys.size, int)
    unit_label[u_index], unit_stratum[u_index] = y_code, t_index
    if np.any(unit_label[u_index] != y_code):
        raise ValueError("the label changes within a unit: pass the unit the label belongs to (each window for "
                         "a per-window label)")
    if np.any(unit_stratum[u_index] != t_index):
        raise ValueError("a unit spans two strata: the labels are permuted among the units of a stratum")
    est = default_head() if estimator is None else estimator
    rng = check_random_state(random_state)
    try:
        pristine = copy.deepcopy(splitter)
    except Exception:  # noqa: BLE001 -- a splitter that cannot be copied is not probed
        pristine = None
    folds = list(splitter.split(Z, y_code, groups))
    _check_held_out(folds, s_index)
    _check_label_free_folds(splitter, pristine, Z, groups, unit_label, u_index, folds)
    C = _batched_head_C(est, unit_label, u_index, folds, 2)

    def predictions(Zm, label_sets: np.ndarray):
        """(test rows, (P, rows) predictions) of the cross-fitted head for each row of (P, n_units) labels."""
        window_labels = label_sets[:, u_index]
        if C is not None:
            fit = [window_labels[:, train].astype(np.int8) for train, _ in folds]
            _, rows, pred = _batched_subject_probabilities(est, C, Zm, fit, folds, u_index, unit_keys.size, 2,
                                                           prior_corrected=False, window_predictions=True)
            return rows, pred
        out = []
        for labels in window_labels:
            rows, pred = [], []
            for train, test in folds:
                rows.append(test)
                pred.append(clone(est).fit(Zm[train], labels[train]).predict(Zm[test]))
            out.append(np.concatenate(pred))
        return np.concatenate([test for _, test in folds]), np.stack(out)

    rows, pred = predictions(Z, unit_label[None])
    truth = y_code[rows]
    value = float(_balanced_accuracy_rows(truth[None], pred)[0])
    G = rng.standard_normal(Z.shape)
    _, pred_g = predictions(G, unit_label[None])
    control_g = float(_balanced_accuracy_rows(truth[None], pred_g)[0])

    tested = np.unique(s_index[rows])
    W = subject_counts(tested.size, n_bootstrap, rng).astype(float)
    position = np.searchsorted(tested, s_index[rows])
    hits = np.stack([np.bincount(position, weights=(pred[0] == truth) & (truth == c), minlength=tested.size)
                     for c in (0, 1)])
    tries = np.stack([np.bincount(position, weights=truth == c, minlength=tested.size) for c in (0, 1)])
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.mean([(W @ hits[c]) / (W @ tries[c]) for c in (0, 1)], axis=0)

    label_sets = _within_stratum_unit_labels(unit_label, unit_stratum, int(n_permutations), rng)
    _, pred_null = predictions(Z, label_sets)
    null = _balanced_accuracy_rows(label_sets[:, u_index][:, rows], pred_null)
    tol = 1e-10 * max(1.0, abs(value))
    finite = null[np.isfinite(null)]
    p_upper = float((1 + np.sum(finite >= value - tol)) / (1 + finite.size))
    p_lower = float((1 + np.sum(finite <= value + tol)) / (1 + finite.size))
    arrangements = 1.0  # a product of binomial coefficients; inf once it leaves the floats (it only informs)
    for s in np.unique(unit_stratum):
        labels = unit_label[unit_stratum == s]
        try:
            arrangements *= float(math.comb(labels.size, int(labels.sum())))
        except OverflowError:
            arrangements = float("inf")
    return WindowLabelResult(
        balanced_accuracy=value, ci=permutation_shift_interval(value, finite, 0.5, confidence),
        subject_ci=_percentile_ci(draws, confidence), control_gaussian=control_g,
        control_permuted=float(finite.mean()) if finite.size else float("nan"), p_value=p_upper,
        p_value_lower=p_lower, n_subjects=int(tested.size), n_windows=int(rows.size),
        n_arrangements=arrangements, null_scores=null)


# ---------------------------------------------------------------------------------------------------------------
# raw-copy check


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.einsum("ij,ij->i", a, b) / (na * nb)
    return np.where((na > 0) & (nb > 0), c, 0.0)


def raw_copy_fraction(Z, groups=None, order=None, threshold: float = 0.99) -> float:
    """Fraction of adjacent-window pairs whose embeddings have cosine similarity >= ``threshold``.

    Adjacency is within a subject or recording (``groups``; all rows form one sequence without it), in
    ``order`` (row order without it); pairs never straddle two groups. A high fraction means windows are
    near copies in embedding space and window-level splits are invalid for that encoder.
    """
    Z = np.asarray(Z, float)
    n = Z.shape[0]
    groups = np.zeros(n, int) if groups is None else np.asarray(groups)
    t = np.arange(n) if order is None else np.asarray(order)
    hits = pairs = 0
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        idx = idx[np.argsort(t[idx], kind="stable")]
        if idx.size < 2:
            continue
        c = _cosine_rows(Z[idx[:-1]], Z[idx[1:]])
        hits += int(np.sum(c >= threshold))
        pairs += c.size
    return float(hits / pairs) if pairs else float("nan")


# ---------------------------------------------------------------------------------------------------------------
# reference-set identity


@dataclass
class BPIDResult:
    """Top-1 reference-set identification: accuracy, chance 1/K, and a query-subject bootstrap interval.

    ``draws`` are the accuracies of ``n_bootstrap`` resamples of the query subjects (``ci`` their percentile
    interval); ``ci_over`` says what was resampled. The reference set (the candidates) is held fixed: it is the
    attacker's, not a sample of the protected population.
    """

    accuracy: float
    chance: float
    ci: tuple[float, float]
    n_queries: int
    n_candidates: int
    correct: np.ndarray = field(repr=False)
    draws: np.ndarray = field(default=None, repr=False)
    n_query_subjects: int = 0
    ci_over: str = "subjects"
    # per query subject (sorted ids): correct queries and queries, so any subject resample can be rescored
    query_units: np.ndarray = field(default=None, repr=False, compare=False)
    query_hits: np.ndarray = field(default=None, repr=False, compare=False)
    query_tries: np.ndarray = field(default=None, repr=False, compare=False)
    # per query: the candidate chosen and the true subject, and the K candidates (sorted), so the identity
    # permutation tests of eegprivacy.evaluation.permutation can be run on the result
    guess: np.ndarray = field(default=None, repr=False)
    query_subjects: np.ndarray = field(default=None, repr=False)
    candidates: np.ndarray = field(default=None, repr=False)

    @property
    def residual(self) -> float:
        return identity_residual(self.accuracy, self.n_candidates)

    def draws_for(self, units, counts) -> np.ndarray:
        """BPID@1 of each subject resample: ``counts`` (B, len(units)) are multiplicities of the subjects
        ``units``; the query subjects take theirs (each must be in ``units``), the others are ignored and the
        candidates stay fixed. With :func:`bpid_at_1`'s own multiplicities it reproduces ``draws`` exactly. A
        resample without any query subject is NaN."""
        if self.query_units is None:
            raise ValueError("this BPID@1 result carries no per-subject hits (computed by older code?)")
        W = _unit_weights(units, counts, self.query_units, "the BPID@1 queries")
        with np.errstate(invalid="ignore", divide="ignore"):
            return (W @ self.query_hits) / (W @ self.query_tries)


def _unit(Z: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(n > 0, n, 1.0)


def bpid_at_1(Z_ref, subj_ref, Z_query, subj_query, center: bool = False, confidence: float = 0.95,
              n_bootstrap: int = 1000, random_state=0) -> BPIDResult:
    """BPID@1: assign each query to the candidate whose reference centroid has the highest cosine similarity.

    Candidates are the subjects of the reference set (K of them, chance 1/K). Every query subject must be a
    candidate -- the protocol only defines BPID@1 in that setting, so a missing one is an error, not a miss.
    ``center=True`` **(ours, off by default)** subtracts the reference-set mean first, which the attacker can
    compute; it removes a common offset that otherwise pushes every cosine towards 1.

    The interval resamples query *subjects* with replacement (cluster bootstrap, ``ci_over="subjects"``): the
    queries of one subject share that subject's centroid and embedding style, so they hit or miss together and a
    Wilson interval over query windows is far too narrow. One query subject gives a zero-width interval.
    """
    Z_ref = np.asarray(Z_ref, float)
    Z_query = np.asarray(Z_query, float)
    subj_ref = np.asarray(subj_ref)
    subj_query = np.asarray(subj_query)
    candidates = np.unique(subj_ref)
    missing = np.setdiff1d(np.unique(subj_query), candidates)
    if missing.size:
        raise ValueError(f"{missing.size} query subject(s) have no reference windows: BPID@1 undefined")
    if center:
        mu = Z_ref.mean(axis=0)
        Z_ref, Z_query = Z_ref - mu, Z_query - mu
    centroids = np.stack([Z_ref[subj_ref == c].mean(axis=0) for c in candidates])
    sims = _unit(Z_query) @ _unit(centroids).T
    guess = candidates[np.argmax(sims, axis=1)]
    correct = guess == subj_query
    k = candidates.size
    queried, index = _codes(subj_query, correct.size, "subj_query")
    hits = np.bincount(index, weights=correct.astype(float), minlength=queried.size)
    tries = np.bincount(index, minlength=queried.size).astype(float)
    counts = subject_counts(queried.size, n_bootstrap, random_state).astype(float)
    draws = (counts @ hits) / (counts @ tries)
    return BPIDResult(accuracy=float(correct.mean()), chance=1.0 / k, ci=_percentile_ci(draws, confidence),
                      n_queries=int(correct.size), n_candidates=int(k), correct=correct, draws=draws,
                      n_query_subjects=int(queried.size), query_units=queried, query_hits=hits,
                      query_tries=tries, guess=guess, query_subjects=subj_query, candidates=candidates)


def identity_residual(bpid, n_candidates: int):
    """R_I = max(0, (BPID@1 - 1/K) / (1 - 1/K)); works elementwise on bootstrap draws. K < 2 gives 0."""
    k = int(n_candidates)
    if k < 2:
        return np.zeros_like(np.asarray(bpid, float)) if np.ndim(bpid) else 0.0
    out = np.maximum(0.0, (np.asarray(bpid, float) - 1.0 / k) / (1.0 - 1.0 / k))
    return out if np.ndim(out) else float(out)


# ---------------------------------------------------------------------------------------------------------------
# membership


@dataclass
class MembershipResult:
    """Loss-threshold membership attack: AUC, its cluster-bootstrap interval and draws, and R_M.

    ``ci_over`` says what the bootstrap resampled: ``"subjects"`` when the caller named every loss's subject,
    ``"windows"`` for the documented fallback without subjects (each window its own cluster). ``paired_with``
    records what fixes the resamples (the seed and both group arrays), so two attacks on the same windows can be
    differenced draw by draw (:func:`membership_difference`). With subjects, ``pair_counts`` (the (member subject,
    non-member subject) win counts C), ``sizes_members`` / ``sizes_nonmembers`` (windows per subject on each side)
    and ``units_members`` / ``units_nonmembers`` (the subjects of each side; one array for both when ``joint``)
    rescore any subject resample (:meth:`draws_for`); they are None for the window-level fallback.
    """

    auc: float
    ci: tuple[float, float]
    n_members: int
    n_nonmembers: int
    draws: np.ndarray = field(repr=False)
    ci_over: str = "subjects"
    n_subjects: int = 0
    joint: bool = False
    paired_with: tuple = field(default=(), repr=False, compare=False)
    pair_counts: np.ndarray = field(default=None, repr=False, compare=False)
    sizes_members: np.ndarray = field(default=None, repr=False, compare=False)
    sizes_nonmembers: np.ndarray = field(default=None, repr=False, compare=False)
    units_members: np.ndarray = field(default=None, repr=False, compare=False)
    units_nonmembers: np.ndarray = field(default=None, repr=False, compare=False)

    @property
    def residual(self) -> float:
        return membership_residual(self.auc)

    def draws_for(self, units, counts) -> np.ndarray:
        """AUC of each subject resample: ``counts`` (B, len(units)) are multiplicities of the subjects ``units``;
        the attack's member and non-member subjects take theirs (each must be in ``units``; a ``joint`` subject
        carries its windows on both sides), the others are ignored. With :func:`membership_auc`'s own
        multiplicities (stratified: the members' then the non-members' columns) it reproduces ``draws`` exactly.
        A resample without a member or without a non-member subject is NaN."""
        if self.pair_counts is None or self.units_members is None:
            raise ValueError("this membership result has no per-subject pair counts (a window-level fallback, or "
                             "computed by older code)")
        w_m = _unit_weights(units, counts, self.units_members, "the membership members")
        w_n = w_m if self.joint else _unit_weights(units, counts, self.units_nonmembers, "the membership non-members")
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.einsum("bh,hg,bg->b", w_m, self.pair_counts, w_n)
                    / ((w_m @ self.sizes_members) * (w_n @ self.sizes_nonmembers)))


def _pair_counts(pos: np.ndarray, neg: np.ndarray, ipos: np.ndarray, ineg: np.ndarray, n_upos: int,
                 n_uneg: int) -> np.ndarray:
    """(n_upos, n_uneg) sums over pairs of P(pos > neg) + 0.5 P(tie), per (positive cluster, negative cluster).

    A resample's AUC is then a bilinear form in the two clusters' multiplicities, so every resample costs one
    small matrix product instead of a rank computation over the windows.
    """
    onehot_neg = np.zeros((neg.size, n_uneg))
    onehot_neg[np.arange(neg.size), ineg] = 1.0
    out = np.zeros((n_upos, n_uneg))
    for start in range(0, pos.size, 2048):  # bounded memory for large window counts
        p = pos[start:start + 2048, None]
        wins = (p > neg[None, :]) + 0.5 * (p == neg[None, :])  # (chunk, n_neg)
        onehot_pos = np.zeros((p.shape[0], n_upos))
        onehot_pos[np.arange(p.shape[0]), ipos[start:start + 2048]] = 1.0
        out += onehot_pos.T @ (wins @ onehot_neg)
    return out


def membership_auc(losses_members, losses_nonmembers, n_bootstrap: int = 1000, confidence: float = 0.95,
                   random_state=0, *, groups_members=None, groups_nonmembers=None) -> MembershipResult:
    """AUC of the loss-threshold attack (lower loss => member), with a subject-cluster bootstrap interval.

    ``groups_members`` / ``groups_nonmembers`` name the subject of every loss. Subjects are the privacy unit,
    so they are what is resampled, with replacement (multinomial counts, as in :func:`attribute_leakage`):

    - the two sides share no subject (the head attack: members = the head's training subjects) -> members'
      subjects and non-members' subjects are resampled separately (stratified, so every resample keeps both
      classes);
    - a subject has windows on both sides (the encoder attack: member and non-member blocks of the same
      recordings) -> the union of subjects is resampled jointly, a subject carrying its member *and* its
      non-member windows into the resample.

    Without groups (both ``None``) every window is its own cluster and ``ci_over="windows"`` -- a fallback for
    callers that have no subject ids, not valid for subject-level claims. Giving one group array but not the
    other is an error. ``random_state`` (an int) fixes the resamples: two calls with the same groups and seed
    draw the same subject multiplicities, which :func:`membership_difference` relies on.
    """
    m = np.asarray(losses_members, float).ravel()
    nm = np.asarray(losses_nonmembers, float).ravel()
    if m.size == 0 or nm.size == 0:
        raise ValueError("need at least one member and one non-member loss")
    if (groups_members is None) != (groups_nonmembers is None):
        raise ValueError("give the subject of every member *and* every non-member loss (groups_members and "
                         "groups_nonmembers), or neither for a window-level bootstrap")
    ci_over = "windows" if groups_members is None else "subjects"
    gm = np.arange(m.size) if groups_members is None else np.asarray(groups_members)
    gn = np.arange(m.size, m.size + nm.size) if groups_nonmembers is None else np.asarray(groups_nonmembers)
    _codes(gm, m.size, "groups_members")
    _codes(gn, nm.size, "groups_nonmembers")
    y = np.r_[np.ones(m.size, int), np.zeros(nm.size, int)]
    auc = auroc(y, -np.r_[m, nm])
    rng = check_random_state(random_state)
    joint = bool(np.intersect1d(gm, gn).size)
    if joint:
        units, index = np.unique(np.r_[gm, gn], return_inverse=True)
        im, inn = index[: m.size], index[m.size:]
        w_m = w_n = subject_counts(units.size, n_bootstrap, rng).astype(float)
        n_um = n_un = units.size
        units_m = units_n = units
    else:
        (units_m, im), (units_n, inn) = np.unique(gm, return_inverse=True), np.unique(gn, return_inverse=True)
        n_um, n_un = units_m.size, units_n.size
        w_m = subject_counts(n_um, n_bootstrap, rng).astype(float)
        w_n = subject_counts(n_un, n_bootstrap, rng).astype(float)
        units = np.r_[units_m, units_n]
    C = _pair_counts(-m, -nm, im, inn, n_um, n_un)
    size_m = np.bincount(im, minlength=n_um).astype(float)
    size_n = np.bincount(inn, minlength=n_un).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.einsum("bh,hg,bg->b", w_m, C, w_n) / ((w_m @ size_m) * (w_n @ size_n))
    seed = random_state if isinstance(random_state, (int, np.integer)) else None
    # what rescores any subject resample (not kept for the window fallback: C would be windows x windows)
    per_subject = {} if ci_over == "windows" else {
        "pair_counts": C, "sizes_members": size_m, "sizes_nonmembers": size_n, "units_members": units_m,
        "units_nonmembers": units_n}
    return MembershipResult(auc=float(auc), ci=_percentile_ci(draws, confidence), n_members=int(m.size),
                            n_nonmembers=int(nm.size), draws=draws, ci_over=ci_over,
                            n_subjects=int(np.unique(units).size), joint=joint,
                            paired_with=(seed, int(n_bootstrap), gm.tobytes(), gn.tobytes()), **per_subject)


def membership_difference(attack: MembershipResult, control: MembershipResult,
                          confidence: float = 0.95) -> tuple[float, tuple[float, float], np.ndarray]:
    """AUC(attack) - AUC(control) with a paired subject-bootstrap interval: (value, ci, draws).

    Both results must come from the same windows' subjects and the same integer seed (e.g. the pretrained and
    the random-init encoder scored on the same member/non-member windows), so draw i of each resampled the same
    subjects; their difference is then the matched-null difference the conventions ask for.
    """
    if attack.paired_with[0] is None or attack.paired_with != control.paired_with:
        raise ValueError("the attack and its control must share the windows' subjects, n_bootstrap and an integer "
                         "random_state to be differenced draw by draw")
    draws = attack.draws - control.draws
    return float(attack.auc - control.auc), _percentile_ci(draws, confidence), draws


def membership_residual(auc):
    """R_M = max(0, 2 AUC - 1); an attack worse than chance is no residual. Elementwise on draws."""
    out = np.maximum(0.0, 2.0 * np.asarray(auc, float) - 1.0)
    return out if np.ndim(out) else float(out)


# ---------------------------------------------------------------------------------------------------------------
# reconstruction


@dataclass
class ReconstructionResult:
    """Held-out R^2 of ridge reconstruction of the downsampled waveform from embeddings."""

    r2: float
    per_fold_r2: np.ndarray
    alphas: np.ndarray


def reconstruction_r2(Z, X_down, groups, splitter, decoder=None, random_state=0) -> ReconstructionResult:
    """Ridge from embeddings to the flattened downsampled waveform; R^2 on held-out (test-fold) windows.

    **(ours)** R^2 = 1 - SSE / SST over all test windows and all waveform samples pooled, with SST around the
    *training* fold's mean waveform, so predicting the training mean scores 0 and anything worse is negative.
    Use a subject-disjoint splitter for the protocol's held-out-subject R^2. Negative or ~0 R^2 means
    reconstruction fails (the single-endpoint false pass the audit exposes).
    """
    Z = np.asarray(Z, float)
    Y = np.asarray(X_down, float).reshape(len(Z), -1)
    groups = np.asarray(groups)
    if decoder is None:
        decoder = AttributeDecoder(random_state=random_state)
    sse_all = sst_all = 0.0
    per_fold, alphas = [], []
    for train, test in splitter.split(Z, Y, groups):
        model = clone(decoder).fit(Z[train], Y[train], groups[train])
        pred = np.asarray(model.predict(Z[test]), float).reshape(len(test), -1)
        sse = float(((Y[test] - pred) ** 2).sum())
        sst = float(((Y[test] - Y[train].mean(axis=0)) ** 2).sum())
        per_fold.append(1.0 - sse / sst if sst > 0 else np.nan)
        alphas.append(getattr(model, "alpha_", np.nan))
        sse_all += sse
        sst_all += sst
    r2 = 1.0 - sse_all / sst_all if sst_all > 0 else float("nan")
    return ReconstructionResult(r2=float(r2), per_fold_r2=np.asarray(per_fold), alphas=np.asarray(alphas))


# ---------------------------------------------------------------------------------------------------------------
# AEDS


@dataclass
class AEDSResult:
    """AEDS = L_A - max(R_M, R_I) with its bootstrap interval and draws (``ci_over``: what the parts resampled).

    ``joint``: True when every draw resampled the subjects once and recomputed every part on that resample (NaN
    draws, where a resample left a part undefined, are kept in ``draws`` and dropped from ``ci``); False when the
    parts' own, separately drawn, bootstrap draws were combined as if independent.
    """

    value: float
    ci: tuple[float, float]
    draws: np.ndarray = field(repr=False)
    ci_over: str = "subjects"
    joint: bool = False


def _value_and_draws(part, name: str, residual: bool) -> tuple[float, np.ndarray | None, str | None]:
    """Point value, bootstrap draws and ``ci_over`` of one AEDS part (a float, a pair, or a result object)."""
    if isinstance(part, LeakageResult):
        return part.gain, part.draws, part.ci_over
    if isinstance(part, MembershipResult):
        return part.residual, membership_residual(part.draws), part.ci_over
    if isinstance(part, BPIDResult):
        if part.draws is None:
            raise ValueError("the BPID@1 result carries no subject-bootstrap draws")
        return part.residual, identity_residual(part.draws, part.n_candidates), part.ci_over
    if isinstance(part, tuple) and len(part) == 2:
        return float(part[0]), np.asarray(part[1], float), None
    value = float(part)
    if residual and value < 0:
        raise ValueError(f"{name} is a residual and cannot be negative, got {value}")
    return value, None, None


def _resampled_units(part) -> np.ndarray | None:
    """The subject ids whose multiplicities a result object's ``draws_for`` reads; None for a float or a
    ``(value, draws)`` pair, a window-level membership fallback, or a result without per-subject data."""
    if isinstance(part, LeakageResult):
        return None if part.moments is None else part.subjects
    if isinstance(part, MembershipResult):
        if part.ci_over != "subjects" or part.pair_counts is None or part.units_members is None:
            return None
        return part.units_members if part.joint else _union_units(part.units_members, part.units_nonmembers)
    if isinstance(part, BPIDResult):
        return part.query_units
    return None


def _joint_draws(part, value: float, units: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One AEDS part (L_A, R_M or R_I) recomputed on every subject resample ``counts`` over ``units``."""
    if isinstance(part, LeakageResult):
        return part.draws_for(units, counts)
    if isinstance(part, MembershipResult):
        return membership_residual(part.draws_for(units, counts))
    if isinstance(part, BPIDResult):
        return identity_residual(part.draws_for(units, counts), part.n_candidates)
    return np.full(counts.shape[0], value)  # a constant part


def aeds(leakage, membership=0.0, identity=0.0, n_bootstrap: int = 1000, confidence: float = 0.95,
         random_state=0) -> AEDSResult:
    """AEDS = L_A - max(R_M, R_I) with a subject-bootstrap CI: the subjects are resampled once per draw.

    Each part is a float, a ``(value, draws)`` pair, or the result object of its endpoint
    (``LeakageResult``, ``MembershipResult``, ``BPIDResult``). The point value is always the parts' point values
    combined.

    Joint resampling (``joint=True``): when every part with draws is a result object that can rescore a subject
    resample (``draws_for``), one multiplicity matrix (:func:`subject_counts`) is drawn over the union of the
    parts' subject ids -- L_A's test subjects, the membership attack's member and non-member subjects (for the
    encoder attack the pretraining subjects, which need not be audited ones; ids are matched as values, so
    ``0`` and ``"0"`` are different subjects) and BPID@1's query subjects -- and every part is recomputed on
    each resample and combined into that draw. The parts resample the same audited subjects, so their errors
    are correlated and only this keeps the correlation. A subject absent from a part does not move it; the head
    attack's members and non-members, stratified in :func:`membership_auc`, are resampled as part of the one
    draw, so a resample without a member or without a non-member subject (or without any test or query subject
    of another part) is NaN and dropped from the percentile interval. Float parts enter as constants.

    Otherwise (a ``(value, draws)`` pair, a window-level membership fallback, or results from older code)
    **(ours)** the parts' own bootstrap draws are combined as if independent: draw i of each part (finite draws,
    resampled to ``n_bootstrap`` where their number differs) into AEDS draw i; a part without draws is a
    constant. The result is ``ci_over="subjects"`` (``"windows"`` if any part fell back to a window bootstrap).
    Use ``identity=0`` where the split has no candidates (subject-disjoint), as the protocol says.
    """
    rng = check_random_state(random_state)
    given = ((leakage, "L_A", False), (membership, "R_M", True), (identity, "R_I", True))
    units = [_resampled_units(part) for part, _, _ in given]
    resampled = [isinstance(part, (LeakageResult, MembershipResult, BPIDResult)) or isinstance(part, tuple)
                 for part, _, _ in given]
    if any(resampled) and all(u is not None for u, r in zip(units, resampled) if r):
        values = [_value_and_draws(part, name, residual)[0] for part, name, residual in given]
        union = _union_units(*(u for u in units if u is not None))
        counts = subject_counts(union.size, n_bootstrap, rng)
        la_d, rm_d, ri_d = (_joint_draws(part, v, union, counts) for (part, _, _), v in zip(given, values))
        draws = la_d - np.maximum(rm_d, ri_d)
        return AEDSResult(value=float(values[0] - max(values[1], values[2])), ci=_percentile_ci(draws, confidence),
                          draws=draws, ci_over="subjects", joint=True)
    parts, over = [], set()
    for part, name, residual in given:
        value, draws, ci_over = _value_and_draws(part, name, residual)
        if ci_over is not None:
            over.add(ci_over)
        if draws is not None:
            draws = draws[np.isfinite(draws)]
            if draws.size != n_bootstrap:
                draws = draws[rng.randint(0, draws.size, int(n_bootstrap))] if draws.size else None
        parts.append((value, draws))
    (la, la_d), (rm, rm_d), (ri, ri_d) = parts
    value = la - max(rm, ri)

    def _d(v, d):
        return np.full(int(n_bootstrap), v) if d is None else d

    draws = _d(la, la_d) - np.maximum(_d(rm, rm_d), _d(ri, ri_d))
    return AEDSResult(value=float(value), ci=_percentile_ci(draws, confidence), draws=draws,
                      ci_over="windows" if "windows" in over else "subjects")
