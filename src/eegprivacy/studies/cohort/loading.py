"""The cohort an audit runs on (:func:`load_cohort`): labels checked before any signal is read, window features
(cached), one vector per patient in a canonical order (:func:`canonical_order`), and the re-identification tables;
no subject identifier leaves this module.

**Patient order is canonical**: patients (rows) are sorted by their feature vectors (lexicographically on values
rounded to ~6 significant digits, label last), and feature columns by name, so everything position-dependent (MLP
training order, membership draws, bootstrap resamples) is the same whatever the dataset calls its subjects, in
which order it lists them, or where its files live.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_paths
from eegprivacy.data.base import DataQualityWarning, EEGDataset, LeftOut
from eegprivacy.errors import InputDataError
from eegprivacy.privacy import patient_vectors
from eegprivacy.signal.table import (
    INDEX_COLUMNS,
    FeaturesParams,
    dataset_window_features,
    is_current,
    read_feature_table,
    write_feature_table,
)
from eegprivacy.studies.cohort.config import AuditConfig
from eegprivacy.studies.release.table_attacks import _aligned_vectors, recording_halves

log = logging.getLogger(__name__)

# The private list of the recordings an audit left out (file, reason), in its work folder.
LEFT_OUT_FILE = "left_out.tsv"


class CohortError(InputDataError, ValueError):
    """The cohort cannot be audited as given (no labels, one class, too few patients...)."""


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
    A, B = _aligned_vectors(a, b, features)  # study A's: patient vectors, rows aligned by subject (checked)
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
