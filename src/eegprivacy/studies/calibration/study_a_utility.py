"""The trials of study A's utility cases: one simulated table (or cell) through the summary the ``dp_utility`` and
``dp_end_to_end`` stages run (the release − null difference, the fixed-sequence horizons, the MDE check)."""

from __future__ import annotations

import functools

import numpy as np

from eegprivacy.evaluation.calibration import ALPHA, Trial
from eegprivacy.studies.calibration.study_a_model import (
    UtilityShape,
    _data_set,
    _dims,
    _row,
    dp_utility_shape,
    end_to_end_shape,
)


def _adjusted(p_values_by_eps: dict[float, float], m: int) -> float:
    """The smallest fixed-sequence adjusted p of one sequence: m × the largest p at this or any larger ε."""
    running, best = 0.0, 1.0
    for eps in sorted(p_values_by_eps, reverse=True):
        p = p_values_by_eps[eps]
        running = max(running, p if np.isfinite(p) else 1.0)
        best = min(best, min(1.0, m * running))
    return best


# ---------------------------------------------------------------------------------------------------------------
# study_a.matched_null_difference (AUROC and balanced accuracy)
# ---------------------------------------------------------------------------------------------------------------
def _difference_cell(shape: UtilityShape) -> tuple[str, float]:
    """The cell of the difference cases: the first mechanism at the largest ε (where the fixed sequence starts and
    where the report's differences are decided)."""
    return shape.mechanisms[0], max(shape.epsilons)


def matched_null_trial(seed: int, effect: float, size: str, metric: str = "auroc", pooled: bool = False) -> Trial:
    """One data set of the difference cases through :func:`eegprivacy.studies.release.utility.summarise`."""
    from eegprivacy.studies.release.utility import summarise

    shape = dp_utility_shape()
    mechanism, epsilon = _difference_cell(shape)
    cell = shape.cell(mechanism, epsilon)
    dims = _dims(shape, size, family=False)
    delta = cell.delta_for(effect, metric)
    y, folder, cells = _data_set(np.random.default_rng(seed), dims, shape, [(mechanism, epsilon)],
                                 {(mechanism, epsilon): delta}, f"difference-{metric}{'-pooled' if pooled else ''}",
                                 pooled=pooled)
    labels = np.tile(y, dims.seeds) if pooled else y
    frame = summarise([(None, cells)], folder, labels, n_resamples=dims.bootstrap, confidence=0.95,
                      epsilons=[epsilon])
    row = _row(frame, arm="release_minus_null", metric=metric)
    truth = (cell.auroc(delta) - cell.auroc(0.0) if metric == "auroc"
             else cell.balanced_accuracy(delta) - cell.balanced_accuracy(0.0))
    return Trial(p_value=float(row["p_value"]), low=float(row["ci_low"]), high=float(row["ci_high"]), truth=truth,
                 estimate=float(row["value"]))


def _simulate_difference(seed: int, effect: float, size: str) -> Trial:
    return matched_null_trial(seed, effect, size, "auroc")


def _simulate_difference_ba(seed: int, effect: float, size: str) -> Trial:
    return matched_null_trial(seed, effect, size, "balanced_accuracy")


# ---------------------------------------------------------------------------------------------------------------
# study_a.horizon: the dp_utility table's fixed-sequence horizons
# ---------------------------------------------------------------------------------------------------------------
def _family_grid(shape: UtilityShape, size: str, mechanisms=None, epsilons=None,
                 tiny_mechanisms: int = 2) -> tuple[list, list, list]:
    """(mechanisms, ε, grid) of a family case: the table's at the cohort size, the top two ε of the first
    ``tiny_mechanisms`` mechanisms at the tiny one."""
    mechanisms = list(mechanisms or shape.mechanisms)
    epsilons = sorted(float(e) for e in (epsilons or shape.epsilons))
    if size == "tiny":
        mechanisms, epsilons = mechanisms[:tiny_mechanisms], epsilons[-2:]
    return mechanisms, epsilons, [(m, e) for m in mechanisms for e in epsilons]


