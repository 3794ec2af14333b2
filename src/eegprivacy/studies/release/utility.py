"""The ``dp_utility`` sweep: how much patient-level utility a DP release keeps, judged against its matched null.

Every row goes through one protocol: a leave-one-patient-out MLP, scored threshold-free (LOSO AUROC, the
headline) and with a decision threshold chosen from one grid (:data:`THRESHOLD_GRID`) by the honest *nested*
protocol (inner split of the training patients) and by the paper's *optimistic* protocol (pooled LOSO
predictions; it sees the test labels, so it is kept only as "the paper's protocol", beside its own control).

The arms of a dataset's table:

- ``baseline`` — the non-private patient table;
- ``permuted`` — the same with permuted labels (nothing to learn: what the protocol scores on no signal);
- ``release`` — one DP release per (mechanism, ε, noise seed), noise drawn independently for every
  (mechanism, ε, seed) (:func:`~eegprivacy.studies.release.table.noise_generator`);
- ``matched_null`` — the same mechanism, noise scale *and noise draw* applied to a zero-signal table of the same
  shape, through the same scaling, clipping and LOSO. A release "keeps utility" only when its difference from this
  null is significant; the null absorbs whatever the protocol extracts from noise alone.

Each cell keeps its per-patient predictions (never logged) so :func:`summarise` can resample patients: intervals
are over ``subjects+seeds`` (a stratified cluster bootstrap of patients, crossed with a bootstrap of the seeds),
release − null is paired by seed and patient resample, and the "keeps utility" decisions are Holm-corrected over
every (mechanism, ε) cell of the table. A mechanism's *utility horizon* is the smallest ε that keeps utility.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.evaluation import LOSOEvaluation
from eegprivacy.evaluation.cluster_bootstrap import (
    auroc_along,
    balanced_accuracy_along,
    bootstrap_indices,
    bootstrap_p_value,
    combine_seeds,
    holm,
    percentile_interval,
    seed_indices,
    utility_horizon,
)
from eegprivacy.evaluation.thresholds import DP_GRID
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, PrefetchedCells, config_key, expand_grid
from eegprivacy.privacy import RandomizedResponse
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import PatientTable, release, release_cells, sweep_runner

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "specificity", "balanced_accuracy", "f1",
                          "tn", "fp", "fn", "tp")
WILSON = ("accuracy", "recall", "specificity")
ARMS = ("baseline", "permuted", "release", "matched_null")
# One threshold grid for every row (the paper used a narrower one for the non-private rows; a control is only a
# control when it goes through the same grid as what it controls).
THRESHOLD_GRID = DP_GRID
THRESHOLD_FREE = "threshold_free"
# Seeds the permuted-label control's permutation with a stream of its own (the MLP takes the plain seed).
_PERMUTATION_STREAM_TAG = 0x5045524D
_LABEL_STREAM_TAG = 0x4C41424C  # randomized-response coins (label DP)
PREDICTIONS = "_predictions"
# The summary's metrics: (protocol, metric, what the per-patient values are).
SUMMARY_METRICS = ((THRESHOLD_FREE, "auroc", "proba"), ("nested", "balanced_accuracy", "pred_nested"))


def evaluation_rows(result, y: np.ndarray) -> list[dict]:
    """One row per (protocol, metric), Wilson bounds where they apply, chance levels beside the scores, plus the
    threshold-free LOSO AUROC (protocol ``threshold_free``)."""
    majority = max(y.mean(), 1 - y.mean())
    chance = {"balanced_accuracy": 0.5, "accuracy": majority, "recall": float("nan")}
    rows = [{"protocol": THRESHOLD_FREE, "metric": "auroc", "value": float(auroc_along(result.proba, result.y_true)),
             "chance": 0.5, "n": int(len(result.y_true))}]
    for name, protocol in result.protocols.items():
        m = protocol.metrics
        for metric in CLASSIFICATION_METRICS:
            row = {"protocol": name, "metric": metric, "value": float(m[metric]),
                   "chance": chance.get(metric, float("nan"))}
            if metric in WILSON:
                row.update(ci_low=m[f"{metric}_ci_low"], ci_high=m[f"{metric}_ci_high"], n=m["n"])
            rows.append(row)
        rows.append({"protocol": name, "metric": "threshold", "value": float(np.mean(protocol.thresholds))})
    return rows


def inner_folds_of(config: DPUtilityConfig) -> int | None:
    """The nested protocol's inner split: None for LOSO, else the number of folds."""
    return None if config.nested_inner_folds == "loso" else config.nested_inner_folds


