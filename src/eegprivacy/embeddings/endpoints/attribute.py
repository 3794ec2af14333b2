"""Attribute leakage L_A of an embedding with its two negative controls (i.i.d. Gaussian embeddings and a
split-local permutation), its subject-bootstrap interval and its permutation p-value (:func:`attribute_leakage`).

The score is the mean Pearson r over attribute dimensions of pooled, fold-centred out-of-fold predictions of the
ridge decoder (:class:`~eegprivacy.embeddings.endpoints.decoder.AttributeDecoder`); the package docstring says why
each choice is ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from eegprivacy.embeddings.endpoints.decoder import AttributeDecoder
from eegprivacy.embeddings.endpoints.resampling import _unit_weights
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = ["LeakageResult", "attribute_leakage"]


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
