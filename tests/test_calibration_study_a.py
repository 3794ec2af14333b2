"""Study A's and ``audit-cohort``'s calibration cases (issue 46): each runs the stage's own summary on tiny data sets
where the answer is known and keeps its size, coverage and power; a broken variant is caught."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest

from eegprivacy.evaluation.calibration import ALPHA, CASES, CalibrationCase, calibrate
from eegprivacy.studies.calibration import study_a  # noqa: F401  (registers the cases)
from eegprivacy.studies.calibration import study_a_audit, study_a_model, study_a_utility

NAMES = ("study_a.matched_null_difference", "study_a.matched_null_difference_ba", "study_a.horizon",
         "study_a.end_to_end_horizon", "study_a.end_to_end_mde", "audit_cohort.verdict",
         "audit_cohort.reidentification", "audit_cohort.membership")
ONE_SIDED = 6  # the first six: release − null is one-sided by design
# Data sets per case in this file (null, per planted effect): the 200 / 50 for the release − null test (a
# tiny data set is one cell's prediction files and its summary, ~12 ms); fewer for the rest, whose data sets cost
# 15–50 ms (a whole table, or the audit's summary document), so the file stays near 20 s on one core. The cohort
# size is measured by the calibration stage.
COUNTS = {"study_a.matched_null_difference": (200, 50), "study_a.matched_null_difference_ba": (100, 30),
          "study_a.horizon": (60, 20), "study_a.end_to_end_horizon": (60, 20), "study_a.end_to_end_mde": (60, 20),
          "audit_cohort.verdict": (25, 10),
          "audit_cohort.reidentification": (40, 15), "audit_cohort.membership": (30, 0)}


@functools.lru_cache(maxsize=None)
def measured(name: str):
    n_null, n_power = COUNTS[name]
    return calibrate(CASES[name], n_null=n_null, n_power=n_power, size="tiny")


def test_every_case_is_registered_with_its_side_and_reason():
    for name in NAMES:
        case = CASES[name]
        assert case.used_in and case.test and case.null_model
        assert case.n_null >= 1000 or case.why_fewer
    for name in NAMES[:ONE_SIDED]:  # release − null is one-sided by design, and says why
        assert CASES[name].sided.startswith("one-sided (")
    for name in NAMES[ONE_SIDED:]:
        assert CASES[name].sided == "two-sided"


def test_the_cohort_shape_comes_from_the_committed_outputs():
    shape = study_a_model.dp_utility_shape()
    features = json.loads((study_a_model._metrics(f"features_{study_a_model.DATASET}.json")).read_text())
    assert shape.n_patients == features["n_subjects"]
    assert 0 < shape.n_positive < shape.n_patients
    assert shape.n_seeds >= 2 and len(shape.mechanisms) >= 1 and len(shape.epsilons) >= 2
    assert set(shape.cells) == {(m, e) for m in shape.mechanisms for e in shape.epsilons}
    for cell in shape.cells.values():
        assert 0 <= cell.rho <= 0.99 and 0 <= cell.pi_release <= 0.9 and cell.tau >= 0
    e2e = study_a_model.end_to_end_shape()
    assert e2e.n_patients < shape.n_patients and len(e2e.mechanisms) >= 2
    assert set(e2e.components) == set(e2e.mechanisms)


def test_a_missing_output_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="dp_utility_no_such_cohort.csv is missing"):
        study_a_model.dp_utility_shape("no_such_cohort")


def test_a_planted_effect_is_the_population_difference():
    cell = study_a_model.dp_utility_shape().cell(*study_a_utility._difference_cell(study_a_model.dp_utility_shape()))
    for effect in (0.05, 0.12):
        assert cell.auroc(cell.delta_for(effect)) - cell.auroc(0.0) == pytest.approx(effect, abs=1e-9)
        delta = cell.delta_for(effect, "balanced_accuracy")
        assert cell.balanced_accuracy(delta) - cell.balanced_accuracy(0.0) == pytest.approx(effect, abs=1e-9)


def test_a_data_set_is_a_function_of_its_seed():
    a = study_a_utility.matched_null_trial(7, 0.05, "tiny")
    assert a == study_a_utility.matched_null_trial(7, 0.05, "tiny")
    assert a != study_a_utility.matched_null_trial(8, 0.05, "tiny")


@pytest.mark.parametrize("name", NAMES)
def test_size_coverage_and_power_on_tiny_data_sets(name):
    result = measured(name)
    case = CASES[name]
    has_test = any(np.isfinite(t.p_value) for t in result.null_trials)
    has_interval = result.n_intervals > 0
    assert has_test or has_interval
    if has_test:
        assert result.n_null == COUNTS[name][0]
        assert result.size <= 0.09, (name, result.size, result.size_ci)
        if case.effects:
            assert result.power[max(case.effects)] > result.size, (name, result.power, result.size)
    if has_interval:
        assert result.coverage >= 0.88, (name, result.coverage, result.coverage_ci)
        for effect, coverage in result.power_coverage.items():
            assert coverage >= 0.8, (name, effect, coverage)


def test_the_horizon_does_not_extend_below_a_planted_effect():
    """The effect sits at each mechanism's largest ε only: declaring a smaller ε kept is a false horizon (the fixed
    sequence keeps that family-wise error at α)."""
    extended = [study_a_utility.horizon_trial(seed, 0.12, "tiny").estimate > 0 for seed in range(20)]
    assert np.mean(extended) <= 0.1


def test_a_broken_variant_is_caught():
    """The same data sets with every seed's predictions pooled as if they were other patients (windows as units):
    the patient effect shared across seeds is pseudo-replicated and the size is inflated beyond Monte Carlo error."""
    broken = CalibrationCase(name="study_a.broken_pooled_seeds", test="utility.summarise on seeds pooled as patients",
                             used_in=(), null_model=CASES[NAMES[0]].null_model,
                             simulate=functools.partial(study_a_utility.matched_null_trial, metric="auroc",
                                                        pooled=True),
                             n_null=200, why_fewer="test")
    result = calibrate(broken, n_null=200, n_power=0, size="tiny")
    assert result.size_verdict == "inflated", (result.size, result.size_ci)
    assert result.size > measured(NAMES[0]).size


def test_the_reidentification_truth_is_chance_under_the_null():
    assert study_a_audit.reidentification_truth("tiny", 0.0) == pytest.approx(1.0 / study_a_model.TINY["patients"])
    assert study_a_audit.reidentification_truth("tiny", 0.95) > 2.0 / study_a_model.TINY["patients"]
    assert math.isnan(study_a_audit.membership_trial(0, 0.0, "tiny").p_value)


def test_the_deciding_cells_decide_a_family_table_as_the_whole_grid_does():
    """``deciding_grid``'s premise, through the stage's summary: the table's smallest adjusted p (and so its
    decision) from the whole (mechanism × ε) grid equals the one from each mechanism's largest-ε cells alone."""
    from eegprivacy.studies.release.utility import summarise

    shape = study_a_model.dp_utility_shape()
    mechanisms, epsilons, grid = study_a_utility._family_grid(shape, "tiny")
    dims = study_a_model._dims(shape, "tiny", family=True)
    top = max(epsilons)
    y = study_a_model._labels(dims.n, dims.n_positive)
    decisions = []
    for seed, effect in ((0, 0.0), (1, 0.0), (2, 0.3), (3, 0.3)):
        deltas = {(m, top): shape.cell(m, top).delta_for(effect) for m in mechanisms}
        folder = study_a_model._scratch(f"deciding-grid-{seed}")
        cells = study_a_model._write_grid(folder, np.random.default_rng(seed), y, dims, shape, grid, deltas)
        deciding = [c for c in cells if float(c.config["epsilon"]) == top]
        smallest = []
        for part, eps in ((cells, epsilons), (deciding, [top])):
            frame = summarise([(None, part)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, epsilons=eps)
            smallest.append(frame.loc[(frame["arm"] == "release_minus_null") & (frame["metric"] == "auroc"),
                                      "p_adjusted"].min())
        assert smallest[0] == smallest[1]
        decisions.append(smallest[0] < ALPHA)
    assert decisions[-1]  # the planted effect is decided: the comparison is not between two "no"s only
