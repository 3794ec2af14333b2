"""Reference-set identity: BPID@1, the top-1 assignment of each query to the candidate subject with the closest
reference centroid, with a query-subject bootstrap interval (:func:`bpid_at_1`), and its residual R_I
(:func:`identity_residual`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from eegprivacy.embeddings.endpoints.resampling import _codes, _percentile_ci, _unit_weights
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = ["BPIDResult", "bpid_at_1", "identity_residual"]


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
