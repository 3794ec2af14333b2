"""Stage ``table_attacks`` (study A, beyond the paper): attack the released patient table itself.

- Re-identification: the release is built from each subject's task recording; the attacker holds features of
  the same subjects' resting recording and names every released row by nearest neighbour. Top-1/top-5
  accuracy with Wilson intervals over the K subjects, next to chance (k/K) and a shuffled-identity control.
- Membership inference: each trial releases a random half of the cohort; an attacker who knows a target's
  true vector scores every target (distance and likelihood tests). AUROC and TPR at 1% and 0.1% FPR per seed.

Every (mechanism, ε) runs over noise seeds; ``none`` is the noiseless scaled-and-clipped table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from eegprivacy.attacks.metrics import attack_summary
from eegprivacy.attacks.table import NearestNeighbourReidentifier, TableMembershipInference, top_k_hits
from eegprivacy.evaluation.dp_figures import panels_vs_epsilon
from eegprivacy.evaluation.intervals import wilson_interval
from eegprivacy.params import load_params
from eegprivacy.privacy import NO_NOISE, patient_vectors, release_table
from eegprivacy.tracking.sweep import aggregate, expand_grid, run_prefetched

from experiments._study_a import PatientTable, code_hash, load_window_table, sweep_runner, write_rows

NAME = "table-attacks"
HELP = ("Study A: re-identification (nearest neighbour from another recording) and membership inference against "
        "the released patient table, per mechanism × ε × noise seed, with chance levels and controls.")

# Seed streams, kept apart from the release noise stream so membership draws never correlate with noise.
_MEMBERSHIP_STREAM = 0x4D454D42
_CONTROL_STREAM = 0x43544C52


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", default="eegmat", help="dataset whose subjects have two recording conditions")
    parser.add_argument("--params", default="params/table_attacks.yaml", help="table attack params")
    parser.add_argument("--release-params", default="params/dp_release.yaml", help="clip norm and δ of the release")
    parser.add_argument("--out", help="tidy per-seed rows (default metrics/table_attacks_<dataset>.csv)")
    parser.add_argument("--metrics", help="headline JSON (default metrics/table_attacks_<dataset>.json)")
    parser.add_argument("--figure", help="figure (default reports/figures/table_attacks_<dataset>.png)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")
    parser.add_argument("--no-progress", action="store_true")


def _release(X: np.ndarray, mechanism: str, epsilon: float, delta: float, clip_norm: float, rng):
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
                    params: dict, seed: int) -> list[dict]:
    """AUROC and TPR at low FPR of each score over ``trials`` releases of a random member subset."""
    n = len(population)
    n_members = max(2, int(round(params["member_fraction"] * n)))
    membership_rng = np.random.default_rng([_MEMBERSHIP_STREAM, seed])
    noise_rng = np.random.default_rng([0x44505245, seed])  # the releaser's own stream tag (see privacy.release)
    attackers = {score: TableMembershipInference(score=score, clip_norm=clip_norm).fit(population)
                 for score in params["scores"] if not (score == "likelihood" and mechanism == NO_NOISE)}
    labels, scores = [], {name: [] for name in attackers}
    for _ in range(params["trials"]):
        members = membership_rng.choice(n, size=n_members, replace=False)
        is_member = np.zeros(n, dtype=int)
        is_member[members] = 1
        released, calib = _release(population[members], mechanism, epsilon, delta, clip_norm, noise_rng)
        labels.append(is_member)
        for name, attacker in attackers.items():
            scores[name].append(attacker.decision_function(released, population, calib))
    y = np.concatenate(labels)
    rows = []
    for name, values in scores.items():
        summary = attack_summary(y, np.concatenate(values), fprs=params["fprs"])
        common = {"attack": "membership", "attacker": name, "n": len(y)}
        rows.append({**common, "metric": "auroc", "value": summary["auroc"], "chance": 0.5})
        for fpr in params["fprs"]:
            rows.append({**common, "metric": f"tpr_at_fpr_{fpr:g}", "value": summary[f"tpr_at_fpr_{fpr:g}"],
                         "chance": float(fpr)})
    return rows


def attack_cell(config: dict, seed: int, released_base: np.ndarray, auxiliary: np.ndarray, population: np.ndarray,
                reid: dict, mia: dict, clip_norm: float, delta: float) -> list[dict]:
    """One cell of either attack (``config["attack"]``), module-level so worker processes can run it."""
    if config["attack"] == "reidentification":
        noise_rng = np.random.default_rng([0x44505245, seed])
        released, _ = _release(released_base, config["mechanism"], config["epsilon"], delta, clip_norm, noise_rng)
        return reidentification_rows(released, auxiliary, reid["metrics"], reid["top_k"], clip_norm,
                                     np.random.default_rng([_CONTROL_STREAM, seed]))
    return membership_rows(population, config["mechanism"], config["epsilon"], delta, clip_norm, mia, seed)


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


def write_json(summary: pd.DataFrame, path) -> None:
    """Headline numbers for DVC: one entry per attack/attacker/mechanism/ε/metric."""
    out = {}
    for record in summary.to_dict("records"):
        eps = record["epsilon"]
        key = "/".join([record["attack"], record["attacker"], record["mechanism"],
                        "none" if not np.isfinite(eps) else f"eps_{eps:g}", record["metric"]])
        out[key] = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record.items()
                    if k in ("value", "ci_low", "ci_high", "n_seeds", "chance", "wilson_low", "wilson_high")}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def figure(summary: pd.DataFrame, dataset: str, synthetic: bool, path) -> None:
    agg = summary.rename(columns={"attacker": "protocol"})
    panels = [("re-identification, top-1", "top1_accuracy", "nearest_neighbour_euclidean", "accuracy"),
              ("re-identification, top-5", "top5_accuracy", "nearest_neighbour_euclidean", "accuracy"),
              ("membership (likelihood), AUROC", "auroc", "likelihood", "AUROC"),
              ("membership (likelihood), TPR @ 1% FPR", "tpr_at_fpr_0.01", "likelihood", "TPR")]
    fig = panels_vs_epsilon(agg, panels, f"{dataset}: attacks on the released patient table vs ε", synthetic)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def stage_code_hash() -> str:
    """The study-A code hash plus the attack modules a cell runs, so cached cells follow changes to them."""
    import eegprivacy.attacks as attacks

    digest = hashlib.sha256(code_hash("table_attacks.py").encode())
    for name in ("table.py", "metrics.py"):
        path = Path(attacks.__file__).parent / name
        digest.update(name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def two_condition_tables(windows, release_condition: str, auxiliary_condition: str):
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


def run(args) -> int:
    all_params = load_params(args.params, "table_attacks")
    release_params = load_params(args.release_params, "dp_release")
    clip_norm, delta = release_params["clip_norm"], release_params["delta"]
    reid, mia = all_params["reidentification"], all_params["membership"]
    windows = load_window_table(args.dataset, features_dir=args.features_dir)
    released_base, auxiliary = two_condition_tables(windows, reid["release_condition"], reid["auxiliary_condition"])
    population, _, _ = patient_vectors(windows.frame, windows.feature_columns, label=None)
    population = population.to_numpy()
    # The sweep helper tags runs from a PatientTable; the population table stands for the dataset here.
    table = PatientTable(windows.dataset, windows.dataset_version, windows.features_hash, windows.synthetic,
                         pd.DataFrame(population), np.zeros(len(population), dtype=int), np.arange(len(population)))
    base = {**table.base_config, "clip_norm": clip_norm, "delta": delta, "n_reidentification": len(auxiliary),
            "code_hash": stage_code_hash()}
    sweep = dict(cells_dir=args.cells, progress=not args.no_progress,
                 params={"table_attacks": all_params, "clip_norm": clip_norm, "delta": delta, **table.base_config})
    seeds = range(all_params["noise_seeds"])
    epsilons = [float(e) for e in all_params["epsilons"]]
    plan = []
    for attack in ("reidentification", "membership"):
        cells = {NO_NOISE: expand_grid({"mechanism": [NO_NOISE], "epsilon": [math.inf]}, seeds=seeds,
                                       base={**base, "attack": attack})}
        for mechanism in all_params["mechanisms"]:
            cells[mechanism] = expand_grid({"mechanism": [mechanism], "epsilon": epsilons}, seeds=seeds,
                                           base={**base, "attack": attack})
        for mechanism, mechanism_cells in cells.items():
            extra = {} if mechanism == NO_NOISE else {"delta": delta}
            plan.append((sweep_runner(table, "table_attacks", f"{attack}-{mechanism}", mechanism=mechanism,
                                      attack=attack, **extra, **sweep), mechanism_cells))
    cell_fn = functools.partial(attack_cell, released_base=released_base, auxiliary=auxiliary, population=population,
                                reid=reid, mia=mia, clip_norm=clip_norm, delta=delta)
    frames = run_prefetched(plan, cell_fn, n_jobs=getattr(args, "jobs", 1))
    out = args.out or f"metrics/table_attacks_{args.dataset}.csv"
    tidy = write_rows(frames, out)
    summary = summarise(tidy, n_subjects=len(auxiliary))
    write_json(summary, args.metrics or f"metrics/table_attacks_{args.dataset}.json")
    figure(summary, windows.dataset, windows.synthetic,
           args.figure or f"reports/figures/table_attacks_{args.dataset}.png")
    top1 = tidy[(tidy["metric"] == "top1_accuracy") & (tidy["mechanism"] == NO_NOISE)]
    print(f"{args.dataset}: K={len(auxiliary)} re-identification, N={len(population)} membership; "
          f"top-1 without noise {top1['value'].mean():.3f} (chance {1 / len(auxiliary):.3f}) -> {out}")
    return 0

