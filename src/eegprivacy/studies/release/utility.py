"""The ``dp_utility`` sweep: how much patient-level utility a DP release keeps, judged against its matched null.

Every row goes through one protocol: a leave-one-patient-out MLP, scored threshold-free (LOSO AUROC, the
headline) and with a decision threshold chosen from one grid (:data:`THRESHOLD_GRID`) by the honest *nested*
protocol (inner split of the training patients) and by the paper's *optimistic* protocol (pooled LOSO
predictions; it sees the test labels, so it is kept only as "the paper's protocol", beside its own control).

The arms of a dataset's table:

- ``baseline`` — the non-private patient table;
- ``clipped`` — the noise-free mechanism input: the table after the release's robust scaling and L2 clipping, no
  noise (mechanism ``none``). Baseline − clipped is what scaling and clipping cost; clipped − release what the
  noise costs on top, so a reader can tell the two losses apart;
- ``permuted`` — the same with permuted labels (nothing to learn: what the protocol scores on no signal), one
  permutation per seed (``dp_utility.permutations`` of them, each its own permutation and MLP seed);
- ``release`` — one DP release per (mechanism, ε, noise seed), noise drawn independently for every
  (mechanism, ε, seed) (:func:`~eegprivacy.studies.release.table.noise_generator`);
- ``matched_null`` — the same mechanism, noise scale *and noise draw* applied to a zero-signal table of the same
  shape, through the same scaling, clipping and LOSO. A release "keeps utility" only when its difference from this
  null is significant; the null absorbs whatever the protocol extracts from noise alone.

Each cell keeps its per-patient predictions (never logged) so :func:`summarise` can resample patients: intervals
are over ``subjects+seeds`` (a stratified cluster bootstrap of patients, crossed with a bootstrap of the seeds;
the permuted-label control's bootstrap is stratified on the permuted labels each permutation is scored against),
and release − null is paired by seed and patient resample.

A mechanism's *utility horizon* is the smallest ε that keeps utility, decided by one test
(:func:`~eegprivacy.evaluation.cluster_bootstrap.fixed_sequence_horizon`): the release − null p-values of the
mechanism are tested from the largest ε down, each at α/m (α = 1 − confidence split over the table's m
mechanisms), stopping at the first that does not reject; the decisions are monotone in ε by construction. Every
p-value carries its Monte-Carlo error and whether that error could flip its decision (``decision_stable``). A
horizon is never read off fewer than :data:`MIN_HORIZON_SEEDS` seeds (with ``nested_seeds`` < 2 the nested
balanced-accuracy horizon is "not tested", with the reason in the row). Beside every horizon the summary says what
its ε covers (``eps_covers``, ``eps_covers_note``): the robust-scaling statistics are fitted on the private
patients outside ε, and unless ``label_epsilon`` is finite the labels travel in the clear.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Mapping
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
    fixed_sequence_horizon,
    on_resamples,
    p_value_mc_error,
    percentile_interval,
    seed_indices,
)
from eegprivacy.evaluation.thresholds import DP_GRID
from eegprivacy.pipeline.keys import config_key
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.pipeline.sweep import Cell, PrefetchedCells, expand_grid
from eegprivacy.privacy import RandomizedResponse
from eegprivacy.privacy.release import NO_NOISE, release_table
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import PatientTable, release, release_cells, sweep_runner

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "specificity", "balanced_accuracy", "f1",
                          "tn", "fp", "fn", "tp")
WILSON = ("accuracy", "recall", "specificity")
ARMS = ("baseline", "clipped", "permuted", "release", "matched_null")
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
# A horizon is tested only when every release and null of the mechanism ran on at least this many seeds: one seed
# is one noise draw (and one MLP initialisation), whose luck no patient bootstrap can see.
MIN_HORIZON_SEEDS = 2
# Each release − null p-value's decision is "stable" when it lies more than this many Monte-Carlo errors from α/m.
STABLE_MC_ERRORS = 3.0
HORIZON_CORRECTION = "fixed sequence from the largest ε, α/m per mechanism"
# What the feature ε covers (the conventions' ``eps_covers``): the robust scaling is fitted on the private table
# inside every release and is not paid for in ε.
EPS_COVERS = "features"
# Columns every summary has (NaN where a row does not use them), beside arm .. chance.
SUMMARY_COLUMNS = ("p_value", "p_mc_error", "alpha_tested", "p_adjusted", "keeps_utility", "decision_stable",
                   "tested", "horizon_tested", "note", "correction", "eps_covers", "eps_covers_note")


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


def eps_covers_note(label_epsilon: float = math.inf) -> str:
    """One sentence on what a release's ε covers, printed beside every horizon (``eps_covers_note``)."""
    scaling = "the scaling statistics are fitted on the private patients outside ε"
    if not math.isfinite(float(label_epsilon)):
        return f"features only: {scaling} and the labels travel in the clear"
    return (f"features, and the labels by randomized response at ε_label = {float(label_epsilon):g} (a row is "
            f"(ε + {float(label_epsilon):g}, δ)-DP by composition): {scaling}")


