"""Calibration cases of study A's tests and intervals (``reports/study-a.md``) and of ``eegprivacy audit-cohort``'s
verdict (the report's first sentence, :func:`eegprivacy.reporting.cohort.verdict_text`).

Every case writes simulated per-patient LOSO predictions with study A's own writer
(:func:`eegprivacy.studies.release.utility.keeping_predictions`, the ``_predictions`` item a ``dp_utility`` cell
hands it) into a scratch folder and runs the summary the stage runs on that folder — so the patient × seed
bootstrap, the pairing of release and null, the p-value, the Bonferroni split and the fixed-sequence horizon are the
project's code, not a copy:

* ``study_a.matched_null_difference`` — :func:`eegprivacy.studies.release.utility.summarise`: release − matched
  null LOSO AUROC, its 95 % interval over ``subjects+seeds`` and its bootstrap p-value, at one (mechanism, ε) cell;
* ``study_a.matched_null_difference_ba`` — the same row for the nested balanced accuracy (two nested seeds);
* ``study_a.horizon`` — the same summary over the whole (mechanism × ε) grid: "some mechanism keeps utility at some
  ε" (the fixed-sequence horizon test, α/m per mechanism) under the global null, the family-wise error of the
  ``dp_utility`` table;
* ``study_a.end_to_end_horizon`` — :func:`eegprivacy.studies.release.end_to_end.summarise` (the lead table: five
  designs, α/5 each, on the private patients) and the lead design's release − null interval at its largest ε;
* ``study_a.end_to_end_mde`` — the same summary at one lead-table cell with the minimum detectable effect its
  formula gives on the model's data planted: the power there should be the stated 80 % (a check of the normal
  approximation the MDE column uses, at the bootstrap SD the data give);
* ``audit_cohort.verdict`` — ``audit-cohort``'s chain (:func:`~eegprivacy.studies.cohort.summary.summarise`, which
  calls study A's summary through :func:`~eegprivacy.studies.cohort.summary.utility_summary`, then
  :func:`~eegprivacy.studies.cohort.verdict.summary_document` and :func:`~eegprivacy.studies.cohort.verdict.headline`)
  on the audit's own grid: the "keeps utility" decision of the verdict's first sentence, and the release AUROC
  interval it prints at the chosen ε (chosen *by* the test: a post-selection interval);
* ``audit_cohort.reidentification`` and ``audit_cohort.membership`` — the re-identification top-1 (Wilson over the K
  subjects) and membership AUROC (t over noise seeds) intervals of the same sentence, through the audit's own
  attack cells (:func:`~eegprivacy.studies.cohort.cells.reidentification_cell`,
  :func:`~eegprivacy.studies.cohort.cells.membership_cell`) and :func:`~eegprivacy.studies.cohort.summary.summarise`,
  which computes them (``summary_document`` copies the row and ``headline`` picks it at the verdict's ε, which
  these cases fix to one ε; the document costs 50–100 ms a data set and changes no number).

The test of release − null is **one-sided by design** (``sided``): "release − null ≤ 0" against "the release keeps
utility"; utility can only grow with ε and a release below its null is not a finding the fixed sequence acts on.
Its size is measured as the stage applies it (one-sided, rejection at p < α).

Found and not covered here (each printed one is an entry of :mod:`.not_measured`, which
``reports/calibration.md`` lists with its mark):

* ``baseline_minus_permuted`` (the ``none − control`` row) and ``baseline_minus_clipped`` (``none − scaled +
  clipped``): descriptive contrasts of the non-private table (no decision in the report reads them); the same
  :func:`~eegprivacy.evaluation.cluster_bootstrap.combine_seeds` / ``percentile_interval`` code as the cases here,
  but the permuted control's own-label resamples are not exercised;
* the balanced-accuracy horizon (the ``BA (nested)`` column of "Utility horizons"): its per-cell p-value is
  ``study_a.matched_null_difference_ba`` and its sequence is the AUROC horizon's code
  (:func:`~eegprivacy.evaluation.cluster_bootstrap.fixed_sequence_horizon`); the table-level FWER is measured for
  AUROC only;
* single-arm intervals of the study A tables (release, matched null, noise-free, the k sweep's effect sizes, which
  are "not tested"): the same percentile interval; one is measured (``audit_cohort.verdict``'s release AUROC);
* ``dp_scaling``'s summary (release − null horizon per scaling source, and ``cost_vs_private`` with Holm) and the
  Optuna front's re-evaluation (:func:`eegprivacy.studies.release.search.reevaluated_values`, Holm over the front):
  written to ``metrics/dp_scaling.json`` / ``metrics/optuna_study_a.json``, printed by no study A report; the same
  bootstrap functions;
* the membership case has no planted effect (the truth of a conditional-on-cohort AUROC at a finite ε is not
  known in closed form; its null is ε = 10⁻³, where the truth is 0.5 to within ~10⁻⁴).

This module registers the cases; the trials they run are :mod:`.study_a_utility`'s (study A's tables) and
:mod:`.study_a_audit`'s (the audit's verdict), on the null model and data sets of :mod:`.study_a_model`, whose
docstring describes the null model (the "module docstring" the cases' null-model text refers to), the bootstrap
counts and what the null model cannot see.
"""

