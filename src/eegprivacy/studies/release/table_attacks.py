"""Study A, beyond the paper: attack the released patient table itself, per dataset.

- Re-identification: the attacker holds other data of the same subjects and names every released row by
  nearest neighbour. How the two tables are formed is set per dataset (``table_attacks.reidentification.
  datasets``) and named by the attack kind every row, headline and run carries:

  - ``cross-condition`` (eegmat): the release is each subject's task recording, the attacker holds its resting
    recording;
  - ``same-session halves`` (MSU, one 60-s recording per subject): the release is the mean of the windows in
    the first half of each recording, the attacker holds the second half's. Windows that straddle the middle are
    left out, so the halves share no sample; they still share the session (electrodes, state, day), so this is an
    upper bound on what linkage across sessions would achieve.

  Top-1/top-5 accuracy over the K subjects, with a Wilson interval over subjects and a t-interval over noise
  seeds, next to chance (k/K) and a shuffled-identity control (the same distances scored against a random
  identity map: what the attack reaches with no link between the tables).
- Membership inference on the released patient table (each subject's released-condition recording, or its whole
  recording for a halves split): each trial releases a random half of the cohort; an attacker who knows every
  target's true vector scores each target (distance and likelihood tests). AUROC and TPR at low FPR per seed,
  the TPR only where the seed's non-member scores number at least 1/FPR.

Every (mechanism, ε) runs over noise seeds; ``none`` is the noiseless scaled-and-clipped table. Noise is drawn
independently per (mechanism, ε, seed) (:func:`~eegprivacy.studies.release.table.noise_generator`). The cells
are pure functions of (config, seed), so worker processes compute them in any order with the same rows.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.attacks.metrics import attack_summary
from eegprivacy.attacks.table import NearestNeighbourReidentifier, TableMembershipInference, top_k_hits
from eegprivacy.evaluation.intervals import wilson_interval
from eegprivacy.params import ParamsError
from eegprivacy.pipeline.sweep import aggregate, expand_grid
from eegprivacy.privacy import NO_NOISE, patient_vectors, release_table
from eegprivacy.signal.table import FeaturesParams
from eegprivacy.studies.release.config import (
    DPReleaseConfig,
    MembershipSettings,
    ReidentificationSettings,
    TableAttacksConfig,
    TablePairing,
)
from eegprivacy.studies.release.table import (
    PatientTable,
    WindowTable,
    load_window_table,
    noise_generator,
    sweep_runner,
)

# Seed streams of the shuffled-identity control and of the membership draws, apart from the release noise
# (table.noise_generator's streams).
CONTROL_STREAM = 0x43544C52
_MEMBERSHIP_STREAM = 0x4D454D42
ATTACKS = ("reidentification", "membership")
# The attack kind of each way of forming the two re-identification tables (TablePairing.split).
ATTACK_KINDS = {"conditions": "cross-condition", "halves": "same-session halves"}
EPS_UNIT = "subject"  # one subject's feature vector is what each release protects


def release_rows(X: np.ndarray, mechanism: str, epsilon: float, delta: float, clip_norm: float, rng):
    """The released rows and the public calibration (None for the noiseless ``none`` table)."""
    released, releaser = release_table(X, mechanism, epsilon, delta, clip_norm, random_state=rng)
    return released, None if mechanism == NO_NOISE else releaser.calibration_


def reidentification_rows(released: np.ndarray, auxiliary: np.ndarray, metrics, top_k, clip_norm: float,
                          control_rng: np.random.Generator) -> list[dict]:
    """Top-k accuracy of each distance, with Wilson bounds over the K subjects and a shuffled-identity control."""
    K = len(auxiliary)
    truth = np.arange(K)
    shuffled = control_rng.permutation(K)  # the control: the same attack scored against a random identity map
    rows = []
    for metric in metrics:
        attacker = NearestNeighbourReidentifier(metric=metric, clip_norm=clip_norm).fit(auxiliary)
        distances = attacker.distances(released)
        for k in top_k:
            hits = int(top_k_hits(distances, truth, k).sum())
            low, high = wilson_interval(hits, K)
            control = float(top_k_hits(distances, shuffled, k).mean())
            common = {"attack": "reidentification", "attacker": f"nearest_neighbour_{metric}", "n": K}
            rows.append({**common, "metric": f"top{k}_accuracy", "value": hits / K, "ci_low": low, "ci_high": high,
                         "chance": min(k, K) / K})
            rows.append({**common, "metric": f"top{k}_accuracy_shuffled_control", "value": control,
                         "chance": min(k, K) / K})
    return rows


def membership_rows(population: np.ndarray, mechanism: str, epsilon: float, delta: float, clip_norm: float,
                    settings: MembershipSettings, seed: int, noise_rng: np.random.Generator) -> list[dict]:
    """AUROC and TPR at low FPR of each score over ``settings.trials`` releases of a random member subset (the
    member draws are shared by every mechanism and ε of a seed; the noise comes from ``noise_rng``)."""
    n = len(population)
    n_members = max(2, int(round(settings.member_fraction * n)))
    membership_rng = np.random.default_rng([_MEMBERSHIP_STREAM, seed])
    attackers = {score: TableMembershipInference(score=score, clip_norm=clip_norm).fit(population)
                 for score in settings.scores if not (score == "likelihood" and mechanism == NO_NOISE)}
    labels, scores = [], {name: [] for name in attackers}
    for _ in range(settings.trials):
        members = membership_rng.choice(n, size=n_members, replace=False)
        is_member = np.zeros(n, dtype=int)
        is_member[members] = 1
        released, calib = release_rows(population[members], mechanism, epsilon, delta, clip_norm, noise_rng)
        labels.append(is_member)
        for name, attacker in attackers.items():
            scores[name].append(attacker.decision_function(released, population, calib))
    y = np.concatenate(labels)
    rows = []
    for name, values in scores.items():
        summary = attack_summary(y, np.concatenate(values), fprs=settings.fprs)
        common = {"attack": "membership", "attacker": name, "n": len(y)}
        rows.append({**common, "metric": "auroc", "value": summary["auroc"], "chance": 0.5})
        for fpr in settings.fprs:
            rows.append({**common, "metric": f"tpr_at_fpr_{fpr:g}", "value": summary[f"tpr_at_fpr_{fpr:g}"],
                         "chance": float(fpr)})
    return rows


def attack_cell(config: dict, seed: int, released_base: np.ndarray, auxiliary: np.ndarray, population: np.ndarray,
                reid: ReidentificationSettings, mia: MembershipSettings, clip_norm: float,
                delta: float) -> list[dict]:
    """One cell of either attack (``config["attack"]``), module-level so worker processes can run it. The
    re-identification release draws the (mechanism, ε, seed) noise stream itself, the membership releases an
    independent child of it (``spawn``), so the two attacks never share a draw."""
    mechanism, epsilon = config["mechanism"], config["epsilon"]
    noise_rng = noise_generator(mechanism, epsilon, seed, bool(config["common_random_numbers"]))
    if config["attack"] == "reidentification":
        released, _ = release_rows(released_base, mechanism, epsilon, delta, clip_norm, noise_rng)
        return reidentification_rows(released, auxiliary, reid.metrics, reid.top_k, clip_norm,
                                     np.random.default_rng([CONTROL_STREAM, seed]))
    return membership_rows(population, mechanism, epsilon, delta, clip_norm, mia, seed, noise_rng.spawn(1)[0])


# ---------------------------------------------------------------------------------------------------------------
# The tables: ids stay in these functions, positions leave them
# ---------------------------------------------------------------------------------------------------------------
def recording_halves(frame: pd.DataFrame, window_s: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The windows of the first and of the second half of every (subject, recording), by window start.

    With ``window_s`` (the window length) the middle is that of the span the windows cover, and a window that
    straddles it is in neither half, so the halves share no sample (with 2-s windows at 1-s steps over 60 s:
    29 windows each, the one at 29-31 s left out). Without it the split is at the median window start and the
    windows on either side of it may overlap by up to one window."""
    starts = frame.groupby(["subject", "recording"])["t_start"]
    if window_s is None:
        middle = starts.transform("median")
        return frame[frame["t_start"] < middle], frame[frame["t_start"] >= middle]
    middle = (starts.transform("min") + starts.transform("max") + window_s) / 2.0
    return frame[frame["t_start"] + window_s <= middle], frame[frame["t_start"] >= middle]