def inner_folds_of(config: DPUtilityConfig) -> int | None:
    """The nested protocol's inner split: None for LOSO, else the number of folds."""
    return None if config.nested_inner_folds == "loso" else config.nested_inner_folds


def arm_table(config: dict, seed: int, X: np.ndarray, y: np.ndarray, *,
              common_random_numbers: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of one cell's arm: the table, the table robust-scaled and L2-clipped at ``clip_norm``
    without noise (the mechanism input), the table with permuted labels, a release, or the release mechanism applied
    to a zero-signal table with the release's own noise draw."""
    arm = config["arm"]
    if arm == "baseline":
        return X, y
    if arm == "clipped":
        clipped, _ = release_table(np.asarray(X, dtype=float), NO_NOISE, math.inf, config["delta"],
                                   config["clip_norm"])
        return clipped, y
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


def loso_fits(config: Mapping, seed: int, n_patients: int) -> float:
    """How many LOSO fits a :func:`utility_cell` runs: one per patient, plus the nested protocol's inner fits on
    the nested seeds (n(n-1)/2 for the inner LOSO, n·k for k inner folds). Every fit is one MLP on about as many
    rows, so this orders cells by their time, which is all the longest-first schedule needs."""
    n = int(n_patients)
    if seed >= int(config["nested_seeds"]):
        return float(n)
    inner = config["nested_inner"]
    return float(n + (n * (n - 1) / 2 if inner == "loso" else n * int(inner)))


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
                            n_jobs: int, cost: Callable[[dict, int], float] | None = None) -> list[pd.DataFrame]:
    """Run every (runner, cells) of ``plan``, pending cells computed ahead in ``n_jobs`` processes (the costliest
    first when ``cost`` estimates a cell's time, :class:`~eegprivacy.pipeline.sweep.PrefetchedCells`), each cell's
    per-patient predictions kept under ``folder`` (:func:`keeping_predictions`). A cell whose rows are on disk but
    whose predictions were lost is computed again, so a summary never lacks a cell's patients."""
    for runner, cells in plan:
        for cell in cells:
            if runner.cell_path(cell).exists() and not predictions_path(folder, cell.key).exists():
                runner.cell_path(cell).unlink()
    jobs = [(cell.config, cell.seed) for runner, cells in plan for cell in runner.pending(cells)]
    compute = keeping_predictions(PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs, cost=cost), folder)
    return [runner.run(cells, compute) for runner, cells in plan]


def per_seed_replicates(folder: str | Path, cells: list[Cell], values: str, metric_fn, y: np.ndarray,
                        idx: np.ndarray, *, own_labels: bool = False,
                        preds: dict | None = None) -> tuple[float, np.ndarray, tuple[int, ...]]:
    """One arm's kept predictions -> (mean of ``metric_fn`` over seeds, (seeds, resamples) metric on every patient
    resample ``idx``, the seeds). Seeds whose ``values`` are not all finite (e.g. no nested protocol) are left out.

    Scores are against ``y``, and predictions kept for other labels (a stale cache) are refused — except with
    ``own_labels`` (the permuted-label control), which is scored against the labels each seed trained and was
    evaluated on, so the control shows what the protocol makes of labels with nothing behind them. Its patient
    resamples are then drawn per seed, stratified on that seed's own (permuted) labels (as many as ``idx`` has
    rows), so every resample keeps the class counts of the labels it is scored against. ``preds``: the cells'
    predictions already loaded (:func:`load_predictions`), read once by a caller that needs several of their
    values."""
    preds = load_predictions(folder, cells) if preds is None else preds
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
    resamples = [bootstrap_indices(lab, idx.shape[0], seed=1 + int(seed)) if own_labels else idx
                 for seed, lab in zip(seeds, labels)]
    replicates = [on_resamples(metric_fn, v, lab, i) for v, lab, i in zip(per_patient, labels, resamples)]
    return point, np.stack(replicates), seeds


