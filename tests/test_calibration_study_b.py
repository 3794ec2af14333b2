"""Study B's calibration cases (issue 46) on the "tiny" federation: each case's test holds its size, its interval
covers, and the test can reject; and a broken variant (resampling trials where a subject's trials share its
membership slope) is caught, so the calibration can fail.

The cases run the study's own functions, several of them pandas summaries with a fixed cost per data set
(``report.across_rounds`` ~0.13 s, LiRA's pooled bootstrap ~0.04–0.07 s), so the expensive cases run fewer data
sets here than the cheap ones (``COUNTS``); the calibration stage runs every case on the cohort's shape.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from eegprivacy.evaluation.calibration import CASES, calibrate
from eegprivacy.studies.calibration import study_b, study_b_audit

#: (null data sets, data sets at the largest effect) per case on "tiny": 200/50 where a data set costs ~0.01 s,
#: fewer as the cost grows (client_utility ~0.025 s, LiRA 0.04–0.07 s, mia_interval ~0.13 s).
COUNTS = {
    "study_b.attack_minus_control": (200, 50),
    "study_b.lira_tail_below_rule": (200, 0),
    "study_b.transfer": (120, 30),
    "study_b.client_utility": (100, 25),
    "study_b.lira_auroc": (50, 15),
    "study_b.lira_tail": (50, 15),
    "study_b.lira_minus_control": (40, 15),
    "study_b.mia_interval": (30, 10),
    "study_b.dp_sgd_minus_control": (60, 20),
    "study_b.one_run_bound": (24, 8),  # two federations per data set (~0.25 s)
}


#: Cases whose test cannot reject on the tiny federation at any effect, so only size and coverage are held here
#: (the stage measures their power on the cohort's shape).
NO_POWER_WHEN_TINY = {
    "study_b.client_utility": "4 non-members per client and 2 seeds leave 6 effective trials (design effect "
                              "2/3): 6 of 6 right is p = 1/64, above 0.05 after Holm over 8 clients",
}


def _size_bound(n: int) -> float:
    """0.09 at 200 data sets; with fewer, the rejections a valid test reaches with ~95 % probability."""
    return max(0.09, (2 + 1.645 * math.sqrt(0.05 * 0.95 * n) + 0.05 * n) / n) if n < 200 else 0.09


def test_every_case_has_counts():
    assert {name for name in CASES if name.startswith("study_b.")} == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_case_holds_size_coverage_and_rejects(name):
    n_null, n_power = COUNTS[name]
    case = CASES[name]
    if case.effects:  # power at the largest effect only (the stage measures every effect)
        case = dataclasses.replace(case, effects=(max(case.effects),))
    result = calibrate(case, n_null=n_null, n_power=n_power, size="tiny")
    has_test = any(np.isfinite(t.p_value) for t in result.null_trials)
    has_interval = result.n_intervals > 0
    assert has_test or has_interval
    if has_test:
        assert result.size <= _size_bound(result.n_null), (name, result.size, result.rejections, result.n_null)
        if name not in NO_POWER_WHEN_TINY:
            assert result.power[max(case.effects)] > result.size, (name, result.power, result.size)
    if has_interval:
        assert result.coverage >= 0.88, (name, result.coverage, result.n_intervals)


def _trial_level(cells, n_clients):
    """The same cells with every row its own 'client': the bootstrap then resamples trials, not subjects."""
    rows = None
    broken = []
    for config, seed, arrays in cells:
        arrays = dict(arrays)
        for key in [k for k in arrays if k.endswith("/client")]:
            rows = arrays[key].size
            arrays[key] = np.arange(rows)
        for arm in ("attack", "control", "untrained"):
            arrays[f"{arm}/accuracy"] = np.resize(arrays[f"{arm}/accuracy"], rows)
        broken.append((config, seed, arrays))
    return broken, rows


def test_resampling_trials_instead_of_subjects_inflates_the_size(monkeypatch):
    """The same null data sets through ``control.summarise``: clustered by subject the size holds; with every trial
    its own cluster (a trial-level bootstrap of trials that share their subject's membership slope) it is
    inflated, which is what the calibration exists to catch. Subjects differ markedly here (slope SD 1, in score
    SD units), as a federation whose clients overfit unequally does; 16 subjects (with 8 the percentile cluster
    bootstrap itself runs near 0.09: few clusters), one seed and few trials keep the trial-level variant cheap."""
    monkeypatch.setitem(study_b.SCORE_MODEL, "slope_sd", 1.0)
    for key, value in {"subjects": 16, "seeds": 1, "trials": 8, "members": 5, "nonmembers": 3,
                       "bootstrap": 99}.items():
        monkeypatch.setitem(study_b.TINY, key, value)
    n = 80
    right = wrong = 0
    for seed in range(n):
        cells, k, b, truth = study_b.control_cells(seed, 0.0, "tiny")
        right += study_b.control_trial(cells, k, b, truth).p_value < 0.05
        broken, rows = _trial_level(cells, k)
        wrong += study_b.control_trial(broken, rows, b, truth).p_value < 0.05
    assert right / n <= 0.09
    assert wrong / n >= 0.15
    assert wrong > 2 * right


def test_cohort_shape_is_read_from_the_committed_outputs():
    shape = study_b.cohort_shape()
    assert shape["subjects"] * (shape["members"] + shape["nonmembers"]) == shape["subjects"] * shape["trials"]
    assert shape["control_seeds"]["simplenet"] >= 1 and shape["models"] >= 1
    assert shape["control_members"] + shape["calibration"] == shape["members"]


def test_the_audit_shape_is_read_from_the_committed_outputs():
    """The one-run case's federation and pooling are the stage's (``metrics/federated_audit.csv`` and its params);
    the DP-SGD table's seeds and control AUROC are its own, its split ``federated_control``'s."""
    shape, base = study_b_audit.audit_shape(), study_b.cohort_shape()
    config = shape["config"]
    assert shape["runs"] == config.seeds and shape["subjects"] == base["subjects"]
    assert shape["cell"]["protocol"] == "dp_sgd" and not math.isfinite(shape["cell"]["epsilon"])
    assert shape["members"] + shape["calibration"] == base["members"]
    dp = study_b_audit.dp_sgd_shape()
    assert dp["control_seeds"]["simplenet"] == config.seeds and dp["control_bootstrap"] == config.bootstrap
    assert 0.0 < dp["control_arm_auroc"]["simplenet"] < 1.0 and dp["control_width"]["simplenet"] > 0


def test_cohort_shape_names_the_missing_output(tmp_path, monkeypatch):
    monkeypatch.setattr(study_b, "METRICS", tmp_path)
    study_b.cohort_shape.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="federated_lira.csv"):
            study_b.cohort_shape()
    finally:
        monkeypatch.undo()
        study_b.cohort_shape.cache_clear()


def test_pooled_auroc_truth_matches_the_simulation():
    """The planted truth (the expected pooled AUROC on K subjects) is what the score model gives on average."""
    from eegprivacy.evaluation.cluster_bootstrap import auroc_along

    k, shift = 8, 0.6
    values = []
    for seed in range(300):
        cohort = study_b._Cohort(np.random.default_rng(seed), k, 12, arms=("attack",))
        role = cohort.split(8, 4)
        z = cohort.scores(role, "attack", shift)
        values.append(float(auroc_along(z.ravel()[None, :], role.ravel()[None, :])[0]))
    assert abs(np.mean(values) - study_b._Cohort.auroc(shift, k)) < 0.01


def test_simulate_is_deterministic():
    for name in COUNTS:
        a = CASES[name].simulate(7, 0.0, "tiny")
        b = CASES[name].simulate(7, 0.0, "tiny")
        assert a == b or all((np.isnan(x) and np.isnan(y)) or x == y for x, y in zip(dataclasses.astuple(a),
                                                                                      dataclasses.astuple(b)))