def arm_table(config: dict, seed: int, X: np.ndarray, y: np.ndarray, *,
              common_random_numbers: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of one cell's arm: the table, the table with permuted labels, a release, or the release
    mechanism applied to a zero-signal table with the release's own noise draw."""
    arm = config["arm"]
    if arm == "baseline":
        return X, y
    if arm == "permuted":
        return X, np.random.default_rng([_PERMUTATION_STREAM_TAG, seed]).permutation(y)
    if arm not in ("release", "matched_null"):
        raise ValueError(f"unknown arm {arm!r}; one of {ARMS}")
    source = X if arm == "release" else np.zeros_like(X)
    _, released = release(source, config["mechanism"], config["epsilon"], config["delta"], config["clip_norm"],
                          seed, common_random_numbers=common_random_numbers)
    return released, y


def released_labels(config: dict, seed: int, y: np.ndarray) -> np.ndarray | None:
    """The labels an analyst of a release trains on: randomized response at ``label_epsilon`` (label DP, its
    coins independent per (mechanism, ε, seed) and of the feature noise), or None when the labels travel in the
    clear (ε = ∞, the default)."""
    label_epsilon = float(config.get("label_epsilon", math.inf))
    if config["arm"] not in ("release", "matched_null") or not math.isfinite(label_epsilon):
        return None
    code = zlib.crc32(f"{config['mechanism']}|{float(config['epsilon'])!r}".encode())
    return RandomizedResponse(label_epsilon).release(y, np.random.default_rng([_LABEL_STREAM_TAG, code, seed]))


def utility_cell(config: dict, seed: int, *, X: np.ndarray, y: np.ndarray) -> list[dict]:
    """One LOSO evaluation of one arm (see the module docstring). A pure function of (config, seed), so cells can
    be computed in any process. With label DP the models train (and the nested protocol picks thresholds) on the
    randomized labels, and every score is against the true ones. The last item (``metric == "_predictions"``)
    holds the per-patient outer probabilities and both protocols' 0/1 predictions for the patient bootstrap;
    :func:`keeping_predictions` stores it and keeps it out of the tidy rows and MLflow."""
    features, labels = arm_table(config, seed, X, y,
                                 common_random_numbers=bool(config.get("common_random_numbers", False)))
    nested = seed < int(config["nested_seeds"])
    inner = config["nested_inner"]
    evaluation = LOSOEvaluation(threshold_grid=THRESHOLD_GRID, random_state=seed, nested=nested,
                                inner_folds=None if inner == "loso" else int(inner))
    result = evaluation.evaluate(features, labels, np.arange(len(labels)),
                                 y_fit=released_labels(config, seed, labels))
    rows = evaluation_rows(result, labels)
    nested_pred = (result.protocols["nested"].y_pred.astype(float) if nested
                   else np.full(len(labels), np.nan))
    rows.append({"metric": PREDICTIONS, "proba": result.proba.astype(float),
                 "pred_optimistic": result.protocols["optimistic"].y_pred.astype(float),
                 "pred_nested": nested_pred, "y": np.asarray(result.y_true, dtype=int)})
    return rows


def predictions_path(folder: str | Path, key: str) -> Path:
    return Path(folder) / "predictions" / f"{key}.npz"


def keeping_predictions(compute: Callable[[dict, int], list[dict]], folder: str | Path):
    """Wrap a cell function: its ``_predictions`` item is saved under ``folder`` (atomically, before the runner
    writes the cell's rows) and not handed on, so per-patient values reach neither the tidy rows nor MLflow."""
    def call(config: dict, seed: int) -> list[dict]:
        rows = compute(config, seed)
        for r in rows:
            if r.get("metric") == PREDICTIONS:
                path = predictions_path(folder, config_key({**config, "seed": seed}))
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                    np.savez(handle, **{k: v for k, v in r.items() if k != "metric"})
        return [r for r in rows if r.get("metric") != PREDICTIONS]
    return call


def load_predictions(folder: str | Path, cells: list[Cell]) -> dict[int, dict[str, np.ndarray]]:
    """Per-patient predictions of ``cells`` by seed."""
    out = {}
    for cell in cells:
        with np.load(predictions_path(folder, cell.key)) as data:
            out[cell.seed] = {k: data[k] for k in data.files}
    return out


def run_keeping_predictions(plan: list, cell_fn: Callable[[dict, int], list[dict]], folder: str | Path,
                            n_jobs: int) -> list[pd.DataFrame]:
    """Run every (runner, cells) of ``plan``, pending cells computed ahead in ``n_jobs`` processes, each cell's
    per-patient predictions kept under ``folder`` (:func:`keeping_predictions`). A cell whose rows are on disk but
    whose predictions were lost is computed again, so a summary never lacks a cell's patients."""
    for runner, cells in plan:
        for cell in cells:
            if runner.cell_path(cell).exists() and not predictions_path(folder, cell.key).exists():
                runner.cell_path(cell).unlink()
    jobs = [(cell.config, cell.seed) for runner, cells in plan for cell in runner.pending(cells)]
    compute = keeping_predictions(PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs), folder)
    return [runner.run(cells, compute) for runner, cells in plan]