def utility_plan(table: PatientTable, release_config: DPReleaseConfig, config: DPUtilityConfig, label: str, *,
                 cells_dir: str | Path, progress: bool) -> list:
    """(runner, cells) of the baseline, the noise-free scaled and clipped table (``baseline_mlp_seeds`` MLP seeds
    each), the permuted-label control (``permutations`` seeds, one permutation each) and one sweep per mechanism
    whose cells hold both its releases and their matched nulls (an MLflow parent run each)."""
    cell_base = {**table.base_config, "nested_seeds": config.nested_seeds,
                 "nested_inner": inner_folds_of(config) or "loso", "code_hash": code_hash("dp_utility")}
    params = {"dp_release": release_config.to_dict(), "dp_utility": config.to_dict(), "label": label,
              **table.base_config}
    sweep = dict(cells_dir=cells_dir, params=params, progress=progress, model="mlp")
    seeds = range(config.baseline_mlp_seeds)
    clipping = {"clip_norm": release_config.clip_norm, "delta": release_config.delta}
    plan = [
        (sweep_runner(table, "dp_utility", "none", mechanism="none", **sweep),
         expand_grid({"arm": ["baseline"], "mechanism": ["none"], "epsilon": [math.inf]}, seeds=seeds,
                     base=cell_base)),
        (sweep_runner(table, "dp_utility", "clipped", mechanism=NO_NOISE, **sweep),
         expand_grid({"arm": ["clipped"], "mechanism": [NO_NOISE], "epsilon": [math.inf]}, seeds=seeds,
                     base={**cell_base, **clipping})),
        (sweep_runner(table, "dp_utility", "permuted_labels", mechanism="none", attack="permuted_labels", **sweep),
         expand_grid({"arm": ["permuted"], "mechanism": ["permuted_labels"], "epsilon": [math.inf]},
                     seeds=range(config.permutations), base=cell_base)),
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
    # Whole cells in n_jobs processes, the nested ones (3-40x the fits) first; every fit is seeded and
    # single-threaded, so neither n_jobs nor the order changes a number.
    cost = functools.partial(loso_fits, n_patients=len(table.y))
    return plan, run_keeping_predictions(plan, cell_fn, predictions_dir(cells_dir, table.dataset), config.n_jobs,
                                         cost=cost)


# ---------------------------------------------------------------------------------------------------------------
# Summary: intervals over patients and seeds, release − null, horizons
# ---------------------------------------------------------------------------------------------------------------
def summarise(plan: list, folder: str | Path, y: np.ndarray, *, n_resamples: int, confidence: float,
              epsilons: list[float]) -> pd.DataFrame:
    """Tidy summary rows of one dataset's table.

    - every arm at every (mechanism, ε): AUROC and nested balanced accuracy, mean over seeds, interval over
      ``subjects+seeds`` (the permuted-label control's patient resamples stratified on its own permuted labels);
    - ``baseline_minus_permuted``: the non-private utility above its permuted-label control (the two on
      independent patient resamples, seeds resampled apart), with its one-sided bootstrap p-value;
    - ``baseline_minus_clipped``: what robust scaling and L2 clipping cost without any noise (same patient
      resamples; descriptive, untested);
    - ``release_minus_null`` per (mechanism, ε), paired by patient resample and seed: its one-sided bootstrap
      ``p_value`` with ``p_mc_error`` (:func:`~eegprivacy.evaluation.cluster_bootstrap.p_value_mc_error`),
      ``alpha_tested`` (α/m, α = 1 − confidence split over the m mechanisms of the table), ``keeps_utility``
      (rejected by the mechanism's fixed-sequence test), ``p_adjusted`` (m × the largest p at this or any larger
      ε, capped at 1: ``keeps_utility`` is ``p_adjusted < α``), ``decision_stable`` (``|p − α/m|`` > 3 Monte-Carlo
      errors: another bootstrap seed would not flip it) and ``tested`` (False below :data:`MIN_HORIZON_SEEDS`
      seeds, ``note`` says why);
    - ``horizon`` per (mechanism, metric): the smallest ε of the unbroken run of rejections from the largest ε
      down (:func:`~eegprivacy.evaluation.cluster_bootstrap.fixed_sequence_horizon`), NaN when the largest ε does
      not reject or when the horizon is not tested (``horizon_tested`` False, ``note`` says why);
      ``decision_stable`` when every decision the sequence took is.

    Every row of a release (release, matched null, their difference, the horizon) carries ``eps_covers``
    (:data:`EPS_COVERS`) and ``eps_covers_note``, one sentence on what its ε leaves out (the label ε is read from
    the release cells' configs). The family of the correction is one metric's table: AUROC and balanced accuracy
    are tested as two tables, as before.
    """
    y = np.asarray(y, dtype=int)
    idx = bootstrap_indices(y, n_resamples)
    alpha = 1.0 - confidence
    rows: list[dict] = []
    label_epsilons = {float(cell.config.get("label_epsilon", math.inf)) for _, cells in plan for cell in cells
                      if cell.config["arm"] in ("release", "matched_null")}
    if len(label_epsilons) > 1:
        raise ValueError(f"release cells of one table with different label_epsilon {sorted(label_epsilons)}")
    covers = {"eps_covers": EPS_COVERS, "eps_covers_note": eps_covers_note(label_epsilons.pop() if label_epsilons
                                                                             else math.inf)}

    def add(arm, mechanism, epsilon, protocol, metric, value, low, high, n_seeds, **extra):
        rows.append({"arm": arm, "mechanism": mechanism, "epsilon": float(epsilon), "protocol": protocol,
                     "metric": metric, "value": value, "ci_low": low, "ci_high": high, "ci_over": "subjects+seeds",
                     "n": int(len(y)), "n_seeds": n_seeds, "chance": 0.5 if arm in ARMS else 0.0, **extra})

    stats: dict[tuple, tuple[float, np.ndarray, tuple[int, ...]]] = {}
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
                if not seeds:
                    continue
                stats[(arm, mechanism, epsilon, metric)] = (point, per_seed, seeds)
                reps = combine_seeds(per_seed, seed_indices(len(seeds), n_resamples, seed=1))
                add(arm, mechanism, epsilon, protocol, metric, point, *percentile_interval(reps, confidence),
                    len(seeds), **(covers if arm in ("release", "matched_null") else {}))

    protocols = dict((m, p) for p, m, _ in SUMMARY_METRICS)
    for metric, protocol in protocols.items():
        base = stats.get(("baseline", "none", math.inf, metric))
        perm = stats.get(("permuted", "permuted_labels", math.inf, metric))
        clip = stats.get(("clipped", NO_NOISE, math.inf, metric))
        if base and perm:
            reps = (combine_seeds(base[1], seed_indices(len(base[2]), n_resamples, seed=2))
                    - combine_seeds(perm[1], seed_indices(len(perm[2]), n_resamples, seed=3)))
            add("baseline_minus_permuted", "none", math.inf, protocol, metric, base[0] - perm[0],
                *percentile_interval(reps, confidence), min(len(base[2]), len(perm[2])),
                p_value=bootstrap_p_value(reps))
        if base and clip:
            reps = (combine_seeds(base[1], seed_indices(len(base[2]), n_resamples, seed=5))
                    - combine_seeds(clip[1], seed_indices(len(clip[2]), n_resamples, seed=6)))
            add("baseline_minus_clipped", "none", math.inf, protocol, metric, base[0] - clip[0],
                *percentile_interval(reps, confidence), min(len(base[2]), len(clip[2])))

    mechanisms = sorted({k[1] for k in stats if k[0] == "release"})
    for metric, protocol in protocols.items():
        per_mechanism: dict[str, list[dict]] = {}
        for mechanism in mechanisms:
            for epsilon in epsilons:
                rel = stats.get(("release", mechanism, float(epsilon), metric))
                null = stats.get(("matched_null", mechanism, float(epsilon), metric))
                if not (rel and null) or rel[2] != null[2]:
                    continue
                reps = combine_seeds(rel[1] - null[1], seed_indices(len(rel[2]), n_resamples, seed=4))
                p = bootstrap_p_value(reps)
                per_mechanism.setdefault(mechanism, []).append(
                    {"epsilon": float(epsilon), "value": rel[0] - null[0], "p": p,
                     "interval": percentile_interval(reps, confidence), "n_seeds": len(rel[2]),
                     "mc_error": p_value_mc_error(p, int(np.isfinite(reps).sum())) if np.isfinite(p) else math.nan})
        m = len(mechanisms)  # the Bonferroni split: every mechanism of the table gets α/m for its sequence
        alpha_m = alpha / m
        for mechanism in mechanisms:
            diffs = per_mechanism.get(mechanism, [])
            few = min((d["n_seeds"] for d in diffs), default=0)
            tested = bool(diffs) and few >= MIN_HORIZON_SEEDS
            note = "" if tested else (
                f"not tested: {'the nested protocol' if metric == 'balanced_accuracy' else 'the release'} ran on "
                f"{few} seed{'' if few == 1 else 's'} of each cell (fewer than {MIN_HORIZON_SEEDS}); a horizon is "
                "never read off one seed")
            horizon, decisions = (fixed_sequence_horizon([d["epsilon"] for d in diffs], [d["p"] for d in diffs],
                                                         alpha_m) if tested else (None, [False] * len(diffs)))
            order = sorted(range(len(diffs)), key=lambda i: -diffs[i]["epsilon"])
            running, adjusted = 0.0, {}
            for i in order:
                running = max(running, diffs[i]["p"] if np.isfinite(diffs[i]["p"]) else 1.0)
                adjusted[i] = min(1.0, m * running)
            stable = {i: bool(abs(d["p"] - alpha_m) > STABLE_MC_ERRORS * d["mc_error"]) for i, d in enumerate(diffs)}
            reached = []  # the decisions the sequence took: every rejection and the first non-rejection
            for i in order:
                reached.append(i)
                if not decisions[i]:
                    break
            for i, d in enumerate(diffs):
                add("release_minus_null", mechanism, d["epsilon"], protocol, metric, d["value"], *d["interval"],
                    d["n_seeds"], p_value=d["p"], p_mc_error=d["mc_error"], alpha_tested=alpha_m,
                    p_adjusted=adjusted[i] if tested else math.nan, keeps_utility=bool(decisions[i]),
                    decision_stable=stable[i] if tested else math.nan, tested=tested, note=note,
                    correction=f"{HORIZON_CORRECTION} (m = {m}, α = {alpha:g})", **covers)
            add("horizon", mechanism, math.inf, protocol, f"{metric}_horizon_epsilon",
                math.nan if horizon is None else horizon, math.nan, math.nan, few, ci_over="",
                alpha_tested=alpha_m, horizon_tested=tested, note=note,
                decision_stable=all(stable[i] for i in reached) if tested else math.nan,
                correction=f"{HORIZON_CORRECTION} (m = {m}, α = {alpha:g})", **covers)
    frame = pd.DataFrame(rows)
    for column in SUMMARY_COLUMNS:
        if column not in frame:
            frame[column] = np.nan
    return frame


def summary_metrics(summary: pd.DataFrame) -> dict[str, float]:
    """The summary as flat MLflow metrics: ``<arm>/<mechanism>/eps_<ε>/<protocol>/<metric>`` plus ``_ci_low`` and
    ``_ci_high`` (and for release − null ``_p_value``, ``_p_mc_error`` and ``_p_adjusted``, the p-value the
    fixed-sequence decision compares with α); horizons as ``horizon/<mechanism>/<protocol>/<metric>`` (absent when
    no ε keeps utility or the horizon is not tested)."""
    out = {}
    for r in summary.to_dict("records"):
        eps = "" if not math.isfinite(r["epsilon"]) else f"/eps_{r['epsilon']:g}"
        mech = "" if r["mechanism"] in ("none", "permuted_labels") else f"/{r['mechanism']}"
        key = f"{r['arm']}{mech}{eps}/{r['protocol']}/{r['metric']}"
        tests = (("_p_value", "p_value"), ("_p_mc_error", "p_mc_error"), ("_p_adjusted", "p_adjusted"))
        for suffix, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"),
                               *(tests if r["arm"] == "release_minus_null" else ())):
            value = r.get(column)
            if value is not None and pd.notna(value) and math.isfinite(float(value)):
                out[key + suffix] = float(value)
    return out


