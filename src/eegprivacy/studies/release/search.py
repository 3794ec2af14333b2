"""Study A as a multi-objective Optuna search for the privacy–utility trade-off of a release.

The grid stages (``dp_utility``, ``table_attacks``) answer "what does ε = 1, 2, 5 … cost"; this search asks the
inverse question — which (mechanism, ε, clip norm C) releases are Pareto-optimal — and lets a sampler spend its
trials near the front instead of on a fixed grid.

One trial = one release configuration. The released table holds each subject's vector from the FIRST half of
its recording (of ``condition``); the attacker holds the SECOND half (*same-session* re-identification: the two
halves share electrodes, state and day, so this is an upper bound on linkage across sessions). Two objectives:

- maximise the threshold-free LOSO AUROC of the patient label on the release *minus its matched null* (the same
  mechanism and noise draw on a zero-signal table through the same LOSO: :func:`~eegprivacy.studies.release.
  utility.utility_cell`). A pure-noise release scores ≈ 0 here, whatever the protocol extracts from noise alone;
  a raw score would put that floor (LOSO AUROC on noise is not 0.5) into every trial;
- minimise the top-1 accuracy of the nearest-neighbour re-identification attack
  (:func:`~eegprivacy.studies.release.table_attacks.reidentification_rows`; chance 1/K).

Both are means over ``noise_seeds`` releases (noise drawn independently per (mechanism, ε, seed), the MLP seed
with it). The front is the best of many noisy trials, so its search-time values are biased upwards (the winner's
curse): every front trial is re-evaluated on ``reevaluation_seeds`` FRESH seeds, and those values, with intervals
over ``subjects+seeds`` (patient cluster bootstrap crossed with the seeds, release − null paired, Holm over the
front), are what the stage reports, beside the search-time ones. The study machinery (RDB storage, heartbeats, a
target of COMPLETE trials shared by cooperating workers, MLflow child runs) is :mod:`eegprivacy.pipeline.search`;
this module defines the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.evaluation import cluster_bootstrap as cb
from eegprivacy.evaluation.intervals import mean_ci, wilson_interval
from eegprivacy.pipeline import search
from eegprivacy.pipeline.keys import config_key
from eegprivacy.privacy import patient_vectors
from eegprivacy.signal.table import FeaturesParams
from eegprivacy.studies.release.config import OptunaStudyAConfig
from eegprivacy.studies.release.table import WindowTable, labelled_windows, load_window_table
from eegprivacy.studies.release.table_attacks import CONTROL_STREAM, recording_halves, reidentification_rows
from eegprivacy.studies.release.utility import PREDICTIONS, THRESHOLD_FREE, arm_table, utility_cell
from eegprivacy.tracking import log_metrics, required_tags, start_run

STAGE = "optuna_study_a"
UTILITY, REIDENTIFICATION = "auroc_minus_null", "top1_accuracy"
OBJECTIVES = (UTILITY, REIDENTIFICATION)
DIRECTIONS = ("maximize", "minimize")
# Reported beside the objectives: the two arms of the difference and the attack's shuffled-identity control.
REPORTED = ("auroc_release", "auroc_null", "top1_accuracy_shuffled_control")
REFERENCE = (0.0, 1.0)  # no utility above the matched null, certain re-identification
REIDENTIFICATION_KIND = "same-session"
EPS_UNIT = "subject"  # one subject's feature vector is what each release protects
PARAMS = ("mechanism", "epsilon", "clip_norm")
# What a trial's numbers (or the sampler's proposals) depend on; n_trials, n_jobs, storage, the heartbeat and
# the re-evaluation are left out, so raising the target (or re-evaluating differently) resumes the same study.
FINGERPRINT_KEYS = ("dataset", "label", "condition", "delta", "search_space", "noise_seeds", "sampler",
                    "population_size", "seed")


@dataclass
class ReleaseProblem:
    """The table every trial releases (first halves), its labels and the attacker's table (second halves), rows
    aligned by subject, positions only: ids stay in :func:`load_problem`."""

    windows: WindowTable
    X: np.ndarray
    y: np.ndarray
    auxiliary: np.ndarray

    @property
    def n_subjects(self) -> int:
        return len(self.X)

    @property
    def chance(self) -> dict:
        """The level of each metric with nothing to learn or link: the matched null for the difference."""
        return {UTILITY: 0.0, "auroc_release": 0.5, "auroc_null": 0.5, REIDENTIFICATION: 1.0 / self.n_subjects,
                "top1_accuracy_shuffled_control": 1.0 / self.n_subjects}


def condition_windows(windows: WindowTable, condition: str | None, label: str) -> pd.DataFrame:
    """The labelled windows of ``condition`` (None: every subject's windows must share one condition, else a
    subject's halves would mix recordings of different conditions)."""
    frame = labelled_windows(windows, label)
    if condition is not None:
        present = sorted(frame["condition"].astype(str).unique())
        if condition not in present:
            raise ValueError(f"{windows.dataset}: no window of condition {condition!r}; the table holds {present} "
                             "(optuna_study_a.condition in params/optuna.yaml)")
        return frame[frame["condition"] == condition]
    mixed = int((frame.groupby("subject")["condition"].nunique() > 1).sum())
    if mixed:
        raise ValueError(f"{windows.dataset}: {mixed} subjects have windows of more than one condition; set "
                         "optuna_study_a.condition in params/optuna.yaml to the one whose halves are released")
    return frame


def load_problem(config: OptunaStudyAConfig, features_dir,
                 features_params: str = "params/features.yaml") -> ReleaseProblem:
    """First- and second-half patient vectors (:func:`~eegprivacy.studies.release.table_attacks.recording_halves`:
    no window straddles the middle, so the halves share no sample) of every subject with both, and its label;
    feature columns that are not finite everywhere (a band dropped above Nyquist) are left out."""
    windows = load_window_table(config.dataset, features_params, features_dir)
    window_s = FeaturesParams.load(features_params, "features").pipeline(config.dataset).window.length_s
    first, second = recording_halves(condition_windows(windows, config.condition, config.label), window_s)
    both = set(first["subject"]) & set(second["subject"])
    if len(both) < 3:
        raise ValueError(f"{windows.dataset}: only {len(both)} subjects have windows in both halves of a recording; "
                         "the search needs at least 3")
    X, y, ids = patient_vectors(first[first["subject"].isin(both)], windows.feature_columns, label="label")
    auxiliary, _, ids_aux = patient_vectors(second[second["subject"].isin(both)], windows.feature_columns,
                                            label=None)
    if not np.array_equal(ids, ids_aux):
        raise AssertionError("subject order differs between the two halves")
    X, auxiliary = X.to_numpy(), auxiliary.to_numpy()
    finite = np.isfinite(X).all(axis=0) & np.isfinite(auxiliary).all(axis=0)
    return ReleaseProblem(windows, X[:, finite], np.asarray(y, dtype=int), auxiliary[:, finite])


def search_seeds(config: OptunaStudyAConfig) -> range:
    return range(config.noise_seeds)


def reevaluation_seeds(config: OptunaStudyAConfig) -> range:
    """Seeds the search never used (the config checks the offset), so the front's values are measured afresh."""
    return range(config.reevaluation_seed_offset, config.reevaluation_seed_offset + config.reevaluation_seeds)


def evaluate_seed(X: np.ndarray, y: np.ndarray, auxiliary: np.ndarray, mechanism: str, epsilon: float,
                  delta: float, clip_norm: float, seed: int) -> dict:
    """One seed of one configuration: the release and its matched null through the dp_utility LOSO (AUROC and
    the per-patient probabilities, kept for the patient bootstrap), and the re-identification attack on the same
    release. Arrays only, so a worker process is sent the two small tables, not the window frame."""
    config = {"mechanism": mechanism, "epsilon": float(epsilon), "delta": delta, "clip_norm": clip_norm,
              "nested_seeds": 0, "nested_inner": "loso"}
    out = {}
    for arm, name in (("release", "release"), ("matched_null", "null")):
        rows = utility_cell({**config, "arm": arm}, seed, X=X, y=y)
        out[f"auroc_{name}"] = next(float(r["value"]) for r in rows
                                    if r.get("protocol") == THRESHOLD_FREE and r["metric"] == "auroc")
        out[f"proba_{name}"] = next(r["proba"] for r in rows if r["metric"] == PREDICTIONS)
    out[UTILITY] = out["auroc_release"] - out["auroc_null"]
    released, _ = arm_table({**config, "arm": "release"}, seed, X, y)  # the same draw the release arm used
    reid = {r["metric"]: r["value"] for r in reidentification_rows(
        released, auxiliary, ["euclidean"], [1], clip_norm, np.random.default_rng([CONTROL_STREAM, seed]))}
    out[REIDENTIFICATION] = float(reid["top1_accuracy"])
    out["top1_accuracy_shuffled_control"] = float(reid["top1_accuracy_shuffled_control"])
    return out


def set_difference_attrs(trial, name: str, values) -> float:
    """:func:`eegprivacy.pipeline.search.set_seed_attrs` for a difference: its t-interval over seeds is not
    clipped to [0, 1] (a difference from the null may be negative)."""
    values = [float(v) for v in values]
    mean, low, high = mean_ci(values)
    trial.set_user_attr(f"{name}_per_seed", values)
    trial.set_user_attr(f"{name}_ci_low", low)
    trial.set_user_attr(f"{name}_ci_high", high)
    return mean


class Objective:
    """Suggests (mechanism, ε, C), scores every search seed (in ``parallel``'s workers) and returns the means."""

    def __init__(self, problem: ReleaseProblem, config: OptunaStudyAConfig, parallel):
        self.problem, self.config, self.parallel = problem, config, parallel

    def __call__(self, trial) -> tuple[float, float]:
        from joblib import delayed

        space, config, p = self.config.search_space, self.config, self.problem
        mechanism = trial.suggest_categorical("mechanism", list(space.mechanisms))
        epsilon = trial.suggest_float("epsilon", *map(float, space.epsilon), log=True)
        clip_norm = trial.suggest_float("clip_norm", *map(float, space.clip_norm), log=True)
        per_seed = self.parallel(delayed(evaluate_seed)(p.X, p.y, p.auxiliary, mechanism, epsilon, config.delta,
                                                        clip_norm, seed) for seed in search_seeds(config))
        for name in REPORTED:  # the mean too: a reported metric's value is its user attribute
            trial.set_user_attr(name, search.set_seed_attrs(trial, name, [s[name] for s in per_seed]))
        return (set_difference_attrs(trial, UTILITY, [s[UTILITY] for s in per_seed]),
                search.set_seed_attrs(trial, REIDENTIFICATION, [s[REIDENTIFICATION] for s in per_seed]))


def study_fingerprint(problem: ReleaseProblem, config: OptunaStudyAConfig, code_hash: str) -> str:
    """Hash of everything a trial's numbers (or the sampler's proposals) depend on (:data:`FINGERPRINT_KEYS`,
    the data and feature versions, the code): a changed config starts a new study instead of mixing
    incomparable trials."""
    settings = config.to_dict()
    return config_key({**{k: settings[k] for k in FINGERPRINT_KEYS},
                       "dataset_version": problem.windows.dataset_version,
                       "features_hash": problem.windows.features_hash, "code_hash": code_hash})[:12]


def hypervolume(front: list[tuple[float, float]], reference=REFERENCE) -> float:
    """Area dominated by the front (utility above the null up, re-identification down) inside the box between
    the reference (no utility above the null, certain re-identification) and the ideal."""
    return search.hypervolume(front, reference)


# ---- re-evaluation of the front -------------------------------------------------------------------------------
def _reevaluation_key(trial_number: int, seed: int) -> str:
    return f"reevaluation/{trial_number}/{seed}"


def reevaluate(optuna_study, trials, problem: ReleaseProblem, config: OptunaStudyAConfig,
               parallel) -> dict[int, list[dict]]:
    """Every trial of ``trials`` scored again on the fresh :func:`reevaluation_seeds`: per trial number, one
    :func:`evaluate_seed` result per seed (in seed order). Each result is kept as a study user attribute (its
    numbers depend only on what names the study, the trial and the seed), so a rerun, or another worker, scores
    only front trials not re-evaluated before."""
    from joblib import delayed

    seeds, p, stored = list(reevaluation_seeds(config)), problem, optuna_study.user_attrs
    todo = [(t, seed) for t in trials for seed in seeds if _reevaluation_key(t.number, seed) not in stored]
    results = parallel(delayed(evaluate_seed)(p.X, p.y, p.auxiliary, t.params["mechanism"], t.params["epsilon"],
                                              config.delta, t.params["clip_norm"], seed) for t, seed in todo)
    for (trial, seed), result in zip(todo, results):
        key = _reevaluation_key(trial.number, seed)
        stored[key] = {k: np.asarray(v).tolist() for k, v in result.items()}  # JSON: floats and lists of them
        optuna_study.set_user_attr(key, stored[key])
    return {t.number: [{k: np.asarray(v) if isinstance(v, list) else v
                        for k, v in stored[_reevaluation_key(t.number, seed)].items()} for seed in seeds]
            for t in trials}


def reevaluated_values(per_seed: list[dict], y: np.ndarray, n_resamples: int, confidence: float) -> dict:
    """Means over the fresh seeds with their intervals: AUROC of the release, of its null and their difference
    over ``subjects+seeds`` (one stratified patient resample and one seed resample shared by both arms, so the
    difference is paired) with the difference's one-sided bootstrap p-value; top-1 with a Wilson interval over the
    K subjects (the mean hit count; seed-to-seed spread is kept per seed)."""
    y = np.asarray(y, dtype=int)
    idx = cb.bootstrap_indices(y, n_resamples)
    seed_idx = cb.seed_indices(len(per_seed), n_resamples)
    replicates = {arm: cb.combine_seeds(cb.auroc_along(np.stack([s[f"proba_{arm}"] for s in per_seed])[:, idx], y[idx]),
                                     seed_idx) for arm in ("release", "null")}
    replicates[UTILITY] = replicates["release"] - replicates["null"]
    out = {}
    for name, reps in (("auroc_release", replicates["release"]), ("auroc_null", replicates["null"]),
                       (UTILITY, replicates[UTILITY])):
        low, high = cb.percentile_interval(reps, confidence)
        out.update({name: float(np.mean([s[name] for s in per_seed])), f"{name}_ci_low": low, f"{name}_ci_high": high})
    out["p_value"] = cb.bootstrap_p_value(replicates[UTILITY])
    top1 = float(np.mean([s[REIDENTIFICATION] for s in per_seed]))
    low, high = wilson_interval(int(round(top1 * len(y))), len(y), confidence)
    out.update({REIDENTIFICATION: top1, f"{REIDENTIFICATION}_ci_low": low, f"{REIDENTIFICATION}_ci_high": high,
                "top1_accuracy_shuffled_control": float(np.mean([s["top1_accuracy_shuffled_control"]
                                                                 for s in per_seed])),
                "n_seeds": len(per_seed)})
    return out


def non_dominated(points: list[tuple[float, float]]) -> list[bool]:
    """Which (maximised, minimised) points no other point is at least as good as in both and better in one."""
    return [not any(u >= up and d <= down and (u > up or d < down) for u, d in points) for up, down in points]


def front_entries(study, per_seed: dict[int, list[dict]], problem: ReleaseProblem,
                  config: OptunaStudyAConfig) -> list[dict]:
    """One entry per search-time front trial (sorted by search-time re-identification): its params, its search
    values (``search_*``, t-interval over the search seeds) and its re-evaluated values; the keeps-utility
    decision (Holm over the front trials), the winner's-curse shrinkage (search − re-evaluated utility) and
    whether it is still non-dominated among the re-evaluated points."""
    front = sorted(study.best_trials, key=lambda t: t.values[1])
    entries = []
    for trial in front:
        searched = {f"search_{name}{suffix}": (trial.values[OBJECTIVES.index(name)] if not suffix
                                               else trial.user_attrs.get(f"{name}{suffix}"))
                    for name in OBJECTIVES for suffix in ("", "_ci_low", "_ci_high")}
        again = reevaluated_values(per_seed[trial.number], problem.y, config.bootstrap, config.confidence)
        delta = config.delta if trial.params["mechanism"].startswith("gaussian") else 0.0
        entries.append({"trial": trial.number, **trial.params, "delta": delta, **searched, **again,
                        "utility_shrinkage": searched[f"search_{UTILITY}"] - again[UTILITY]})
    adjusted = cb.holm([e["p_value"] for e in entries])
    still_front = non_dominated([(e[UTILITY], e[REIDENTIFICATION]) for e in entries])
    for entry, p_holm, kept in zip(entries, adjusted, still_front):
        entry.update(p_holm=float(p_holm), keeps_utility=bool(p_holm < 1.0 - config.confidence),
                     pareto_after_reevaluation=bool(kept))
    return entries


def front_summary(study, entries: list[dict], problem: ReleaseProblem, config: OptunaStudyAConfig) -> dict:
    """The report: what was searched and how, the trial counts, the front (search-time and re-evaluated values
    side by side) and the hypervolume of each."""
    searched = [(e[f"search_{UTILITY}"], e[f"search_{REIDENTIFICATION}"]) for e in entries]
    again = [(e[UTILITY], e[REIDENTIFICATION]) for e in entries]
    return {
        "dataset": problem.windows.dataset, "synthetic": problem.windows.synthetic, "study_name": study.study_name,
        "label": config.label, "objectives": dict(zip(OBJECTIVES, DIRECTIONS)),
        "utility": "threshold-free LOSO AUROC of the release minus its matched null (same mechanism and noise draw "
                   "on a zero-signal table)",
        "reidentification": f"{REIDENTIFICATION_KIND}: nearest neighbour (euclidean), first half of each recording "
                            "released, second half held by the attacker",
        "eps_unit": EPS_UNIT, "n_subjects": problem.n_subjects, "noise_seeds": list(search_seeds(config)),
        "reevaluation_seeds": list(reevaluation_seeds(config)),
        "ci_over": {"search": "seeds", "auroc": "subjects+seeds", REIDENTIFICATION: "subjects"},
        "confidence": config.confidence, "correction": f"holm over {len(entries)} front trials",
        "n_trials": search.n_complete(study), "n_trials_all_states": len(study.get_trials(deepcopy=False)),
        "front_size": len(entries), "front_distinct_points": len(set(searched)),
        "hypervolume": hypervolume(searched), "hypervolume_reevaluated": hypervolume(again),
        "hypervolume_reference": dict(zip(OBJECTIVES, REFERENCE)), "chance": problem.chance,
        "front": [{k: search.json_number(v) for k, v in entry.items()} for entry in entries],
    }


# ---- tables and runs -------------------------------------------------------------------------------------------
def _head(problem: ReleaseProblem) -> dict:
    return {"study": "a", "dataset": problem.windows.dataset, "reidentification": REIDENTIFICATION_KIND,
            "eps_unit": EPS_UNIT}


def trial_rows(study, front_numbers: set[int], problem: ReleaseProblem, config: OptunaStudyAConfig) -> pd.DataFrame:
    """Search rows (``phase`` search): one per (trial, metric), mean over the search seeds, t-interval, per-seed
    values, chance; trials that did not complete keep their rows with empty values, so failures stay visible."""
    rows = search.trial_rows(study, OBJECTIVES, PARAMS, problem.chance, front_numbers, config.noise_seeds,
                             _head(problem), REPORTED)
    attrs = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
    difference = rows["metric"] == UTILITY
    for bound in search.BOUNDS:  # the generic rows clip every bound to [0, 1]; a difference's may be negative
        rows.loc[difference, bound] = rows.loc[difference, "trial"].map(
            lambda n, key=f"{UTILITY}_{bound}": attrs[n].get(key, np.nan))
    return rows.assign(phase="search", ci_over="seeds")


def reevaluation_rows(entries: list[dict], per_seed: dict[int, list[dict]], study, problem: ReleaseProblem,
                      config: OptunaStudyAConfig) -> pd.DataFrame:
    """Re-evaluation rows (``phase`` reevaluation): one per (front trial, metric) in the trial rows' columns."""
    ci_over = {"auroc_release": "subjects+seeds", "auroc_null": "subjects+seeds", UTILITY: "subjects+seeds",
               REIDENTIFICATION: "subjects", "top1_accuracy_shuffled_control": ""}
    rows = []
    for entry in entries:
        for name in (*OBJECTIVES, *REPORTED):
            rows.append({**_head(problem), "study_name": study.study_name, "trial": entry["trial"],
                         "state": "COMPLETE", **{k: entry[k] for k in PARAMS}, "metric": name, "value": entry[name],
                         "ci_low": entry.get(f"{name}_ci_low", np.nan), "ci_high": entry.get(f"{name}_ci_high", np.nan),
                         "n": config.reevaluation_seeds, "chance": problem.chance[name],
                         "per_seed": json.dumps([s[name] for s in per_seed[entry["trial"]]]), "pareto": True,
                         "duration_s": np.nan, "phase": "reevaluation", "ci_over": ci_over[name]})
    return pd.DataFrame(rows)


def run_tags(windows: WindowTable, seed: int, **extra) -> dict:
    """MLflow tags of the search's parent run and (with a trial's ε, mechanism and δ) of its children."""
    return required_tags(study="a", stage=STAGE, dataset=windows.dataset, dataset_version=windows.dataset_version,
                         synthetic=windows.synthetic, seed=seed, dvc_stage=STAGE, model="mlp",
                         attack="reidentification", attacker="nearest_neighbour_euclidean", **extra)


def _trial_run_tags(windows: WindowTable, config: OptunaStudyAConfig, params: dict) -> dict:
    mechanism = params["mechanism"]
    delta = config.delta if mechanism.startswith("gaussian") else 0.0
    return run_tags(windows, config.seed, epsilon=params["epsilon"], mechanism=mechanism, delta=delta)


def trial_tags(windows: WindowTable, config: OptunaStudyAConfig):
    """The child-run tags of a trial: its mechanism and ε, and δ where the mechanism is a Gaussian one."""
    return lambda trial: _trial_run_tags(windows, config, trial.params)


def log_reevaluation(parent_run_id: str, entries: list[dict], per_seed: dict[int, list[dict]], study_name: str,
                     windows: WindowTable, config: OptunaStudyAConfig) -> int:
    """One MLflow child run per re-evaluated front trial (param ``phase`` = reevaluation, the trial's tags):
    every number of its front entry as a metric and each metric's per-seed values as a history (step = seed)."""
    for entry in entries:
        params = {k: entry[k] for k in PARAMS}
        run_params = {**params, "phase": "reevaluation", "trial_number": entry["trial"], "study_name": study_name,
                      "reevaluation_seeds": list(reevaluation_seeds(config)), "bootstrap": config.bootstrap,
                      "confidence": config.confidence}
        with start_run(study="a", tags=_trial_run_tags(windows, config, params), params=run_params,
                       run_name=f"reevaluation-trial-{entry['trial']}", parent_run_id=parent_run_id):
            numbers = {k: float(v) for k, v in entry.items()
                       if k not in ("trial", "delta", *PARAMS) and isinstance(v, (int, float)) and np.isfinite(v)}
            log_metrics(numbers)
            for seed, values in zip(reevaluation_seeds(config), per_seed[entry["trial"]]):
                log_metrics({f"{name}_per_seed": values[name] for name in (*OBJECTIVES, *REPORTED)}, step=seed)
    return len(entries)