def _aligned_vectors(first: pd.DataFrame, second: pd.DataFrame, features) -> tuple[np.ndarray, np.ndarray]:
    """Patient vectors of two window sets, rows aligned by subject (sorted ids, checked)."""
    A, _, ids_a = patient_vectors(first, features, label=None)
    B, _, ids_b = patient_vectors(second, features, label=None)
    if not np.array_equal(ids_a, ids_b):
        raise AssertionError("subject order differs between the two re-identification tables")
    return A.to_numpy(), B.to_numpy()


def two_condition_tables(windows: WindowTable, release_condition: str, auxiliary_condition: str):
    """Patient vectors of the subjects that have both conditions, rows aligned by subject (ids stay here)."""
    frame = windows.frame
    conditions = frame.groupby("subject")["condition"].agg(lambda c: set(c))
    both = conditions[conditions.map(lambda c: {release_condition, auxiliary_condition} <= c)].index
    if len(both) < 3:
        raise ValueError(f"{windows.dataset}: only {len(both)} subjects have both {release_condition!r} and "
                         f"{auxiliary_condition!r} recordings; re-identification needs at least 3")
    frame = frame[frame["subject"].isin(both)]
    return _aligned_vectors(frame[frame["condition"] == release_condition],
                            frame[frame["condition"] == auxiliary_condition], windows.feature_columns)


