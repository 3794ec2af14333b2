"""The tests and intervals the reports print that no calibration case measures, each with why.

``reports/calibration.md`` lists them under their own mark (‡) beside the measured cases, every report that prints
one names it in its closing tests section (stage reports) or its calibration section (study reports), and a
reader can tell a test that was measured and holds from one that was never run on null data. An entry leaves this
list when a case in ``study_a`` / ``study_b`` / ``study_c`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

STUDY_C_REPORTS = ("reports/study-c.md", "reports/embedding_audit_cohorts.md",
                   *(f"reports/embedding_audit_{c}.md" for c in ("eegmat", "msu_schizophrenia", "eegmmidb")))


@dataclass(frozen=True)
class NotMeasured:
    """A printed test or interval without a calibration case: ``used_in`` are ``"<report path>: <where>"``
    entries (as :class:`~eegprivacy.evaluation.calibration.CalibrationCase`'s), ``what`` the test, ``why`` the
    reason no case runs it (and what bounds the risk)."""

    name: str
    used_in: tuple[str, ...]
    what: str
    why: str


def _in(reports, where: str) -> tuple[str, ...]:
    return tuple(f"{r}: {where}" for r in reports)


def _entries(reports, *rows: tuple[str, str, str, str]) -> tuple[NotMeasured, ...]:
    """The entries printed in each of ``reports``: one a (name, where in the reports, what, why) row."""
    return tuple(NotMeasured(name, _in(reports, where), what, why) for name, where, what, why in rows)


NOT_MEASURED: tuple[NotMeasured, ...] = (
    *_entries(("reports/study-a.md",),
              ("study_a.baseline_contrasts",
               "none − control, none − scaled + clipped",
               "release-free contrasts of the non-private table with patient × seed percentile intervals",
               "descriptive (no decision reads them); the same combine_seeds / percentile_interval code as "
               "study_a.matched_null_difference, but the permuted control's own-label resamples are not exercised"),
              ("study_a.single_arm_intervals",
               "release, matched null and noise-free AUROC",
               "single-arm percentile intervals (patients × seeds) of the study A tables and the k sweep",
               "the same percentile interval as the measured differences; one single arm is measured "
               "(audit_cohort.verdict's release AUROC, its coverage)"),
              ("study_a.horizon_ba",
               "Utility horizons (BA)",
               "the balanced-accuracy horizon's fixed sequence over ε",
               "its per-cell p is study_a.matched_null_difference_ba and its sequence the AUROC horizon's code "
               "(study_a.horizon); the table-level error rate is measured for AUROC only")),
    *_entries(("reports/federated_mia_tables.md", "reports/study-b.md"),
              ("study_b.seed_t_tests",
               "CLA and GLA (paper) cells",
               "one-sample t-test of 5 per-seed means against chance, t(4) interval (ci_over = seeds)",
               "exact under independent seed means by construction; what it leaves out is the subject (the same 16 "
               "clients in every seed), which the table labels; CLA's label is the client, so no subject-level null "
               "with its structure exists to simulate")),
    *_entries(("reports/federated_mia_tables.md",),
              ("study_b.gla_sound",
               "GLA (sound) cells",
               "the client bootstrap of study_b.mia_interval on 32 updates per round",
               "the same functions as study_b.mia_interval on another shape; left out for cost (20 rounds of a "
               "grouped split per seed to be faithful)"),
              ("study_b.utility_rows",
               "utility vs chance",
               "mean_replicates over per-client accuracies (client bootstrap of a client mean)",
               "the same bootstrap of a client mean as study_b.transfer's arms, which is measured")),
    *_entries(("reports/federated_audit.md",),
              ("study_b.dp_sgd_utility",
               "DP-SGD non-member accuracy [95 % CI]",
               "control.summarise's subjects+seeds percentile interval of one arm's non-member accuracy",
               "the report reads 'above chance' off its lower end, so its coverage matters; it is the "
               "subjects+seeds bootstrap that study_b.dp_sgd_minus_control measures on a difference, here on one "
               "arm's per-client accuracies, and no case models a per-client accuracy with its subject and seed "
               "structure to score that coverage")),
    *_entries(("reports/federated_transfer.md",),
              ("study_b.transfer_other_comparisons",
               "held out − untrained, held out − own data only, AUROC",
               "the other comparisons of federated_transfer.summarise",
               "one call computes them with the bootstrap and p-value study_b.transfer measures")),
    *_entries(("reports/federated_lira.md",),
              ("study_b.lira_per_seed",
               "per-seed and shadow-as-target rows",
               "t-interval over 10 target seeds (ci_over = seeds); the pooled functions on shadow masks",
               "exact for independent seed means by construction; the shadow rows run the functions "
               "study_b.lira_auroc and study_b.lira_tail measure")),
    *_entries(STUDY_C_REPORTS,
              ("study_c.aeds",
               "AEDS [CI]",
               "AEDS = L_A − max(R_M, R_I), its joint subject-bootstrap interval",
               "no claim is decided by it, and its truth on a null is not 0 (a difference of maxima of noisy parts), "
               "so neither a size nor a coverage can be scored without a model of all three parts"),
              ("study_c.attribute_interval",
               "attribute claim's interval",
               "L_A's subject-bootstrap interval as an interval (its test's size is study_c.attribute)",
               "on embeddings that carry nothing L_A's truth lies below 0 by an amount that depends on the decoder "
               "(the larger of two controls), so no coverage can be scored")),
    *_entries(STUDY_C_REPORTS[1:],
              ("study_c.defenses",
               "defense and deployment rows, defense verdicts",
               "the defenses' and the deployment check's intervals (subject bootstrap; t over noise seeds) and the "
               "closes-the-channel rule (every attacker's L_A interval reaches 0 and the defense keeps a share of the "
               "undefended utility, which must lie above its controls)",
               "a decision rule on intervals, not a test at a level; the undefended utility's subject bootstrap keeps "
               "the fitted heads (the interval the task claim no longer prints for that reason), so read 'undecided' "
               "and 'yes' there as descriptive")),
)
