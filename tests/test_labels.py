"""Study A's keyword labelling: strict phrases, the interictal traps, and configurability."""

from __future__ import annotations

import math

import pytest

from eegprivacy.data.labels import (
    NEGATIVE_KEYWORDS,
    POSITIVE_KEYWORDS,
    matched_keywords,
    patient_label,
    patient_labels,
    report_is_positive,
)

CASES = [
    # the three positive phrases, any case, any whitespace
    ("Epileptic seizure recorded at 10:32.", True),
    ("ICTAL EEG PATTERN over the left temporal region.", True),
    ("Rhythmic ictal EEG activity, evolving in frequency.", True),
    ("ictal\nEEG   pattern", True),
    ("Ictal EEG activity.", True),
    ("(ictal EEG pattern)", True),
    # the interictal traps: not positive on their own
    ("Epileptiform interictal activity in the left temporal region.", False),
    ("Abnormal interictal record.", False),
    ("Interictal EEG activity with sharp waves.", False),
    ("INTERICTAL EEG PATTERN", False),
    ("postictal EEG activity", False),
    ("preictal EEG pattern", False),
    # near misses: words present but not the whole phrase
    ("Seizure, epileptic in nature", False),
    ("ictal pattern on EEG", False),
    ("epileptic seizures", False),
    ("Normal background activity.", False),
    ("No epileptiform discharges.", False),
    ("", False),
    # a trap next to a real positive is still positive
    ("Interictal EEG activity; later an ictal EEG activity burst.", True),
    ("Abnormal interictal findings and one epileptic seizure.", True),
    # no negation handling, as in the paper
    ("No epileptic seizure was recorded.", True),
]


@pytest.mark.parametrize(("report", "expected"), CASES)
def test_report_keyword_rules(report, expected):
    assert report_is_positive(report) is expected


def test_defaults_are_the_papers_phrases():
    assert set(POSITIVE_KEYWORDS) == {"epileptic seizure", "ictal EEG pattern", "ictal EEG activity"}
    assert "epileptiform interictal activity" in NEGATIVE_KEYWORDS and "abnormal interictal" in NEGATIVE_KEYWORDS


def test_matched_keywords_names_the_phrases():
    found = matched_keywords("Epileptic seizure with ictal EEG pattern; interictal EEG activity before.")
    assert found == ["epileptic seizure", "ictal EEG pattern"]


def test_missing_reports_are_negative():
    assert not report_is_positive(None)
    assert not report_is_positive(math.nan)


def test_keywords_are_configurable():
    # a params file can add a phrase ...
    assert not report_is_positive("Electrographic seizure.")
    extended = [*POSITIVE_KEYWORDS, "electrographic seizure"]
    assert report_is_positive("Electrographic seizure.", positive_keywords=extended)
    # ... drop one ...
    assert not report_is_positive("Epileptic seizure.", positive_keywords=["ictal EEG pattern"])
    # ... or switch on a crude negation by masking a negative phrase
    negated = "No epileptic seizure was recorded."
    assert report_is_positive(negated)
    assert not report_is_positive(negated, negative_keywords=[*NEGATIVE_KEYWORDS, "no epileptic seizure"])
    # masking removes only the negative phrase, not a later positive one
    assert report_is_positive("No epileptic seizure today; ictal EEG pattern yesterday.",
                              negative_keywords=["no epileptic seizure"])


def test_patient_label_is_any_report():
    assert patient_label(["Normal.", "Abnormal interictal.", "Ictal EEG pattern."]) == 1
    assert patient_label(["Normal.", "Epileptiform interictal activity."]) == 0
    assert patient_label([]) == 0


def test_patient_labels_from_mapping_and_pairs():
    mapping = {"A": ["Normal.", "epileptic seizure"], "B": ["interictal EEG activity"], "C": "ictal EEG activity"}
    assert patient_labels(mapping) == {"A": 1, "B": 0, "C": 1}
    pairs = [("A", "Normal."), ("B", "Abnormal interictal"), ("A", "Ictal EEG pattern"), (7, "Normal.")]
    assert patient_labels(pairs) == {"A": 1, "B": 0, "7": 0}
    assert patient_labels(pairs, positive_keywords=["normal"]) == {"A": 1, "B": 0, "7": 1}