from __future__ import annotations

from eegprivacy.evaluation.calibration import CalibrationCase, register
from eegprivacy.studies.calibration.study_a_audit import (
    MEMBERSHIP_NULL_EPSILON,
    membership_trial,
    reidentification_trial,
    verdict_trial,
)
from eegprivacy.studies.calibration.study_a_model import DATASET
from eegprivacy.studies.calibration.study_a_utility import (
    MDE_PILOT,
    _simulate_difference,
    _simulate_difference_ba,
    end_to_end_trial,
    horizon_trial,
    mde_trial,
)

REPORT = "reports/study-a.md"
AUDIT_REPORT = "eegprivacy audit-cohort: report.html verdict (reporting.cohort.verdict_text)"
#: The effect sizes the reports give: study A's release − null AUROC at ε = 100 / 200 (0.08 … 0.18) and the
#: end-to-end designs' 0.12; the planted effects of the utility cases (AUROC or balanced-accuracy difference).
UTILITY_EFFECTS = (0.05, 0.12)
#: The re-identification case's planted effects: the share of a feature vector's variance that is the subject's
#: own (shared by the released half and the attacker's half); 0 is the null (the attacker's half says nothing).
REID_EFFECTS = (0.5, 0.95)


# ---------------------------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------------------------
ONE_SIDED = ("one-sided (release − null ≤ 0 against the release keeping utility: utility only grows with ε, and "
             "the fixed-sequence horizon acts on rejections in that direction only; a release below its null is "
             "printed as an interval)")
UTILITY_NULL = ("per-patient LOSO scores for every seed of a release and its matched null from the same "
                "distribution (no label shift in either): a patient effect shared across seeds, a noise part the "
                "arms share within a seed, a per-seed LOSO shift; patients, class balance, seeds and every share "
                "read per (mechanism, ε) from the stage's committed outputs (module docstring)")



def _case(name: str, simulate, **fields) -> CalibrationCase:
    """Register the case ``name`` (``simulate`` and the :class:`CalibrationCase` ``fields``) on study A's cohort."""
    return register(CalibrationCase(name=name, cohort=DATASET, simulate=simulate, **fields))


def _utility_case(name: str, simulate, null_model: str = "", **fields) -> CalibrationCase:
    """A release − null case: :data:`UTILITY_NULL` (``null_model`` adds to it), one-sided by design."""
    return _case(name, simulate, null_model=UTILITY_NULL + null_model, sided=ONE_SIDED, **fields)


