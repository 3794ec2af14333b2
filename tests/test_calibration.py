"""The calibration runner (``evaluation/calibration.py``) and the seconds-long calibration of study C's tests.

The runner's own tests feed it cases whose answer is known by construction (a test that rejects 5 % or 20 % of
nulls); the study tests run each registered study C case through the real functions on tiny cohorts and hold its
size and coverage to the issue-46 gates (size ≤ 0.09, coverage ≥ 0.88 over ~200 null data sets), so a change
that breaks a test's null shows here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eegprivacy.evaluation.calibration import (
    CASES,
    CalibrationCase,
    Trial,
    calibrate,
    coverage_verdict,
    register,
    size_verdict,
    trial_seeds,
)


def _uniform_p(rate: float = 1.0):
    """A test whose p-value is uniform on (0, rate⁻¹·…): with ``rate`` 1 its size is exactly α; a rate r rejects
    r·α of nulls. The interval is the mean ± 1.96 SE of 20 normal draws (coverage 0.95)."""
    def simulate(seed: int, effect: float, size: str) -> Trial:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(20) + effect
        half = 1.96 / math.sqrt(20)
        return Trial(p_value=min(1.0, rng.uniform() / rate) if effect == 0 else rng.uniform() * 0.01,
                     low=x.mean() - half, high=x.mean() + half, truth=effect, estimate=x.mean())
    return simulate


def _case(name: str, simulate, **kw) -> CalibrationCase:
    return CalibrationCase(name=name, test="t", used_in=("r",), null_model="m", simulate=simulate, **kw)


def test_a_valid_test_holds_and_an_inflated_one_is_caught():
    good = calibrate(_case("toy.valid", _uniform_p(1.0), effects=(1.0,)), n_null=1000, n_power=50)
    bad = calibrate(_case("toy.inflated", _uniform_p(4.0)), n_null=1000)
    assert good.size_ci[0] <= 0.05 <= good.size_ci[1]
    assert good.size_verdict in ("holds", "undecided") and good.coverage_verdict == "holds"
    assert good.power[1.0] == 1.0 and good.power_coverage[1.0] > 0.9
    assert bad.size_verdict == "inflated" and bad.size > 0.15


def test_verdicts_read_the_wilson_interval():
    assert size_verdict(40, 1000) == "holds"            # upper bound 0.054
    assert size_verdict(82, 1000) == "inflated"         # lower bound 0.067 > 0.05: the review's diagnosis test
    assert size_verdict(12, 200) == "undecided"         # 0.06 over 200: cannot tell
    assert coverage_verdict(950, 1000) == "holds"
    assert coverage_verdict(920, 1000) == "undercovers"  # the review's membership interval: upper bound 0.935
    assert coverage_verdict(92, 100) == "undecided"


def test_the_report_marks_an_inflated_test_and_an_unresolved_one():
    """``reports/calibration.md``: an inflated size carries ⚠ and joins the list the reports must mark; a size too
    few data sets resolve carries † and is listed apart (not shown wrong); a holding one carries neither."""
    import pandas as pd

    from eegprivacy.reporting.calibration import MARK, UNRESOLVED, markdown

    results = [calibrate(_case("toy.valid", _uniform_p(1.0)), n_null=1000),
               calibrate(_case("toy.inflated", _uniform_p(4.0)), n_null=1000),
               calibrate(_case("toy.few", _uniform_p(1.0), why_fewer="toy"), n_null=60)]
    table = pd.DataFrame([{**r.row(), "seconds": 0.0} for r in results])
    assert list(table["size_verdict"]) == ["holds", "inflated", "undecided"]
    text = markdown(table, {"seed": 0, "scale": 1.0, "size": "tiny", "seconds": 0.0, "n_jobs": 1})
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| <a id=")}
    assert MARK not in rows["toy.valid"] and UNRESOLVED not in rows["toy.valid"]
    assert f"inflated {MARK}" in rows["toy.inflated"] and f"undecided {UNRESOLVED}" in rows["toy.few"]
    marks = text[text.index("## Tests the reports must mark"):text.index("## The cases")]
    assert f"`toy.inflated` ({MARK})" in marks and f"`toy.few` ({UNRESOLVED})" in marks and "toy.valid" not in marks


def test_same_seed_same_result_whatever_the_workers():
    case = _case("toy.jobs", _uniform_p(1.0))
    one = calibrate(case, n_null=60, n_jobs=1)
    two = calibrate(case, n_null=60, n_jobs=2)
    assert one.row() == two.row()
    assert trial_seeds("toy.jobs", 0, 0.0, 3) != trial_seeds("toy.other", 0, 0.0, 3)
    assert trial_seeds("toy.jobs", 0, 0.0, 3) != trial_seeds("toy.jobs", 0, 0.5, 3)


def test_a_case_is_registered_once_and_says_why_fewer_than_1000():
    case = _case("toy.once", _uniform_p())
    register(case)
    try:
        with pytest.raises(ValueError, match="registered twice"):
            register(_case("toy.once", _uniform_p()))
    finally:
        CASES.pop("toy.once")
    with pytest.raises(ValueError, match="why_fewer"):
        _case("toy.few", _uniform_p(), n_null=100)
    with pytest.raises(ValueError, match="<study>.<test>"):
        _case("nodot", _uniform_p())


# -- study C's cases on tiny cohorts -----------------------------------------------------------------------------

# Every claim test of study C. The window-label and attribute cases failed this gate before issue 46 (two-sided
# sizes 0.31 and 0.35: an interval against the largest of chance and two noisy controls, and a gain over the larger
# of two controls, both below their reference on a null); the diagnosis case holds its interval (the inverted
# permutation test) to it since then.
STUDY_C_FAST = ["study_c.diagnosis", "study_c.window_task", "study_c.identity", "study_c.pretraining_adds_identity",
                "study_c.attribute", "study_c.head_membership", "study_c.encoder_membership"]


@pytest.fixture(scope="module")
def study_c_cases():
    from eegprivacy.studies.calibration import study_c  # noqa: F401  (registers the cases)

    return CASES


@pytest.mark.parametrize("name", STUDY_C_FAST)
def test_study_c_test_holds_its_size_and_its_interval_its_coverage(study_c_cases, name):
    """~200 tiny null data sets through the real functions: size ≤ 0.09, coverage ≥ 0.88, and power above the
    size at the case's planted effect (so the case can tell a signal from none)."""
    result = calibrate(study_c_cases[name], n_null=200, n_power=50, size="tiny")
    assert result.n_null == 200
    assert result.size <= 0.09, result.row()
    if result.n_intervals:
        assert result.coverage >= 0.88, result.row()


