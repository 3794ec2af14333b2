"""The trials of ``eegprivacy audit-cohort``'s verdict cases: the audit's own chain (summary, summary document,
headline) on study A's null model, its utility decision and the intervals of its first sentence."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from eegprivacy.evaluation.calibration import ALPHA, Trial
from eegprivacy.studies.calibration.study_a_model import (
    BOOTSTRAP,
    DATASET,
    TINY,
    UtilityShape,
    _data_set,
    _dims,
    _metrics,
    _row,
    dp_utility_shape,
)
from eegprivacy.studies.calibration.study_a_utility import _adjusted, _family_data_set, _family_grid, deciding_grid

#: The membership case's null: at this ε membership moves the attack's AUROC by ≲ 1e-4 (noise SD ~2·10⁴ per
#: coordinate against rows clipped to norm 2).
MEMBERSHIP_NULL_EPSILON = 1e-3
#: Independent data sets behind the re-identification truth (its Monte-Carlo error: ~0.003 at the cohort size,
#: ~0.02 at the tiny one, against Wilson half-widths of ~0.08 and ~0.25).
REID_TRUTH_REPLICATES = {"cohort": 300, "tiny": 60}


# ---------------------------------------------------------------------------------------------------------------
# audit-cohort: the verdict's first sentence
# ---------------------------------------------------------------------------------------------------------------
def _audit_cohort(X: np.ndarray, y: np.ndarray, reid: tuple | None = None):
    from eegprivacy.studies.cohort.loading import Cohort

    n1 = int(np.sum(y))
    summary = {"n_patients": int(len(y)), "n_label_1": n1, "n_label_0": int(len(y) - n1),
               "n_features": int(X.shape[1])}
    return Cohort(dataset="calibration", dataset_version="calibration", features_hash="calibration",
                  synthetic=True, X=X, y=np.asarray(y, dtype=int), feature_names=[f"f{j}" for j in range(X.shape[1])],
                  summary=summary, reid_release=None if reid is None else reid[0],
                  reid_auxiliary=None if reid is None else reid[1],
                  reid_kind="same-session halves" if reid is not None else "none",
                  reid_reason="" if reid is not None else "one recording per subject")


def _audit_rows(cohort, config, utility_cells: list, attack_frames: dict, folder: Path):
    """The audit's summary rows (:func:`eegprivacy.studies.cohort.summary.summarise`, as ``run_audit`` calls it) of
    the utility cells kept in ``folder`` and the attack cells' tidy rows."""
    from eegprivacy.studies.cohort.summary import summarise
    from eegprivacy.studies.cohort.sweeps import Sweep

    sweeps = [Sweep("utility", None, utility_cells, "utility")]
    frames = [None]
    for kind, frame in attack_frames.items():
        sweeps.append(Sweep(kind, None, [], kind))
        frames.append(frame)
    return summarise(cohort, config, sweeps, frames, folder)


def _audit_chain(cohort, config, utility_cells: list, attack_frames: dict, folder: Path) -> dict:
    """summarise -> summary_document (whose ``headline`` is the verdict's lead), as ``run_audit`` calls them."""
    from eegprivacy.studies.cohort.verdict import summary_document

    return summary_document(cohort, config, _audit_rows(cohort, config, utility_cells, attack_frames, folder))


def _audit_shape(size: str, family: bool = True):
    """(audit config, study A shape, dims): the audit's own defaults (mechanisms, ε grid, seeds, nested seeds) on
    a cohort shaped like study A's (the audit runs on a user's cohort; MSU is the cohort the project audits)."""
    from eegprivacy.studies.cohort.config import AuditConfig

    config = AuditConfig()
    shape = dp_utility_shape()
    return config, shape, _dims(shape, size, family=family, seeds=config.noise_seeds,
                                nested_seeds=config.nested_seeds)