def horizon_text(value: float, tested=True) -> str:
    """A horizon as printed and tagged: ``ε`` as a number, ``none`` (the largest ε does not keep utility) or
    ``not tested`` (too few seeds; the summary row's ``note`` says why)."""
    if tested is False or (isinstance(tested, str) and tested.lower() == "false"):
        return "not tested"
    return "none" if not math.isfinite(float(value)) else f"{float(value):g}"


def log_summary(table: PatientTable, summary: pd.DataFrame, release_config: DPReleaseConfig,
                config: DPUtilityConfig, label: str) -> str:
    """One MLflow run per dataset (``dp_utility-<dataset>-summary``) with every summary number and each mechanism's
    horizon as metrics, and as tags readable in the runs table: the horizons (``utility_horizon/<mechanism>/<metric>``:
    an ε, ``none`` or ``not tested``), the test that decides them (``utility_horizon_test``) and what their ε covers
    (``eps_covers``, ``eps_covers_note``); returns its run id."""
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
                        horizon_text(r.value, r.horizon_tested) for r in horizons.itertuples()}
        for column, tag in (("correction", "utility_horizon_test"), ("eps_covers", "eps_covers"),
                            ("eps_covers_note", "eps_covers_note")):
            values = horizons[column].dropna().unique()
            if len(values):
                horizon_tags[tag] = str(values[0])
        assert_no_identifiers(horizon_tags, "tag")
        mlflow.set_tags(horizon_tags)
        return run.info.run_id
