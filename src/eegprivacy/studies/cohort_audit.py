"""Cohort audit: study A's pipeline on a user's own labelled cohort (any :class:`EEGDataset`, e.g. a BIDS folder).

Stages, each resumable:

1. **Features** — the project's window features (``params/features.yaml``; low-pass and bands above Nyquist are
   clipped and flagged by the signal layer), cached in the private cache folder by dataset version + config;
   one vector per patient (:func:`~eegprivacy.privacy.patient_vectors`), patient = subject.
2. **Utility** — leave-one-patient-out MLP (study A's :class:`~eegprivacy.evaluation.LOSOEvaluation`) on the
   non-private features (``baseline``), on them with permuted labels (``permuted``), and for every mechanism × ε ×
   noise seed on the DP release (``release``) and on its matched null (``null``: the same mechanism, noise scale and
   noise draw applied to a zero-signal table of the same shape, through the same scale/clip/noise and LOSO). The
   headline is the threshold-free LOSO AUROC; balanced accuracy uses the nested (inner-fold) threshold.
3. **Table attacks** — re-identification when subjects have two recordings (sessions/runs; with one recording per
   subject, optionally its two halves, labelled *same-session*), and membership inference on the released table.

Every cell is a :class:`~eegprivacy.pipeline.sweep.SweepRunner` cell: a resumable cache file, a nested MLflow child
run under one parent per sweep. Per-patient LOSO predictions (needed for the patient-level bootstrap) are kept in
the cell cache beside the rows and are never logged. Summaries (:func:`summarise`) are computed from the cells' rows
and those predictions, logged as metrics of one ``summary`` run, and written as ``rows.csv``/``summary.json``.

**Patient order is canonical**: patients (rows) are sorted by their feature vectors (lexicographically on values
rounded to ~6 significant digits, label last), and feature columns by name, so everything position-dependent (MLP
training order, membership draws, bootstrap resamples) is the same whatever the dataset calls its subjects, in
which order it lists them, or where its files live. Numbers depend on the recordings' data, labels and seeds only.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path, atomic_paths
from eegprivacy.attacks.metrics import auroc as attack_auroc
from eegprivacy.attacks.table import (
    NearestNeighbourReidentifier,
    TableMembershipInference,
    top_k_hits,
)
from eegprivacy.data.base import EEGDataset
from eegprivacy.evaluation import LOSOEvaluation, mean_ci, wilson_interval
from eegprivacy.evaluation.cluster_bootstrap import (
    auroc_along,
    balanced_accuracy_along,
    bootstrap_indices,
    combine_seeds,
)
from eegprivacy.evaluation.cluster_bootstrap import percentile_interval as _interval
from eegprivacy.evaluation.cluster_bootstrap import utility_horizon as shared_horizon
from eegprivacy.evaluation.thresholds import DP_GRID as THRESHOLD_GRID
from eegprivacy.pipeline.sweep import (
    Cell,
    PrefetchedCells,
    SweepRunner,
    config_key,
    expand_grid,
)
from eegprivacy.privacy import (
    NO_NOISE,
    DPFeatureReleaser,
    make_mechanism,
    patient_vectors,
)
from eegprivacy.signal.table import (
    INDEX_COLUMNS,
    FeaturesParams,
    dataset_window_features,
    is_current,
    read_feature_table,
    write_feature_table,
)
from eegprivacy.studies.release.table_attacks import recording_halves
from eegprivacy.tracking import required_tags

log = logging.getLogger(__name__)

STAGE = "audit_cohort"
EPS_UNIT = "subject"
DEFAULT_MECHANISMS = ("gaussian_analytic", "laplace_implemented")
DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
# "matched_null", not "null": pandas reads a bare "null" back from the cell cache as NaN.
ARMS = ("baseline", "permuted", "release", "matched_null")

# Seed streams (mixed with the cell seed and a hash of (mechanism, ε)), kept apart from each other.
_NOISE_STREAM = 0x41554454
_PERMUTE_STREAM = 0x5045524D
_REID_STREAM = 0x52454944
_MEMBERSHIP_STREAM = 0x4D454D42
_CONTROL_STREAM = 0x43544C52
_BOOTSTRAP_STREAM = 0x424F4F54


class CohortError(ValueError):
    """The cohort cannot be audited as given (no labels, one class, too few patients...)."""


@dataclass(frozen=True)
class AuditConfig:
    """Every knob of an audit (all logged as params; the CLI exposes each)."""

    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    noise_seeds: int = 3  # noise draws (and MLP seeds) per (mechanism, ε)
    baseline_seeds: int = 3  # MLP seeds of the baseline and the permuted-label control
    nested_seeds: int = 1  # seeds (first ones) that also run the nested threshold protocol (balanced accuracy)
    inner_folds: int = 3  # the nested protocol's inner k-fold over the training patients
    clip_norm: float = 2.0
    delta: float = 1e-5
    bootstrap: int = 2000  # patient-level (cluster) bootstrap resamples
    confidence: float = 0.95
    correction: str = "bonferroni"  # across the ε cells of one mechanism, for the horizon decision
    min_patients: int = 6
    min_per_class: int = 2
    membership_trials: int = 20
    member_fraction: float = 0.5
    split_halves: bool = True  # one recording per subject: re-identify its second half from its first
    features_params: str = "params/features.yaml"

    def __post_init__(self):
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        object.__setattr__(self, "epsilons", tuple(sorted(float(e) for e in self.epsilons)))
        for name in self.mechanisms:
            make_mechanism(name, 1.0, self.delta)  # refuses an unknown name now, not in a worker
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"epsilons must be positive and finite, got {self.epsilons}")
        if self.noise_seeds < 1 or self.baseline_seeds < 1:
            raise ValueError("noise_seeds and baseline_seeds must be >= 1")
        if self.correction not in ("bonferroni", "none"):
            raise ValueError(f"correction must be 'bonferroni' or 'none', got {self.correction!r}")

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# Cohort
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Cohort:
    """A labelled cohort ready for the audit; no subject identifier leaves :func:`load_cohort`."""

    dataset: str
    dataset_version: str
    features_hash: str
    synthetic: bool
    X: np.ndarray  # patients × features, canonical order
    y: np.ndarray
    feature_names: list[str]
    summary: dict  # cohort description for the report (counts, channels, rates, flags); no identifiers
    reid_release: np.ndarray | None = None  # one vector per subject from its first recording (or first half)
    reid_auxiliary: np.ndarray | None = None  # the same subjects, from their second recording (or second half)
    reid_kind: str = "none"  # cross-session | cross-run | cross-recording | same-session halves | none
    reid_reason: str = ""

    @property
    def base_config(self) -> dict:
        return {"dataset_version": self.dataset_version, "features_hash": self.features_hash,
                "n_patients": int(self.X.shape[0]), "n_features": int(self.X.shape[1])}


def canonical_order(X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Row order that depends on the rows' values only: lexicographic on the features rounded to 20 mantissa
    bits (~6 significant digits, so float noise from another file format does not reorder), then the label."""
    X = np.asarray(X, dtype=float)
    mantissa, exponent = np.frexp(X)
    rounded = np.ldexp(np.round(mantissa * 2.0**20) / 2.0**20, exponent)
    keys = [] if y is None else [np.asarray(y)]
    keys += [rounded[:, j] for j in range(X.shape[1] - 1, -1, -1)]  # lexsort: last key is the primary one
    return np.lexsort(keys) if keys else np.arange(len(X))