def verdict_trial(seed: int, effect: float, size: str) -> Trial:
    """The audit's utility decision (``effect`` planted at every mechanism's largest ε of the audit's grid) and the
    release AUROC interval its first sentence prints at the chosen ε (the horizon, else the largest ε). Null data
    sets hold the cells that decide the verdict (:func:`deciding_grid`; the chosen ε is then the largest, as it is
    on the whole grid unless the verdict is a false claim)."""
    import dataclasses

    config, shape, dims = _audit_shape(size)
    # tiny: one mechanism (the summary document's cost grows with the grid; the cohort size has both)
    mechanisms, epsilons, _ = _family_grid(shape, size, config.mechanisms, config.epsilons, tiny_mechanisms=1)
    epsilons, grid = deciding_grid(mechanisms, epsilons, effect)
    config = dataclasses.replace(config, mechanisms=tuple(mechanisms), epsilons=tuple(epsilons),
                                 bootstrap=dims.bootstrap)
    _, deltas, y, folder, cells = _family_data_set(seed, effect, shape, dims, mechanisms, epsilons, grid,
                                                   "audit-verdict")
    cohort = _audit_cohort(np.zeros((dims.n, 1)), y)
    document = _audit_chain(cohort, config, cells, {}, folder)
    points = document["headline"]
    p = min(_adjusted({float(e): (document["utility"][m][f"{e:g}"].get("release_minus_null_auroc") or {})
                       .get("p_value", math.nan) for e in epsilons}, len(mechanisms)) for m in mechanisms)
    if (p < ALPHA) != any(point["why"] == "horizon" for point in points):
        raise AssertionError(f"adjusted p {p} and the verdict's horizons {[pt['why'] for pt in points]} disagree")
    lead = points[0]
    release = lead["release_auroc"]
    cell = shape.cell(lead["mechanism"], lead["epsilon"])
    truth = cell.auroc(deltas.get((lead["mechanism"], lead["epsilon"]), 0.0))
    return Trial(p_value=p, low=float(release["ci_low"]), high=float(release["ci_high"]), truth=truth,
                 estimate=float(release["value"]))


def _attack_config(size: str, epsilon: float):
    """The audit's config for the attack cases: its first mechanism at one ε (the verdict's ε is then that one),
    its seeds, trials and member fraction."""
    import dataclasses

    config, shape, dims = _audit_shape(size, family=False)
    config = dataclasses.replace(config, mechanisms=config.mechanisms[:1], epsilons=(float(epsilon),),
                                 bootstrap=BOOTSTRAP["tiny"])
    if size == "tiny":
        config = dataclasses.replace(config, membership_trials=TINY["membership_trials"])
    return config, shape, dims


def _n_features(size: str) -> int:
    import json

    if size == "tiny":
        return TINY["features"]
    meta = json.loads(_metrics(f"features_{DATASET}.json").read_text())
    return int(meta["n_feature_columns"])