def half_recording_tables(windows: WindowTable, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Patient vectors of the first and of the second half of every subject's recording(s), rows aligned by
    subject (:func:`recording_halves`; ids stay here)."""
    first, second = recording_halves(windows.frame, window_s)
    both = sorted(set(first["subject"]) & set(second["subject"]))
    if len(both) < 3:
        raise ValueError(f"{windows.dataset}: only {len(both)} subjects have windows in both halves of a "
                         f"recording ({window_s:g}-s windows); re-identification needs at least 3")
    return _aligned_vectors(first[first["subject"].isin(both)], second[second["subject"].isin(both)],
                            windows.feature_columns)


def window_length(dataset: str, features_params: str = "params/features.yaml") -> float:
    """The dataset's window length in seconds (its feature config: shared blocks + its per-dataset overrides)."""
    return float(FeaturesParams.load(features_params, "features").pipeline(dataset).window.length_s)


def pairing_of(config: TableAttacksConfig, dataset: str, source) -> TablePairing:
    """The dataset's way of forming the two tables; an error naming the params file when it has none."""
    pairings = config.reidentification.datasets
    if dataset not in pairings:
        raise ParamsError(f"{source}: table_attacks.reidentification.datasets has no entry for {dataset!r} "
                          f"(it has {', '.join(sorted(pairings)) or 'none'}); add how its released and auxiliary "
                          "tables are formed (split: conditions with release_condition and auxiliary_condition, "
                          "or split: halves)")
    return pairings[dataset]


def _finite_columns(*tables: np.ndarray) -> np.ndarray:
    """Columns finite in every row of every table (a band the signal layer dropped is NaN for everyone)."""
    return np.logical_and.reduce([np.isfinite(t).all(axis=0) for t in tables])


@dataclass
class AttackTables:
    """What the attacks run on, positions only: the released rows and the attacker's auxiliary rows (aligned by
    subject), the released patient table for membership, and that table as the ``PatientTable`` that tags the
    runs."""

    windows: WindowTable
    kind: str  # the re-identification attack kind (ATTACK_KINDS)
    released: np.ndarray
    auxiliary: np.ndarray
    population: np.ndarray
    table: PatientTable


def load_attack_tables(dataset: str, pairing: TablePairing, features_dir,
                       features_params: str = "params/features.yaml") -> AttackTables:
    """The dataset's current window features turned into the attack tables (ids never leave this function).
    The membership population is the table a release of this dataset publishes: the released condition's patient
    vectors (every subject that has it), or the whole recordings for a halves split."""
    windows = load_window_table(dataset, features_params, features_dir)
    frame = windows.frame
    if pairing.split == "halves":
        mixed = int((frame.groupby("subject")["condition"].nunique() > 1).sum())
        if mixed:
            raise ValueError(f"{dataset}: {mixed} subjects have windows of more than one condition; a halves split "
                             "would mix them in one vector (use split: conditions)")
        released, auxiliary = half_recording_tables(windows, window_length(dataset, features_params))
    else:
        released, auxiliary = two_condition_tables(windows, pairing.release_condition, pairing.auxiliary_condition)
        frame = frame[frame["condition"] == pairing.release_condition]
    population = patient_vectors(frame, windows.feature_columns, label=None)[0].to_numpy()
    reid_columns, population_columns = _finite_columns(released, auxiliary), _finite_columns(population)
    population = population[:, population_columns]
    table = PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                         pd.DataFrame(population), np.zeros(len(population), dtype=int), np.arange(len(population)))
    return AttackTables(windows, ATTACK_KINDS[pairing.split], released[:, reid_columns], auxiliary[:, reid_columns],
                        population, table)


