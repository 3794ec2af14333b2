"""Label leakage from held-out subjects' embeddings: a label of the subject (a diagnosis,
:func:`subject_label_leakage`) and a label of a recording or cue (a task state, :func:`window_label_leakage`), each
against a permuted-label null that reruns the whole cross-fitted protocol, with the interval that inverts it
(:func:`permutation_shift_interval`).

One idea over about 700 lines: both endpoints are the same protocol -- a head cross-fitted over subject-disjoint
folds, a Gaussian-embedding control, and labels permuted among the units they belong to with every fit redone --
and the window-level one runs on the subject-level one's fold checks, label-free-splitter probe and batched exact
logistic solver. Split apart, one module would import the other's private machinery.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from eegprivacy.embeddings.endpoints.resampling import _codes, _percentile_ci
from eegprivacy.embeddings.heads import default_head, weighted_balanced_accuracy
from eegprivacy.evaluation.cluster_bootstrap import subject_counts

__all__ = ["SubjectLabelResult", "WindowLabelResult", "permutation_shift_interval", "subject_label_leakage",
           "window_label_leakage"]


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
