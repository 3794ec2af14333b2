"""Cohort audit: study A's pipeline on a user's own labelled cohort (any :class:`EEGDataset`, e.g. a BIDS folder).

Stages, each resumable:

1. **Features** — the project's window features (``params/features.yaml``; low-pass and bands above Nyquist are
   clipped and flagged by the signal layer), cached in the private cache folder by dataset version + config;
   one vector per patient (:func:`~eegprivacy.privacy.patient_vectors`), patient = subject.
2. **Utility** — study A's ``dp_utility`` protocol itself (:mod:`eegprivacy.studies.release.utility`): its plan
   (:func:`~eegprivacy.studies.release.utility.utility_plan`: baseline, the noise-free ``clipped`` table, the
   permuted-label control, and per mechanism × ε × noise seed the release and its matched null), its LOSO cell
   (:func:`~eegprivacy.studies.release.utility.utility_cell`) and its summary
   (:func:`~eegprivacy.studies.release.utility.summarise`: intervals, release − null, the fixed-sequence horizon
   test), so ``audit-cohort`` and the ``dp_utility`` stage print the same test. Only the runners differ: the audit's
   cells are cached and logged under its own names and tags.
3. **Table attacks** — re-identification when subjects have two recordings (sessions/runs; with one recording per
   subject, optionally its two halves, labelled *same-session*), and membership inference on the released table.

Every cell is a :class:`~eegprivacy.pipeline.sweep.SweepRunner` cell: a resumable cache file, a nested MLflow child
run under one run per sweep, the sweeps nested under one top-level run per audit, which a rerun of the same inputs
and parameters reopens (:func:`audit_key`). Per-patient LOSO predictions (needed for the patient-level bootstrap)
are kept in the cell cache beside the rows and are never logged. Summaries (:func:`summarise`: study A's utility
summary plus the attacks) are logged as metrics of the audit's run, with the verdict's lead as its headline columns
(:func:`headline`, :func:`headline_metrics`), and written as ``rows.csv``/``summary.json``.

**Patient order is canonical**: patients (rows) are sorted by their feature vectors (lexicographically on values
rounded to ~6 significant digits, label last), and feature columns by name, so everything position-dependent (MLP
training order, membership draws, bootstrap resamples) is the same whatever the dataset calls its subjects, in
which order it lists them, or where its files live. Numbers depend on the recordings' data, labels and seeds only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import sys
import warnings
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_paths
from eegprivacy.attacks.metrics import auroc as attack_auroc
from eegprivacy.attacks.table import (
    NearestNeighbourReidentifier,
    TableMembershipInference,
    top_k_hits,
)
from eegprivacy.data.base import DataQualityWarning, EEGDataset, LeftOut
from eegprivacy.errors import InputDataError
from eegprivacy.evaluation import mean_ci, wilson_interval
from eegprivacy.params import ParamsError
from eegprivacy.pipeline.sweep import (
    Cell,
    PrefetchedCells,
    SweepRunner,
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
from eegprivacy.studies.release import utility as study_a
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.table import PatientTable
from eegprivacy.studies.release.table_attacks import recording_halves
from eegprivacy.tracking import required_tags

log = logging.getLogger(__name__)

STAGE = "audit_cohort"
EPS_UNIT = "subject"
# The formally calibrated mechanisms (dp_utility's defaults); the paper's laplace_implemented can be asked for by
# name and is flagged wherever it appears (PAPER_MECHANISMS).
DEFAULT_MECHANISMS = ("gaussian_analytic", "laplace_formal")
DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
PAPER_MECHANISMS = {"laplace_implemented": "the paper's mechanism (b = 2C/ε): no formal guarantee for d > 1"}
# dp_utility's sweep names (its runners' name suffixes) -> the audit's (kept as they were: utility-baseline, ...).
_SWEEP_NAMES = {"none": "baseline", "permuted_labels": "permuted"}
# Where the audit's study-A configs say they come from in an error message.
_SOURCE = "audit-cohort settings"

# Seed streams of the attacks (mixed with the cell seed and a hash of (mechanism, ε)), kept apart from each other.
_REID_STREAM = 0x52454944
_MEMBERSHIP_STREAM = 0x4D454D42
_CONTROL_STREAM = 0x43544C52


# The private list of the recordings an audit left out (file, reason), in its work folder.
LEFT_OUT_FILE = "left_out.tsv"


class CohortError(InputDataError, ValueError):
    """The cohort cannot be audited as given (no labels, one class, too few patients...)."""


@dataclass(frozen=True)
class AuditConfig:
    """Every knob of an audit (all logged as params; the CLI exposes each). The utility knobs are those of study A's
    ``dp_release``/``dp_utility`` (:func:`study_a_configs` maps them), with the same defaults where they matter for
    the horizon test (bootstrap count, permutations, nested seeds)."""

    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    noise_seeds: int = 10  # noise draws (and MLP seeds) per (mechanism, ε), as dp_release's default profile
    baseline_seeds: int = 5  # MLP seeds of the baseline and of the noise-free clipped table
    permutations: int = 40  # the permuted-label control: label permutations, each its own seed
    nested_seeds: int = 2  # seeds (first ones) that also run the nested threshold protocol; < 2: no BA horizon
    inner_folds: int = 3  # the nested protocol's inner k-fold over the training patients
    clip_norm: float = 2.0
    delta: float = 1e-5
    bootstrap: int = 10000  # patient-level (cluster) bootstrap resamples of every interval and p-value
    confidence: float = 0.95  # intervals; α = 1 − confidence for the horizon test (split over the mechanisms)
    min_patients: int = 6
    min_per_class: int = 2
    caution_per_class: int = 8  # fewer patients in a class: the verdict cautions that its intervals are too wide
    membership_trials: int = 20
    member_fraction: float = 0.5
    split_halves: bool = True  # one recording per subject: re-identify its second half from its first
    features_params: str | None = None  # a params file with a ``features`` section; None: the packaged defaults
    skip_bad: bool = True  # leave out a recording that cannot be used (unreadable, NaN samples) instead of stopping

    def __post_init__(self):
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        object.__setattr__(self, "epsilons", tuple(sorted(float(e) for e in self.epsilons)))
        for name in self.mechanisms:
            make_mechanism(name, 1.0, self.delta)  # refuses an unknown name now, not in a worker
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ValueError(f"epsilons must be positive and finite, got {self.epsilons}")
        if self.noise_seeds < 1 or self.baseline_seeds < 1:
            raise ValueError("noise_seeds and baseline_seeds must be >= 1")
        study_a_configs(self)  # every utility knob within study A's constraints, before any data is read

    def to_dict(self) -> dict:
        return asdict(self)


def study_a_configs(config: AuditConfig, dataset: str = "cohort") -> tuple[DPReleaseConfig, DPUtilityConfig]:
    """The audit's utility knobs as study A's typed ``dp_release`` and ``dp_utility`` configs (checked by their
    constraints), so :func:`eegprivacy.studies.release.utility.utility_plan` builds the audit's utility cells.

    Labels travel in the clear (``label_epsilon`` = ∞) and every (mechanism, ε, seed) draws its own noise."""
    try:
        release = DPReleaseConfig.from_mapping(
            {"clip_norm": float(config.clip_norm), "delta": float(config.delta), "epsilons": list(config.epsilons),
             "mechanisms": list(config.mechanisms), "noise_seeds": int(config.noise_seeds),
             "datasets": {dataset: {"label": "label"}}, "common_random_numbers": False,
             "label_epsilon": math.inf}, _SOURCE, "dp_release.")
        utility = DPUtilityConfig.from_mapping(
            {"mechanisms": list(config.mechanisms), "baseline_mlp_seeds": int(config.baseline_seeds),
             "permutations": int(config.permutations), "nested_seeds": int(config.nested_seeds), "n_jobs": 1,
             "figure_epsilon": float(max(config.epsilons)), "nested_inner_folds": int(config.inner_folds),
             "bootstrap": int(config.bootstrap), "confidence": float(config.confidence)}, _SOURCE, "dp_utility.")
    except ParamsError as err:
        raise ValueError(f"an audit setting is outside study A's utility protocol: {err}") from None
    return release, utility


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


def feature_settings(config: AuditConfig):
    """The feature pipeline of an audit: the ``features`` section of ``config.features_params``, else of the
    params shipped inside the package (:mod:`eegprivacy.defaults`, a copy of the repository's
    ``params/features.yaml``), so the installed tool needs no checkout."""
    from eegprivacy.defaults import default_params

    if config.features_params is not None:
        return FeaturesParams.load(config.features_params, "features").pipeline()
    with default_params() as path:
        return FeaturesParams.load(path, "features").pipeline()


def window_table(dataset: EEGDataset, config: AuditConfig, cache_dir: str | Path | None,
                 progress: bool = True, on_recording=None) -> tuple[pd.DataFrame, str, str, list[LeftOut]]:
    """(window features, dataset version, feature-config hash, recordings left out), read from ``cache_dir`` when
    current.

    A user's cohort gets the shared feature settings whatever it is called (``per_dataset`` overrides are the
    pipeline's own datasets'), so a BIDS copy of a dataset and its loader give the same numbers; a low-pass or band
    above the cohort's Nyquist is moved or dropped, and flagged, by the signal layer. With ``config.skip_bad`` a
    recording that cannot be used (unreadable, NaN samples) is left out (else it stops the audit); it and the
    recordings too short for one window are returned. The data-quality warnings raised while the table was
    computed, and the recordings left out, are kept beside it (``.warnings.json``) and raised again when it is read
    back, so a resumed audit reports (and prints) the same problems as the first run. ``on_recording`` is called
    once per recording read (an overall progress bar)."""
    features = feature_settings(config)
    version = dataset.version()
    left_out: list[LeftOut] = []

    def compute() -> pd.DataFrame:
        return dataset_window_features(dataset, features, progress=progress, on_recording=on_recording,
                                       skip_bad=config.skip_bad, on_left_out=left_out.append)

    if cache_dir is None:
        return compute(), version, features.config_hash(), left_out
    path = Path(cache_dir) / f"features-{version[:16]}-{features.config_hash()}.parquet"
    notes = path.with_suffix(".warnings.json")
    kept = json.loads(notes.read_text()) if notes.exists() else None
    # a table that left bad recordings out is not what an audit that stops at them (skip_bad off) would compute
    if is_current(path, version, features) and isinstance(kept, dict) and (
            config.skip_bad or not any(entry["unusable"] for entry in kept["left_out"])):
        for message in kept["warnings"]:
            warnings.warn(message, DataQualityWarning, stacklevel=2)
        left_out = [LeftOut(**entry) for entry in kept["left_out"]]
        return (read_feature_table(path, dataset_version=version, config=features), version, features.config_hash(),
                left_out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = compute()
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    write_feature_table(table, path, dataset_version=version, config=features, synthetic=dataset.synthetic)
    with atomic_paths(notes) as (tmp,):
        tmp.write_text(json.dumps({"warnings": messages, "left_out": [asdict(e) for e in left_out]}, indent=1)
                       + "\n")
    for w in caught:  # to the caller, as if never caught here
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return table, version, features.config_hash(), left_out


def _redacted(messages: list[str], dataset: EEGDataset, left_out: list[LeftOut] = ()) -> list[str]:
    """Warnings as the report may show them: subject ids, recording ids and file names (which loaders' warnings
    name, of the recordings read and of those ``left_out``) replaced by ``<redacted>``, so the report and MLflow
    never carry an identifier."""
    import re

    names = set()
    for rec in [*dataset.recordings(), *left_out]:  # a recording id may hold the subject's (BIDS: sub-05_task-rest)
        names |= {str(rec.subject), str(getattr(rec, "recording", "")), str(rec.source), Path(str(rec.source)).name}
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


def check_labels(dataset: EEGDataset, config: AuditConfig = AuditConfig()) -> None:
    """The label checks, from the recordings' metadata (headers, ``participants.tsv``) before any signal is read:
    a 0/1 label for every subject, both classes, enough patients. :func:`load_cohort` checks again after the
    features (a subject whose every recording is unusable drops out)."""
    meta = dataset.metadata()
    labels = _binary_labels(dataset.name, meta)
    y = labels.groupby(meta["subject"]).first()
    _check_classes(dataset.name, y.to_numpy(), config)


def _binary_labels(name: str, table: pd.DataFrame) -> pd.Series:
    """``table["label"]`` (one row per recording or window, with ``subject``) as 0/1 integers, or the error that
    says what is wrong with it."""
    if "label" not in table or table["label"].isna().all():
        raise CohortError(f"{name}: the recordings carry no patient label (meta 'label'); pass a label column that "
                          "exists for every subject (for BIDS: --label COLUMN of participants.tsv)")
    labels = pd.to_numeric(table["label"], errors="coerce")
    if labels.isna().any():
        n = table.loc[labels.isna(), "subject"].nunique()
        raise CohortError(f"{name}: {n} subject(s) have no label; every subject needs a 0/1 label")
    if not labels.isin([0, 1]).all():
        raise CohortError(f"{name}: labels must be 0/1, got values {sorted(labels.unique())[:6]}; map them (for "
                          "BIDS: --label-map)")
    return labels.astype(int)


def _check_classes(name: str, y: np.ndarray, config: AuditConfig) -> None:
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        raise CohortError(f"{name}: all {len(y)} patients have label {int(y[0])}; the audit needs both classes")
    if min(n_pos, n_neg) < config.min_per_class:
        raise CohortError(f"{name}: {n_pos} positive and {n_neg} negative patients; each class needs at "
                          f"least {config.min_per_class}")
    if len(y) < max(config.min_patients, config.inner_folds + 2):
        raise CohortError(f"{name}: {len(y)} patients; the audit needs at least "
                          f"{max(config.min_patients, config.inner_folds + 2)}")


def load_cohort(dataset: EEGDataset, config: AuditConfig = AuditConfig(), cache_dir: str | Path | None = None,
                progress: bool = True, on_recording=None) -> Cohort:
    """Labels checked (before any signal is read), window features -> canonical patient table, plus the
    re-identification tables. Every data-quality warning (a truncated file, a flat channel, a recording too short)
    is logged once, naming its file, for the console; the report keeps them with subject ids and file names
    redacted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_labels(dataset, config)
        frame, version, features_hash, dropped = window_table(dataset, config, cache_dir, progress, on_recording)
    left_out = [*dataset.left_out, *dropped]
    messages = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)})
    for message in messages:
        log.warning("%s", message)
    quality_warnings = _redacted(messages, dataset, left_out)
    if cache_dir is not None:  # the private list, naming files, beside the feature table
        with atomic_paths(Path(cache_dir) / LEFT_OUT_FILE) as (tmp,):
            pd.DataFrame([asdict(e) for e in left_out], columns=["subject", "source", "reason", "unusable"]).rename(
                columns={"source": "file"}).to_csv(tmp, sep="\t", index=False)
    if frame.empty:
        raise CohortError(f"{dataset.name}: no recording gave a feature window")
    frame = frame.assign(label=_binary_labels(dataset.name, frame))
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
    _check_classes(dataset.name, y, config)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
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
        "n_recordings": int(len(recs)), "n_recordings_listed": int(len(meta) + len(dataset.left_out)),
        "n_windows": int(len(frame)),
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
        "label_names": {k: str(v) for k, v in dataset.label_names().items() if k in ("0", "1")},
        "flags": _flag_counts(frame), "warnings": quality_warnings,
        "left_out": [{"reason": reason, "unusable": e.unusable}
                     for e, reason in zip(left_out, _redacted([e.reason for e in left_out], dataset, left_out))],
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
    """An attack cell, by ``config["kind"]`` (utility cells are study A's
    :func:`~eegprivacy.studies.release.utility.utility_cell`); a pure function of (config, seed) so any process can
    compute it."""
    kind = config["kind"]
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
# The package's sources an audit's numbers depend on (relative to the package folder): the cell cache's code key.
CODE = ("studies/cohort_audit.py", "studies/release", "signal", "privacy", "evaluation", "attacks", "data",
        "batched", "defaults")