def _halves(rng: np.random.Generator, K: int, d: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(released half, attacker's half) of K subjects: a subject's own vector (``share`` of the variance) plus
    independent noise in each half."""
    own = rng.standard_normal((K, d))
    first = math.sqrt(share) * own + math.sqrt(1.0 - share) * rng.standard_normal((K, d))
    second = math.sqrt(share) * own + math.sqrt(1.0 - share) * rng.standard_normal((K, d))
    return first, second


def _cell_frame(rows: list[dict], mechanism: str, epsilon: float, seed: int):
    import pandas as pd

    return pd.DataFrame([{**r, "mechanism": mechanism, "epsilon": float(epsilon), "seed": seed} for r in rows])


def _attack_trial(seed: int, effect: float, size: str, kind: str):
    """One audit with an attack sweep of ``kind`` at the audit's first mechanism and one ε (the largest of its
    grid for re-identification, :data:`MEMBERSHIP_NULL_EPSILON` for membership); returns the summary row of the
    attack at that (mechanism, ε). The verdict prints that row as it is: ``summary_document`` copies it
    (``_entry``) and ``headline`` picks it at the verdict's ε, which is this one ε."""
    import dataclasses

    import pandas as pd

    from eegprivacy.studies.cohort import cells as audit
    from eegprivacy.studies.cohort.config import AuditConfig

    epsilon = (max(AuditConfig().epsilons) if kind == "reidentification" else MEMBERSHIP_NULL_EPSILON)
    config, shape, dims = _attack_config(size, epsilon)
    mechanism = config.mechanisms[0]
    rng = np.random.default_rng(seed)
    d = _n_features(size)
    # the utility cells the audit's summary needs beside its attacks (they change no attack row): two seeds, the
    # fewest its horizon test reads, no nested protocol
    utility_dims = dataclasses.replace(dims, seeds=2, nested_seeds=0)
    y, folder, cells = _data_set(rng, utility_dims, _with_cell(shape, mechanism, epsilon), [(mechanism, epsilon)], {},
                                 f"audit-{kind}")
    cell = {"mechanism": mechanism, "epsilon": epsilon, "clip_norm": config.clip_norm, "delta": config.delta}
    frames = []
    if kind == "reidentification":
        first, second = _halves(rng, dims.n, d, effect)
        X, reid = first, (first, second)
        for s in range(dims.seeds):
            frames.append(_cell_frame(audit.reidentification_cell(cell, s, release_base=first, auxiliary=second),
                                      mechanism, epsilon, s))
    else:
        X, reid = rng.standard_normal((dims.n, d)), None
        for s in range(dims.seeds):
            frames.append(_cell_frame(audit.membership_cell(cell, s, population=X, trials=config.membership_trials,
                                                            member_fraction=config.member_fraction),
                                      mechanism, epsilon, s))
    cohort = _audit_cohort(X, y, reid)
    rows = _audit_rows(cohort, config, cells, {kind: pd.concat(frames, ignore_index=True)}, folder)
    metric = "top1_accuracy" if kind == "reidentification" else "auroc_likelihood"
    return _row(rows, arm=kind, mechanism=mechanism, epsilon=float(epsilon), metric=metric)


def _with_cell(shape: UtilityShape, mechanism: str, epsilon: float) -> UtilityShape:
    """``shape`` with a cell at (mechanism, ε) (the membership null's ε is below the grid: it borrows the smallest
    ε's structure, which only fills the utility part the chain needs)."""
    import dataclasses

    if (mechanism, float(epsilon)) in shape.cells:
        return shape
    nearest = min((e for m, e in shape.cells if m == mechanism), key=lambda e: abs(e - float(epsilon)))
    return dataclasses.replace(shape, cells={**shape.cells, (mechanism, float(epsilon)): shape.cell(mechanism,
                                                                                                     nearest)})


@functools.lru_cache(maxsize=None)
def reidentification_truth(size: str, share: float) -> float:
    """The expected top-1 accuracy of the audit's re-identification cell at ``size`` and ``share`` (:mod:`.study_a`'s
    docstring): 1/K under the null (the attacker's half independent of the released one), else the mean over
    :data:`REID_TRUTH_REPLICATES` independent cohorts, one noise seed each."""
    from eegprivacy.studies.cohort import cells as audit
    from eegprivacy.studies.cohort.config import AuditConfig

    config, _, dims = _attack_config(size, max(AuditConfig().epsilons))
    if share == 0:
        return 1.0 / dims.n
    d = _n_features(size)
    cell = {"mechanism": config.mechanisms[0], "epsilon": max(config.epsilons), "clip_norm": config.clip_norm,
            "delta": config.delta}
    rng = np.random.default_rng([0x52454944, int(round(share * 1e6)), dims.n, d])
    hits = []
    for r in range(REID_TRUTH_REPLICATES[size]):
        first, second = _halves(rng, dims.n, d, share)
        hits.append(audit.reidentification_cell(cell, 10_000 + r, release_base=first, auxiliary=second)[0]["value"])
    return float(np.mean(hits))


def reidentification_trial(seed: int, effect: float, size: str) -> Trial:
    entry = _attack_trial(seed, effect, size, "reidentification")
    return Trial(low=float(entry["ci_low"]), high=float(entry["ci_high"]), truth=reidentification_truth(size, effect),
                 estimate=float(entry["value"]))


def membership_trial(seed: int, effect: float, size: str) -> Trial:
    if effect != 0:
        raise ValueError("the membership case has no planted effect (the study_a module's docstring)")
    entry = _attack_trial(seed, effect, size, "membership")
    return Trial(low=float(entry["ci_low"]), high=float(entry["ci_high"]), truth=0.5, estimate=float(entry["value"]))
