"""Calibration cases of study C's claim tests and intervals (``reports/study-c.md``, ``reports/embedding_audit_*.md``).

Each case makes embeddings shaped like the audited cohort (its subjects, windows per subject and, for the
diagnosis, class balance, read from the embedding audit's committed metadata and the dataset's own labels) and runs
the function the ``embedding_audit`` stage runs on them. The null model is Gaussian: a window's embedding is its
subject's random effect plus window noise (``icc``, the share of variance between subjects, and ``dim`` are the
null model's parameters, given in ``params/calibration.yaml``), so windows of one subject are correlated as real
windows are, and nothing in the embedding depends on what the test asks about. A planted effect adds exactly that
(a label shift, a shared identity, a member-loss shift).

Not covered here (entries of :mod:`.not_measured`, listed with their mark): AEDS's interval (no claim is decided by
it; it combines three parts whose joint truth on a null is not 0), the attribute claim's interval
(``study_c.attribute`` measures its test's size only: on embeddings that carry nothing, L_A's truth lies below 0 by
an amount that depends on the decoder, so no coverage can be scored), the deployment and defense rows' intervals
(utility beside a defense, no claim), and the per-cohort reports' subject bootstrap of the task (printed as
``balanced_accuracy_subject_bootstrap`` for comparison, not as the claim's).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from eegprivacy.evaluation.calibration import CalibrationCase, Trial, register
from eegprivacy.studies.calibration.config import NullModel

#: The null model's parameters (:class:`~eegprivacy.studies.calibration.config.NullModel`; the stage sets them
#: from ``params/calibration.yaml`` with :func:`configure`).
NULL_MODEL = dict(NullModel().to_dict())
#: The tiny data sets of the seconds-long version in ``tests/``: a few subjects, a small embedding and 79
#: permutations (the fewest whose two-sided p can fall below 0.05: 2/80).
TINY = {"subjects": 12, "windows": 6, "positives": 6, "queries": 3, "dim": 8, "permutations": 79}
METRICS = Path("metrics")
COHORTS = ("eegmat", "msu_schizophrenia", "eegmmidb")


def _used_in(claim: str, cohorts: tuple[str, ...] = COHORTS) -> tuple[str, ...]:
    """Every report that prints ``claim``'s rows: the study report, the cross-cohort one and each cohort's."""
    return tuple(f"{r}: {claim}" for r in ("reports/study-c.md", "reports/embedding_audit_cohorts.md",
                                           *(f"reports/embedding_audit_{c}.md" for c in cohorts)))


def configure(**null_model) -> None:
    """Set the null model's parameters (unknown keys are an error)."""
    unknown = set(null_model) - set(NULL_MODEL)
    if unknown:
        raise ValueError(f"unknown null-model parameter(s) {sorted(unknown)}; known: {sorted(NULL_MODEL)}")
    NULL_MODEL.update(null_model)
    cohort_shape.cache_clear()