def window_table(dataset: EEGDataset, config: AuditConfig, cache_dir: str | Path | None,
                 progress: bool = True) -> tuple[pd.DataFrame, str, str]:
    """(window features, dataset version, feature-config hash), read from ``cache_dir`` when current.

    A user's cohort gets the shared feature settings whatever it is called (``per_dataset`` overrides are the
    pipeline's own datasets'), so a BIDS copy of a dataset and its loader give the same numbers; a low-pass or band
    above the cohort's Nyquist is moved or dropped, and flagged, by the signal layer."""
    features = FeaturesParams.load(config.features_params, "features").pipeline()
    version = dataset.version()
    if cache_dir is None:
        return dataset_window_features(dataset, features, progress=progress), version, features.config_hash()
    path = Path(cache_dir) / f"features-{version[:16]}-{features.config_hash()}.parquet"
    if is_current(path, version, features):
        return read_feature_table(path, dataset_version=version, config=features), version, features.config_hash()
    table = dataset_window_features(dataset, features, progress=progress)
    write_feature_table(table, path, dataset_version=version, config=features, synthetic=dataset.synthetic)
    return table, version, features.config_hash()


def _redacted(messages: list[str], dataset: EEGDataset) -> list[str]:
    """Warnings as the report may show them: subject ids and file names (which loaders' warnings name) replaced
    by ``<redacted>``, so the report and MLflow never carry an identifier."""
    import re

    names = set()
    for rec in dataset.recordings():
        names |= {str(rec.subject), str(rec.source), Path(str(rec.source)).name}
    names = sorted((n for n in names if n and n != "."), key=len, reverse=True)
    if not names:
        return messages
    pattern = re.compile("|".join(rf"(?<![\w]){re.escape(n)}(?![\w])" for n in names))
    return [pattern.sub("<redacted>", m) for m in messages]


def _flag_counts(frame: pd.DataFrame) -> dict[str, int]:
    """Recordings per data-quality flag (flags name channels or bands, never subjects)."""
    per_recording = frame.drop_duplicates(["subject", "recording"])["flags"].fillna("")
    counts: dict[str, int] = {}
    for cell in per_recording:
        for flag in filter(None, str(cell).split(";")):
            counts[flag] = counts.get(flag, 0) + 1
    return dict(sorted(counts.items()))


def _recording_order(meta: pd.DataFrame) -> pd.DataFrame:
    """Recordings sorted within each subject by session, run, then recording id (the canonical 'first')."""
    keys = [c for c in ("session", "run", "recording") if c in meta.columns]
    sort_keys = {f"_{k}": meta[k].astype(str) for k in keys}
    return meta.assign(**sort_keys).sort_values(["subject", *sort_keys])


def _reidentification_tables(frame: pd.DataFrame, features: list[str], meta: pd.DataFrame, split_halves: bool):
    """(release vectors, auxiliary vectors, kind, reason) for the subjects with two sources, rows aligned and in a
    canonical order; ids stay here."""
    recs = frame[["subject", "recording"]].drop_duplicates()
    meta = meta.merge(recs, on=["subject", "recording"], how="inner")
    counts = meta.groupby("subject").size()
    multi = counts[counts >= 2].index
    if len(multi) >= 3:
        ordered = _recording_order(meta[meta["subject"].isin(multi)])
        first = ordered.groupby("subject").nth(0)[["subject", "recording"]]
        second = ordered.groupby("subject").nth(1)[["subject", "recording"]]
        a = frame.merge(first, on=["subject", "recording"])
        b = frame.merge(second, on=["subject", "recording"])
        kind = "cross-recording"
        for column, name in (("session", "cross-session"), ("run", "cross-run")):
            if column in meta.columns:
                pair = ordered.groupby("subject")[column].agg(lambda s: s.astype(str).iloc[0] != s.astype(str).iloc[1])
                if pair.all():
                    kind = name
                    break
        reason = f"{len(multi)} subjects with two or more recordings; first vs second ({kind})"
    elif split_halves:

        a, b = recording_halves(frame)
        both = sorted(set(a["subject"]) & set(b["subject"]))
        if len(both) < 3:
            return None, None, "none", "fewer than 3 subjects with two recordings or two half-recordings"
        a, b = a[a["subject"].isin(both)], b[b["subject"].isin(both)]
        kind = "same-session halves"
        reason = ("one recording per subject: the first half of each recording is released, the attacker holds the "
                  "second half (same session: an upper bound on cross-session linkage)")
    else:
        return None, None, "none", "re-identification does not apply: one recording per subject"
    A, _, ids_a = patient_vectors(a, features, label=None)
    B, _, ids_b = patient_vectors(b, features, label=None)
    if not np.array_equal(ids_a, ids_b):
        raise AssertionError("subject order differs between the two re-identification tables")
    A, B = A.to_numpy(), B.to_numpy()
    ok = np.isfinite(A).all(1) & np.isfinite(B).all(1)
    A, B = A[ok], B[ok]
    order = canonical_order(A)
    return A[order], B[order], kind, reason


