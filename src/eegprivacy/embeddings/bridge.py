"""Study C cross-encoder bridge: does an attribute decoder trained on encoder s read encoder t's embeddings?

Protocol (shared/spec/study-c-protocol.md, "Cross-encoder bridge"): train the ridge attribute decoder D_s on
encoder s, fit a ridge map B from t's embeddings to s's on a bridge set of windows embedded by both, drawn from
subjects disjoint from the test subjects, and score D_s(B(z_t)) on t's held-out subjects against the matched
negative control. Next to the measured gain we report the summary's lower bound
sqrt(beta / (1 + tau_t^2)) - eps_br - rho0. Operational choices the protocol leaves open are marked **(ours)**.

Both encoders' embeddings of the same windows are passed as one matrix ``hstack([Z_t, Z_s])`` so the bridge is
an ordinary regressor and ``attribute_leakage`` supplies the splits, the bootstrap and the controls unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import subspace_angles
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state

from eegprivacy.embeddings.endpoints.attribute import LeakageResult, _fold_centred, attribute_leakage
from eegprivacy.embeddings.endpoints.decoder import AttributeDecoder

__all__ = ["BridgedDecoder", "BridgeResult", "bridge_transfer"]


class BridgedDecoder(RegressorMixin, BaseEstimator):
    """D_s(B(z_t)): the source decoder read through a ridge bridge from the target encoder.

    Fitted on ``Z = hstack([Z_t, Z_s])`` (the first ``n_target_features`` columns are encoder t, the rest
    encoder s, rows = the same windows): ``decoder_`` is an ``AttributeDecoder`` Z_s -> A and ``bridge_`` an
    ``AttributeDecoder`` used as multi-output ridge Z_t -> Z_s (inputs standardised, inner CV grouped by
    subject). ``predict`` reads only the t columns, so at test time nothing of encoder s is used.

    Why this gives the protocol's disjointness: bridge and decoder are fitted on the training rows of each
    fold, so the bridge subjects are that fold's training subjects and, under ``SubjectDisjointSplit``,
    disjoint from its test subjects.

    Why ``attribute_leakage(Z, A, groups, splitter, decoder=BridgedDecoder(...))`` gives the matched control:
    its Gaussian control replaces all of Z (both blocks) by noise of the same shape and runs this same pipeline;
    its permutation control indexes ``Z_fit[rng.permutation(train)]`` and ``Z[rng.permutation(test)]``, i.e.
    permutes *whole rows*, so B is still fitted on aligned (z_t, z_s) pairs of the same windows while their
    pairing with A is destroyed -- same pipeline, no attribute information.

    Bridge alpha **(ours)**: chosen by grouped inner CV on the *decoder's reading* of Z_s
    (``decoder_.predict(Z_s)``, n_attr outputs) rather than on all dim_s outputs; ``bridge_`` is then the full
    Z_t -> Z_s ridge at that alpha. Ridge is linear in its targets, so at a given alpha D_s(B(z_t)) is the same
    whichever of the two targets B is fitted to; choosing alpha on the read-out tunes B for what it is used for
    and makes the inner CV cost n_attr instead of dim_s outputs (dim_s is up to ~512).
    """

    def __init__(self, n_target_features: int, alphas=None, random_state=None):
        self.n_target_features = n_target_features
        self.alphas = alphas
        self.random_state = random_state

    def _split(self, Z) -> tuple[np.ndarray, np.ndarray]:
        Z = np.asarray(Z, float)
        k = int(self.n_target_features)
        if Z.ndim != 2 or not 0 < k < Z.shape[1]:
            raise ValueError(f"Z must be (n, dim_t + dim_s) with 0 < n_target_features={k} < {Z.shape[-1]} "
                             f"columns; got shape {Z.shape}")
        return Z[:, :k], Z[:, k:]

    def fit(self, Z, A, groups=None):
        Z_t, Z_s = self._split(Z)
        A = np.asarray(A, float)
        if A.shape[0] != Z.shape[0]:
            raise ValueError(f"A must have one row per row of Z: {A.shape[0]} vs {Z.shape[0]}")
        seeds = check_random_state(self.random_state).randint(2**31 - 1, size=2)
        self.decoder_ = AttributeDecoder(alphas=self.alphas, random_state=seeds[0]).fit(Z_s, A, groups)
        readout = AttributeDecoder(alphas=self.alphas, random_state=seeds[1]).fit(
            Z_t, self.decoder_.predict(Z_s), groups)
        self.bridge_ = AttributeDecoder(alphas=[readout.alpha_]).fit(Z_t, Z_s)
        self.alpha_ = self.decoder_.alpha_
        self.bridge_alpha_ = readout.alpha_
        self.n_features_in_ = Z.shape[1]
        return self

    def predict(self, Z):
        Z = np.asarray(Z, float)
        if Z.ndim != 2 or Z.shape[1] < int(self.n_target_features):
            raise ValueError(f"Z needs at least n_target_features={self.n_target_features} columns: {Z.shape}")
        return self.decoder_.predict(self.bridge_.predict(Z[:, : int(self.n_target_features)]))


@dataclass
class BridgeResult:
    """Bridged leakage of one ordered pair (source s, target t) with the summary's lower bound.

    ``leakage`` holds score, controls, gain L_A, its CI and p-value; ``bound`` = sqrt(beta / (1 + tau2))
    - bridge_error - rho0 is the transferred gain the summary's argument guarantees, reported next to it.
    """

    leakage: LeakageResult
    beta: float
    tau2: float
    bridge_error: float
    rho0: float
    bound: float
    n_target_features: int
    n_source_features: int

    @property
    def gain(self) -> float:
        return self.leakage.gain

    def as_dict(self) -> dict:
        lk = self.leakage
        return {"score": lk.score, "control_gaussian": lk.control_gaussian,
                "control_permuted": lk.control_permuted, "gain": lk.gain, "ci_low": lk.ci[0],
                "ci_high": lk.ci[1], "p_value": lk.p_value, "beta": self.beta, "tau2": self.tau2,
                "bridge_error": self.bridge_error, "rho0": self.rho0, "bound": self.bound}


class _Folds:
    """A splitter that replays materialised folds, so leakage and bound terms use literally the same folds."""

    def __init__(self, folds):
        self.folds = folds

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return len(self.folds)

    def split(self, X=None, y=None, groups=None):
        yield from self.folds


def _overlap(U: np.ndarray, V: np.ndarray) -> float:
    """Mean cos^2 of the principal angles between col(U) and col(V); 0 if either is (numerically) empty."""
    if np.linalg.norm(U) < 1e-12 or np.linalg.norm(V) < 1e-12:
        return 0.0
    return float(np.mean(np.cos(subspace_angles(U, V)) ** 2))


def _halves(train: np.ndarray, groups_train: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Training rows split into two subject-disjoint halves (seeded shuffle of subjects, dealt alternately)."""
    subjects = rng.permutation(np.unique(groups_train))
    if subjects.size < 2:
        raise ValueError("the cross-fitted beta needs at least two training subjects per fold")
    first = np.isin(groups_train, subjects[0::2])
    return train[first], train[~first]


