"""Typed params of the ``calibration`` stage (``params/calibration.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from eegprivacy.params import Config, param
from eegprivacy.validation import FRACTION_OPEN, InstanceOf, Interval, count


@dataclass(frozen=True)
class NullModel(Config):
    """The Gaussian null model of the embedding cases (:mod:`eegprivacy.studies.calibration.study_c`)."""

    dim: int = param(count(2, "dimensions"), default=32,
                     doc="embedding dimension of the null embeddings (the head's cost grows with it; a "
                         "permutation test's size does not depend on it)")
    icc: float = param(FRACTION_OPEN, default=0.5,
                       doc="share of an embedding's variance between subjects (windows of one subject correlate)")
    recording_share: float = param(Interval(0, 1, closed="left", text="a fraction in [0, 1)"), default=0.2,
                                   doc="share of an embedding's variance between a subject's recordings (windows "
                                       "of one recording correlate beyond their subject; the window-label case)")
    permutations: int = param(count(19, "permutations"), default=99,
                              doc="permutations of each data set's test ((P + 1)·0.05 whole: the size is exact "
                                  "for a valid scheme at any such P, so 99 measures it as 999 would)")
    bootstrap: int = param(count(1000, "resamples"), default=1000, doc="bootstrap resamples of each interval")


@dataclass(frozen=True)
class CalibrationConfig(Config):
    """``calibration``: which cases run, how many data sets, the seed, the workers and the null model."""

    seed: int = param(Interval(0, None, integral=True, text="a whole number ≥ 0"), default=0,
                      doc="seed of every case's data sets (one SeedSequence per case and effect)")
    cases: list | None = param(InstanceOf((list, type(None)), text="null (every registered case) or a list of "
                                                                   "case names"), default=None,
                               doc="case names (null: every registered case)")
    scale: float = param(Interval(0, 1, closed="right", text="a fraction in (0, 1]"), default=1.0,
                         doc="share of each case's default data-set counts to run (1 = the default profile)")
    n_jobs: int = param(count(1, "workers"), default=2, doc="worker processes (results do not depend on it)")
    null_model: NullModel = param(default=NullModel())