@functools.cache
def code_hash() -> str:
    """The cell cache's code key: sha256 (16 hex) over the sources in :data:`CODE` by package-relative path and
    content, so a cached cell is never reused after a change to them, in a checkout or an installed wheel alike."""
    import hashlib

    import eegprivacy

    package = Path(eegprivacy.__file__).resolve().parent
    digest = hashlib.sha256()
    for entry in CODE:
        path = package / entry
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and file.suffix in (".py", ".yaml", ".tsv") and "__pycache__" not in file.parts:
                digest.update(file.relative_to(package).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


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


def patient_table(cohort: Cohort) -> PatientTable:
    """The cohort as study A's patient table (canonical patient order; LOSO groups are positions)."""
    X = pd.DataFrame(cohort.X, columns=cohort.feature_names)
    return PatientTable(cohort.dataset, cohort.dataset_version, cohort.features_hash, cohort.synthetic, X,
                        np.asarray(cohort.y, dtype=int), np.arange(len(cohort.y)))


class _AuditRunner(SweepRunner):
    """A sweep runner that also reports each computed cell to ``on_cell(config, seed)`` (the audit's one overall
    progress line), in place of a bar per sweep."""

    on_cell = None

    def run(self, cells, cell_fn):
        if self.on_cell is None:
            return super().run(cells, cell_fn)

        def counted(config, seed):
            rows = cell_fn(config, seed)
            self.on_cell(config, seed)
            return rows

        return super().run(cells, counted)


def audit_key(cohort: Cohort, config: AuditConfig) -> str:
    """The audit's idempotency key: a hash of everything its results depend on (the stage, the dataset and its
    version, the feature settings, every knob, the code), so a rerun of the same inputs and parameters reopens the
    same MLflow runs instead of adding new ones (:func:`eegprivacy.tracking.runs.start_run`)."""
    text = json.dumps({"stage": STAGE, "dataset": cohort.dataset, "dataset_version": cohort.dataset_version,
                       "features_hash": cohort.features_hash, "config": config.to_dict(), "code": code_hash()},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runner(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, name: str, progress: bool,
            parent_tags: dict, tags_fn, key: str | None = None) -> SweepRunner:
    """The audit runner of sweep ``name``; with the audit's ``key``, the sweep's own (the two hashed)."""
    sweep_key = None if key is None else hashlib.sha256(f"{key}/{name}".encode()).hexdigest()[:16]
    return _AuditRunner(name=f"{STAGE}-{cohort.dataset}-{name}", study="a", dataset=cohort.dataset,
                        out_dir=Path(cells_dir) / name, parent_tags=parent_tags, tags_fn=tags_fn,
                        params={"audit": config.to_dict(), **cohort.base_config}, progress=progress,
                        idempotency_key=sweep_key)


def utility_plan(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, progress: bool = True,
                 key: str | None = None) -> list[Sweep]:
    """Study A's utility plan (:func:`eegprivacy.studies.release.utility.utility_plan`) for the cohort: the same
    arms and cells (configs, seeds, cache keys) as ``dp_utility`` on this table, each sweep run by an audit runner
    (named ``audit_cohort-<dataset>-utility-<sweep>``, its cells under ``cells_dir``, tagged ``stage =
    audit_cohort`` on top of dp_utility's own tags: mechanism, model, attack, ε, δ); with the audit's ``key``
    (:func:`audit_key`) each sweep's runs are reused by a rerun."""
    release_config, utility_config = study_a_configs(config, cohort.dataset)
    prefix = f"dp_utility-{cohort.dataset}-"
    sweeps = []
    for runner, cells in study_a.utility_plan(patient_table(cohort), release_config, utility_config, "label",
                                              cells_dir=cells_dir, progress=progress):
        suffix = runner.name.removeprefix(prefix)
        name = f"utility-{_SWEEP_NAMES.get(suffix, suffix)}"

        def tags_fn(cell, _own=runner.tags_fn):
            return {**_own(cell), **run_tags(cohort, cell.seed)}

        sweeps.append(Sweep(name, _runner(cohort, config, cells_dir, name, progress,
                                          {**runner.parent_tags, **run_tags(cohort, None)}, tags_fn, key),
                            cells, "utility"))
    return sweeps


def plan(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, progress: bool = True,
         key: str | None = None) -> list[Sweep]:
    """Every sweep of the audit: study A's utility sweeps (:func:`utility_plan`), then the attacks; with the
    audit's ``key`` (:func:`audit_key`) a rerun reuses each sweep's runs."""
    sweeps = utility_plan(cohort, config, cells_dir, progress, key)
    base = {**cohort.base_config, "clip_norm": float(config.clip_norm), "code_hash": code_hash()}

    def add(name, kind, cells, mechanism, **tags):
        def child_tags(cell):
            eps = float(cell.config.get("epsilon", math.inf))
            own = {"epsilon": eps} if math.isfinite(eps) else {}
            if "delta" in cell.config and cell.config["mechanism"] != NO_NOISE:
                own["delta"] = cell.config["delta"]
            return run_tags(cohort, cell.seed, mechanism=mechanism, **tags, **own)

        runner = _runner(cohort, config, cells_dir, name, progress, run_tags(cohort, None, mechanism=mechanism, **tags),
                         child_tags, key)
        sweeps.append(Sweep(name, runner, cells, kind))

    noise_seeds = range(config.noise_seeds)
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


def _pending(sweep: Sweep, cells_dir: Path) -> list[Cell]:
    """Cells a run computes: not on disk, or (utility) on disk without their kept predictions."""
    missing = {cell.key for cell in sweep.runner.pending(sweep.cells)}
    return [cell for cell in sweep.cells if cell.key in missing
            or (sweep.kind == "utility" and not study_a.predictions_path(cells_dir, cell.key).exists())]


def cell_cost(config: dict, seed: int, n_patients: int) -> float:
    """A cell's work in LOSO fits, the unit of the progress line's cells phase: a utility cell's
    (:func:`eegprivacy.studies.release.utility.loso_fits`: n, or n plus the nested protocol's inner fits), an
    attack cell's one (a few releases and distance computations: about one fit's time)."""
    if config.get("kind") in ("reidentification", "membership"):
        return 1.0
    return study_a.loso_fits(config, seed, n_patients)


def run_sweeps(cohort: Cohort, config: AuditConfig, cells_dir: str | Path, *, progress: bool = True,
               n_jobs: int = 1, bar=None, key: str | None = None) -> tuple[list[Sweep], list[pd.DataFrame], dict]:
    """Run every sweep: the utility sweeps through study A's
    :func:`~eegprivacy.studies.release.utility.run_keeping_predictions` (per-patient predictions kept under
    ``cells_dir``), then the attacks; pending cells are computed ahead by ``n_jobs`` processes or the process-wide
    executor. With ``bar`` (a :class:`~eegprivacy.pipeline.progress.PhaseProgress`) the cells are one phase of it,
    counted in LOSO fits (:func:`cell_cost`), and no sweep draws its own. With the audit's ``key``
    (:func:`audit_key`) a rerun reuses the sweeps' MLflow runs."""
    cells_dir = Path(cells_dir)
    sweeps = plan(cohort, config, cells_dir, progress and bar is None, key)
    utility = [s for s in sweeps if s.kind == "utility"]
    attacks = [s for s in sweeps if s.kind != "utility"]
    pending = [cell for s in sweeps for cell in _pending(s, cells_dir)]
    if bar is not None:
        cost = functools.partial(cell_cost, n_patients=len(cohort.y))
        bar.phase("audit: utility and attack cells", sum(cost(c.config, c.seed) for c in pending), "LOSO fits")
        for sweep in sweeps:
            sweep.runner.on_cell = lambda config, seed, _cost=cost: bar.advance(_cost(config, seed))
    frames = study_a.run_keeping_predictions([(s.runner, s.cells) for s in utility],
                                             functools.partial(study_a.utility_cell, X=cohort.X, y=cohort.y),
                                             cells_dir, n_jobs)
    arrays = {"X": cohort.X, "y": cohort.y, "reid_release": cohort.reid_release,
              "reid_auxiliary": cohort.reid_auxiliary}
    cell_fn = functools.partial(audit_cell, cohort_arrays=arrays,
                                audit={"membership_trials": config.membership_trials,
                                       "member_fraction": config.member_fraction})
    jobs = [(cell.config, cell.seed) for s in attacks for cell in s.runner.pending(s.cells)]
    compute = PrefetchedCells(cell_fn, jobs, n_jobs=n_jobs)
    frames += [s.runner.run(s.cells, compute) for s in attacks]
    n_cells = sum(len(s.cells) for s in sweeps)
    return utility + attacks, frames, {"sweeps": len(sweeps), "cells": n_cells, "cells_computed": len(pending),
                                       "cells_resumed": n_cells - len(pending)}


# ---------------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------------
def metric_key(arm: str, mechanism: str, epsilon: float, metric: str, protocol: str = "") -> str:
    """The MLflow metric name of a summary row (the same name in rows.csv's ``key`` and summary.json):
    ``<arm>/<mechanism>/eps_<ε>/<protocol>/<metric>``, the parts that do not apply left out, as
    :func:`eegprivacy.studies.release.utility.summary_metrics` names dp_utility's."""
    eps = f"eps_{epsilon:g}" if np.isfinite(epsilon) else ""
    mech = "" if mechanism in (NO_NOISE, "permuted_labels") else mechanism
    protocol = protocol if isinstance(protocol, str) else ""
    return "/".join(p for p in (arm, mech, eps, protocol, metric) if p)


def utility_summary(cohort: Cohort, config: AuditConfig, sweeps: list[Sweep], cells_dir: str | Path) -> pd.DataFrame:
    """Study A's utility summary of the audit's utility cells: exactly
    :func:`eegprivacy.studies.release.utility.summarise` (arms, release − null, the horizon test and its columns)."""
    plan_ = [(s.runner, s.cells) for s in sweeps if s.kind == "utility"]
    return study_a.summarise(plan_, cells_dir, cohort.y, n_resamples=config.bootstrap, confidence=config.confidence,
                             epsilons=list(config.epsilons))


def summarise(cohort: Cohort, config: AuditConfig, sweeps: list[Sweep], frames: list[pd.DataFrame],
              cells_dir: str | Path) -> pd.DataFrame:
    """Tidy summary rows: study A's utility summary (:func:`utility_summary`, unchanged) and the attacks beside
    chance, each row with the dataset, ``eps_unit``, ``eps_covers`` where a release is involved, and ``key`` (its
    MLflow metric name)."""
    utility = utility_summary(cohort, config, sweeps, cells_dir)
    rows: list[dict] = []
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
            released = record["mechanism"] != NO_NOISE
            rows.append({"arm": sweep.kind, "mechanism": record["mechanism"], "epsilon": record["epsilon"],
                         "metric": metric, "value": value, "ci_low": low, "ci_high": high, "ci_over": ci_over,
                         "n": K, "n_seeds": n_seeds, "chance": float(part["chance"].iloc[0]),
                         "attack_kind": cohort.reid_kind if sweep.kind == "reidentification" else "",
                         **({"eps_covers": study_a.EPS_COVERS} if released else {})})
    frame = pd.concat([utility, pd.DataFrame(rows)], ignore_index=True)
    frame.insert(0, "dataset", cohort.dataset)
    frame.insert(1, "dataset_version", cohort.dataset_version)
    frame.insert(2, "synthetic", cohort.synthetic)
    frame["eps_unit"] = EPS_UNIT
    frame["key"] = [metric_key(r.arm, r.mechanism, r.epsilon, r.metric, r.protocol)
                    for r in frame[["arm", "mechanism", "epsilon", "metric", "protocol"]].itertuples()]
    duplicated = frame["key"][frame["key"].duplicated()]
    if len(duplicated):
        raise AssertionError(f"two summary rows share the MLflow key {duplicated.iloc[0]!r}")
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


def mechanism_flags(cohort: Cohort, config: AuditConfig) -> dict[str, str]:
    """Per mechanism, what every table must say beside it: "" for a formal guarantee at every ε of the grid, the
    paper's flag for ``laplace_implemented`` ("no formal guarantee for d > 1"), else the ε without one."""
    flags = {}
    for mechanism in config.mechanisms:
        informal = [g["epsilon"] for g in guarantees(cohort, config)
                    if g["mechanism"] == mechanism and not g["formal_guarantee"]]
        if mechanism in PAPER_MECHANISMS and cohort.X.shape[1] > 1:
            flags[mechanism] = PAPER_MECHANISMS[mechanism]
        elif informal:
            flags[mechanism] = f"no formal guarantee at ε = {', '.join(f'{e:g}' for e in informal)}"
        else:
            flags[mechanism] = ""
    return flags


CAVEATS = (
    "ε is per patient (eps_unit: subject): the release is one vector per patient, the mean of all its windows.",
    "Labels are released in the clear: the guarantee covers the features only, not the 0/1 label column.",
    "Robust-scaling statistics (median, IQR) are fitted on the private table in each release; the ε is conditional "
    "on them (eps_covers: features; no end-to-end guarantee).",
    "Every formal guarantee here is under idealised sampling: the audit simulates releases with seeded numpy "
    "floating-point noise (textbook samplers, open to floating-point attacks; Mironov 2012). A release of the real "
    "cohort should draw its noise with OpenDP's exact samplers (release_table(..., sampler='opendp')).",
    "laplace_implemented (b = 2C/ε) is what the paper ran: no formal guarantee for d > 1 (not a full-vector ε-DP "
    "guarantee); it runs only when asked for by name.",
    "Each (mechanism, ε, seed) is a separate release: running several spends the sum of their ε on the same "
    "patients.",
)
# Columns that place a row (in summary.json they are the keys of the nesting, not of the entry).
_PLACE = ("dataset", "dataset_version", "synthetic", "arm", "mechanism", "epsilon", "metric", "key")
# Numeric columns that describe a row rather than measure it: in summary.json, not logged as metrics.
_DESCRIPTORS = ("epsilon", "n", "n_seeds", "chance")


def _json_value(value):
    """A summary cell as JSON: finite numbers, booleans and non-empty text; None for what is missing."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _clean(value)
    if isinstance(value, str):
        return value or None
    return None if value is None or pd.isna(value) else value


def _entry(row: pd.Series) -> dict:
    """One summary row as summary.json holds it: every column that has a value (the utility summary's test columns
    included), and the MLflow metric key its numbers were logged under."""
    out = {"value": _clean(row["value"]), "ci_low": _clean(row["ci_low"]), "ci_high": _clean(row["ci_high"])}
    for column, value in row.items():
        if column in _PLACE or column in out:
            continue
        value = _json_value(value)
        if value is not None:
            out[column] = value
    out["mlflow_metric"] = row["key"]
    return out


def summary_document(cohort: Cohort, config: AuditConfig, rows: pd.DataFrame, run_id: str | None = None) -> dict:
    """summary.json: the headline numbers, each with the MLflow metric key it was logged under. The utility part is
    study A's summary (:func:`utility_summary`) arranged by arm, mechanism and ε; the horizons are its ``horizon``
    rows, with the test that decided them (``correction``) and what their ε covers (``eps_covers``)."""
    # the first row of each (arm, metric[, mechanism][, ε]): one pass, not a filter of the table per lookup
    first_of: dict = {}
    for i, (arm_, metric_, mechanism_, epsilon_) in enumerate(zip(rows["arm"], rows["metric"], rows["mechanism"],
                                                                  rows["epsilon"].astype(float))):
        for key in ((mechanism_, epsilon_), (mechanism_, None), (None, epsilon_), (None, None)):
            first_of.setdefault((arm_, metric_, *key), i)

    def pick(arm, metric, mechanism=None, epsilon=None):
        i = first_of.get((arm, metric, mechanism, None if epsilon is None else float(epsilon)))
        return None if i is None else _entry(rows.iloc[i])

    metrics = [m for _, m, _ in study_a.SUMMARY_METRICS]
    released = rows[rows["mechanism"].isin(config.mechanisms) & np.isfinite(rows["epsilon"].astype(float))]
    released_arms = [a for a in dict.fromkeys(released["arm"]) if a not in ("reidentification", "membership")]
    utility = {mechanism: {f"{eps:g}": {f"{arm}_{metric}": pick(arm, metric, mechanism, eps)
                                        for arm in released_arms for metric in metrics
                                        if pick(arm, metric, mechanism, eps) is not None}
                           for eps in config.epsilons}
               for mechanism in config.mechanisms}
    # the non-private arms and their differences (baseline, clipped, permuted, baseline − permuted, ...)
    unreleased = rows[~np.isfinite(rows["epsilon"].astype(float)) & ~rows["arm"].isin(
        ["horizon", "reidentification", "membership"])]
    controls = {arm: {m: pick(arm, m) for m in metrics if pick(arm, m) is not None}
                for arm in dict.fromkeys(unreleased["arm"])}
    horizon_rows = rows[rows["arm"] == "horizon"]
    horizons, horizon_tests = {}, {}
    for mechanism in config.mechanisms:
        mine = horizon_rows[horizon_rows["mechanism"] == mechanism]
        tests = {}
        for _, row in mine.iterrows():
            metric = row["metric"].removesuffix("_horizon_epsilon")
            tests[metric] = {**_entry(row), "horizon": study_a.horizon_text(row["value"], row.get("horizon_tested"))}
        horizon_tests[mechanism] = tests
        auroc = tests.get("auroc")
        horizons[mechanism] = "none" if auroc is None else (auroc["value"] if auroc["value"] is not None
                                                            else auroc["horizon"])
    corrections = sorted(set(horizon_rows["correction"].dropna().astype(str)))
    covers = sorted(set(horizon_rows["eps_covers"].dropna().astype(str)))
    notes = sorted(set(horizon_rows["eps_covers_note"].dropna().astype(str))) if "eps_covers_note" in rows else []
    attacks = {}
    for kind, names in (("reidentification", ["top1_accuracy", "top1_accuracy_shuffled_control"]),
                        ("membership", ["auroc_distance", "auroc_likelihood"])):
        part = rows[rows["arm"] == kind]
        if part.empty:
            attacks[kind] = {"applies": False, "reason": cohort.reid_reason}
            continue
        table = {}
        for _, row in part.iterrows():
            if row["metric"] not in names:
                continue
            eps = "none" if not np.isfinite(row["epsilon"]) else f"{row['epsilon']:g}"
            table.setdefault(row["mechanism"], {}).setdefault(eps, {})[row["metric"]] = _entry(row)
        attacks[kind] = {"applies": True, **({"kind": cohort.reid_kind, "reason": cohort.reid_reason}
                                             if kind == "reidentification" else {}), "results": table}
    document = {
        "dataset": cohort.dataset, "dataset_version": cohort.dataset_version, "synthetic": cohort.synthetic,
        "stage": STAGE, "eps_unit": EPS_UNIT, "mlflow_summary_run": run_id,
        "cohort": cohort.summary, "config": config.to_dict(),
        "baseline": {m: pick("baseline", m) for m in metrics},
        "permuted_labels": {m: pick("permuted", m) for m in metrics},
        "controls": controls,
        "horizon_test": "; ".join(corrections),
        "horizon_rule": ("study A's dp_utility horizon test (eegprivacy.studies.release.utility.summarise) on the "
                         "one-sided bootstrap p-values of release − null: " + ("; ".join(corrections) or "none")),
        "eps_covers": "; ".join(covers), "eps_covers_note": "; ".join(notes),
        "mechanism_flags": mechanism_flags(cohort, config),
        "horizons": horizons, "horizon_tests": horizon_tests, "utility": utility, "attacks": attacks,
        "guarantees": guarantees(cohort, config), "caveats": list(CAVEATS),
    }
    document["headline"] = headline(document)
    return document


def headline(summary: dict) -> list[dict]:
    """The verdict's lead, one point per mechanism: the ε a steward would pick — the mechanism's utility horizon
    (the smallest ε of the grid from which its release beats the matched null), else the largest ε tried — with
    what the release keeps there (release AUROC, its matched null, release − null with the test's decision) and
    what it leaks (re-identification top-1 with its noiseless value, membership AUROC). Every number is an entry
    of ``summary`` (its ``utility`` and ``attacks``), copied with the MLflow metric it was logged as.

    Returns
    -------
    list of dict
        Per mechanism (config order): ``mechanism``, ``epsilon``, ``why`` ("horizon", "largest" or "not tested")
        and the entries ``release_auroc``, ``matched_null_auroc``, ``release_minus_null_auroc``,
        ``reidentification``, ``reidentification_none`` (no noise) and ``membership`` (None where absent).
    """
    config, attacks = summary["config"], summary["attacks"]
    reid = (attacks.get("reidentification") or {}).get("results") or {}
    member = (attacks.get("membership") or {}).get("results") or {}
    points = []
    for mechanism in config["mechanisms"]:
        horizon = summary["horizons"].get(mechanism)
        if isinstance(horizon, (int, float)) and math.isfinite(horizon):
            epsilon, why = float(horizon), "horizon"
        else:
            epsilon, why = float(max(config["epsilons"])), "not tested" if horizon == "not tested" else "largest"
        at = f"{epsilon:g}"
        cells = (summary.get("utility") or {}).get(mechanism, {}).get(at) or {}
        points.append({"mechanism": mechanism, "epsilon": epsilon, "why": why,
                       **{name: cells.get(name) for name in ("release_auroc", "matched_null_auroc",
                                                             "release_minus_null_auroc")},
                       "reidentification": (reid.get(mechanism) or {}).get(at, {}).get("top1_accuracy"),
                       "reidentification_none": (reid.get(NO_NOISE) or {}).get("none", {}).get("top1_accuracy"),
                       "membership": (member.get(mechanism) or {}).get(at, {}).get("auroc_likelihood")})
    return points


def _clean(value):
    value = float(value)
    return value if math.isfinite(value) else None


def summary_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """What the audit run logs: every row's value under its key, and each other finite number of the row
    (interval, p-value, its Monte-Carlo error, adjusted p, α tested...) under ``<key>_<column>``; descriptors
    (ε, n, seeds, chance), booleans and text are not logged."""
    out = {}
    for _, row in rows.iterrows():
        for column, value in row.items():
            if column in _PLACE or column in _DESCRIPTORS or isinstance(value, (bool, np.bool_, str)):
                continue
            if isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(float(value)):
                out[row["key"] + ("" if column == "value" else f"_{column}")] = float(value)
    return out


class AuditReport(Protocol):
    """What draws the audit's figures and writes its ``report.html`` (:mod:`eegprivacy.reporting.cohort` is one).

    :func:`run_audit` computes and hands the rows and summary to it, so that this study never imports the reporting
    layer, which sits above the studies (``tests/test_architecture.py``): the caller passes the reporter in.
    """

    def figures(self, rows: pd.DataFrame, summary: dict) -> dict:
        """The report's figures by name (``utility``, ``attacks``), drawn from the summary rows."""

    def write_html(self, path: str | Path, rows: pd.DataFrame, summary: dict, images: dict) -> Path:
        """The report, written to ``path``, with the saved figures ``images`` (name -> file) in it."""

    def close(self, figs: dict) -> None:
        """Release what :meth:`figures` drew."""


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


# The audit run's headline columns, per mechanism (the name says what the column holds, then which mechanism, so a
# narrow column still shows what it is) and the chance level of re-identification.
HEADLINE_COLUMNS = {"epsilon": "ε {}", "release_auroc": "AUROC {}", "reidentification": "re-identified {}"}
CHANCE_COLUMN = "re-identified by chance"


def headline_metrics(summary: dict) -> dict[str, float]:
    """The verdict's lead as the audit run's metrics, the columns a steward reads first in MLflow's runs table
    (:data:`HEADLINE_COLUMNS`): per mechanism the ε of :func:`headline`, the release's AUROC there and the share
    of patients re-identified there, and :data:`CHANCE_COLUMN`, to 3 decimals as a table shows them (the exact
    values are the summary metrics of the same run); a number the summary does not have is left out."""
    out = {}
    for point in summary.get("headline") or []:
        for name, column in HEADLINE_COLUMNS.items():
            value = point["epsilon"] if name == "epsilon" else (point.get(name) or {}).get("value")
            if value is not None:
                out[column.format(point["mechanism"])] = round(float(value), 3)
        chance = (point.get("reidentification") or {}).get("chance")
        if chance is not None:
            out[CHANCE_COLUMN] = round(float(chance), 3)
    return out


def headline_columns(config: AuditConfig) -> list[str]:
    """The runs-table columns of the audit's first screen (:func:`headline_metrics`), in reading order."""
    return [column.format(m) for m in config.mechanisms for column in HEADLINE_COLUMNS.values()] + [CHANCE_COLUMN]


def run_audit(dataset: EEGDataset, config: AuditConfig = AuditConfig(), out_dir: str | Path | None = None, *,
              report: AuditReport, cache_dir: str | Path | None = None, progress: bool = True,
              n_jobs: int = 1) -> AuditResult:
    """The whole audit: cohort -> one top-level MLflow run for the audit, its sweeps nested under it -> summary
    rows, logged on that run with the verdict's headline columns (:func:`headline_metrics`) -> rows.csv,
    summary.json, figures and report.html in ``out_dir`` (written together, atomically; the report reads the logged
    rows). A rerun of the same inputs and parameters reopens the same runs (:func:`audit_key`), and the runs
    table's first screen for the cohort is stored in the experiment (:func:`~eegprivacy.tracking.runs.share_view`).
    ``report`` draws the figures and writes report.html (:class:`AuditReport`; pass
    :mod:`eegprivacy.reporting.cohort`). ``cache_dir`` keeps the feature table and every finished cell, so a rerun
    computes only what is missing.
    One progress line: recordings read, then LOSO fits computed, each phase's ETA from its own measured pace
    (:class:`~eegprivacy.pipeline.progress.PhaseProgress`)."""
    from eegprivacy.pipeline.progress import PhaseProgress
    from eegprivacy.tracking import log_artifact, log_metrics, start_run
    from eegprivacy.tracking.runs import search_literal, share_view

    out = Path(out_dir) if out_dir is not None else default_out_dir(dataset.name, dataset.version())
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(dataset.name, dataset.version())
    line = PhaseProgress(enabled=progress)
    line.note("audit: checking labels and recordings")
    try:
        def on_recording():
            if line.unit != "recordings":
                line.phase("audit: reading recordings", len(dataset.recordings()), "recordings")
            line.advance()

        cohort = load_cohort(dataset, config, cache_dir=cache, progress=False, on_recording=on_recording)
        key = audit_key(cohort, config)
        with start_run(study="a", tags=run_tags(cohort, None), run_name=f"{STAGE}-{cohort.dataset}",
                       params={"audit": config.to_dict(), **cohort.base_config}, idempotency_key=key) as run:
            sweeps, frames, counts = run_sweeps(cohort, config, cache / "cells", progress=progress, n_jobs=n_jobs,
                                                bar=line if progress else None, key=key)
            line.note("audit: intervals and report")
            rows = summarise(cohort, config, sweeps, frames, cache / "cells")
            paths = {"rows": out / "rows.csv", "summary": out / "summary.json", "report": out / "report.html",
                     "utility_figure": out / "utility_vs_epsilon.png",
                     "attack_figure": out / "attacks_vs_epsilon.png"}
            summary = summary_document(cohort, config, rows, run.info.run_id)
            summary["counts"] = counts
            log_metrics({**summary_metrics(rows), **{f"sweep/{k}": float(v) for k, v in counts.items()},
                         **headline_metrics(summary)})
            figures = report.figures(rows, summary)
            with atomic_paths(*paths.values()) as (tmp_rows, tmp_summary, tmp_report, tmp_utility, tmp_attack):
                rows.to_csv(tmp_rows, index=False)
                tmp_summary.write_text(json.dumps(summary, indent=1, default=_json_default) + "\n")
                figures["utility"].savefig(tmp_utility, dpi=110)
                figures["attacks"].savefig(tmp_attack, dpi=110)
                report.write_html(tmp_report, rows, summary, {"utility": tmp_utility, "attacks": tmp_attack})
            report.close(figures)
            for name in ("rows", "summary", "report"):
                log_artifact(paths[name], STAGE)
            for name in ("utility_figure", "attack_figure"):
                log_artifact(paths[name], f"{STAGE}/figures")
        name = search_literal(cohort.dataset)  # None: a name with both kinds of quotes, which no filter can hold
        share_view("a", runs_view_key(cohort.dataset), f"tags.stage = '{STAGE}'"
                   + (f" and tags.dataset = {name}" if name else ""), headline_columns(config))
    except BaseException:
        line.close(leave=False)  # an error or Ctrl-C: clear the line, so the message that follows starts a line
        raise
    line.close()
    return AuditResult(cohort, rows, summary, counts, paths)


def runs_view_key(dataset: str) -> str:
    """The key of the cohort's runs view in MLflow (``viewStateShareKey`` in the address the command prints)."""
    return f"{STAGE}-{hashlib.sha256(dataset.encode()).hexdigest()[:16]}"


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _clean(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