def deciding_grid(mechanisms: list, epsilons: list, effect: float) -> tuple[list, list]:
    """(ε, grid) a family data set needs. Under the global null (``effect`` 0) only each sequence's largest ε:
    a fixed sequence stops at its first non-rejection, so every adjusted p of a sequence is at least m × its
    largest ε's p, and the table rejects exactly when some mechanism's largest-ε cell has p < α/m — the other
    cells never change the decision (``tests/test_calibration_study_a.py`` runs the summary both ways).
    With a planted effect the whole grid (the false horizon extension is read below the largest ε)."""
    if effect:
        return epsilons, [(m, e) for m in mechanisms for e in epsilons]
    top = max(epsilons)
    return [top], [(m, top) for m in mechanisms]


def _family_data_set(seed: int, effect: float, shape: UtilityShape, dims, mechanisms: list, epsilons: list,
                     grid: list, case: str, extra=None) -> tuple:
    """One data set of a family case from ``seed``, ``effect`` planted at every mechanism's largest ε only:
    (that ε, the planted shifts, then :func:`~.study_a_model._data_set`'s labels, folder and cells)."""
    top = max(epsilons)
    deltas = {(m, top): shape.cell(m, top).delta_for(effect) for m in mechanisms}
    return (top, deltas, *_data_set(np.random.default_rng(seed), dims, shape, grid, deltas, case, extra=extra))


def horizon_trial(seed: int, effect: float, size: str) -> Trial:
    """One ``dp_utility`` table (AUROC) under the global null, or with ``effect`` planted at every mechanism's
    largest ε only. ``p_value``: the smallest fixed-sequence adjusted p of the table (``p_adjusted`` of the
    summary), < α exactly when some mechanism keeps utility at some ε; ``estimate``: how many ε below the largest
    were declared kept (a false horizon extension when the effect sits at the largest ε only). Null data sets
    hold the cells that decide the table (:func:`deciding_grid`)."""
    from eegprivacy.studies.release.utility import summarise

    shape = dp_utility_shape()
    mechanisms, epsilons, _ = _family_grid(shape, size)
    epsilons, grid = deciding_grid(mechanisms, epsilons, effect)
    dims = _dims(shape, size, family=True)
    top, _, y, folder, cells = _family_data_set(seed, effect, shape, dims, mechanisms, epsilons, grid, "horizon")
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, epsilons=epsilons)
    rows = frame[(frame["arm"] == "release_minus_null") & (frame["metric"] == "auroc")]
    p = float(rows["p_adjusted"].min())
    kept = rows["keeps_utility"].astype(bool)
    if (p < ALPHA) != bool(kept.any()):
        raise AssertionError(f"the summary's p_adjusted ({p}) and keeps_utility ({kept.any()}) disagree")
    return Trial(p_value=p, estimate=float((kept & (rows["epsilon"] < top)).sum()))


# ---------------------------------------------------------------------------------------------------------------
# study_a.end_to_end_horizon: the lead table (five designs, α/5)
# ---------------------------------------------------------------------------------------------------------------
def end_to_end_trial(seed: int, effect: float, size: str) -> Trial:
    """One end-to-end table through :func:`eegprivacy.studies.release.end_to_end.summarise`: ``effect`` planted
    at every design's largest ε. ``p_value``: the smallest adjusted p over the designs (number of designs × the
    largest p at this or any larger ε; < α exactly when some design keeps utility); the interval: the lead
    design's release − null at its largest ε, whose truth is ``effect``. Null data sets hold the cells that decide
    the table (:func:`deciding_grid`), the lead design's largest ε among them."""
    from eegprivacy.studies.release.end_to_end import summarise

    shape = end_to_end_shape()
    designs, epsilons, _ = _family_grid(shape, size)
    epsilons, grid = deciding_grid(designs, epsilons, effect)
    grid = [cell for cell in grid if cell in shape.cells]  # a design may run a subset of the ε (design_epsilons)
    dims = _dims(shape, size, family=True)
    extra = {d: {"n_components": shape.components[d], "headline": True} for d in designs}
    top, _, y, folder, cells = _family_data_set(seed, effect, shape, dims, designs, epsilons, grid, "end-to-end",
                                                extra=extra)
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, headline=designs)
    rows = frame[frame["arm"] == "release_minus_null"]
    p = min(_adjusted(dict(zip(part["epsilon"], part["p_value"])), len(designs))
            for _, part in rows.groupby("mechanism"))
    kept = bool(rows["keeps_utility"].astype(bool).any())
    if (p < ALPHA) != kept:
        raise AssertionError(f"adjusted p {p} and keeps_utility {kept} disagree")
    lead = _row(rows, mechanism=designs[0], epsilon=top)
    return Trial(p_value=p, low=float(lead["ci_low"]), high=float(lead["ci_high"]), truth=float(effect),
                 estimate=float(lead["value"]))