def load_cohort(dataset: EEGDataset, config: AuditConfig = AuditConfig(), cache_dir: str | Path | None = None,
                progress: bool = True) -> Cohort:
    """Window features -> canonical patient table, labels checked, plus the re-identification tables."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame, version, features_hash = window_table(dataset, config, cache_dir, progress)
    quality_warnings = _redacted(sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)}),
                                 dataset)
    if frame.empty:
        raise CohortError(f"{dataset.name}: no recording gave a feature window")
    labels = pd.to_numeric(frame["label"], errors="coerce")
    if labels.isna().all():
        raise CohortError(f"{dataset.name}: the recordings carry no patient label (meta 'label'); pass a label "
                          "column that exists for every subject (for BIDS: --label COLUMN of participants.tsv)")
    if labels.isna().any():
        n = frame.loc[labels.isna(), "subject"].nunique()
        raise CohortError(f"{dataset.name}: {n} subject(s) have no label; every subject needs a 0/1 label")
    if not labels.isin([0, 1]).all():
        raise CohortError(f"{dataset.name}: labels must be 0/1, got values {sorted(labels.unique())[:6]}; map them "
                          "(for BIDS: --label-map)")
    frame = frame.assign(label=labels.astype(int))
    # Feature columns by name: a loader that lists channels in another order gives the same table.
    features = sorted(c for c in frame.columns if c not in INDEX_COLUMNS)
    X, y, _ids = patient_vectors(frame, features, group="subject", label="label")
    finite = np.isfinite(X.to_numpy()).all(axis=0)
    dropped = [c for c, ok in zip(features, finite) if not ok]
    features = [c for c, ok in zip(features, finite) if ok]
    if not features:
        raise CohortError(f"{dataset.name}: no feature is finite for every patient")
    X = X[features].to_numpy()
    y = np.asarray(y, dtype=int)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        raise CohortError(f"{dataset.name}: all {len(y)} patients have label {int(y[0])}; the audit needs both classes")
    if min(n_pos, n_neg) < config.min_per_class:
        raise CohortError(f"{dataset.name}: {n_pos} positive and {n_neg} negative patients; each class needs at "
                          f"least {config.min_per_class}")
    if len(y) < max(config.min_patients, config.inner_folds + 2):
        raise CohortError(f"{dataset.name}: {len(y)} patients; the audit needs at least "
                          f"{max(config.min_patients, config.inner_folds + 2)}")
    order = canonical_order(X, y)
    X, y = X[order], y[order]

    meta = dataset.metadata()
    release, auxiliary, kind, reason = _reidentification_tables(frame, features, meta, config.split_halves)
    recs = frame.drop_duplicates(["subject", "recording"])
    per_subject = recs.groupby("subject").size()
    used = meta.merge(recs[["subject", "recording"]], on=["subject", "recording"])
    channels = sorted({c.split(":", 1)[0] for c in features})
    summary = {
        "dataset": dataset.name, "dataset_version": version, "synthetic": bool(dataset.synthetic),
        "n_patients": int(len(y)), "n_label_1": n_pos, "n_label_0": n_neg,
        "n_recordings": int(len(recs)), "n_recordings_listed": int(len(meta)), "n_windows": int(len(frame)),
        "recordings_per_subject_max": int(per_subject.max()),
        "n_subjects_with_2plus_recordings": int((per_subject >= 2).sum()),
        "n_sessions": int(used["session"].astype(str).nunique()) if "session" in used else None,
        "n_runs": int(used["run"].astype(str).nunique()) if "run" in used else None,
        "tasks": sorted(used["task"].dropna().astype(str).unique().tolist()) if "task" in used else [],
        "n_channels": len(channels), "channels": channels,
        "sfreqs": sorted(float(f) for f in frame["sfreq"].unique()),
        "duration_s_total": float(pd.to_numeric(used["duration_s"], errors="coerce").sum()),
        "duration_s_median_per_recording": float(pd.to_numeric(used["duration_s"], errors="coerce").median()),
        "n_features": len(features), "features_dropped_nonfinite": dropped,
        "flags": _flag_counts(frame), "warnings": quality_warnings,
        "reidentification": {"kind": kind, "reason": reason,
                             "n_subjects": 0 if release is None else int(len(release))},
    }
    return Cohort(dataset.name, version, features_hash, bool(dataset.synthetic), X, y, features, summary, release,
                  auxiliary, kind, reason)


# ---------------------------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------------------------
def _stream(tag: int, mechanism: str, epsilon: float, seed: int) -> np.random.Generator:
    """Independent stream per (purpose, mechanism, ε, seed)."""
    code = zlib.crc32(f"{mechanism}|{float(epsilon)!r}".encode())
    return np.random.default_rng([tag, code, int(seed)])






def _release(X: np.ndarray, mechanism: str, epsilon: float, delta: float, clip_norm: float, rng):
    """Scale -> clip -> noise with ``rng``; returns (released, calibration)."""
    releaser = DPFeatureReleaser(make_mechanism(mechanism, epsilon, delta), clip_norm=clip_norm, random_state=rng)
    return releaser.fit_transform(X), releaser.calibration_


def utility_cell(config: dict, seed: int, *, X: np.ndarray, y: np.ndarray) -> list[dict]:
    """One LOSO evaluation: rows ``auroc`` (threshold-free) and, on nested seeds, ``balanced_accuracy`` (nested
    threshold); the last item is the per-patient predictions (``_predictions``), kept out of MLflow by the caller."""
    arm, mechanism, epsilon = config["arm"], config["mechanism"], float(config["epsilon"])
    labels = y
    if arm == "baseline":
        features = X
    elif arm == "permuted":
        features = X
        labels = np.random.default_rng([_PERMUTE_STREAM, seed]).permutation(y)
    else:
        # release and null share the noise draw: null = the same noise on a zero-signal table of the same shape
        source = X if arm == "release" else np.zeros_like(X)
        features, _ = _release(source, mechanism, epsilon, config["delta"], config["clip_norm"],
                               _stream(_NOISE_STREAM, mechanism, epsilon, seed))
    nested = seed < int(config["nested_seeds"])
    # one threshold grid for every arm, as in dp_utility: a control is a control only under the same protocol
    evaluation = LOSOEvaluation(threshold_grid=THRESHOLD_GRID, random_state=seed, nested=nested,
                                inner_folds=int(config["inner_folds"]))
    result = evaluation.evaluate(features, labels, np.arange(len(labels)))
    rows = [{"metric": "auroc", "value": float(auroc_along(result.proba, result.y_true)), "chance": 0.5,
             "n": len(labels)}]
    pred = np.full(len(labels), np.nan)
    if nested:
        nested_result = result.protocols["nested"]
        pred = nested_result.y_pred.astype(float)
        rows.append({"metric": "balanced_accuracy", "value": float(balanced_accuracy_along(pred, result.y_true)),
                     "chance": 0.5, "n": len(labels)})
    rows.append({"metric": "_predictions", "proba": result.proba.astype(float), "pred": pred,
                 "y": np.asarray(result.y_true, dtype=int)})
    return rows


def reidentification_cell(config: dict, seed: int, *, release_base: np.ndarray, auxiliary: np.ndarray) -> list[dict]:
    """Nearest-neighbour linkage of each released row (first recording/half) to the attacker's vectors of the
    same subjects (second recording/half): top-1 accuracy with a Wilson interval over the K subjects."""
    mechanism, epsilon, clip_norm = config["mechanism"], float(config["epsilon"]), config["clip_norm"]
    if mechanism == NO_NOISE:
        released = DPFeatureReleaser(make_mechanism("gaussian_analytic", 1.0, 1e-5), clip_norm=clip_norm) \
            .fit(release_base).clipped_
    else:
        released, _ = _release(release_base, mechanism, epsilon, config["delta"], clip_norm,
                               _stream(_REID_STREAM, mechanism, epsilon, seed))
    K = len(auxiliary)
    attacker = NearestNeighbourReidentifier(metric="euclidean", clip_norm=clip_norm).fit(auxiliary)
    distances = attacker.distances(released)
    hits = int(top_k_hits(distances, np.arange(K), 1).sum())
    low, high = wilson_interval(hits, K)
    shuffled = np.random.default_rng([_CONTROL_STREAM, seed]).permutation(K)
    control = float(top_k_hits(distances, shuffled, 1).mean())
    return [{"metric": "top1_accuracy", "value": hits / K, "ci_low": low, "ci_high": high, "n": K, "chance": 1 / K},
            {"metric": "top1_accuracy_shuffled_control", "value": control, "n": K, "chance": 1 / K}]


def membership_cell(config: dict, seed: int, *, population: np.ndarray, trials: int,
                    member_fraction: float) -> list[dict]:
    """Each trial releases a random subset of the patients; an attacker who knows every patient's true vector scores
    each as member or not (distance; and the likelihood under the known noise). AUROC over all trials' scores."""
    mechanism, epsilon, clip_norm = config["mechanism"], float(config["epsilon"]), config["clip_norm"]
    n = len(population)
    n_members = min(n - 1, max(2, int(round(member_fraction * n))))
    draws = np.random.default_rng([_MEMBERSHIP_STREAM, seed])
    noise = _stream(_MEMBERSHIP_STREAM, mechanism, epsilon, seed)
    scores = ["distance"] if mechanism == NO_NOISE else ["distance", "likelihood"]
    attackers = {s: TableMembershipInference(score=s, clip_norm=clip_norm).fit(population) for s in scores}
    labels, values = [], {s: [] for s in scores}
    for _ in range(trials):
        members = draws.choice(n, size=n_members, replace=False)
        is_member = np.zeros(n, dtype=int)
        is_member[members] = 1
        if mechanism == NO_NOISE:
            released = DPFeatureReleaser(make_mechanism("gaussian_analytic", 1.0, 1e-5), clip_norm=clip_norm) \
                .fit(population[members]).clipped_
            calibration = None
        else:
            released, calibration = _release(population[members], mechanism, epsilon, config["delta"], clip_norm,
                                             noise)
        labels.append(is_member)
        for s, attacker in attackers.items():
            values[s].append(attacker.decision_function(released, population, calibration))
    y = np.concatenate(labels)
    return [{"metric": "auroc", "attacker": s, "value": attack_auroc(y, np.concatenate(v)), "chance": 0.5,
             "n": len(y)} for s, v in values.items()]


