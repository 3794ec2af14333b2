"""The calibration cases of every test and interval the reports print, one module per study registers them (study
A's trials and null model sit in its own modules beside it: ``study_a_utility``, ``study_a_audit``, ``study_a_model``).

Importing this package registers every case in :data:`eegprivacy.evaluation.calibration.CASES` (the generic
runner there knows no study; the cases here call the study code the stages run). ``cases()`` returns them in
report order.
"""

from __future__ import annotations

from eegprivacy.evaluation.calibration import CASES, CalibrationCase


def cases() -> dict[str, CalibrationCase]:
    """Every registered case, by name, after importing each study's module (lazily: they import study code)."""
    import importlib

    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return dict(CASES)


#: The modules that register cases, in the order the report lists them.
MODULES = ("study_a", "study_b", "study_b_audit", "study_c")
