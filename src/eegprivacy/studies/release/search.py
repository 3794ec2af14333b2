"""Study A as a multi-objective Optuna search for the privacy–utility trade-off of a release.

The grid stages (``dp_utility``, ``table_attacks``) answer "what does ε = 1, 2, 5 … cost"; this search asks the
inverse question — which (mechanism, ε, clip norm C) releases are Pareto-optimal — and lets a sampler spend its
trials near the front instead of on a fixed grid.

One trial = one release configuration, scored on one released table (the ``table_attacks`` setup: each
subject's ``release_condition`` recording, scaled, clipped to C and noised) by two objectives:

- maximise the LOSO balanced accuracy of the patient label on the release (the paper's MLP and threshold
  protocol from ``eegprivacy.evaluation``; chance 0.5);
- minimise the top-1 accuracy of the nearest-neighbour re-identification attack
  (:func:`~eegprivacy.studies.release.table_attacks.reidentification_rows`: the attacker holds the same
  subjects' ``auxiliary_condition`` recording; chance 1/K).

Both are means over ``noise_seeds`` releases (the noise and the MLP seed vary together), never one realisation;
the per-seed values and a t-interval over seeds are kept as trial user attributes. The study machinery (RDB
storage, heartbeats, a target of COMPLETE trials shared by cooperating workers, MLflow child runs, the front)
is :mod:`eegprivacy.pipeline.search`; this module defines the problem.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.evaluation import DP_GRID, LOSOEvaluation
from eegprivacy.pipeline import search
from eegprivacy.pipeline.sweep import config_key
from eegprivacy.privacy import release_table
from eegprivacy.studies.release.config import OptunaStudyAConfig
from eegprivacy.studies.release.table import WindowTable, labelled_windows, load_window_table
from eegprivacy.studies.release.table_attacks import (
    CONTROL_STREAM,
    NOISE_STREAM,
    reidentification_rows,
    two_condition_tables,
)
from eegprivacy.tracking import required_tags

STAGE = "optuna_study_a"
OBJECTIVES = ("balanced_accuracy", "top1_accuracy")  # directions: maximise, minimise
DIRECTIONS = ("maximize", "minimize")
REFERENCE = (0.5, 1.0)  # chance utility, certain re-identification
# What a trial's numbers (or the sampler's proposals) depend on; n_trials, n_jobs, storage and the heartbeat
# are left out, so raising the target resumes the same study.
FINGERPRINT_KEYS = ("dataset", "label", "release_condition", "auxiliary_condition", "delta", "search_space",
                    "noise_seeds", "protocol", "sampler", "population_size", "seed")


@dataclass
class ReleaseProblem:
    """The private table every trial releases, its labels and the attacker's auxiliary table (rows aligned by
    subject, positions only: ids stay in :func:`load_problem`)."""

    windows: WindowTable
    X: np.ndarray
    y: np.ndarray
    auxiliary: np.ndarray

    @property
    def n_subjects(self) -> int:
        return len(self.X)

    @property
    def chance(self) -> dict:
        return {"balanced_accuracy": 0.5, "top1_accuracy": 1.0 / len(self.auxiliary)}


def load_problem(config: OptunaStudyAConfig, features_dir) -> ReleaseProblem:
    """The table_attacks tables (subjects with both conditions) plus each subject's patient label."""
    windows = load_window_table(config.dataset, features_dir=features_dir)
    release_condition, auxiliary_condition = config.release_condition, config.auxiliary_condition
    X, auxiliary = two_condition_tables(windows, release_condition, auxiliary_condition)
    frame = labelled_windows(windows, config.label)
    per_subject = frame.groupby("subject", sort=True).agg(conditions=("condition", set), label=("label", "first"))
    both = per_subject["conditions"].map(lambda c: {release_condition, auxiliary_condition} <= c)
    y = per_subject.loc[both, "label"].to_numpy(dtype=int)  # same sorted-subject order as two_condition_tables
    if len(y) != len(X):
        raise AssertionError("labels and released rows are not aligned")
    return ReleaseProblem(windows, X, y, auxiliary)


