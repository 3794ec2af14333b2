"""Patient labels from free-text EEG reports by strict keyword rules, as in study A.

Study A labels a patient positive (epilepsy) when any of the patient's reports names a seizure-related
phrase: "epileptic seizure", "ictal EEG pattern" or "ictal EEG activity". Phrases such as "epileptiform
interictal activity" or "abnormal interictal" do not by themselves make a patient positive, and there is
no negation handling ("no epileptic seizure" still matches, exactly as in the paper).

Matching is case-insensitive, on whole phrases (word boundaries at both ends, any run of whitespace
between words), so "interictal EEG activity" never matches "ictal EEG activity". Negative phrases are
masked out of the text before the positive search: with the defaults this changes nothing (word
boundaries already separate them), but it lets a params file add, e.g., "no epileptic seizure" to switch
on a crude negation rule without code changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

POSITIVE_KEYWORDS: tuple[str, ...] = ("epileptic seizure", "ictal EEG pattern", "ictal EEG activity")
NEGATIVE_KEYWORDS: tuple[str, ...] = (
    "epileptiform interictal activity",
    "abnormal interictal",
    "interictal EEG activity",
)


@lru_cache(maxsize=256)
def _phrase_pattern(phrase: str) -> re.Pattern:
    words = phrase.strip().split()
    if not words:
        raise ValueError("empty keyword phrase")
    body = r"\s+".join(re.escape(w) for w in words)
    # \b would fail next to non-word characters at the phrase ends (e.g. "EEG-"); lookarounds do not.
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def _as_text(report) -> str:
    if report is None:
        return ""
    if isinstance(report, float) and math.isnan(report):  # empty CSV cell read by pandas
        return ""
    return str(report)


def matched_keywords(
    report,
    positive_keywords: Sequence[str] = POSITIVE_KEYWORDS,
    negative_keywords: Sequence[str] = NEGATIVE_KEYWORDS,
) -> list[str]:
    """The positive phrases found in one report, after masking the negative phrases."""
    text = _as_text(report)
    for phrase in negative_keywords:
        text = _phrase_pattern(phrase).sub(" ", text)
    return [p for p in positive_keywords if _phrase_pattern(p).search(text)]


def report_is_positive(
    report,
    positive_keywords: Sequence[str] = POSITIVE_KEYWORDS,
    negative_keywords: Sequence[str] = NEGATIVE_KEYWORDS,
) -> bool:
    """Whether one report carries a positive (seizure-related) phrase."""
    return bool(matched_keywords(report, positive_keywords, negative_keywords))


def patient_label(
    reports: Iterable,
    positive_keywords: Sequence[str] = POSITIVE_KEYWORDS,
    negative_keywords: Sequence[str] = NEGATIVE_KEYWORDS,
) -> int:
    """1 if any of one patient's reports is positive, else 0."""
    return int(any(report_is_positive(r, positive_keywords, negative_keywords) for r in reports))


def patient_labels(
    reports_by_patient: Mapping[str, Iterable] | Iterable[tuple[str, object]],
    positive_keywords: Sequence[str] = POSITIVE_KEYWORDS,
    negative_keywords: Sequence[str] = NEGATIVE_KEYWORDS,
) -> dict[str, int]:
    """Patient -> label, from either {patient: [reports]} or (patient, report) pairs (one per report)."""
    grouped: dict[str, list] = {}
    items = reports_by_patient.items() if isinstance(reports_by_patient, Mapping) else None
    if items is not None:
        for patient, reports in items:
            if isinstance(reports, str):
                reports = [reports]
            grouped.setdefault(str(patient), []).extend(reports)
    else:
        for patient, report in reports_by_patient:
            grouped.setdefault(str(patient), []).append(report)
    return {p: patient_label(rs, positive_keywords, negative_keywords) for p, rs in grouped.items()}


__all__ = [
    "NEGATIVE_KEYWORDS",
    "POSITIVE_KEYWORDS",
    "matched_keywords",
    "patient_label",
    "patient_labels",
    "report_is_positive",
]
