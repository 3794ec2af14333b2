"""Bootstrap replicates from resample counts vs materialising every resample, same resamples, same numbers.

Two shapes, both SYNTHETIC data of the studies' shapes (not their cohorts):

- ``study_a``: study A's patient bootstrap of one arm's LOSO predictions (84 patients, 10,000 stratified resamples,
  the stage's count), AUROC per resample: :func:`~eegprivacy.evaluation.cluster_bootstrap.on_resamples` (one
  patient pair matrix and a matrix product) vs ``auroc_along`` on the gathered (resamples × patients) scores (a
  sort of every resample, the old path).
- ``lira``: study B's LiRA pool (10 target models × 720 trials of 16 subjects, 500 two-way resamples, the stage's
  count): the pooled AUROC and the TPR at 2 % FPR of every resample from its (model, subject) counts
  (``lira.pooled._resampled_metrics``) vs building each resample and scoring it (``lira.pooled._pooled_metrics``, the
  old path).

The values must agree: study A's exactly (:data:`ATOL` 0, both sum halves of integer counts), LiRA's to 1e-12 (the
old path's AUROC is scikit-learn's trapezoid, which rounds differently); so the ratio is the whole story. One core
each.
"""

from __future__ import annotations

import numpy as np

from benchmarks._common import best_of, ratio_entry

NAME = "resample_replicates"
DESCRIPTION = "bootstrap replicates from resample counts vs materialised resamples (study A patients, LiRA pool)"
TARGET_RATIO = 3.0
ATOL = 0.0


def _study_a(quick: bool):
    from eegprivacy.evaluation.cluster_bootstrap import auroc_along, bootstrap_indices, on_resamples

    rng = np.random.default_rng(0)
    y = (np.arange(84) < 39).astype(int)
    scores = rng.normal(size=84) + 0.4 * y
    idx = bootstrap_indices(y, 2_000 if quick else 10_000, seed=1)
    project_s, fast = best_of(lambda: on_resamples(auroc_along, scores, y, idx))
    baseline_s, slow = best_of(lambda: auroc_along(scores[idx], y[idx]))
    return project_s, baseline_s, float(np.max(np.abs(fast - slow)))


def _lira(quick: bool):
    from eegprivacy.studies.federated.lira.pooled import (
        _cluster_codes,
        _pooled_metrics,
        _resampled_metrics,
        two_way_resamples,
    )

    rng = np.random.default_rng(1)
    models, trials, subjects = 10, 720, 16
    cluster_of = _cluster_codes(np.repeat(np.arange(subjects), trials // subjects), trials)
    members = (rng.random((models, trials)) < 0.8).astype(int)
    scores = rng.normal(size=(models, trials)) + 1.2 * members
    resamples = two_way_resamples(models, subjects, 100 if quick else 500, seed=2)
    fprs = {"tpr_at_0.02": 0.02}
    rows = [np.flatnonzero(cluster_of == c) for c in range(subjects)]

    def materialised():
        out = []
        for m, c in resamples:
            t = np.concatenate([rows[k] for k in c])
            out.append(_pooled_metrics(members[m][:, t], scores[m][:, t], fprs))
        return out

    project_s, fast = best_of(lambda: _resampled_metrics(members, scores, cluster_of, resamples, fprs, True),
                              repeats=2)
    baseline_s, slow = best_of(materialised, repeats=1)
    diff = max(abs(a[k] - b[k]) for a, b in zip(fast, slow) for k in a)
    return project_s, baseline_s, float(diff)


def run(quick: bool = False) -> dict:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        a = _study_a(quick)
        b = _lira(quick)
    project_s, baseline_s = a[0] + b[0], a[1] + b[1]
    same = a[2] <= ATOL and b[2] <= 1e-12  # sklearn's trapezoid AUROC vs exact half-counts: float rounding only
    return ratio_entry(project_s, baseline_s, TARGET_RATIO, same, tolerance={"atol": ATOL, "atol_lira_auroc": 1e-12},
                       shapes={"study_a": {"ratio": round(a[1] / a[0], 2), "max_abs_difference": a[2]},
                               "lira": {"ratio": round(b[1] / b[0], 2), "max_abs_difference": b[2]}},
                       note="one core; ratio = materialised seconds / counts seconds over both shapes")