def _family_case(name: str, simulate, planted_at: str, null_model: str, **fields) -> CalibrationCase:
    """A release − null case on a whole table: its power at a release − null AUROC of 0.12 planted at
    ``planted_at`` (the end-to-end designs' effect size), on 30 data sets."""
    return _utility_case(name, simulate, null_model, effects=(0.12,), n_power=30,
                         effect_unit=f"release − null AUROC planted at {planted_at}", **fields)


MATCHED_NULL_DIFFERENCE = _utility_case(
    "study_a.matched_null_difference", _simulate_difference,
    test=("eegprivacy.studies.release.utility.summarise on predictions kept by its own writer (keeping_predictions): "
          "release − matched-null LOSO AUROC, paired patient cluster bootstrap crossed with a seed bootstrap, "
          "one-sided add-one p-value (bootstrap_p_value) and 95 % percentile interval; first mechanism at the "
          "largest ε of the table, 1,000 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: The paper's mechanisms (− null AUROC, p_adj)", f"{REPORT}: End-to-end private releases",
             AUDIT_REPORT),
    effects=UTILITY_EFFECTS, effect_unit="release − null LOSO AUROC (population)", n_null=1000, n_power=100)

MATCHED_NULL_DIFFERENCE_BA = _utility_case(
    "study_a.matched_null_difference_ba", _simulate_difference_ba, "; 0/1 predictions are scores > 0",
    test=("eegprivacy.studies.release.utility.summarise: release − matched-null nested balanced accuracy over the "
          "nested seeds (the first two), the same paired bootstrap, one-sided p-value and 95 % interval; first "
          "mechanism at the largest ε, 1,000 resamples"),
    used_in=(f"{REPORT}: The paper's mechanisms (− null BA (nested), p_adj)", f"{REPORT}: Utility horizons (BA)"),
    effects=UTILITY_EFFECTS, effect_unit="release − null balanced accuracy (population)", n_null=500, n_power=100,
    why_fewer="0.16 s per data set (the AUROC case's files and resamples): 700 data sets take about 2 minutes")

HORIZON = _family_case(
    "study_a.horizon", horizon_trial, "each mechanism's largest ε only",
    "; the global null (each data set holds the cells that decide the table, every mechanism's largest ε: "
    "deciding_grid), or the effect at every mechanism's largest ε only (the whole grid)",
    test=("eegprivacy.studies.release.utility.summarise over the whole (mechanism × ε) grid: each mechanism's "
          "fixed sequence from the largest ε down at α/m (fixed_sequence_horizon); the data set rejects when any "
          "mechanism keeps utility at any ε (its p: the smallest p_adjusted); 250 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: Utility horizons (AUROC)", f"{REPORT}: The paper's mechanisms (p_adj)"), n_null=1000)

END_TO_END_HORIZON = _family_case(
    "study_a.end_to_end_horizon", end_to_end_trial, "every design's largest ε only",
    "; the private patients of the end-to-end split; ρ from the committed interval widths, π and τ the dp_utility "
    "cells' medians; null data sets hold the cells that decide the table (every design's largest ε: deciding_grid)",
    test=("eegprivacy.studies.release.end_to_end.summarise: the five designs' fixed sequences at α/5 (rejects when "
          "any design keeps utility at any ε; its p: designs × the largest p at or above an ε), and the lead "
          "design's release − null 95 % interval at its largest ε; 250 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: End-to-end private releases (horizon, release − null, p)",), n_null=200,
    why_fewer="a null data set is the five designs' deciding cells (each design's largest ε: its seeds × 2 arms of "
              "prediction files and their resamples, 0.25 s); 200 put the coverage within about ±0.03 and resolve "
              "the size, which the designs' α/5 split keeps far below 0.05 (the calibration stage's 600 s budget)")