def bridge_transfer(Z_source, Z_target, A, groups, splitter, *, n_bootstrap: int = 1000,
                    n_permutations: int = 20, random_state=0) -> BridgeResult:
    """Gain of D_s(B(z_t)) on t's held-out subjects vs the matched control, with beta, tau_t^2, eps_br, rho0.

    Rows of ``Z_source`` (s) and ``Z_target`` (t) are the same windows. The leakage is
    ``attribute_leakage(hstack([Z_t, Z_s]), A, groups, splitter, decoder=BridgedDecoder(...))``. The bound's
    terms are operational definitions **(ours)**, computed on the same folds (materialised once):

    - beta: per fold, D_s is fitted on the source train rows; the training subjects are split into two
      subject-disjoint halves, D_t is fitted on one and B (``BridgedDecoder``'s bridge) on the other
      (cross-fitting, so that shared noise cannot fake alignment); beta is the mean cos^2 of the principal
      angles between col(D_s.coef_) in s's standardised coordinates and the image under B of col(D_t.coef_),
      also in s's standardised coordinates; mean over folds.
    - tau2 (tau_t^2): t's noise-to-signal ratio, from D_t's pooled held-out predictions on t's test windows,
      fold-centred as in ``attribute_leakage``: var(truth - prediction) / var(prediction) per attribute
      dimension, averaged over dimensions (inf if the decoder predicts a constant).
    - bridge_error (eps_br): held-out relative error of B in s's standardised coordinates,
      sqrt(SSE / SST) pooled over folds, SST around the training mean (predicting that mean gives 1).
    - rho0: max(control_gaussian, control_permuted) of the leakage result.
    """
    Z_s = np.asarray(Z_source, float)
    Z_t = np.asarray(Z_target, float)
    A = np.asarray(A, float)
    A = A[:, None] if A.ndim == 1 else A
    groups = np.asarray(groups)
    if Z_s.ndim != 2 or Z_t.ndim != 2:
        raise ValueError(f"Z_source and Z_target must be 2-D: {Z_s.shape}, {Z_t.shape}")
    if not (Z_s.shape[0] == Z_t.shape[0] == A.shape[0] == groups.shape[0]):
        raise ValueError(f"row counts differ: Z_source {Z_s.shape[0]}, Z_target {Z_t.shape[0]}, "
                         f"A {A.shape[0]}, groups {groups.shape[0]} (rows must be the same windows)")
    rng = check_random_state(random_state)
    seed = int(rng.randint(2**31 - 1))
    d_t = Z_t.shape[1]
    Z = np.hstack([Z_t, Z_s])
    folds = list(splitter.split(Z, A, groups))
    leakage = attribute_leakage(Z, A, groups, _Folds(folds),
                                decoder=BridgedDecoder(d_t, random_state=seed),
                                n_bootstrap=n_bootstrap, n_permutations=n_permutations, random_state=random_state)

    betas, preds_t, truths, sse, sst = [], [], [], 0.0, 0.0
    for train, test in folds:
        g = groups[train]
        bd = BridgedDecoder(d_t, random_state=seed).fit(Z[train], A[train], g)
        D_s, B = bd.decoder_, bd.bridge_
        D_t = AttributeDecoder(random_state=seed).fit(Z_t[train], A[train], g)
        # beta is cross-fitted (ours): B and D_t fitted on the same rows share their noise, and the shrunk
        # coefficients then compose to ~ Z_s^T (X X^T) A ~ Z_s^T A, i.e. even a pure-noise t would "map onto"
        # s's decoding subspace. Fitting D_t on one half of the training subjects and B on the other removes it.
        h1, h2 = _halves(train, g, rng)
        B_h = BridgedDecoder(d_t, random_state=seed).fit(Z[h2], A[h2], groups[h2]).bridge_
        D_th = AttributeDecoder(random_state=seed).fit(Z_t[h1], A[h1], groups[h1])
        # A coefficient column w of D_th is a direction in standardised t coordinates (D_th's mean_/scale_);
        # in B_h's standardised input coordinates it is w * D_th.scale_ / B_h.scale_. B_h maps that direction
        # to the raw-s displacement (...) @ B_h.coef_ (the intercept cancels for directions); dividing by
        # D_s.scale_ expresses it in s's standardised coordinates, where D_s.coef_ lives.
        # (B_h.coef_ is (dim_t, dim_s), D_th.coef_ (dim_t, n_attr).)
        w = D_th.coef_ * (D_th.scale_ / B_h.scale_)[:, None]
        image = (B_h.coef_.T @ w) / D_s.scale_[:, None]
        betas.append(_overlap(D_s.coef_, image))
        preds_t.append(D_t.predict(Z_t[test]).reshape(len(test), -1))
        truths.append(A[test])
        resid = (Z_s[test] - B.predict(Z_t[test])) / D_s.scale_
        sse += float((resid ** 2).sum())
        sst += float((((Z_s[test] - D_s.mean_) / D_s.scale_) ** 2).sum())

    pred, true = _fold_centred(np.concatenate(preds_t), np.concatenate(truths), [len(te) for _, te in folds])
    var_p = pred.var(axis=0)
    var_r = (true - pred).var(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau2 = float(np.mean(np.where(var_p > 1e-12, var_r / var_p, np.inf)))
    beta = float(np.mean(betas))
    bridge_error = float(np.sqrt(sse / sst)) if sst > 0 else float("nan")
    rho0 = float(max(leakage.control_gaussian, leakage.control_permuted))
    bound = float(np.sqrt(beta / (1.0 + tau2)) - bridge_error - rho0)
    return BridgeResult(leakage=leakage, beta=beta, tau2=tau2, bridge_error=bridge_error, rho0=rho0,
                        bound=bound, n_target_features=int(d_t), n_source_features=int(Z_s.shape[1]))
