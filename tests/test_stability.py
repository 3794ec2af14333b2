"""The one rule of "changed" numbers: a tracked CSV is kept when a rerun's rows equal it within the stage's
registered tolerance, and two runs' metrics are compared on key columns with the same tolerance."""

from __future__ import annotations

import pandas as pd
import pytest

from eegprivacy.pipeline.stability import compare_csv, compare_json, tolerance_for, write_csv_within_tolerance
from eegprivacy.pipeline.stages import get_stage

ROWS = pd.DataFrame({"mechanism": ["gaussian_analytic", "laplace_formal"], "code_hash": ["aa", "aa"],
                     "value": [0.004867142963119997, 0.75]})


def test_a_last_bit_difference_within_the_tolerance_keeps_the_file(tmp_path):
    path = tmp_path / "rows.csv"
    assert write_csv_within_tolerance(ROWS, path, 1e-9)  # first write
    text = path.read_text()
    wobble = ROWS.assign(value=[0.004867142963120022, 0.75])  # the cross-machine difference seen in issue 17
    assert not write_csv_within_tolerance(wobble, path, 1e-9)
    assert path.read_text() == text


@pytest.mark.parametrize("change", [
    lambda f: f.assign(value=[0.004867142963119997, 0.76]),       # a real change
    lambda f: f.assign(code_hash=["bb", "bb"]),                     # new code: rewrite, even with equal numbers
    lambda f: pd.concat([f, f.iloc[:1]], ignore_index=True),       # a new row
])
def test_real_changes_rewrite_the_file(tmp_path, change):
    path = tmp_path / "rows.csv"
    write_csv_within_tolerance(ROWS, path, 1e-9)
    assert write_csv_within_tolerance(change(ROWS), path, 1e-9)
    pd.testing.assert_frame_equal(pd.read_csv(path), change(ROWS))


def test_a_bit_stable_stage_rewrites_on_any_difference(tmp_path):
    path = tmp_path / "rows.csv"
    write_csv_within_tolerance(ROWS, path, 0.0)
    assert write_csv_within_tolerance(ROWS.assign(value=[0.004867142963120022, 0.75]), path, 0.0)


def test_comparison_matches_rows_on_keys_and_ignores_code_hashes():
    shuffled = ROWS.iloc[::-1].assign(code_hash="zz")
    assert compare_csv(ROWS, shuffled, 0.0) == []
    assert compare_csv(ROWS, ROWS.assign(value=[0.004867142963120022, 0.75]), 0.0)[0].startswith("value: 1 values")
    assert compare_csv(ROWS, ROWS.assign(value=[0.004867142963120022, 0.75]), 1e-9) == []
    assert compare_json({"a": 1.0, "seconds": 3, "b": [1, 2]}, {"a": 1.0, "seconds": 9, "b": [1, 2]}, 0.0) == []
    assert compare_json({"a": 1.0}, {"a": 1.5}, 1e-9) == ["/a: 1.0 -> 1.5"]


def test_tolerances_come_from_the_registry():
    assert tolerance_for("dp_release_eegmat.csv") == get_stage("dp_release").tolerance > 0
    assert tolerance_for("linkage.csv") == 0.0


def test_missing_text_values_compare_equal():
    rows = pd.DataFrame({"attack": ["rla", None, "cla"], "formal_guarantee": [True, None, False],
                         "value": [0.5, 0.6, float("nan")]})
    assert compare_csv(rows, rows.copy(), 0.0) == []
    assert compare_csv(rows, rows.assign(attack=["rla", "fla", "cla"]), 0.0)[0].startswith("attack: ")