def per_seed_replicates(folder: str | Path, cells: list[Cell], values: str, metric_fn, y: np.ndarray,
                        idx: np.ndarray, *, own_labels: bool = False) -> tuple[float, np.ndarray, tuple[int, ...]]:
    """One arm's kept predictions -> (mean of ``metric_fn`` over seeds, (seeds, resamples) metric on every patient
    resample ``idx``, the seeds). Seeds whose ``values`` are not all finite (e.g. no nested protocol) are left out.

    Scores are against ``y``, and predictions kept for other labels (a stale cache) are refused — except with
    ``own_labels`` (the permuted-label control), which is scored against the labels each seed trained and was
    evaluated on, so the control shows what the protocol makes of labels with nothing behind them."""
    preds = load_predictions(folder, cells)
    seeds = tuple(sorted(s for s in preds if np.isfinite(preds[s][values]).all()))
    if not seeds:
        return float("nan"), np.empty((0, idx.shape[0])), ()
    labels = []
    for seed in seeds:
        kept = np.asarray(preds[seed]["y"], dtype=int)
        if own_labels and np.array_equal(np.sort(kept), np.sort(y)):
            labels.append(kept)
        elif not own_labels and np.array_equal(kept, y):
            labels.append(y)
        else:
            raise RuntimeError(f"{folder}: kept predictions of seed {seed} are for other labels than the cohort's; "
                               "delete the cell cache and rerun")
    per_patient = np.stack([preds[seed][values] for seed in seeds])  # (seeds, patients)
    point = float(np.mean([metric_fn(v, lab) for v, lab in zip(per_patient, labels)]))
    return point, np.stack([metric_fn(v[idx], lab[idx]) for v, lab in zip(per_patient, labels)]), seeds


def utility_plan(table: PatientTable, release_config: DPReleaseConfig, config: DPUtilityConfig, label: str, *,
                 cells_dir: str | Path, progress: bool) -> list:
    """(runner, cells) of the baseline, the permuted-label control and one sweep per mechanism whose cells hold
    both its releases and their matched nulls (an MLflow parent run each)."""
    cell_base = {**table.base_config, "nested_seeds": config.nested_seeds,
                 "nested_inner": inner_folds_of(config) or "loso", "code_hash": code_hash("dp_utility")}
    params = {"dp_release": release_config.to_dict(), "dp_utility": config.to_dict(), "label": label,
              **table.base_config}
    sweep = dict(cells_dir=cells_dir, params=params, progress=progress, model="mlp")
    seeds = range(config.baseline_mlp_seeds)
    plan = [
        (sweep_runner(table, "dp_utility", "none", mechanism="none", **sweep),
         expand_grid({"arm": ["baseline"], "mechanism": ["none"], "epsilon": [math.inf]}, seeds=seeds,
                     base=cell_base)),
        (sweep_runner(table, "dp_utility", "permuted_labels", mechanism="none", attack="permuted_labels", **sweep),
         expand_grid({"arm": ["permuted"], "mechanism": ["permuted_labels"], "epsilon": [math.inf]}, seeds=seeds,
                     base=cell_base)),
    ]
    extra = {**cell_base, "common_random_numbers": bool(release_config.common_random_numbers),
             "label_epsilon": float(release_config.label_epsilon)}
    for mechanism in config.mechanisms:
        cells = [Cell({**cell.config, "arm": arm}, cell.seed)
                 for cell in release_cells(table, release_config, mechanism, extra=extra)
                 for arm in ("release", "matched_null")]
        plan.append((sweep_runner(table, "dp_utility", mechanism, mechanism=mechanism, delta=release_config.delta,
                                  **sweep), cells))
    return plan


