"""Checks shared by the tests of the Optuna search stages (``optuna-study-a``, ``optuna-study-b``)."""

from __future__ import annotations

import pandas as pd

from eegprivacy.cli import main


def assert_same_trials(found: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The same trials with the same values, in order; the Pareto flag aside (it depends on the study's other
    trials)."""
    pd.testing.assert_frame_equal(found.drop(columns="pareto").reset_index(drop=True),
                                  expected.drop(columns="pareto").reset_index(drop=True))


def assert_resume_adds_only_missing(more, trials: pd.DataFrame, runs, read_trials) -> None:
    """A rerun with a larger target (``more``: 6 complete trials where the first run made the 4 in ``trials``) adds
    exactly the missing trials, in one more parent run, without recomputing the first four; a rerun at the target
    adds nothing. ``runs()`` gives (parents, search children, ...) of the stage's experiment; ``read_trials`` reads
    the trials CSV."""
    assert main(more.argv) == 0
    parents, children = runs()[:2]
    assert len(parents) == 2 and len(children) == 6
    assert_same_trials(read_trials(more.trials_csv).iloc[:4], trials)
    assert main(more.argv) == 0  # target reached: nothing new
    assert len(runs()[1]) == 6