# ---------------------------------------------------------------------------------------------------------------
# study_a.end_to_end_mde: the minimum detectable effect the lead table prints beside every cell
# ---------------------------------------------------------------------------------------------------------------
#: The cell whose printed MDE is checked: the design and ε the issue that asked for the MDE was about.
MDE_CELL = ("public_pls", 10.0)
#: Null data sets whose median bootstrap SD sets the unit of the planted effects: the formula is checked at the SD
#: the model's own data give, not at the real cell's (the model's variance is the dp_utility cells' median, not
#: this cell's), so a mismatch of the two variances cannot pass for a wrong formula, nor hide one.
MDE_PILOT = 20


def _stated_power() -> float:
    """The power the lead table's MDE column is stated at (``params/dp_end_to_end.yaml``: ``power``)."""
    from eegprivacy.paths import repo_root
    from eegprivacy.studies.release.config import DPEndToEndConfig

    return float(DPEndToEndConfig.load(repo_root() / "params" / "dp_end_to_end.yaml", "dp_end_to_end").power)


def _mde_cell_summary(seed: int, target: float, size: str):
    """The release − null row :func:`eegprivacy.studies.release.end_to_end.summarise` prints at ``MDE_CELL`` on
    one data set of the null model with an AUROC difference of ``target`` planted, and the planted truth."""
    from eegprivacy.studies.release.end_to_end import summarise

    shape = end_to_end_shape()
    design, epsilon = MDE_CELL
    dims = _dims(shape, size, family=False)
    cell = shape.cell(design, epsilon)
    delta = cell.delta_for(target)
    y, folder, cells = _data_set(np.random.default_rng(seed), dims, shape, [(design, epsilon)],
                                 {(design, epsilon): delta}, "end-to-end-mde",
                                 extra={design: {"n_components": shape.components[design], "headline": True}})
    frame = summarise([(None, cells)], folder, y, n_resamples=dims.bootstrap, confidence=0.95, headline=[design])
    return _row(frame[frame["protocol"] == "threshold_free"], arm="release_minus_null"), \
        cell.auroc(delta) - cell.auroc(0.0)


@functools.lru_cache(maxsize=None)
def model_mde(size: str) -> float:
    """The MDE the lead table would print at ``MDE_CELL`` on the null model's data: the stage's own formula
    (:func:`~eegprivacy.studies.release.end_to_end.minimum_detectable_effect`) at the table's α/designs on the
    median bootstrap SD (``se``) the summary prints over ``MDE_PILOT`` null data sets of their own seeds (a
    SeedSequence of their own, so no trial's data set is among them)."""
    from eegprivacy.evaluation.calibration import trial_seeds
    from eegprivacy.studies.release.end_to_end import minimum_detectable_effect

    seeds = trial_seeds("study_a.end_to_end_mde:pilot", 0, 0.0, MDE_PILOT)
    se = float(np.median([float(_mde_cell_summary(s, 0.0, size)[0]["se"]) for s in seeds]))
    return minimum_detectable_effect(se, alpha=ALPHA / len(end_to_end_shape().mechanisms), power=_stated_power())


def mde_trial(seed: int, effect: float, size: str) -> Trial:
    """One (design, ε) cell of the lead table through :func:`eegprivacy.studies.release.end_to_end.summarise`
    with ``effect`` × the MDE the table's formula gives on the null model's data planted (:func:`model_mde`; 1.0:
    where the power should be the stated 80 %). ``p_value`` is the cell's one-sided p, tested at α/designs as the table
    tests it (the summary's ``alpha`` column; the trial reports p × designs, < 0.05 exactly when that test
    rejects); the interval is the cell's release − null interval, whose truth is the planted AUROC difference."""
    target = float(effect) * model_mde(size) if effect else 0.0
    row, truth = _mde_cell_summary(seed, target, size)
    designs = len(end_to_end_shape().mechanisms)
    return Trial(p_value=min(1.0, designs * float(row["p_value"])), low=float(row["ci_low"]),
                 high=float(row["ci_high"]), truth=truth, estimate=float(row["value"]))
