"""Empirical DP audit: a statistically valid lower bound on a mechanism's ε from its own noise draws.

An (ε, δ)-DP mechanism M limits every test between neighbouring inputs x, x': FNR + e^ε·FPR ≥ 1 − δ and
FPR + e^ε·FNR ≥ 1 − δ. Run M many times on each side of one neighbour pair, count a threshold test's errors,
replace FPR and FNR by Clopper–Pearson upper bounds, and any ε that the inequalities then exclude is excluded
with the stated confidence (the auditing recipe of Jagielski et al. 2020 and Nasr et al. 2021). The bound can
only refute a claim, never prove one: it is ≤ the true ε (with that confidence), and with N evaluation trials
per side it cannot exceed about ln(N / ln(2/α)) however leaky the mechanism is (:func:`max_certifiable_epsilon`).

The mechanism's input is one clipped patient row (‖x‖2 ≤ C) in d dimensions; the table's other rows get
independent noise, so auditing one row is auditing the table release. The neighbour pair is the worst case for
the *noise* the mechanism draws, whatever norm its calibration assumed:

- Gaussian noise: the privacy loss depends only on ‖x − x'‖2, so any antipodal pair of the C-ball is worst;
  we use x = C·e1, x' = −C·e1 (distance 2C = Δ2).
- Laplace noise: the privacy loss is bounded by ‖x − x'‖1 / b and, for many coordinates, grows with it; the
  pair on the L2 ball that maximises the L1 distance is the diagonal x = (C/√d)·1, x' = −x (distance
  2·√d·C = Δ1). This is where ``laplace_implemented`` (b = 2C/ε, an L2 sensitivity) breaks its claim.

Each output is scored by the log-likelihood-ratio statistic of the known noise (Neyman–Pearson: the most
powerful test), the threshold is chosen on a selection share of the trials and the bound is computed on the
others, so choosing the threshold does not spend the confidence. The audit tests the noise calibration, not the
floating-point sampler: the statistic is computed so that rounding in the last bits cannot decide it (the
low-bit attack of Mironov 2012 on textbook floating-point Laplace is a separate, real issue).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.stats import beta

__all__ = [
    "clopper_pearson",
    "epsilon_lower_bound",
    "max_certifiable_epsilon",
    "neighbour_pair",
    "noise_family",
    "MechanismAudit",
]

NOISE_FAMILIES = ("gaussian", "laplace")
PAIRS = ("worst_case", "axis", "diagonal")


def _check_confidence(confidence: float) -> float:
    confidence = float(confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return confidence


def _check_counts(k, n) -> None:
    if np.any(np.asarray(n) < 1) or np.any(np.asarray(k) < 0) or np.any(np.asarray(k) > np.asarray(n)):
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")


def _upper(k, n, level: float) -> np.ndarray:
    """One-sided exact (Clopper–Pearson) upper bound at ``level`` on a binomial rate; 1 when k = n."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    full = k >= n
    # beta.ppf needs b > 0; the k = n case is filled with 1 below
    return np.where(full, 1.0, beta.ppf(level, k + 1.0, np.where(full, 1.0, n - k)))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial interval (equal tails); each end alone is a one-sided bound at 1 − α/2."""
    confidence = _check_confidence(confidence)
    _check_counts(k, n)
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2.0, k, n - k + 1))
    high = float(_upper(k, n, 1.0 - alpha / 2.0))
    return low, high


def _epsilon_bounds(false_positives, n_negatives, false_negatives, n_positives, delta: float,
                    confidence: float) -> np.ndarray:
    """Vectorised :func:`epsilon_lower_bound` (arrays of counts, one bound each)."""
    # Bonferroni over the two rates: each upper bound holds with 1 − α/2, both at once with at least 1 − α,
    # whatever the dependence between them.
    level = 1.0 - (1.0 - confidence) / 2.0
    fpr_hi = _upper(false_positives, n_negatives, level)
    fnr_hi = _upper(false_negatives, n_positives, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log(np.clip(1.0 - delta - fnr_hi, 0.0, None)) - np.log(fpr_hi)
        two = np.log(np.clip(1.0 - delta - fpr_hi, 0.0, None)) - np.log(fnr_hi)
    return np.maximum(np.nan_to_num(np.maximum(one, two), nan=0.0, neginf=0.0), 0.0)


def epsilon_lower_bound(false_positives: int, n_negatives: int, false_negatives: int, n_positives: int,
                        delta: float = 0.0, confidence: float = 0.95) -> float:
    """ε that a threshold test's error counts certify with ``confidence``, clamped at 0.

    FPR⁺, FNR⁺ are one-sided Clopper–Pearson upper bounds at 1 − α/2 each (Bonferroni: both hold together
    with ≥ 1 − α); then ε ≥ max(log((1 − δ − FNR⁺)/FPR⁺), log((1 − δ − FPR⁺)/FNR⁺)). Negatives are outputs
    on x' (the test should say "x'"), positives outputs on x.
    """
    confidence = _check_confidence(confidence)
    if not 0.0 <= float(delta) < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta}")
    _check_counts(false_positives, n_negatives)
    _check_counts(false_negatives, n_positives)
    return float(_epsilon_bounds(false_positives, n_negatives, false_negatives, n_positives, float(delta),
                                 confidence))


def max_certifiable_epsilon(n_negatives: int, n_positives: int | None = None, delta: float = 0.0,
                            confidence: float = 0.95) -> float:
    """The audit's ceiling: the bound for a test with no errors at all (≈ ln(n / ln(2/α)))."""
    n_positives = n_negatives if n_positives is None else n_positives
    return epsilon_lower_bound(0, n_negatives, 0, n_positives, delta, confidence)