def predictions_dir(cells_dir: str | Path, dataset: str) -> Path:
    return Path(cells_dir) / "dp_utility" / dataset


def utility_sweeps(table: PatientTable, release_config: DPReleaseConfig, config: DPUtilityConfig, label: str, *,
                   cells_dir: str | Path, progress: bool) -> tuple[list, list[pd.DataFrame]]:
    """Run the plan (:func:`utility_plan`), pending cells computed ahead in ``config.n_jobs`` processes; returns the
    plan and each sweep's per-seed rows. A cell whose predictions were lost is computed again."""
    plan = utility_plan(table, release_config, config, label, cells_dir=cells_dir, progress=progress)
    cell_fn = functools.partial(utility_cell, X=table.X.to_numpy(), y=table.y)
    # Whole cells in n_jobs processes, each fitting one MLP at a time; every fit is seeded and single-threaded,
    # so n_jobs changes no number.
    return plan, run_keeping_predictions(plan, cell_fn, predictions_dir(cells_dir, table.dataset), config.n_jobs)


# ---------------------------------------------------------------------------------------------------------------
# Summary: intervals over patients and seeds, release − null, horizons
# ---------------------------------------------------------------------------------------------------------------
def summarise(plan: list, folder: str | Path, y: np.ndarray, *, n_resamples: int, confidence: float,
              epsilons: list[float]) -> pd.DataFrame:
    """Tidy summary rows of one dataset's table.

    - every arm at every (mechanism, ε): AUROC and nested balanced accuracy, mean over seeds, interval over
      ``subjects+seeds``;
    - ``baseline_minus_permuted``: the non-private utility above its permuted-label control (same patient
      resamples, seeds resampled apart);
    - ``release_minus_null`` per (mechanism, ε), paired; its one-sided bootstrap p-value, the Holm-adjusted
      p-value over all (mechanism, ε) cells of the table, and ``keeps_utility`` (adjusted p < 1 − confidence);
    - ``horizon`` per mechanism: the smallest ε that keeps utility (NaN when none does).
    """
    y = np.asarray(y, dtype=int)
    idx = bootstrap_indices(y, n_resamples)
    alpha = 1.0 - confidence
    rows: list[dict] = []

    def add(arm, mechanism, epsilon, protocol, metric, value, low, high, n_seeds, **extra):
        rows.append({"arm": arm, "mechanism": mechanism, "epsilon": float(epsilon), "protocol": protocol,
                     "metric": metric, "value": value, "ci_low": low, "ci_high": high, "ci_over": "subjects+seeds",
                     "n": int(len(y)), "n_seeds": n_seeds, "chance": 0.5 if arm in ARMS else 0.0, **extra})

    stats: dict[tuple, tuple[float, np.ndarray, int]] = {}
    for _, cells in plan:
        by_group: dict[tuple, list[Cell]] = {}
        for cell in cells:
            c = cell.config
            by_group.setdefault((c["arm"], c["mechanism"], float(c["epsilon"])), []).append(cell)
        for (arm, mechanism, epsilon), group in by_group.items():
            for protocol, metric, key in SUMMARY_METRICS:
                fn = auroc_along if metric == "auroc" else balanced_accuracy_along
                point, per_seed, seeds = per_seed_replicates(folder, group, key, fn, y, idx,
                                                             own_labels=arm == "permuted")
                n_seeds = len(seeds)
                if n_seeds == 0:
                    continue
                stats[(arm, mechanism, epsilon, metric)] = (point, per_seed, n_seeds)
                reps = combine_seeds(per_seed, seed_indices(n_seeds, n_resamples, seed=1))
                add(arm, mechanism, epsilon, protocol, metric, point, *percentile_interval(reps, confidence), n_seeds)

    protocols = dict((m, p) for p, m, _ in SUMMARY_METRICS)
    for metric, protocol in protocols.items():
        base = stats.get(("baseline", "none", math.inf, metric))
        perm = stats.get(("permuted", "permuted_labels", math.inf, metric))
        if base and perm:
            reps = (combine_seeds(base[1], seed_indices(base[2], n_resamples, seed=2))
                    - combine_seeds(perm[1], seed_indices(perm[2], n_resamples, seed=3)))
            add("baseline_minus_permuted", "none", math.inf, protocol, metric, base[0] - perm[0],
                *percentile_interval(reps, confidence), min(base[2], perm[2]), p_value=bootstrap_p_value(reps))

    mechanisms = sorted({k[1] for k in stats if k[0] == "release"})
    for metric, protocol in protocols.items():
        diffs = []
        for mechanism in mechanisms:
            for epsilon in epsilons:
                rel = stats.get(("release", mechanism, float(epsilon), metric))
                null = stats.get(("matched_null", mechanism, float(epsilon), metric))
                if not (rel and null) or rel[2] != null[2]:
                    continue
                reps = combine_seeds(rel[1] - null[1], seed_indices(rel[2], n_resamples, seed=4))
                diffs.append({"mechanism": mechanism, "epsilon": float(epsilon), "value": rel[0] - null[0],
                              "interval": percentile_interval(reps, confidence), "p": bootstrap_p_value(reps),
                              "n_seeds": rel[2]})
        adjusted = holm([d["p"] for d in diffs])
        for d, p_adj in zip(diffs, adjusted):
            add("release_minus_null", d["mechanism"], d["epsilon"], protocol, metric, d["value"], *d["interval"],
                d["n_seeds"], p_value=d["p"], p_holm=float(p_adj), keeps_utility=bool(p_adj < alpha),
                correction=f"holm over {len(diffs)} (mechanism, ε) cells")
        for mechanism in mechanisms:
            mine = [(d["epsilon"], p < alpha) for d, p in zip(diffs, adjusted) if d["mechanism"] == mechanism]
            horizon = utility_horizon([e for e, _ in mine], [ok for _, ok in mine])
            add("horizon", mechanism, math.inf, protocol, f"{metric}_horizon_epsilon",
                math.nan if horizon is None else horizon, math.nan, math.nan, 0, ci_over="",
                correction=f"holm over {len(diffs)} (mechanism, ε) cells")
    frame = pd.DataFrame(rows)
    for column in ("p_value", "p_holm", "keeps_utility", "correction"):
        if column not in frame:
            frame[column] = np.nan
    return frame