def audit_cell(config: dict, seed: int, *, cohort_arrays: dict, audit: dict) -> list[dict]:
    """Dispatch on ``config["kind"]``; a pure function of (config, seed) so any process can compute it."""
    kind = config["kind"]
    if kind == "utility":
        return utility_cell(config, seed, X=cohort_arrays["X"], y=cohort_arrays["y"])
    if kind == "reidentification":
        return reidentification_cell(config, seed, release_base=cohort_arrays["reid_release"],
                                     auxiliary=cohort_arrays["reid_auxiliary"])
    if kind == "membership":
        return membership_cell(config, seed, population=cohort_arrays["X"], trials=audit["membership_trials"],
                               member_fraction=audit["member_fraction"])
    raise ValueError(f"unknown cell kind {kind!r}")


# ---------------------------------------------------------------------------------------------------------------
# Sweeps
# ---------------------------------------------------------------------------------------------------------------
def code_hash() -> str:
    """The cell cache's code key: the registry's hash of what ``audit_cohort`` runs (eegprivacy.pipeline.stages)."""
    from eegprivacy.pipeline.stages import code_hash as stage_code_hash

    return stage_code_hash("audit_cohort")


def run_tags(cohort: Cohort, seed: int | None, **extra) -> dict:
    return required_tags(study="a", stage=STAGE, dataset=cohort.dataset, dataset_version=cohort.dataset_version,
                         synthetic=cohort.synthetic, seed=seed, dvc_stage=f"{STAGE}@{cohort.dataset}",
                         **{k: v for k, v in extra.items() if v is not None})


