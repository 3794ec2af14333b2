"""Study A, beyond the paper: attack the released patient table itself.

- Re-identification: the release is built from each subject's task recording; the attacker holds features of
  the same subjects' resting recording and names every released row by nearest neighbour. Top-1/top-5
  accuracy with Wilson intervals over the K subjects, next to chance (k/K) and a shuffled-identity control.
- Membership inference: each trial releases a random half of the cohort; an attacker who knows a target's
  true vector scores every target (distance and likelihood tests). AUROC and TPR at 1% and 0.1% FPR per seed.

Every (mechanism, ε) runs over noise seeds; ``none`` is the noiseless scaled-and-clipped table. The cells are
pure functions of (config, seed), so worker processes compute them in any order with the same rows.
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
from eegprivacy.pipeline.sweep import aggregate, expand_grid
from eegprivacy.privacy import NO_NOISE, patient_vectors, release_table
from eegprivacy.studies.release.config import (
    DPReleaseConfig,
    MembershipSettings,
    ReidentificationSettings,
    TableAttacksConfig,
)
from eegprivacy.studies.release.table import PatientTable, WindowTable, load_window_table, sweep_runner

# Seed streams: the releaser's own noise tag (see privacy.release), and two kept apart from it so membership
# draws and the shuffled-identity control never correlate with the noise.
NOISE_STREAM = 0x44505245
CONTROL_STREAM = 0x43544C52
_MEMBERSHIP_STREAM = 0x4D454D42
ATTACKS = ("reidentification", "membership")


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
                    settings: MembershipSettings, seed: int) -> list[dict]:
    """AUROC and TPR at low FPR of each score over ``settings.trials`` releases of a random member subset."""
    n = len(population)
    n_members = max(2, int(round(settings.member_fraction * n)))
    membership_rng = np.random.default_rng([_MEMBERSHIP_STREAM, seed])
    noise_rng = np.random.default_rng([NOISE_STREAM, seed])
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
    """One cell of either attack (``config["attack"]``), module-level so worker processes can run it."""
    if config["attack"] == "reidentification":
        noise_rng = np.random.default_rng([NOISE_STREAM, seed])
        released, _ = release_rows(released_base, config["mechanism"], config["epsilon"], delta, clip_norm,
                                   noise_rng)
        return reidentification_rows(released, auxiliary, reid.metrics, reid.top_k, clip_norm,
                                     np.random.default_rng([CONTROL_STREAM, seed]))
    return membership_rows(population, config["mechanism"], config["epsilon"], delta, clip_norm, mia, seed)


def two_condition_tables(windows: WindowTable, release_condition: str, auxiliary_condition: str):
    """Patient vectors of the subjects that have both conditions, rows aligned by subject (ids stay here)."""
    frame = windows.frame
    conditions = frame.groupby("subject")["condition"].agg(lambda c: set(c))
    both = conditions[conditions.map(lambda c: {release_condition, auxiliary_condition} <= c)].index
    if len(both) < 3:
        raise ValueError(f"{windows.dataset}: only {len(both)} subjects have both {release_condition!r} and "
                         f"{auxiliary_condition!r} recordings; re-identification needs at least 3")
    frame = frame[frame["subject"].isin(both)]
    released, _, ids_r = patient_vectors(frame[frame["condition"] == release_condition], windows.feature_columns,
                                         label=None)
    auxiliary, _, ids_a = patient_vectors(frame[frame["condition"] == auxiliary_condition],
                                          windows.feature_columns, label=None)
    if not np.array_equal(ids_r, ids_a):
        raise AssertionError("subject order differs between the two condition tables")
    return released.to_numpy(), auxiliary.to_numpy()


@dataclass
class AttackTables:
    """What the attacks run on, positions only: the released condition's rows and the attacker's auxiliary rows
    (aligned by subject), the whole cohort for membership, and the cohort as the ``PatientTable`` that tags the
    runs (the population table stands for the dataset)."""

    windows: WindowTable
    released: np.ndarray
    auxiliary: np.ndarray
    population: np.ndarray
    table: PatientTable


def load_attack_tables(dataset: str, reid: ReidentificationSettings, features_dir) -> AttackTables:
    """The dataset's current window features turned into the attack tables (ids never leave this function)."""
    windows = load_window_table(dataset, features_dir=features_dir)
    released, auxiliary = two_condition_tables(windows, reid.release_condition, reid.auxiliary_condition)
    population = patient_vectors(windows.frame, windows.feature_columns, label=None)[0].to_numpy()
    table = PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                         pd.DataFrame(population), np.zeros(len(population), dtype=int), np.arange(len(population)))
    return AttackTables(windows, released, auxiliary, population, table)


def sweep_plan(tables: AttackTables, config: TableAttacksConfig, release: DPReleaseConfig, code_hash: str, *,
               cells_dir, progress: bool):
    """One sweep per (attack, mechanism) with the noiseless ``none`` first, and the cell function they share."""
    clip_norm, delta, table = release.clip_norm, release.delta, tables.table
    base = {**table.base_config, "clip_norm": clip_norm, "delta": delta,
            "n_reidentification": len(tables.auxiliary), "code_hash": code_hash}
    sweep = dict(cells_dir=cells_dir, progress=progress,
                 params={"table_attacks": config.to_dict(), "clip_norm": clip_norm, "delta": delta,
                         **table.base_config})
    seeds = range(config.noise_seeds)
    grids = {NO_NOISE: [math.inf], **{mechanism: [float(e) for e in config.epsilons]
                                      for mechanism in config.mechanisms}}
    plan = []
    for attack in ATTACKS:
        for mechanism, epsilons in grids.items():
            cells = expand_grid({"mechanism": [mechanism], "epsilon": epsilons}, seeds=seeds,
                                base={**base, "attack": attack})
            extra = {} if mechanism == NO_NOISE else {"delta": delta}
            plan.append((sweep_runner(table, "table_attacks", f"{attack}-{mechanism}", mechanism=mechanism,
                                      attack=attack, **extra, **sweep), cells))
    cell_fn = functools.partial(attack_cell, released_base=tables.released, auxiliary=tables.auxiliary,
                                population=tables.population, reid=config.reidentification,
                                mia=config.membership, clip_norm=clip_norm, delta=delta)
    return plan, cell_fn


def summarise(tidy: pd.DataFrame, n_subjects: int) -> pd.DataFrame:
    """Mean and 95% t-interval over noise seeds per (attack, attacker, mechanism, ε, metric); top-k rows also
    get a Wilson interval for the mean hit count out of the K subjects (the subject-sampling uncertainty)."""
    summary = aggregate(tidy, ["dataset", "attack", "attacker", "mechanism", "epsilon"])
    summary = summary.rename(columns={"n": "n_seeds"})
    topk = summary["metric"].str.match(r"top\d+_accuracy$")
    bounds = [wilson_interval(int(round(v * n_subjects)), n_subjects) if ok else (np.nan, np.nan)
              for v, ok in zip(summary["value"], topk)]
    summary["wilson_low"], summary["wilson_high"] = zip(*bounds) if bounds else ((), ())
    return summary