def summary_metrics(summary: pd.DataFrame) -> dict[str, float]:
    """The summary as flat MLflow metrics: ``<arm>/<mechanism>/eps_<ε>/<protocol>/<metric>`` plus ``_ci_low`` and
    ``_ci_high`` (and ``_p_holm`` for release − null); horizons as ``horizon/<mechanism>/<protocol>/<metric>``
    (absent when no ε keeps utility)."""
    out = {}
    for r in summary.to_dict("records"):
        eps = "" if not math.isfinite(r["epsilon"]) else f"/eps_{r['epsilon']:g}"
        mech = "" if r["mechanism"] in ("none", "permuted_labels") else f"/{r['mechanism']}"
        key = f"{r['arm']}{mech}{eps}/{r['protocol']}/{r['metric']}"
        for suffix, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"), ("_p_holm", "p_holm")):
            value = r.get(column)
            if value is not None and pd.notna(value) and math.isfinite(float(value)):
                out[key + suffix] = float(value)
    return out


def log_summary(table: PatientTable, summary: pd.DataFrame, release_config: DPReleaseConfig,
                config: DPUtilityConfig, label: str) -> str:
    """One MLflow run per dataset (``dp_utility-<dataset>-summary``) with every summary number and each mechanism's
    horizon as metrics (and the horizons as tags, readable in the runs table); returns its run id."""
    import mlflow

    from eegprivacy.studies.release.table import tags
    from eegprivacy.tracking import assert_no_identifiers, log_metrics, start_run

    params = {"dp_release": release_config.to_dict(), "dp_utility": config.to_dict(), "label": label,
              **table.base_config}
    with start_run(study="a", tags=tags(table, "dp_utility", None, model="mlp"),
                   run_name=f"dp_utility-{table.dataset}-summary", params=params) as run:
        log_metrics(summary_metrics(summary))
        horizons = summary[summary["arm"] == "horizon"]
        horizon_tags = {f"utility_horizon/{r.mechanism}/{r.metric.removesuffix('_horizon_epsilon')}":
                        ("none" if not math.isfinite(r.value) else f"{r.value:g}") for r in horizons.itertuples()}
        assert_no_identifiers(horizon_tags, "tag")
        mlflow.set_tags(horizon_tags)
        return run.info.run_id