@dataclass
class Sweep:
    name: str
    runner: SweepRunner
    cells: list[Cell]
    kind: str


def plan(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, progress: bool = True) -> list[Sweep]:
    """Every sweep of the audit: baseline, permuted control, release+null per mechanism, then the attacks."""
    base = {**cohort.base_config, "clip_norm": float(config.clip_norm), "code_hash": code_hash()}
    utility_base = {**base, "kind": "utility", "nested_seeds": int(config.nested_seeds),
                    "inner_folds": int(config.inner_folds)}
    params = {"audit": config.to_dict(), **cohort.base_config}
    sweeps: list[Sweep] = []

    def add(name, kind, cells, mechanism, **tags):
        def child_tags(cell):
            eps = float(cell.config.get("epsilon", math.inf))
            own = {"epsilon": eps} if math.isfinite(eps) else {}
            if "delta" in cell.config and cell.config["mechanism"] not in (NO_NOISE, "none"):
                own["delta"] = cell.config["delta"]
            return run_tags(cohort, cell.seed, mechanism=mechanism, **tags, **own)

        runner = SweepRunner(name=f"{STAGE}-{cohort.dataset}-{name}", study="a", dataset=cohort.dataset,
                             out_dir=Path(cells_dir) / name, parent_tags=run_tags(cohort, None, mechanism=mechanism,
                                                                                  **tags),
                             tags_fn=child_tags, params=params, progress=progress)
        sweeps.append(Sweep(name, runner, cells, kind))

    baseline_seeds = range(config.baseline_seeds)
    noise_seeds = range(config.noise_seeds)
    for arm in ("baseline", "permuted"):
        add(f"utility-{arm}", "utility",
            expand_grid({"arm": [arm], "mechanism": ["none"], "epsilon": [math.inf]}, baseline_seeds, utility_base),
            "none", model="mlp", **({"attack": "permuted_labels"} if arm == "permuted" else {}))
    for mechanism in config.mechanisms:
        delta = config.delta if make_mechanism(mechanism, 1.0, config.delta).uses_delta else 0.0
        add(f"utility-{mechanism}", "utility",
            expand_grid({"arm": ["release", "matched_null"], "mechanism": [mechanism],
                         "epsilon": list(config.epsilons)}, noise_seeds, {**utility_base, "delta": delta}),
            mechanism, model="mlp")
    attacks = []
    if cohort.reid_release is not None:
        attacks.append(("reidentification", {"n_reidentification": int(len(cohort.reid_release)),
                                             "reid_kind": cohort.reid_kind}))
    attacks.append(("membership", {"membership_trials": int(config.membership_trials),
                                   "member_fraction": float(config.member_fraction)}))
    for attack, extra in attacks:
        add(f"{attack}-none", attack,
            expand_grid({"mechanism": [NO_NOISE], "epsilon": [math.inf]}, noise_seeds,
                        {**base, **extra, "kind": attack}), NO_NOISE, attack=attack)
        for mechanism in config.mechanisms:
            delta = config.delta if make_mechanism(mechanism, 1.0, config.delta).uses_delta else 0.0
            add(f"{attack}-{mechanism}", attack,
                expand_grid({"mechanism": [mechanism], "epsilon": list(config.epsilons)}, noise_seeds,
                            {**base, **extra, "kind": attack, "delta": delta}), mechanism, attack=attack)
    return sweeps


def _predictions_path(cells_dir: Path, key: str) -> Path:
    return cells_dir / "predictions" / f"{key}.npz"


def _keeping_predictions(compute, cells_dir: Path):
    """Wrap a cell function: the ``_predictions`` item is saved beside the cell cache (atomically, before the
    runner writes the cell's rows) and not handed to the runner, so per-patient values never reach MLflow."""
    def call(config: dict, seed: int) -> list[dict]:
        rows = compute(config, seed)
        kept = [r for r in rows if r.get("metric") != "_predictions"]
        for r in rows:
            if r.get("metric") == "_predictions":
                path = _predictions_path(cells_dir, config_key({**config, "seed": seed}))
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                    np.savez(handle, proba=r["proba"], pred=r["pred"], y=r["y"])
        return kept
    return call