END_TO_END_MDE = _utility_case(
    "study_a.end_to_end_mde", mde_trial,
    "; the lead table's cell (ρ from its committed interval widths, π and τ the dp_utility cells' medians), its "
    "seeds and private patients",
    test=("eegprivacy.studies.release.end_to_end.summarise at one lead-table cell (public PLS, ε = 10): release − "
          "matched-null LOSO AUROC, its one-sided bootstrap p at α/designs (p × designs < 0.05) and 95 % interval; "
          "power at the minimum detectable effect the table's formula gives on the null model's data (effect 1.0 = "
          "that MDE; the column states 0.80) and at half of it; 1,000 resamples (the stage: 10,000)"),
    used_in=(f"{REPORT}: End-to-end private releases (MDE (80 %), power)",),
    effects=(0.5, 1.0),
    effect_unit=(f"multiples of the MDE the table's formula (minimum_detectable_effect at α/designs) gives at the "
                 f"cell on the model's own bootstrap SD (median of {MDE_PILOT} null data sets; the model's variance "
                 f"is the dp_utility cells' median, so its MDE is not the real cell's)"),
    n_null=200, n_power=100,
    why_fewer="0.3 s per data set (one cell, 40 seeds × 2 arms of prediction files and their resamples); the size "
              "sits near α/designs = 0.01, far from 0.05, and 100 data sets per effect put the power within ±0.08")

AUDIT_VERDICT = _family_case(
    "audit_cohort.verdict", verdict_trial, "every mechanism's largest ε of the audit's grid",
    "; shaped like study A's cohort (the audit runs on a user's cohort); null data sets hold the cells that decide "
    "the verdict (every mechanism's largest ε: deciding_grid)",
    test=("eegprivacy.studies.cohort.summary.summarise (study A's summary through utility_summary) -> summary_document "
          "-> headline on the audit's own grid (AuditConfig: mechanisms, ε, 10 seeds): 'keeps utility' at some ε "
          "(the verdict's 'still tells … better than its matched null … by a test'), and the release AUROC "
          "interval the first sentence prints at the chosen ε; 250 resamples (the audit: 10,000)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (AUROC, matched null, test)",), n_null=1000)

AUDIT_REIDENTIFICATION = _case(
    "audit_cohort.reidentification", reidentification_trial,
    test=("eegprivacy.studies.cohort.cells.reidentification_cell (nearest-neighbour linkage of the released first "
          "halves to the attacker's second halves) at the audit's first mechanism and largest ε, 10 seeds, through "
          "cohort.summary.summarise: the Wilson 95 % interval over the K subjects of the mean top-1 (the row "
          "summary_document copies and headline picks for the first sentence)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (re-identifies x% of the patients [interval])",),
    null_model=("K subjects (the cohort's patients) with one vector per half in the cohort's feature dimension; "
                "under the null the two halves are independent (truth 1/K), a planted effect shares a subject's own "
                "vector between them (truth: the mean top-1 over 300 independent cohorts)"),
    effects=REID_EFFECTS, effect_unit="share of a half's variance that is the subject's own", n_null=300, n_power=60,
    why_fewer="10 linkage cells and the audit's summary per data set (0.25 s): 420 data sets take about 2 minutes")

AUDIT_MEMBERSHIP = _case(
    "audit_cohort.membership", membership_trial,
    test=("eegprivacy.studies.cohort.cells.membership_cell (20 member draws per seed, distance and likelihood "
          "attackers) at the audit's first mechanism, 10 seeds, through cohort.summary.summarise: the t interval over "
          "seeds (clipped to [0, 1]) of the likelihood attacker's AUROC (the row the first sentence prints)"),
    used_in=(f"{AUDIT_REPORT}: first sentence (membership AUROC, 95% interval)",),
    null_model=(f"the cohort's patients, Gaussian feature vectors, released at ε = {MEMBERSHIP_NULL_EPSILON:g} (the "
                "signal removed: membership moves the attack's AUROC by ≲ 1e-4, a tenth of the interval's "
                "half-width; truth 0.5)"),
    effects=(), effect_unit="", n_null=40, n_power=0,
    why_fewer="a data set is 10 membership cells of 20 releases and attacks each on the cohort's patients (3 s): "
              "40 data sets take 2 minutes")
