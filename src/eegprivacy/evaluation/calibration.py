"""Measured size, coverage and power of a statistical test: run it on many data sets where the answer is known.

A p-value is only as good as the null it was computed under. A test whose null is not exchangeable with the
observed arrangement (labels permuted inside folds that were chosen with the real labels, windows resampled when
the subject is the unit) rejects more often than α, and no unit test that feeds the function hand-made
statistics can see it. This module measures it the only way that can: a **calibration case** makes one data set
with the structure of the cohort a report uses, with no signal (``effect = 0``) or a planted one, runs **the
project's own function** on it (the function the stage runs, not a copy) and returns what the report would print
(a p-value, an interval and the true value the interval should cover). :func:`calibrate` repeats the case over
independent seeds and reports

* **size**: the share of null data sets with ``p < α`` (Wilson interval over data sets);
* **coverage**: the share of intervals that hold the true value, under the null and under each planted effect;
* **power**: the share of planted-effect data sets with ``p < α``.

Cases are small declarative objects in a registry (:data:`CASES`, :func:`register`), one entry per test, so a
new test joins the calibration the way a new attack joins ``attacks/``. This module knows no study: the cases
that call study code are registered by :mod:`eegprivacy.studies.calibration`.

The verdicts (:func:`size_verdict`, :func:`coverage_verdict`) read the Wilson interval, so a measured size of
0.06 over 200 data sets (upper bound 0.10) is "undecided", not "inflated": the row says how many data sets it
took and why fewer than 1,000 where a case is expensive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from eegprivacy.evaluation.intervals import wilson_interval

__all__ = ["Trial", "CalibrationCase", "CalibrationResult", "CASES", "register", "calibrate", "trial_seeds",
           "size_verdict", "coverage_verdict", "SIZE_TOLERANCE", "COVERAGE_FLOOR"]

ALPHA = 0.05
#: The issue's gate: a size holds when its Wilson upper bound is at most this (0.05 within its Monte Carlo error
#: at 1,000 data sets); it is inflated when the Wilson lower bound exceeds α.
SIZE_TOLERANCE = 0.065
#: A nominal 95 % interval holds when it covers the truth at least this often.
COVERAGE_FLOOR = 0.93


@dataclass(frozen=True)
class Trial:
    """What a report prints for one data set: the test's p-value, the interval and the value it should cover.

    Any field may be NaN (a case that has only a test, or only an interval). ``truth`` is the population value
    of the interval's target on the data set's generator (0 for a null difference, 0.5 for a null AUC, the
    planted value otherwise)."""

    p_value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    truth: float = math.nan
    estimate: float = math.nan

    @property
    def covered(self) -> float:
        """1.0 if the interval holds the truth, 0.0 if not, NaN without an interval."""
        if not (np.isfinite(self.low) and np.isfinite(self.high) and np.isfinite(self.truth)):
            return math.nan
        return float(self.low <= self.truth <= self.high)


@dataclass(frozen=True)
class CalibrationCase:
    """One test or interval a report prints, and how to make data sets for it.

    Parameters
    ----------
    name : str
        Registry key, ``<study>.<test>`` (e.g. ``study_c.identity``).
    test : str
        The function the stage runs, and the test in words (``identity_permutation_test: reference labels
        permuted between subjects``).
    used_in : tuple of str
        The reports that print it (``reports/study-c.md`` …) and their table.
    null_model : str
        How a null data set is made, in words (what it keeps of the cohort and what it removes).
    simulate : callable ``(seed: int, effect: float, size: str) -> Trial``
        Makes one data set from ``seed`` with the planted ``effect`` (0 = the null) and runs the project's
        function on it. ``size`` is ``"cohort"`` (the shape of the cohort the report uses) or ``"tiny"`` (a few
        subjects, for the seconds-long version in ``tests/``); the case decides what each means.
    effects : tuple of float
        The planted effects whose power is measured (the effect sizes the reports give), in the case's unit.
    effect_unit : str
        What ``effects`` are (``AUC − 0.5``, ``BPID@1 difference`` …).
    n_null, n_power : int
        Data sets for the size (and null coverage) and for each planted effect on the default profile.
    why_fewer : str
        Why ``n_null`` is below 1,000, where it is (a case's cost).
    sided : str
        ``"two-sided"`` or the argued side.
    cohort : str
        The cohort whose shape the "cohort" data sets take (its MLflow ``dataset`` tag).
    """

    name: str
    test: str
    used_in: tuple[str, ...]
    null_model: str
    simulate: Callable[[int, float, str], Trial]
    effects: tuple[float, ...] = ()
    effect_unit: str = ""
    n_null: int = 1000
    n_power: int = 200
    why_fewer: str = ""
    sided: str = "two-sided"
    cohort: str = ""

    def __post_init__(self):
        if "." not in self.name:
            raise ValueError(f"a calibration case is named '<study>.<test>', got {self.name!r}")
        if int(self.n_null) < 1:
            raise ValueError(f"{self.name}: n_null must be a positive count, got {self.n_null}")
        if int(self.n_null) < 1000 and not self.why_fewer:
            raise ValueError(f"{self.name}: {self.n_null} null data sets (< 1,000) needs why_fewer")


CASES: dict[str, CalibrationCase] = {}


def register(case: CalibrationCase) -> CalibrationCase:
    """Add ``case`` to :data:`CASES` (an error if its name is taken: one entry per test)."""
    if case.name in CASES and CASES[case.name] is not case:
        raise ValueError(f"calibration case {case.name!r} is registered twice")
    CASES[case.name] = case
    return case


@dataclass(frozen=True)
class CalibrationResult:
    """The measured behaviour of one case: the rows of ``metrics/calibration.csv`` and ``reports/calibration.md``."""

    case: CalibrationCase
    size_label: str
    n_null: int
    rejections: int
    size: float
    size_ci: tuple[float, float]
    n_covered: int
    n_intervals: int
    coverage: float
    coverage_ci: tuple[float, float]
    power: dict[float, float] = field(default_factory=dict)
    power_n: dict[float, int] = field(default_factory=dict)
    power_coverage: dict[float, float] = field(default_factory=dict)
    null_trials: tuple[Trial, ...] = ()

    @property
    def size_verdict(self) -> str:
        return size_verdict(self.rejections, self.n_null) if self.n_null and self._has_test else "no test"

    @property
    def coverage_verdict(self) -> str:
        return coverage_verdict(self.n_covered, self.n_intervals) if self.n_intervals else "no interval"

    @property
    def _has_test(self) -> bool:
        return any(np.isfinite(t.p_value) for t in self.null_trials) if self.null_trials else self.n_null > 0

    def row(self) -> dict:
        """One flat row (the CSV's and MLflow's)."""
        c = self.case
        out = {"name": c.name, "cohort": c.cohort, "test": c.test, "used_in": "; ".join(c.used_in), "null_model": c.null_model,
               "sided": c.sided, "size_label": self.size_label, "n_null": self.n_null,
               "rejections": self.rejections, "size": self.size, "size_low": self.size_ci[0],
               "size_high": self.size_ci[1], "size_verdict": self.size_verdict, "n_intervals": self.n_intervals,
               "n_covered": self.n_covered,
               "coverage": self.coverage, "coverage_low": self.coverage_ci[0], "coverage_high": self.coverage_ci[1],
               "coverage_verdict": self.coverage_verdict, "effect_unit": c.effect_unit, "why_fewer": c.why_fewer}
        for e in c.effects:
            out[f"power@{e:g}"] = self.power.get(e, math.nan)
            out[f"coverage@{e:g}"] = self.power_coverage.get(e, math.nan)
        return out


def size_verdict(rejections: int, n: int, alpha: float = ALPHA, tolerance: float = SIZE_TOLERANCE) -> str:
    """``holds`` (Wilson upper bound ≤ ``tolerance``), ``inflated`` (Wilson lower bound > α: the test rejects
    true nulls more often than α beyond its Monte Carlo error) or ``undecided`` (too few data sets to tell)."""
    low, high = wilson_interval(rejections, n)
    if low > alpha:
        return "inflated"
    return "holds" if high <= tolerance else "undecided"


def coverage_verdict(covered: int, n: int, confidence: float = 0.95, floor: float = COVERAGE_FLOOR) -> str:
    """``holds`` (coverage ≥ ``floor``), ``undercovers`` (Wilson upper bound below the nominal level: the
    interval misses the truth more often than 5 % beyond its Monte Carlo error) or ``undecided``."""
    low, high = wilson_interval(covered, n)
    if covered / n >= floor:
        return "holds"
    return "undercovers" if high < confidence else "undecided"


def trial_seeds(name: str, seed: int, effect: float, n: int) -> list[int]:
    """``n`` independent 32-bit seeds for the data sets of (case, effect): one :class:`numpy.random.SeedSequence`
    per case name and effect, so adding a case or an effect never moves another's data sets."""
    key = [int(seed), *name.encode(), int(round(float(effect) * 1e6)) & 0xFFFFFFFF]
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(key).spawn(int(n))]