def run_sweeps(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, *, progress: bool = True,
               n_jobs: int = 1) -> tuple[list[Sweep], list[pd.DataFrame], dict]:
    """Run every sweep (pending cells computed ahead by ``n_jobs`` processes or the process-wide executor)."""
    cells_dir = Path(cells_dir)
    sweeps = plan(cohort, config, cells_dir, progress)
    for sweep in sweeps:  # a cell whose predictions were lost is computed again
        if sweep.kind == "utility":
            for cell in sweep.cells:
                if sweep.runner.cell_path(cell).exists() and not _predictions_path(cells_dir, cell.key).exists():
                    sweep.runner.cell_path(cell).unlink()
    arrays = {"X": cohort.X, "y": cohort.y, "reid_release": cohort.reid_release,
              "reid_auxiliary": cohort.reid_auxiliary}
    cell_fn = functools.partial(audit_cell, cohort_arrays=arrays,
                                audit={"membership_trials": config.membership_trials,
                                       "member_fraction": config.member_fraction})
    jobs = [(cell.config, cell.seed) for s in sweeps for cell in s.runner.pending(s.cells)]
    compute = _keeping_predictions(PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs), cells_dir)
    frames = [s.runner.run(s.cells, compute) for s in sweeps]
    n_cells = sum(len(s.cells) for s in sweeps)
    return sweeps, frames, {"cells": n_cells, "cells_computed": len(jobs), "cells_resumed": n_cells - len(jobs)}


# ---------------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------------
def utility_horizon(epsilons: Sequence[float], lower_bounds: Sequence[float]) -> float | None:
    """The smallest ε whose (utility − null) interval lower bound is above 0; None when no ε clears it."""
    return shared_horizon(epsilons, [np.isfinite(low) and low > 0 for low in lower_bounds])




