"""Reading one row of a study's summary table, shared by the tests of study A's utility summaries."""

from __future__ import annotations

import numpy as np


def summary_row(summary, arm, metric="auroc", mechanism=None, epsilon=None):
    """The one row of ``summary`` for ``arm`` and ``metric`` (and ``mechanism``, ``epsilon`` where given); fails
    unless exactly one matches."""
    part = summary[(summary.arm == arm) & (summary.metric == metric)]
    if mechanism is not None:
        part = part[part.mechanism == mechanism]
    if epsilon is not None:
        part = part[np.isclose(part.epsilon, epsilon)]
    assert len(part) == 1, (arm, metric, mechanism, epsilon, len(part))
    return part.iloc[0]