# ---------------------------------------------------------------------------------------------------------------
# The sweep and its summary
# ---------------------------------------------------------------------------------------------------------------
def sweep_plan(tables: AttackTables, config: TableAttacksConfig, release: DPReleaseConfig, code_hash: str, *,
               cells_dir, progress: bool):
    """One sweep per (attack, mechanism) with the noiseless ``none`` first, and the cell function they share. The
    re-identification cells carry the attack kind (``attack_kind``: a row column and a child param) and their
    runs the MLflow tag ``split`` (the convention's tag for how data was split), so every output says what was
    linked to what."""
    clip_norm, delta, table = release.clip_norm, release.delta, tables.table
    base = {**table.base_config, "clip_norm": clip_norm, "delta": delta,
            "n_reidentification": len(tables.auxiliary),
            "common_random_numbers": bool(release.common_random_numbers), "code_hash": code_hash}
    sweep = dict(cells_dir=cells_dir, progress=progress,
                 params={"table_attacks": config.to_dict(), "clip_norm": clip_norm, "delta": delta,
                         "common_random_numbers": bool(release.common_random_numbers),
                         "attack_kind": tables.kind, **table.base_config})
    seeds = range(config.noise_seeds)
    grids = {NO_NOISE: [math.inf], **{mechanism: [float(e) for e in config.epsilons]
                                      for mechanism in config.mechanisms}}
    plan = []
    for attack in ATTACKS:
        reid = attack == "reidentification"
        for mechanism, epsilons in grids.items():
            cells = expand_grid({"mechanism": [mechanism], "epsilon": epsilons}, seeds=seeds,
                                base={**base, "attack": attack, **({"attack_kind": tables.kind} if reid else {})})
            extra = {"split": tables.kind} if reid else {}
            if mechanism != NO_NOISE:
                extra["delta"] = delta
            plan.append((sweep_runner(table, "table_attacks", f"{attack}-{mechanism}", mechanism=mechanism,
                                      attack=attack, **extra, **sweep), cells))
    cell_fn = functools.partial(attack_cell, released_base=tables.released, auxiliary=tables.auxiliary,
                                population=tables.population, reid=config.reidentification,
                                mia=config.membership, clip_norm=clip_norm, delta=delta)
    return plan, cell_fn


def summarise(tidy: pd.DataFrame, n_subjects: int) -> pd.DataFrame:
    """Mean and 95% t-interval over noise seeds (``ci_over = seeds``) per (attack, attacker, mechanism, ε,
    metric); top-k rows also get a Wilson interval for the mean hit count out of the K subjects
    (``wilson_over = subjects``: the subject-sampling uncertainty). ``attack_kind`` names the re-identification
    pairing (empty for membership); ε is per subject (``eps_unit``)."""
    tidy = tidy.assign(attack_kind=tidy["attack_kind"].fillna(""))
    summary = aggregate(tidy, ["dataset", "attack", "attack_kind", "attacker", "mechanism", "epsilon"])
    summary = summary.rename(columns={"n": "n_seeds"})
    topk = summary["metric"].str.match(r"top\d+_accuracy$")
    bounds = [wilson_interval(int(round(v * n_subjects)), n_subjects) if ok else (np.nan, np.nan)
              for v, ok in zip(summary["value"], topk)]
    summary["wilson_low"], summary["wilson_high"] = zip(*bounds) if bounds else ((), ())
    return summary.assign(ci_over="seeds", wilson_over=np.where(topk, "subjects", ""),
                          eps_unit=np.where(np.isfinite(summary["epsilon"]), EPS_UNIT, ""))