def _per_seed_resampled(metric, values: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(seeds, resamples) metric of every seed's per-patient values on every patient resample."""
    return np.stack([metric(values[s][idx], labels[s][idx]) for s in range(len(values))])






def _load_predictions(cells_dir: Path, cells: list[Cell]) -> dict[int, dict]:
    out = {}
    for cell in cells:
        with np.load(_predictions_path(cells_dir, cell.key)) as data:
            out[cell.seed] = {k: data[k] for k in data.files}
    return out


def metric_key(arm: str, mechanism: str, epsilon: float, metric: str) -> str:
    """The MLflow metric name of a summary row (the same name in rows.csv's ``key`` and summary.json)."""
    eps = "none" if not np.isfinite(epsilon) else f"eps_{epsilon:g}"
    return "/".join(p for p in (arm, mechanism if mechanism != "none" else "", eps if np.isfinite(epsilon) else "",
                                metric) if p)


def summarise(cohort: Cohort, config: AuditConfig, sweeps: list[Sweep], frames: list[pd.DataFrame],
              cells_dir: str | Path) -> pd.DataFrame:
    """Tidy summary rows: every arm's AUROC and balanced accuracy with patient+seed intervals, utility − null per
    (mechanism, ε) with the horizon decision's corrected bound, and the attacks beside chance."""
    cells_dir = Path(cells_dir)
    idx = bootstrap_indices(cohort.y, config.bootstrap)
    rng = np.random.default_rng([_BOOTSTRAP_STREAM, 1])
    rows: list[dict] = []
    common = {"dataset": cohort.dataset, "dataset_version": cohort.dataset_version, "synthetic": cohort.synthetic,
              "eps_unit": EPS_UNIT}
    metrics = {"auroc": auroc_along, "balanced_accuracy": balanced_accuracy_along}

    def seed_resample(n_seeds: int) -> np.ndarray:
        return rng.integers(0, n_seeds, size=(config.bootstrap, n_seeds))

    def arm_stats(tidy: pd.DataFrame, cells: list[Cell]):
        """{metric: (point, per-seed resampled matrix, n_seeds)} of one arm at one (mechanism, ε)."""
        preds = _load_predictions(cells_dir, cells)
        out = {}
        for metric, fn in metrics.items():
            part = tidy[tidy["metric"] == metric].sort_values("seed")
            if part.empty:
                continue
            seeds = part["seed"].astype(int).tolist()
            values = np.stack([preds[s]["proba" if metric == "auroc" else "pred"] for s in seeds])
            labels = np.stack([preds[s]["y"] for s in seeds])
            out[metric] = (float(part["value"].mean()), _per_seed_resampled(fn, values, labels, idx), len(seeds))
        return out

    def add(arm, mechanism, epsilon, metric, value, low, high, ci_over, n, n_seeds, chance, **extra):
        rows.append({**common, "arm": arm, "mechanism": mechanism, "epsilon": epsilon, "metric": metric,
                     "value": value, "ci_low": low, "ci_high": high, "ci_over": ci_over, "n": n, "n_seeds": n_seeds,
                     "chance": chance, "key": metric_key(arm, mechanism, epsilon, metric), **extra})

    n = len(cohort.y)
    m = len(config.epsilons)
    adjusted = 1 - (1 - config.confidence) / m if config.correction == "bonferroni" else config.confidence
    for sweep, tidy in zip(sweeps, frames):
        if sweep.kind != "utility":
            continue
        tidy = tidy.assign(epsilon=tidy["epsilon"].astype(float))
        for (arm, mechanism, epsilon), part in tidy.groupby(["arm", "mechanism", "epsilon"], sort=False):
            cells = [c for c in sweep.cells if c.config["arm"] == arm and float(c.config["epsilon"]) == epsilon]
            stats = arm_stats(part, cells)
            for metric, (point, per_seed, n_seeds) in stats.items():
                reps = combine_seeds(per_seed, seed_resample(n_seeds))
                low, high = _interval(reps, config.confidence)
                add(arm, mechanism, epsilon, metric, point, low, high, "subjects+seeds", n, n_seeds, 0.5)
        # utility − null, paired by seed (same noise draw) and by patient resample
        for mechanism in sorted(set(tidy["mechanism"]) - {"none"}):
            bounds = []
            for epsilon in config.epsilons:
                stats = {}
                for arm in ("release", "matched_null"):
                    part = tidy[(tidy["arm"] == arm) & (tidy["epsilon"] == epsilon)]
                    cells = [c for c in sweep.cells if c.config["arm"] == arm and float(c.config["epsilon"]) == epsilon]
                    stats[arm] = arm_stats(part, cells)
                for metric in stats["release"]:
                    (p_rel, r_rel, s_rel), (p_null, r_null, _) = stats["release"][metric], stats["matched_null"][metric]
                    seed_idx = seed_resample(s_rel)
                    reps = combine_seeds(r_rel - r_null, seed_idx)
                    low, high = _interval(reps, config.confidence)
                    adj_low, _ = _interval(reps, adjusted)
                    add("release_minus_null", mechanism, epsilon, metric, p_rel - p_null, low, high,
                        "subjects+seeds", n, s_rel, 0.0, correction=config.correction, ci_low_adjusted=adj_low)
                    if metric == "auroc":
                        bounds.append(adj_low)
            horizon = utility_horizon(config.epsilons, bounds)
            add("horizon", mechanism, math.inf, "auroc_horizon_epsilon", horizon if horizon is not None else math.nan,
                math.nan, math.nan, "", n, config.noise_seeds, math.nan, correction=config.correction)

    for sweep, tidy in zip(sweeps, frames):
        if sweep.kind == "utility":
            continue
        tidy = tidy.assign(epsilon=tidy["epsilon"].astype(float))
        by = ["mechanism", "epsilon", "metric"] + (["attacker"] if "attacker" in tidy else [])
        for keys, part in tidy.groupby(by, sort=False, dropna=False):
            record = dict(zip(by, keys))
            metric = record["metric"] if sweep.kind == "reidentification" else f"auroc_{record['attacker']}"
            value, n_seeds = float(part["value"].mean()), int(len(part))
            K = int(part["n"].iloc[0])
            if sweep.kind == "reidentification" and metric == "top1_accuracy":
                low, high = wilson_interval(int(round(value * K)), K)
                ci_over = "subjects"
            else:
                # a t-interval over a few seeds can reach past [0, 1]; rates and AUROCs cannot
                _, low, high = np.clip(mean_ci(part["value"].to_numpy(dtype=float)), 0.0, 1.0)
                ci_over = "seeds"
            add(sweep.kind, record["mechanism"], record["epsilon"], metric, value, low, high, ci_over, K, n_seeds,
                float(part["chance"].iloc[0]), attack_kind=cohort.reid_kind if sweep.kind == "reidentification" else "")
    frame = pd.DataFrame(rows)
    for column in ("correction", "ci_low_adjusted", "attack_kind"):
        if column not in frame:
            frame[column] = np.nan
    return frame


def guarantees(cohort: Cohort, config: AuditConfig) -> list[dict]:
    """Per mechanism: the calibration at each ε and what the guarantee does and does not cover."""
    out = []
    for mechanism in config.mechanisms:
        for epsilon in config.epsilons:
            calib = make_mechanism(mechanism, epsilon, config.delta).calibrate(config.clip_norm, cohort.X.shape[1])
            mech = make_mechanism(mechanism, epsilon, config.delta)
            out.append({"mechanism": mechanism, "epsilon": epsilon, "delta": mech.delta, "eps_unit": EPS_UNIT,
                        "noise_scale": calib.noise_scale, "sensitivity": calib.sensitivity,
                        "sensitivity_norm": calib.sensitivity_norm, "formal_guarantee": calib.formal_guarantee,
                        "sampling": calib.sampling, "note": calib.note})
    return out


CAVEATS = (
    "ε is per patient (eps_unit: subject): the release is one vector per patient, the mean of all its windows.",
    "Labels are released in the clear: the guarantee covers the features only, not the 0/1 label column.",
    "Robust-scaling statistics (median, IQR) are fitted on the private table in each release; the ε is conditional "
    "on them (no end-to-end guarantee).",
    "Every formal guarantee here is under idealised sampling: the audit simulates releases with seeded numpy "
    "floating-point noise (textbook samplers, open to floating-point attacks; Mironov 2012). A release of the real "
    "cohort should draw its noise with OpenDP's exact samplers (release_table(..., sampler='opendp')).",
    "laplace_implemented (b = 2C/ε) is what the paper ran; it is not a formal full-vector ε-DP guarantee for d > 1.",
    "Each (mechanism, ε, seed) is a separate release: running several spends the sum of their ε on the same "
    "patients.",
)


def summary_document(cohort: Cohort, config: AuditConfig, rows: pd.DataFrame, run_id: str | None = None) -> dict:
    """summary.json: the headline numbers, each with the MLflow metric key it was logged under."""
    def entry(row) -> dict:
        out = {"value": _clean(row["value"]), "ci_low": _clean(row["ci_low"]), "ci_high": _clean(row["ci_high"]),
               "ci_over": row["ci_over"], "n": int(row["n"]), "n_seeds": int(row["n_seeds"]),
               "chance": _clean(row["chance"]), "mlflow_metric": row["key"]}
        if pd.notna(row.get("ci_low_adjusted")):
            out["ci_low_adjusted"] = _clean(row["ci_low_adjusted"])
        return out

    def pick(arm, metric, mechanism=None, epsilon=None):
        part = rows[(rows["arm"] == arm) & (rows["metric"] == metric)]
        if mechanism is not None:
            part = part[part["mechanism"] == mechanism]
        if epsilon is not None:
            part = part[part["epsilon"] == epsilon]
        return entry(part.iloc[0]) if len(part) else None

    utility = {}
    for mechanism in config.mechanisms:
        utility[mechanism] = {f"{eps:g}": {f"{arm}_{metric}": pick(arm, metric, mechanism, eps)
                                           for arm in ("release", "matched_null", "release_minus_null")
                                           for metric in ("auroc", "balanced_accuracy")
                                           if pick(arm, metric, mechanism, eps) is not None}
                              for eps in config.epsilons}
    horizons = {}
    for mechanism in config.mechanisms:
        h = rows[(rows["arm"] == "horizon") & (rows["mechanism"] == mechanism)]["value"]
        horizons[mechanism] = "none" if h.empty or not np.isfinite(h.iloc[0]) else float(h.iloc[0])
    attacks = {}
    for kind, metrics in (("reidentification", ["top1_accuracy", "top1_accuracy_shuffled_control"]),
                          ("membership", ["auroc_distance", "auroc_likelihood"])):
        part = rows[rows["arm"] == kind]
        if part.empty:
            attacks[kind] = {"applies": False, "reason": cohort.reid_reason}
            continue
        table = {}
        for _, row in part.iterrows():
            if row["metric"] not in metrics:
                continue
            eps = "none" if not np.isfinite(row["epsilon"]) else f"{row['epsilon']:g}"
            table.setdefault(row["mechanism"], {}).setdefault(eps, {})[row["metric"]] = entry(row)
        attacks[kind] = {"applies": True, **({"kind": cohort.reid_kind, "reason": cohort.reid_reason}
                                             if kind == "reidentification" else {}), "results": table}
    return {
        "dataset": cohort.dataset, "dataset_version": cohort.dataset_version, "synthetic": cohort.synthetic,
        "stage": STAGE, "eps_unit": EPS_UNIT, "mlflow_summary_run": run_id,
        "cohort": cohort.summary, "config": config.to_dict(),
        "baseline": {m: pick("baseline", m) for m in ("auroc", "balanced_accuracy")},
        "permuted_labels": {m: pick("permuted", m) for m in ("auroc", "balanced_accuracy")},
        "horizon_rule": (f"smallest ε whose (release − null) AUROC lower bound is above 0, at the "
                         f"{config.correction}-corrected level over {len(config.epsilons)} ε"),
        "horizons": horizons, "utility": utility, "attacks": attacks,
        "guarantees": guarantees(cohort, config), "caveats": list(CAVEATS),
    }


def _clean(value):
    value = float(value)
    return value if math.isfinite(value) else None


def summary_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """What the summary run logs: every row's value and interval under its key (non-finite values skipped)."""
    out = {}
    for _, row in rows.iterrows():
        for suffix, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"),
                               ("_ci_low_adjusted", "ci_low_adjusted")):
            value = row.get(column)
            if value is not None and pd.notna(value) and math.isfinite(float(value)):
                out[f"{row['key']}{suffix}"] = float(value)
    return out