def test_the_committed_calibration_report_has_a_row_for_every_registered_case():
    """``reports/calibration.md`` (the stage's output) lists every case the registry holds, so no test a report
    prints goes uncalibrated, and every report a case names exists."""
    from pathlib import Path

    from eegprivacy.reporting.calibration import anchor
    from eegprivacy.studies.calibration import cases

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "reports" / "calibration.md").read_text()
    from eegprivacy.studies.calibration.not_measured import NOT_MEASURED

    registered = cases()
    missing = [name for name in [*registered, *(m.name for m in NOT_MEASURED)] if f'id="{anchor(name)}"' not in text]
    assert not missing, f"reports/calibration.md lacks {missing}: dvc repro calibration"
    for case in registered.values():
        for used in case.used_in:
            path = used.split(":", 1)[0].strip()
            if path.startswith("reports/"):
                assert (repo / path).exists(), (case.name, path)


def test_every_committed_report_links_each_of_its_tests_to_its_calibration_row():
    """Each report a case names (the stage reports by their closing "Tests behind…" section, the study reports by
    their calibration section) links that case's row of ``reports/calibration.md``, so a reader of any table with a
    p-value or an interval can find the test's measured size; so does every printed test no case measures (‡)."""
    from pathlib import Path

    from eegprivacy.reporting.calibration import anchor
    from eegprivacy.studies.calibration import cases

    from eegprivacy.studies.calibration.not_measured import NOT_MEASURED

    repo = Path(__file__).resolve().parents[1]
    unlinked = []
    entries = [(name, case.used_in) for name, case in cases().items()] + [(m.name, m.used_in) for m in NOT_MEASURED]
    for name, used_in in entries:
        for path in dict.fromkeys(u.split(":", 1)[0].strip() for u in used_in):
            if path.startswith("reports/") and f"calibration.md#{anchor(name)}" not in (repo / path).read_text():
                unlinked.append((name, path))
    assert not unlinked, f"reports that print a test without linking its calibration row: {unlinked}"


def test_the_stewards_report_states_the_committed_calibration_verdicts():
    """The steward's report.html is written away from the repository, so it carries the calibration verdicts of
    the tests it prints as a constant (``reporting.cohort.CALIBRATION``); it must name every case whose ``used_in``
    is the audit-cohort report and agree with the committed ``metrics/calibration.csv``, marks included."""
    from pathlib import Path

    import pandas as pd

    from eegprivacy.reporting.cohort import CALIBRATION, calibration_sentence

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "metrics" / "calibration.csv").set_index("name")
    used = {name for name, used_in in table["used_in"].items() if "eegprivacy audit-cohort" in str(used_in)}
    assert used == set(CALIBRATION), "reporting.cohort.CALIBRATION must list exactly the audit-cohort's cases"
    for name, (_, size, coverage) in CALIBRATION.items():
        assert (size, coverage) == (table.loc[name, "size_verdict"], table.loc[name, "coverage_verdict"]), name
        assert name in calibration_sentence()


def test_every_module_path_a_case_names_exists():
    """A case's texts (what it runs, its null, where it is printed) name the project's functions by dotted path; a
    move that leaves a stale path would send a reader of ``reports/calibration.md`` to code that is not there."""
    import importlib
    import re

    from eegprivacy.studies.calibration import cases

    def resolves(ref: str) -> bool:
        parts = ref.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for part in parts[i:]:
                if not hasattr(obj, part):
                    return False
                obj = getattr(obj, part)
            return True
        return False

    stale = [(name, ref) for name, case in cases().items()
             for ref in re.findall(r"eegprivacy(?:\.\w+)+", " ".join([case.test, case.null_model, *case.used_in]))
             if not resolves(ref)]
    assert not stale, stale
