"""Study A's three deployment scenarios on one cohort split across hospitals.

The same windows flow through all three, so differences come from where protection happens:

- ``client_side_release``: every hospital scales, clips and noises its own patients; the server pools the
  protected tables. A patient seen at two hospitals is released twice and spends ε at each (basic composition:
  2ε for that patient — ``patient_epsilon`` says so).
- ``server_side_release``: hospitals send per-patient features keyed by GlobalID (HMAC of the canonical patient
  identifier under the linkage key); the trusted server merges duplicates into one exact pooled mean (hospitals
  send window counts for that), then scales, clips and noises once. The GlobalID never leaves this function.
  Without a linkage key it refuses to run.
- decentralised: hospitals protect their rows as in the client-side scenario and keep them; only model weights
  travel (FedAvg over the federated layer). The release is ``client_side_release``'s; the training differs and
  lives with the caller (``eegprivacy.federated``), since this layer knows nothing of models.

Patient identifiers stay in ``HospitalTables.patients`` and in ``ScenarioRelease.truth_group`` (positions, for
the evaluator's grouping only); neither is part of what a server or a reader receives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from eegprivacy.privacy.linkage import LinkageKey, MissingLinkageKeyError, global_id
from eegprivacy.privacy.release import NO_NOISE, patient_vectors, release_table

__all__ = ["SCENARIOS", "HospitalTables", "ScenarioRelease", "split_across_hospitals", "hospital_tables",
           "client_side_release", "server_side_release", "identifier_as_recorded"]

SCENARIOS = ("client_side", "server_side", "decentralised")
_SPLIT_STREAM = 0x484F5350  # seed-stream tags keep the split, the noise and the MLP seeds independent
_NOISE_STREAM = 0x44505245


def split_across_hospitals(window_table: pd.DataFrame, n_hospitals: int, shared_fraction: float, seed: int,
                           group: str = "subject", recording: str = "recording") -> np.ndarray:
    """Hospital index for every window row.

    Patients get a home hospital in balanced round-robin over a seeded shuffle. ``shared_fraction`` of all
    patients (drawn among those with at least two recordings) are also seen at a second hospital: their
    recordings alternate between the two, so each hospital holds part of that patient's data.
    """
    if n_hospitals < 1:
        raise ValueError(f"n_hospitals must be >= 1, got {n_hospitals}")
    if not 0.0 <= shared_fraction <= 1.0:
        raise ValueError(f"shared_fraction must lie in [0, 1], got {shared_fraction}")
    rng = np.random.default_rng([_SPLIT_STREAM, seed])
    patients = np.array(sorted(window_table[group].unique()))
    order = rng.permutation(len(patients))
    home = {patients[i]: rank % n_hospitals for rank, i in enumerate(order)}
    recordings = window_table.groupby(group)[recording].unique().map(sorted)
    multi = np.array(sorted(p for p in patients if len(recordings[p]) >= 2))
    n_shared = min(len(multi), int(round(shared_fraction * len(patients)))) if n_hospitals > 1 else 0
    shared = set(rng.choice(multi, size=n_shared, replace=False)) if n_shared else set()
    site_of_recording = {}
    for patient in patients:
        second = (home[patient] + 1 + int(rng.integers(n_hospitals - 1))) % n_hospitals if patient in shared else None
        for i, rec in enumerate(recordings[patient]):
            site_of_recording[(patient, rec)] = home[patient] if second is None or i % 2 == 0 else second
    keys = list(zip(window_table[group], window_table[recording]))
    return np.array([site_of_recording[k] for k in keys], dtype=int)


# How each hospital's records write the same identifier: canonicalisation must make them agree.
_ID_FORMATS = (lambda s: s, lambda s: s.upper(), lambda s: re.sub(r"(?<=[a-z])(?=\d)", "-", s.lower()),
               lambda s: f" {s.lower()} ")


def identifier_as_recorded(identifier: str, hospital: int) -> str:
    """The patient identifier in hospital ``hospital``'s own formatting (case, separators, padding)."""
    return _ID_FORMATS[hospital % len(_ID_FORMATS)](str(identifier))


@dataclass
class HospitalTables:
    """Per hospital: one row per patient it has seen (the mean over its windows of that patient)."""

    features: list[pd.DataFrame]
    labels: list[np.ndarray]
    patients: list[np.ndarray] = field(repr=False)  # private identifiers, in the hospital's own formatting
    windows: list[np.ndarray]  # windows behind each row, so a server can pool duplicates exactly
    truth: list[np.ndarray] = field(repr=False)  # evaluation only: position of each row's true patient

    @property
    def n_hospitals(self) -> int:
        return len(self.features)