@dataclass
class AuditResult:
    cohort: Cohort
    rows: pd.DataFrame
    summary: dict
    counts: dict = field(default_factory=dict)  # cells, cells_computed, cells_resumed
    paths: dict = field(default_factory=dict)


def default_out_dir(dataset: str, version: str) -> Path:
    return Path("reports") / "cohort_audit" / f"{dataset}-{version[:8]}"


def default_cache_dir(dataset: str, version: str) -> Path:
    """Where the feature table (it holds subject ids) and the cell cache live: under the git-ignored data/cache,
    never beside the shareable report."""
    return Path("data") / "cache" / "cohort_audit" / f"{dataset}-{version[:8]}"


def run_audit(dataset: EEGDataset, config: AuditConfig = AuditConfig(), out_dir: str | Path | None = None, *,
              cache_dir: str | Path | None = None, progress: bool = True, n_jobs: int = 1) -> AuditResult:
    """The whole audit: cohort -> sweeps -> summary rows -> one MLflow summary run -> rows.csv, summary.json,
    figures and report.html in ``out_dir`` (written together, atomically; the report reads the logged rows).
    ``cache_dir`` keeps the feature table and every finished cell, so a rerun computes only what is missing."""
    from eegprivacy.reporting import cohort as cohort_report
    from eegprivacy.tracking import log_artifact, log_metrics, start_run

    out = Path(out_dir) if out_dir is not None else default_out_dir(dataset.name, dataset.version())
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(dataset.name, dataset.version())
    cohort = load_cohort(dataset, config, cache_dir=cache, progress=progress)
    sweeps, frames, counts = run_sweeps(cohort, config, cache / "cells", progress=progress, n_jobs=n_jobs)
    rows = summarise(cohort, config, sweeps, frames, cache / "cells")
    paths = {"rows": out / "rows.csv", "summary": out / "summary.json", "report": out / "report.html",
             "utility_figure": out / "utility_vs_epsilon.png", "attack_figure": out / "attacks_vs_epsilon.png"}
    with start_run(study="a", tags=run_tags(cohort, None), run_name=f"{STAGE}-{cohort.dataset}-summary",
                   params={"audit": config.to_dict(), **cohort.base_config}) as run:
        log_metrics({**summary_metrics(rows), **{f"sweep/{k}": float(v) for k, v in counts.items()}})
        summary = summary_document(cohort, config, rows, run.info.run_id)
        summary["counts"] = counts
        figures = cohort_report.figures(rows, summary)
        with atomic_paths(*paths.values()) as (tmp_rows, tmp_summary, tmp_report, tmp_utility, tmp_attack):
            rows.to_csv(tmp_rows, index=False)
            tmp_summary.write_text(json.dumps(summary, indent=1, default=_json_default) + "\n")
            figures["utility"].savefig(tmp_utility, dpi=110)
            figures["attacks"].savefig(tmp_attack, dpi=110)
            cohort_report.write_html(tmp_report, rows, summary, {"utility": tmp_utility, "attacks": tmp_attack})
        cohort_report.close(figures)
        for key in ("rows", "summary", "report"):
            log_artifact(paths[key], STAGE)
        for key in ("utility_figure", "attack_figure"):
            log_artifact(paths[key], f"{STAGE}/figures")
    return AuditResult(cohort, rows, summary, counts, paths)


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _clean(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