@functools.lru_cache(maxsize=None)
def cohort_shape(cohort: str) -> dict:
    """Subjects, windows per subject and identity queries per subject of the audited ``cohort``, from the
    embedding audit's committed metadata (``metrics/embedding_audit_<cohort>.json`` and ``.csv``); the
    subject-level label's positives from the dataset's own labels, scaled to the audited subjects."""
    meta_path = METRICS / f"embedding_audit_{cohort}.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} is missing: the calibration reads the audited cohort's shape from "
                                "the embedding_audit stage's outputs (dvc repro embedding_audit)")
    meta = json.loads(meta_path.read_text())["meta"]
    subjects, windows = int(meta["n_audit_subjects"]), int(meta["n_audit_windows"])
    import pandas as pd

    tidy = pd.read_csv(METRICS / f"embedding_audit_{cohort}.csv")
    ident = tidy[(tidy["unit"] == "identity") & (tidy["metric"] == "bpid_at_1")]
    k = int(round(1.0 / float(ident["chance"].iloc[0])))
    queries = max(1, int(round(float(ident["n"].iloc[0]) / k)))
    shape = {"subjects": subjects, "windows": max(2, windows // subjects), "candidates": k, "queries": queries}
    if cohort == "msu_schizophrenia":
        from eegprivacy.data import get_dataset

        labels = [int(r.meta["label"]) for r in get_dataset(cohort).recordings()]
        shape["positives"] = int(round(subjects * float(np.mean(labels))))
    return shape


def _shape(size: str, cohort: str) -> dict:
    """The data sets' shape and null-model parameters at ``size``."""
    if size == "tiny":
        return {**NULL_MODEL, **TINY, "candidates": TINY["subjects"]}
    if size != "cohort":
        raise ValueError(f"size must be 'cohort' or 'tiny', got {size!r}")
    return {**NULL_MODEL, **cohort_shape(cohort)}


def _embeddings(rng, n_subjects: int, windows: int, dim: int, icc: float):
    """(n_subjects·windows, dim) embeddings: subject effect (variance ``icc``) + window noise (``1 − icc``)."""
    groups = np.repeat(np.arange(n_subjects), windows)
    u = rng.standard_normal((n_subjects, dim)) * math.sqrt(icc)
    return u[groups] + rng.standard_normal((groups.size, dim)) * math.sqrt(1.0 - icc), groups, u


def _random_state(seed: int) -> int:
    """The ``random_state`` a data set's function gets from its seed."""
    return int(seed) % 2**31


def _permutations(s: dict) -> int:
    """Permutations of the tests that permute without refitting: ten times the null model's count, plus 9 (the
    count stays one whose (P + 1)·0.05 is whole)."""
    return s["permutations"] * 10 + 9


def _trial(test, interval, null_truth: float, effect: float, estimate: float) -> Trial:
    """A two-sided ``test``'s p and ``interval`` as a :class:`Trial`: its truth ``null_truth`` under the null,
    unknown (nan) with a planted ``effect``."""
    return Trial(p_value=test.p_value_two_sided, low=interval[0], high=interval[1],
                 truth=null_truth if not effect else math.nan, estimate=estimate)


def _paired_trial(paired_test, *data, s: dict, seed: int, effect: float) -> Trial:
    """``paired_test`` (a difference of two arms, sign flips per subject) on ``data`` with the null model's
    permutations and bootstrap, as a :class:`Trial` of the difference (truth 0 under the null)."""
    t = paired_test(*data, n_permutations=_permutations(s), n_bootstrap=s["bootstrap"],
                    random_state=_random_state(seed))
    return _trial(t, t.difference_ci, 0.0, effect, t.statistic)


def _case(name: str, simulate, effect: float, claim: str | None = None, cohorts: tuple[str, ...] = COHORTS,
          cohort: str = "msu_schizophrenia", **fields) -> CalibrationCase:
    """Register ``study_c.<name>``: ``simulate`` on ``cohort``'s shape with one planted ``effect``, used in every
    report of ``claim`` (default: the ``<name> claim``) on ``cohorts`` (:func:`_used_in`); ``fields``: the rest of
    the :class:`CalibrationCase`."""
    return register(CalibrationCase(name=f"study_c.{name}", cohort=cohort,
                                    used_in=_used_in(claim or f"{name} claim", cohorts), simulate=simulate,
                                    effects=(effect,), **fields))


# -- diagnosis: a subject-level label of held-out subjects ------------------------------------------------------


def _diagnosis(seed: int, effect: float, size: str) -> Trial:
    """MSU-shaped embeddings, labels independent of them (``effect`` = 0) or shifting one direction of the subject
    effect by ``effect`` standard deviations; ``subject_label_leakage`` with the stage's splitter."""
    from eegprivacy.embeddings.endpoints.labels import subject_label_leakage
    from eegprivacy.embeddings.splits import SubjectDisjointSplit

    s = _shape(size, "msu_schizophrenia")
    rng = np.random.default_rng(seed)
    Z, groups, _ = _embeddings(rng, s["subjects"], s["windows"], s["dim"], s["icc"])
    label = np.zeros(s["subjects"], int)
    label[rng.permutation(s["subjects"])[: s["positives"]]] = 1
    Z[:, 0] += effect * label[groups]
    folds = min(5, s["subjects"] // 2)
    r = subject_label_leakage(Z, label[groups], groups, SubjectDisjointSplit(folds, random_state=_random_state(seed)),
                              n_bootstrap=s["bootstrap"], n_permutations=s["permutations"],
                              random_state=_random_state(seed))
    return _trial(r, r.shift_ci, 0.5, effect, r.balanced_accuracy)


_case("diagnosis", _diagnosis, 0.6, "task claim (the diagnosis)", ("msu_schizophrenia",),
      test="subject_label_leakage: held-out subjects' label (balanced accuracy) against its permuted-label null, "
           "two-sided; interval: the test inverted under a shift (shift_ci, the claim's interval)",
      null_model="MSU-shaped Gaussian embeddings (audited subjects × windows, class balance of the cohort), "
                 "subject effect + window noise, labels independent of the embeddings",
      effect_unit="label shift of one embedding dimension (SD)", n_null=400, n_power=100,
      why_fewer="each data set refits the head for every permutation in 5 folds (~1 s at 99 permutations on one "
                "core); 400 data sets resolve a size of 0.08 from 0.05")


# -- identity: BPID@1 against chance, and pretrained minus random init ------------------------------------------


def _identity_data(rng, s: dict, effect: float):
    """Reference and query windows of K subjects; their subject effects are independent (null) or share
    ``effect`` of the reference effect (planted identity)."""
    dim, icc = s["dim"], s["icc"]
    k, q = s["candidates"], s["queries"]
    Zr, gr, u = _embeddings(rng, k, q, dim, icc)
    Zq, gq, _ = _embeddings(rng, k, q, dim, icc)
    Zq = Zq + effect * u[gq]
    return Zr, gr, Zq, gq


def _identity(seed: int, effect: float, size: str) -> Trial:
    from eegprivacy.embeddings.endpoints.identity import bpid_at_1
    from eegprivacy.evaluation.permutation import identity_permutation_test

    s = _shape(size, "msu_schizophrenia")
    rng = np.random.default_rng(seed)
    Zr, gr, Zq, gq = _identity_data(rng, s, effect)
    b = bpid_at_1(Zr, gr, Zq, gq, n_bootstrap=s["bootstrap"], random_state=_random_state(seed))
    t = identity_permutation_test(b.guess, b.query_subjects, b.candidates, n_permutations=_permutations(s),
                                  random_state=_random_state(seed))
    return _trial(t, b.ci, b.chance, effect, b.accuracy)


_case("identity", _identity, 0.2,
      test="bpid_at_1 + identity_permutation_test: reference labels permuted between subjects, two-sided p (as the "
           "claim prints it); interval: query-subject bootstrap of BPID@1",
      null_model="MSU-shaped reference and query windows whose subject effects are independent (nothing links a "
                 "query to its subject's reference set); BPID@1's truth is 1/K",
      effect_unit="share of the reference subject effect in the queries")


def _pretraining_adds_identity(seed: int, effect: float, size: str) -> Trial:
    """Two encoders embed the same subjects; the second (random init) exactly like the first under the null, the
    first's queries sharing ``effect`` more of the reference effect when planted."""
    from eegprivacy.embeddings.endpoints.identity import bpid_at_1
    from eegprivacy.evaluation.permutation import paired_identity_test

    s = _shape(size, "msu_schizophrenia")
    rng = np.random.default_rng(seed)
    base = 0.3  # both encoders identify above chance, as the real ones do; only the difference is tested
    a = bpid_at_1(*_identity_data(rng, s, base + effect), n_bootstrap=s["bootstrap"])
    b = bpid_at_1(*_identity_data(rng, s, base), n_bootstrap=s["bootstrap"])
    return _paired_trial(paired_identity_test, a.correct, b.correct, a.query_subjects, s=s, seed=seed, effect=effect)


_case("pretraining_adds_identity", _pretraining_adds_identity, 0.2,
      test="paired_identity_test: BPID@1 difference, sign flips per query subject (two-sided from its null); "
           "interval: paired query-subject bootstrap",
      null_model="two encoders drawn from the same identity model on MSU-shaped subjects (exchangeable per "
                 "subject); the difference's truth is 0",
      effect_unit="extra share of the reference effect")


# -- membership: the downstream head and the encoder ------------------------------------------------------------


def _losses(rng, n_subjects: int, windows: int, shift: np.ndarray, icc: float):
    """Per-window losses with a subject effect (log-normal, as cross-entropy losses are skewed)."""
    groups = np.repeat(np.arange(n_subjects), windows)
    z = rng.standard_normal(n_subjects)[groups] * math.sqrt(icc) + rng.standard_normal(groups.size) * math.sqrt(
        1 - icc)
    return np.exp(z - shift[groups]), groups


def _head_membership(seed: int, effect: float, size: str) -> Trial:
    """Half the subjects are members; members' losses are lowered by ``effect`` (log scale) when planted."""
    from eegprivacy.embeddings.endpoints.membership import membership_auc
    from eegprivacy.evaluation.permutation import membership_permutation_test

    s = _shape(size, "msu_schizophrenia")
    rng = np.random.default_rng(seed)
    n = s["subjects"]
    member = np.zeros(n, bool)
    member[rng.permutation(n)[: n // 2]] = True
    loss, groups = _losses(rng, n, s["windows"], effect * member, s["icc"])
    inside = member[groups]
    res = membership_auc(loss[inside], loss[~inside], s["bootstrap"], random_state=_random_state(seed),
                         groups_members=groups[inside], groups_nonmembers=groups[~inside])
    t = membership_permutation_test(loss[inside], loss[~inside], groups[inside], groups[~inside],
                                    n_permutations=_permutations(s), random_state=_random_state(seed))
    return _trial(t, res.ci, 0.5, effect, res.auc)


_case("head_membership", _head_membership, 0.5,
      test="membership_permutation_test: member subjects permuted, scores fixed, two-sided p (as the claim prints "
           "it); interval: membership_auc's stratified subject bootstrap",
      null_model="MSU-shaped per-window losses with a subject effect, members and non-members from one "
                 "distribution; the AUC's truth is 0.5",
      effect_unit="members' log-loss shift")


def _encoder_membership(seed: int, effect: float, size: str) -> Trial:
    """Every subject has member and non-member windows; attack and control losses exchangeable per subject, the
    attack's members lowered by ``effect`` when planted."""
    from eegprivacy.evaluation.permutation import paired_membership_test

    s = _shape(size, "msu_schizophrenia")
    rng = np.random.default_rng(seed)
    n, w = s["subjects"], max(2, s["windows"] // 2)
    out = []
    for shift in (effect, 0.0):
        m, gm = _losses(rng, n, w, np.full(n, shift), s["icc"])
        nm, gn = _losses(rng, n, w, np.zeros(n), s["icc"])
        out.append((m, nm))
    (am, an), (cm, cn) = out
    return _paired_trial(paired_membership_test, am, an, cm, cn, gm, gn, s=s, seed=seed, effect=effect)


_case("encoder_membership", _encoder_membership, 0.3,
      test="paired_membership_test: within-subject AUC minus random init, sign flips per subject (two-sided from "
           "its null); interval: paired subject bootstrap",
      null_model="MSU-shaped subjects with member and held-out windows, attack and control losses from one "
                 "distribution; the difference's truth is 0",
      effect_unit="members' log-loss shift in the attack")


# -- the window-level task claim (eegmat: rest vs arithmetic of held-out subjects) ------------------------------


def _window_task(seed: int, effect: float, size: str) -> Trial:
    """eegmat-shaped subjects with one rest and one arithmetic recording each: a window's embedding is its
    subject's effect, its recording's effect (``recording_share`` of the variance: windows of one recording
    correlate beyond their subject) and window noise; independent of the state (null) or shifted by ``effect``
    SD along one dimension in the arithmetic recordings. :func:`eegprivacy.embeddings.endpoints.
    labels.window_label_leakage` as :func:`eegprivacy.studies.embedding_audit.cells._window_label_rows` calls it (units:
    recordings, strata: subjects), its two-sided p and the interval the claim prints."""
    from eegprivacy.embeddings.endpoints.labels import window_label_leakage
    from eegprivacy.embeddings.splits import SubjectDisjointSplit

    s = _shape(size, "eegmat")
    rng = np.random.default_rng(seed)
    w = max(1, s["windows"] // 2)
    n_rec = 2 * s["subjects"]
    share = float(s["recording_share"])
    within = max(1e-6, 1.0 - s["icc"] - share)
    groups = np.repeat(np.arange(s["subjects"]), 2 * w)
    recording = np.repeat(np.arange(n_rec), w)
    state = recording % 2
    Z = (rng.standard_normal((s["subjects"], s["dim"]))[groups] * math.sqrt(s["icc"])
         + rng.standard_normal((n_rec, s["dim"]))[recording] * math.sqrt(share)
         + rng.standard_normal((groups.size, s["dim"])) * math.sqrt(within))
    Z[:, 0] += effect * state
    r = window_label_leakage(Z, state, groups, recording,
                             SubjectDisjointSplit(min(5, s["subjects"] // 2), random_state=_random_state(seed)),
                             n_bootstrap=s["bootstrap"], n_permutations=s["permutations"],
                             random_state=_random_state(seed))
    return _trial(r, r.ci, 0.5, effect, r.balanced_accuracy)


_case("window_task", _window_task, 0.5, "task claim (window label)", ("eegmat", "eegmmidb"), cohort="eegmat",
      test="window_label_leakage: held-out windows' state (balanced accuracy) against the null that permutes the "
           "labels among each subject's recordings and reruns the cross-fitted pipeline, two-sided; interval: the "
           "test inverted under a shift (the claim's interval)",
      null_model="eegmat-shaped subjects (audited subjects × windows), one rest and one arithmetic recording each, "
                 "subject + recording effects + window noise, embeddings independent of the state; the balanced "
                 "accuracy's truth is 0.5",
      effect_unit="state shift of one embedding dimension (SD)", n_null=400, n_power=100,
      why_fewer="each data set refits the head for every permutation in 5 folds (~0.5 s at 99 permutations on one "
                "core); 400 data sets resolve a size of 0.08 from 0.05")


# -- the attribute claim: L_A (a gain over the larger of two controls) above 0, one-sided ------------------------

#: Dimensions of the null's attribute (a window's centred band powers; the cohorts' have channels × bands).
ATTRIBUTE_DIMS = 16


def _attribute(seed: int, effect: float, size: str) -> Trial:
    """eegmat-shaped subjects whose attribute (``ATTRIBUTE_DIMS`` dimensions, a subject effect and window noise
    like the embeddings) is independent of the embeddings (null) or holds ``effect`` times their first
    dimensions; :func:`eegprivacy.embeddings.endpoints.attribute.attribute_leakage` with the stage's splitter and the
    claim's one-sided interval p (:func:`eegprivacy.studies.embedding_audit.claims.cell_claims`). No coverage: L_A's
    truth on a null is below 0 by an amount the case cannot state (the larger of two controls)."""
    from eegprivacy.embeddings.endpoints.attribute import attribute_leakage
    from eegprivacy.embeddings.splits import SubjectDisjointSplit
    from eegprivacy.evaluation.intervals import interval_p_value

    s = _shape(size, "eegmat")
    rng = np.random.default_rng(seed)
    Z, groups, _ = _embeddings(rng, s["subjects"], s["windows"], s["dim"], s["icc"])
    A, _, _ = _embeddings(rng, s["subjects"], s["windows"], ATTRIBUTE_DIMS, s["icc"])
    k = min(ATTRIBUTE_DIMS, s["dim"])
    A[:, :k] += effect * Z[:, :k]
    r = attribute_leakage(Z, A, groups, SubjectDisjointSplit(min(5, s["subjects"] // 2),
                                                             random_state=_random_state(seed)),
                          n_bootstrap=max(1000, s["bootstrap"]), n_permutations=0, random_state=_random_state(seed))
    return Trial(p_value=interval_p_value(r.gain, r.ci[0], r.ci[1], 0.0), low=r.ci[0], high=r.ci[1],
                 truth=math.nan, estimate=r.gain)


_case("attribute", _attribute, 0.3, cohort="eegmat",
      test="attribute_leakage + interval_p_value: L_A (held-out ridge score minus the larger of its Gaussian and "
           "permuted controls), its subject-bootstrap interval read against 0 one-sided (normal approximation), as "
           "the claim prints it; size only (no coverage: L_A's truth on a null is below 0)",
      null_model=f"eegmat-shaped subjects (audited subjects × windows); a {ATTRIBUTE_DIMS}-dimensional attribute "
                 "with its own subject effect, independent of the embeddings",
      effect_unit="attribute share of the embedding's first dimensions",
      sided="one-sided (L_A subtracts the larger of two controls, so it lies below 0 on a null by construction; "
            "only above 0 answers the claim)",
      n_null=1000, n_power=100)