def hospital_tables(window_table: pd.DataFrame, hospital_of_row: np.ndarray, feature_columns,
                    n_hospitals: int, group: str = "subject", label: str = "label") -> HospitalTables:
    hospital_of_row = np.asarray(hospital_of_row)
    if hospital_of_row.shape[0] != len(window_table):
        raise ValueError("hospital_of_row must give one hospital per window row")
    features, labels, patients, windows, subjects = [], [], [], [], []
    for h in range(n_hospitals):
        part = window_table[hospital_of_row == h]
        if part.empty:
            raise ValueError(f"hospital {h} received no patients; use fewer hospitals")
        X, y, ids = patient_vectors(part, feature_columns, group=group, label=label)
        features.append(X)
        labels.append(np.asarray(y).astype(int))
        patients.append(np.array([identifier_as_recorded(i, h) for i in ids]))
        windows.append(part.groupby(group).size().loc[ids].to_numpy())
        subjects.append(ids)
    position = {p: i for i, p in enumerate(sorted(set(np.concatenate(subjects))))}
    truth = [np.array([position[p] for p in ids], dtype=int) for ids in subjects]
    return HospitalTables(features, labels, patients, windows, truth)


@dataclass
class ScenarioRelease:
    """What the server holds after a scenario's release, plus the evaluator's private grouping."""

    X: np.ndarray  # released rows, no identifiers
    y: np.ndarray
    hospital: np.ndarray  # which hospital each row came from (known to the server)
    truth_group: np.ndarray = field(repr=False)  # evaluation only: position of the true patient of each row
    patient_epsilon: float  # worst-case ε any single patient spends in this release (basic composition)
    info: dict


def _noise_rng(seed: int, hospital: int | None):
    return np.random.default_rng([_NOISE_STREAM, seed] + ([] if hospital is None else [hospital + 1]))


def client_side_release(tables: HospitalTables, mechanism: str, epsilon: float, delta: float, clip_norm: float,
                        seed: int) -> ScenarioRelease:
    """Each hospital releases its own patients with its own scaling; the server pools the protected rows."""
    released = [release_table(X.to_numpy(), mechanism, epsilon, delta, clip_norm, _noise_rng(seed, h))[0]
                for h, X in enumerate(tables.features)]
    group = np.concatenate(tables.truth)
    rows_per_patient = np.bincount(group).max()
    return ScenarioRelease(
        X=np.vstack(released), y=np.concatenate(tables.labels),
        hospital=np.concatenate([np.full(len(X), h) for h, X in enumerate(tables.features)]),
        truth_group=group, patient_epsilon=float(epsilon) * int(rows_per_patient) if mechanism != NO_NOISE
        else float("inf"),
        info={"scenario": "client_side", "n_rows": int(sum(len(X) for X in tables.features)),
              "n_patients": int(group.max() + 1), "max_rows_per_patient": int(rows_per_patient),
              "scaling": "per hospital"})


def server_side_release(tables: HospitalTables, key: LinkageKey | None, mechanism: str, epsilon: float,
                        delta: float, clip_norm: float, seed: int) -> ScenarioRelease:
    """Pseudonymised submissions are merged by GlobalID at the trusted server, then released once."""
    if not isinstance(key, LinkageKey):
        raise MissingLinkageKeyError("the server-side scenario links hospitals by GlobalID and needs a linkage key; "
                                     "none was given (see LinkageKey.from_env)")
    if key.synthetic:
        raise ValueError("the synthetic-evaluation linkage key is public; pseudonymising patients needs a secret "
                         "key (LinkageKey.from_env)")
    truth = np.concatenate(tables.truth)
    columns = list(tables.features[0].columns)
    submissions = pd.concat(
        [X.assign(_gid=[global_id(p, key) for p in ids], _label=y, _windows=w)
         for X, y, ids, w in zip(tables.features, tables.labels, tables.patients, tables.windows)],
        ignore_index=True)
    submissions["_truth"] = truth
    weights = submissions["_windows"].to_numpy(float)
    weighted = submissions[columns].mul(weights, axis=0).assign(_gid=submissions["_gid"], _w=weights)
    # Rows keep the order in which patients first arrive (hospital by hospital), not GlobalID order: sorting by a
    # keyed hash would make which noise draw meets which patient, and so every number, depend on the key.
    sums = weighted.groupby("_gid", sort=False).sum()
    merged = sums[columns].div(sums["_w"], axis=0)  # the exact pooled mean over the patient's windows
    grouped = submissions.groupby("_gid", sort=False)
    if (grouped["_label"].nunique() > 1).any():
        raise ValueError("a GlobalID carries different labels at different hospitals")
    y = grouped["_label"].first().loc[merged.index].to_numpy()
    truth_group = grouped["_truth"].first().loc[merged.index].to_numpy()
    X = merged.reset_index(drop=True).to_numpy()  # the GlobalID index is dropped here, before the release
    released, _ = release_table(X, mechanism, epsilon, delta, clip_norm, _noise_rng(seed, None))
    n_submitted = len(submissions)
    return ScenarioRelease(
        X=released, y=y.astype(int), hospital=np.full(len(X), -1), truth_group=truth_group,
        patient_epsilon=float(epsilon) if mechanism != NO_NOISE else float("inf"),
        info={"scenario": "server_side", "n_rows": int(len(X)), "n_patients": int(len(X)),
              "n_submitted": int(n_submitted), "n_duplicates_merged": int(n_submitted - len(X)),
              "scaling": "central"})