def score_seed(X: np.ndarray, y: np.ndarray, auxiliary: np.ndarray, mechanism: str, epsilon: float, delta: float,
               clip_norm: float, protocol: str, seed: int) -> dict:
    """Both objectives for one noise seed: one release, a LOSO MLP on it, the re-identification attack on it.
    Takes arrays only, so a worker process is sent the two small tables, not the window frame. The seed streams
    are table_attacks', so a trial at one of its grid points reproduces its re-identification seed for seed."""
    noise_rng = np.random.default_rng([NOISE_STREAM, seed])
    released, _ = release_table(X, mechanism, epsilon, delta, clip_norm, random_state=noise_rng)
    loso = LOSOEvaluation(threshold_grid=DP_GRID, random_state=seed, nested=protocol == "nested")
    utility = loso.evaluate(released, y, np.arange(len(y))).metrics[protocol]
    reid = reidentification_rows(released, auxiliary, ["euclidean"], [1], clip_norm,
                                 np.random.default_rng([CONTROL_STREAM, seed]))
    top1 = next(row for row in reid if row["metric"] == "top1_accuracy")
    return {"balanced_accuracy": float(utility["balanced_accuracy"]), "top1_accuracy": float(top1["value"])}


class Objective:
    """Suggests (mechanism, ε, C), scores every noise seed (in ``parallel``'s workers) and returns the means."""

    def __init__(self, problem: ReleaseProblem, config: OptunaStudyAConfig, parallel):
        self.problem, self.config, self.parallel = problem, config, parallel

    def __call__(self, trial) -> tuple[float, float]:
        from joblib import delayed

        space, config, p = self.config.search_space, self.config, self.problem
        mechanism = trial.suggest_categorical("mechanism", list(space.mechanisms))
        epsilon = trial.suggest_float("epsilon", *map(float, space.epsilon), log=True)
        clip_norm = trial.suggest_float("clip_norm", *map(float, space.clip_norm), log=True)
        per_seed = self.parallel(delayed(score_seed)(p.X, p.y, p.auxiliary, mechanism, epsilon, config.delta,
                                                     clip_norm, config.protocol, seed)
                                 for seed in range(config.noise_seeds))
        return tuple(search.set_seed_attrs(trial, name, [s[name] for s in per_seed]) for name in OBJECTIVES)


def study_fingerprint(problem: ReleaseProblem, config: OptunaStudyAConfig, code_hash: str) -> str:
    """Hash of everything a trial's numbers (or the sampler's proposals) depend on (:data:`FINGERPRINT_KEYS`,
    the data and feature versions, the code): a changed config starts a new study instead of mixing
    incomparable trials."""
    settings = config.to_dict()
    return config_key({**{k: settings[k] for k in FINGERPRINT_KEYS},
                       "dataset_version": problem.windows.dataset_version,
                       "features_hash": problem.windows.features_hash, "code_hash": code_hash})[:12]


def hypervolume(front: list[tuple[float, float]], reference=REFERENCE) -> float:
    """Area dominated by the front (balanced accuracy up, re-identification down) inside the box between the
    reference (chance utility, certain re-identification) and the ideal (1, 0)."""
    return search.hypervolume(front, reference)


def trial_rows(study, front_numbers: set[int], problem: ReleaseProblem, config: OptunaStudyAConfig) -> pd.DataFrame:
    """One row per (trial, objective): mean over noise seeds, t-interval, per-seed values, chance; trials that
    did not complete keep their row with empty values, so failures stay visible."""
    return search.trial_rows(study, OBJECTIVES, ("mechanism", "epsilon", "clip_norm"), problem.chance,
                             front_numbers, config.noise_seeds, {"study": "a", "dataset": problem.windows.dataset})


def front_summary(study, problem: ReleaseProblem, config: OptunaStudyAConfig) -> dict:
    head = {"dataset": problem.windows.dataset, "synthetic": problem.windows.synthetic,
            "study_name": study.study_name, "objectives": dict(zip(OBJECTIVES, DIRECTIONS)),
            "protocol": config.protocol, "noise_seeds": config.noise_seeds, "n_subjects": problem.n_subjects}
    return search.front_summary(study, OBJECTIVES, REFERENCE, problem.chance, head)


def run_tags(windows: WindowTable, seed: int, **extra) -> dict:
    """MLflow tags of the search's parent run and (with a trial's ε, mechanism and δ) of its children."""
    return required_tags(study="a", stage=STAGE, dataset=windows.dataset, dataset_version=windows.dataset_version,
                         synthetic=windows.synthetic, seed=seed, dvc_stage=STAGE, model="mlp",
                         attack="reidentification", attacker="nearest_neighbour_euclidean", **extra)


def trial_tags(windows: WindowTable, config: OptunaStudyAConfig):
    """The child-run tags of a trial: its mechanism and ε, and δ where the mechanism is a Gaussian one."""
    def child_tags(trial):
        mechanism = trial.params["mechanism"]
        delta = config.delta if mechanism.startswith("gaussian") else 0.0
        return run_tags(windows, config.seed, epsilon=trial.params["epsilon"], mechanism=mechanism, delta=delta)

    return child_tags