def noise_family(mechanism) -> str:
    """``gaussian`` or ``laplace``, from the registry name (``gaussian_*`` / ``laplace_*``)."""
    family = str(getattr(mechanism, "name", "")).split("_")[0]
    if family not in NOISE_FAMILIES:
        raise ValueError(f"cannot audit mechanism {getattr(mechanism, 'name', mechanism)!r}: "
                         f"its name must start with one of {NOISE_FAMILIES}")
    return family


def neighbour_pair(family: str, clip_norm: float, dim: int, pair: str = "worst_case") -> tuple[np.ndarray, np.ndarray]:
    """(x, x') on the C-ball of R^d: antipodal, along e1 (``axis``) or the diagonal (``diagonal``).

    ``worst_case`` picks the pair that maximises the distance the noise's privacy loss depends on: L2 for
    Gaussian (every antipodal pair is equivalent, e1 is cheapest), L1 for Laplace (the diagonal, ‖x − x'‖1 =
    2·√d·C, the Cauchy–Schwarz maximum).
    """
    if family not in NOISE_FAMILIES:
        raise ValueError(f"unknown noise family {family!r}; known: {NOISE_FAMILIES}")
    if pair not in PAIRS:
        raise ValueError(f"unknown pair {pair!r}; known: {PAIRS}")
    clip_norm = float(clip_norm)
    if not (math.isfinite(clip_norm) and clip_norm > 0) or int(dim) != dim or dim < 1:
        raise ValueError(f"need clip_norm > 0 and an integer dim >= 1, got {clip_norm}, {dim}")
    if pair == "worst_case":
        pair = "axis" if family == "gaussian" else "diagonal"
    x = np.zeros(int(dim))
    if pair == "axis":
        x[0] = clip_norm
    else:
        x[:] = clip_norm / math.sqrt(dim)
    return x, -x


def _statistic(outputs: np.ndarray, x: np.ndarray, x_neighbour: np.ndarray, family: str) -> np.ndarray:
    """Log-likelihood ratio log p(r | x) / p(r | x'), up to a positive factor and (Gaussian) an offset.

    Overwrites ``outputs``.
    """
    if family == "gaussian":
        return outputs @ (x - x_neighbour)
    # Σ |r − x'| − |r − x| per coordinate is sign(x − x')·clip(2r − x − x', −|x − x'|, |x − x'|). Written as a
    # clip, every saturated coordinate maps to exactly ±|x − x'| on both sides; written as a difference of
    # absolute values, its last bits would differ between the sides and let the threshold read floating-point
    # rounding (Mironov 2012) instead of the noise calibration this audit is about. In place: the hot loop.
    diff = x - x_neighbour
    outputs *= 2.0
    outputs -= x + x_neighbour
    np.clip(outputs, -np.abs(diff), np.abs(diff), out=outputs)
    outputs *= np.sign(diff)
    return outputs.sum(axis=1)