def _run_trials(case: CalibrationCase, seeds: Sequence[int], effect: float, size: str, n_jobs: int,
                progress: Callable[[int], None] | None) -> list[Trial]:
    if n_jobs == 1:
        out = []
        for s in seeds:
            out.append(case.simulate(s, effect, size))
            if progress:
                progress(1)
        return out
    from joblib import Parallel, delayed

    out = []
    for trial in Parallel(n_jobs=n_jobs, return_as="generator")(delayed(case.simulate)(s, effect, size)
                                                                 for s in seeds):
        out.append(trial)
        if progress:
            progress(1)
    return out


def calibrate(case: CalibrationCase, seed: int = 0, n_null: int | None = None, n_power: int | None = None,
              size: str = "cohort", alpha: float = ALPHA, n_jobs: int = 1,
              progress: Callable[[int], None] | None = None) -> CalibrationResult:
    """Measure ``case``: ``n_null`` null data sets (default ``case.n_null``) and ``n_power`` for each of
    ``case.effects``, each from its own seed (:func:`trial_seeds`), through ``case.simulate``.

    Same ``seed``, counts and ``size``, same result, whatever ``n_jobs``. ``progress(k)`` is called after each
    data set."""
    n_null = case.n_null if n_null is None else int(n_null)
    n_power = case.n_power if n_power is None else int(n_power)
    null = _run_trials(case, trial_seeds(case.name, seed, 0.0, n_null), 0.0, size, n_jobs, progress)
    p = np.array([t.p_value for t in null], float)
    tested = p[np.isfinite(p)]
    rejections = int(np.sum(tested < alpha))
    covered = np.array([t.covered for t in null], float)
    covered = covered[np.isfinite(covered)]
    power, power_n, power_cov = {}, {}, {}
    for effect in case.effects:
        trials = _run_trials(case, trial_seeds(case.name, seed, effect, n_power), effect, size, n_jobs, progress)
        pe = np.array([t.p_value for t in trials], float)
        pe = pe[np.isfinite(pe)]
        power[effect] = float(np.mean(pe < alpha)) if pe.size else math.nan
        power_n[effect] = int(pe.size)
        ce = np.array([t.covered for t in trials], float)
        ce = ce[np.isfinite(ce)]
        power_cov[effect] = float(ce.mean()) if ce.size else math.nan
    return CalibrationResult(
        case=case, size_label=size, n_null=int(tested.size), rejections=rejections,
        size=rejections / tested.size if tested.size else math.nan,
        size_ci=wilson_interval(rejections, tested.size) if tested.size else (math.nan, math.nan),
        n_covered=int(covered.sum()), n_intervals=int(covered.size),
        coverage=float(covered.mean()) if covered.size else math.nan,
        coverage_ci=wilson_interval(int(covered.sum()), covered.size) if covered.size else (math.nan, math.nan),
        power=power, power_n=power_n, power_coverage=power_cov, null_trials=tuple(null))