class MechanismAudit:
    """Empirical ε lower bound for one mechanism at (C, d), scikit-learn style: params in ``__init__``,
    ``run(mechanism, clip_norm, dim)`` returns self with results in attributes ending in ``_``.

    Parameters
    ----------
    n_trials: outputs drawn per side (x and x'); a ``selection_fraction`` of them choose the threshold, the
        rest give the bound (more evaluation trials tighten it; 0.3 beat 0.5 in our runs).
    confidence: joint confidence of the bound (Bonferroni-split over FPR and FNR).
    selection_confidence: the threshold maximises the bound on the selection trials at this (stricter)
        confidence; at 0.95 the maximum over hundreds of thresholds favours far-tail thresholds with a handful of
        lucky errors that do not repeat on the evaluation trials. It only steers the choice, never the validity.
    pair: ``worst_case`` (by noise family, see :func:`neighbour_pair`), ``axis`` or ``diagonal``.
    n_thresholds: candidate thresholds tried on the selection trials (log-spaced quantiles of both tails, where
        the large ratios live).
    chunk_elements: noise values drawn at once (memory bound, ~8 bytes each); results do not depend on it.
    n_jobs: 2 draws the x and x' sides on two threads (numpy releases the GIL while sampling); results do
        not depend on it.
    random_state: seed or Generator; x and x' draw from two independent child streams.
    """

    def __init__(self, n_trials: int = 100_000, confidence: float = 0.95, selection_fraction: float = 0.3,
                 pair: str = "worst_case", n_thresholds: int = 400, selection_confidence: float = 0.999,
                 chunk_elements: int = 2 ** 18, n_jobs: int = 1, random_state=None):
        self.n_trials = n_trials
        self.confidence = confidence
        self.selection_fraction = selection_fraction
        self.pair = pair
        self.n_thresholds = n_thresholds
        self.selection_confidence = selection_confidence
        self.chunk_elements = chunk_elements
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _validate(self) -> tuple[int, int]:
        n = int(self.n_trials)
        n_select = int(round(float(self.selection_fraction) * n))
        if not 1 <= n_select < n:
            raise ValueError(f"n_trials={self.n_trials} with selection_fraction={self.selection_fraction} leaves "
                             "no selection or no evaluation trials")
        _check_confidence(self.confidence)
        _check_confidence(self.selection_confidence)
        if int(self.n_thresholds) < 2 or int(self.chunk_elements) < 1:
            raise ValueError("n_thresholds must be >= 2 and chunk_elements >= 1")
        return n, n_select

    def _scores(self, centre: np.ndarray, support: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """LLR scores of ``n`` mechanism outputs on input ``centre``, drawn in memory-bounded chunks.

        Only the coordinates where x and x' differ are drawn: elsewhere the noise is independent of them and
        identically distributed under both inputs, so it cannot change any test (and costs d/k times more).
        """
        x, x_neighbour = self.x_[support], self.x_neighbour_[support]
        k = int(support.sum())
        rows = max(1, int(self.chunk_elements) // k)
        out = np.empty(n)
        for start in range(0, n, rows):
            m = min(rows, n - start)
            outputs = self.mechanism_.sample((m, k), self.calibration_, rng)
            outputs += centre[support]
            out[start:start + m] = _statistic(outputs, x, x_neighbour, self.noise_)
        return out

    def _candidates(self, negatives: np.ndarray, positives: np.ndarray) -> np.ndarray:
        pooled = np.sort(np.concatenate([negatives, positives]))
        tail = np.geomspace(1.0 / pooled.size, 0.5, max(2, int(self.n_thresholds) // 2))
        index = np.round(np.concatenate([tail, 1.0 - tail]) * (pooled.size - 1)).astype(int)
        return np.unique(pooled[np.clip(index, 0, pooled.size - 1)])

    @staticmethod
    def _errors(negatives_sorted: np.ndarray, positives_sorted: np.ndarray,
                thresholds) -> tuple[np.ndarray, np.ndarray]:
        """Test "say x when score ≥ t": false positives among x' outputs, false negatives among x outputs."""
        fp = negatives_sorted.size - np.searchsorted(negatives_sorted, thresholds, side="left")
        fn = np.searchsorted(positives_sorted, thresholds, side="left")
        return fp, fn

    def run(self, mechanism, clip_norm: float, dim: int) -> MechanismAudit:
        """Audit ``mechanism`` (a ``privacy.mechanisms.Mechanism``) on the worst-case pair at (C, d)."""
        n, n_select = self._validate()
        self.mechanism_ = mechanism
        self.calibration_ = mechanism.calibrate(clip_norm, dim)
        self.noise_ = noise_family(mechanism)
        self.x_, self.x_neighbour_ = neighbour_pair(self.noise_, clip_norm, dim, self.pair)
        self.pair_ = ("axis" if self.noise_ == "gaussian" else "diagonal") if self.pair == "worst_case" else self.pair
        support = self.x_ != self.x_neighbour_

        rng = self.random_state if isinstance(self.random_state, np.random.Generator) else \
            np.random.default_rng(self.random_state)
        rng_positive, rng_negative = rng.spawn(2)
        sides = [(self.x_, support, n, rng_positive), (self.x_neighbour_, support, n, rng_negative)]
        if int(self.n_jobs) > 1:
            with ThreadPoolExecutor(2) as pool:
                positives, negatives = pool.map(lambda side: self._scores(*side), sides)
        else:
            positives, negatives = (self._scores(*side) for side in sides)

        delta = float(mechanism.delta)
        confidence = float(self.confidence)
        sel_neg, sel_pos = np.sort(negatives[:n_select]), np.sort(positives[:n_select])
        thresholds = self._candidates(sel_neg, sel_pos)
        fp, fn = self._errors(sel_neg, sel_pos, thresholds)
        selection = _epsilon_bounds(fp, n_select, fn, n_select, delta, float(self.selection_confidence))
        best = int(np.argmax(selection))
        self.threshold_ = float(thresholds[best])
        self.selection_epsilon_lower_bound_ = float(selection[best])

        eval_neg, eval_pos = np.sort(negatives[n_select:]), np.sort(positives[n_select:])
        fp, fn = self._errors(eval_neg, eval_pos, [self.threshold_])
        self.n_negatives_ = self.n_positives_ = n - n_select
        self.false_positives_, self.false_negatives_ = int(fp[0]), int(fn[0])
        self.fpr_ = self.false_positives_ / self.n_negatives_
        self.fnr_ = self.false_negatives_ / self.n_positives_
        level = 1.0 - (1.0 - confidence) / 2.0
        self.fpr_upper_ = float(_upper(self.false_positives_, self.n_negatives_, level))
        self.fnr_upper_ = float(_upper(self.false_negatives_, self.n_positives_, level))
        self.epsilon_lower_bound_ = epsilon_lower_bound(self.false_positives_, self.n_negatives_,
                                                        self.false_negatives_, self.n_positives_, delta, confidence)
        self.max_certifiable_epsilon_ = max_certifiable_epsilon(self.n_negatives_, self.n_positives_, delta,
                                                                confidence)
        self.claimed_epsilon_, self.claimed_delta_ = float(mechanism.epsilon), delta
        self.formal_guarantee_ = bool(self.calibration_.formal_guarantee)
        self.noise_scale_ = float(self.calibration_.noise_scale)
        self.exceeds_claim_ = self.epsilon_lower_bound_ > self.claimed_epsilon_
        return self

    def summary(self) -> dict[str, float]:
        """The scalar results, as numbers (booleans as 0/1), for tidy rows and MLflow metrics."""
        keys = ("epsilon_lower_bound", "claimed_epsilon", "claimed_delta", "fpr", "fnr", "fpr_upper", "fnr_upper",
                "false_positives", "false_negatives", "n_negatives", "n_positives", "threshold",
                "selection_epsilon_lower_bound", "max_certifiable_epsilon", "noise_scale", "formal_guarantee",
                "exceeds_claim")
        return {k: float(getattr(self, f"{k}_")) for k in keys}
