"""Stage ``optuna_study_a`` (study A): multi-objective Optuna search for the privacy–utility trade-off of a release.

The grid stages (``dp_utility``, ``table_attacks``) answer "what does ε = 1, 2, 5 … cost"; this stage asks the
inverse question — which (mechanism, ε, clip norm C) releases are Pareto-optimal — and lets a sampler spend its
trials near the front instead of on a fixed grid.

One trial = one release configuration, scored on one released table (the ``table_attacks`` setup: each
subject's ``release_condition`` recording, scaled, clipped to C and noised) by two objectives:

- maximise the LOSO balanced accuracy of the patient label on the release (the paper's MLP and threshold
  protocol from ``eegprivacy.evaluation``; chance 0.5);
- minimise the top-1 accuracy of the nearest-neighbour re-identification attack
  (``table_attacks.reidentification_rows``: the attacker holds the same subjects' ``auxiliary_condition``
  recording; chance 1/K).

Both are means over ``noise_seeds`` releases (the noise and the MLP seed vary together), never one realisation;
the per-seed values and a t-interval over seeds are kept as trial user attributes.

Storage and cooperation: the study lives in an RDB (``storage``, sqlite by default) under a name derived from
everything that determines a trial's numbers (data version, features, label, search space, seeds, sampler and
code), opened with ``load_if_exists=True``. ``n_trials`` is the study's target number of COMPLETE trials, so

- a rerun (or a run after a crash) only adds the missing trials: finished trials are never recomputed, and a
  trial whose process died is marked FAIL by the next worker once its heartbeat is stale;
- N processes or machines running the same command against one shared database cooperate, each adding trials
  until the study has exactly ``n_trials`` complete ones (a trial starts only while fewer are complete or
  running, counted under a database lock: ``tracking.search.optimize_to_target``), e.g.::

      eegprivacy optuna-study-a --storage postgresql://user@dbhost/optuna --no-progress   # on every machine

  (sqlite works for several processes on one machine; use a server database across machines.) With one worker
  and a fixed ``seed`` the sampler proposes the same trials; with several the order of completions decides.

MLflow: each invocation opens one parent run in ``study-a-dp-release``; every trial it completes becomes one
child run (params = the trial's params, metrics = both objectives with their intervals and per-seed values),
logged by :class:`MLflowChildRuns`, an Optuna callback that runs in the main process. The parent gets the front
summary and the JSON, CSV and figure as artifacts, computed over all trials in the study (every worker's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from eegprivacy.evaluation import DP_GRID, LOSOEvaluation
from eegprivacy.evaluation.figures import titled
from eegprivacy.params import load_params
from eegprivacy.privacy import release_table
from eegprivacy.tracking import required_tags, search, start_run
from eegprivacy.tracking.search import MLflowChildRuns
from eegprivacy.tracking.sweep import config_key

from experiments._study_a import WindowTable, code_hash, labelled_windows, load_window_table
from experiments.table_attacks import reidentification_rows, stage_code_hash, two_condition_tables

NAME = "optuna-study-a"
HELP = ("Study A: Optuna multi-objective search (mechanism, ε, clip norm) maximising LOSO balanced accuracy and "
        "minimising nearest-neighbour re-identification of the release; resumable RDB study shared by workers, "
        "Pareto front JSON/CSV/figure, MLflow parent with one child per trial.")

STAGE = "optuna_study_a"
OBJECTIVES = ("balanced_accuracy", "top1_accuracy")  # directions: maximise, minimise
DIRECTIONS = ("maximize", "minimize")
# Seed streams of table_attacks (release noise, shuffled-identity control), so a trial at one of its grid points
# reproduces its re-identification numbers seed for seed.
_NOISE_STREAM, _CONTROL_STREAM = 0x44505245, 0x43544C52


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/optuna.yaml", help="search params file")
    parser.add_argument("--storage", help="SQLAlchemy URL of the study database (default: params' storage); give "
                                          "every worker the same URL to share one study")
    parser.add_argument("--study-name", help="study name (default: derived from the config, so a changed config "
                                             "starts a new study instead of mixing incomparable trials)")
    parser.add_argument("--metrics", default="metrics/optuna_study_a.json", help="Pareto front JSON")
    parser.add_argument("--trials-csv", default="metrics/optuna_study_a_trials.csv", help="tidy table of all trials")
    parser.add_argument("--figure", default="reports/figures/optuna_pareto_study_a.png", help="Pareto figure")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--no-progress", action="store_true")


# ---- the problem ---------------------------------------------------------------------------------------------
@dataclass
class ReleaseProblem:
    """The private table every trial releases, its labels and the attacker's auxiliary table (rows aligned by
    subject, positions only: ids stay in ``load_problem``)."""

    windows: WindowTable
    X: np.ndarray
    y: np.ndarray
    auxiliary: np.ndarray

    @property
    def n_subjects(self) -> int:
        return len(self.X)


def load_problem(cfg: dict, features_dir) -> ReleaseProblem:
    """The table_attacks tables (subjects with both conditions) plus each subject's patient label."""
    windows = load_window_table(cfg["dataset"], features_dir=features_dir)
    release_condition, auxiliary_condition = cfg["release_condition"], cfg["auxiliary_condition"]
    X, auxiliary = two_condition_tables(windows, release_condition, auxiliary_condition)
    frame = labelled_windows(windows, cfg["label"])
    per_subject = frame.groupby("subject", sort=True).agg(conditions=("condition", set), label=("label", "first"))
    both = per_subject["conditions"].map(lambda c: {release_condition, auxiliary_condition} <= c)
    y = per_subject.loc[both, "label"].to_numpy(dtype=int)  # same sorted-subject order as two_condition_tables
    if len(y) != len(X):
        raise AssertionError("labels and released rows are not aligned")
    return ReleaseProblem(windows, X, y, auxiliary)


def score_seed(X: np.ndarray, y: np.ndarray, auxiliary: np.ndarray, mechanism: str, epsilon: float, delta: float,
               clip_norm: float, protocol: str, seed: int) -> dict:
    """Both objectives for one noise seed: one release, a LOSO MLP on it, the re-identification attack on it.
    Takes arrays only, so a worker process is sent the two small tables, not the window frame."""
    noise_rng = np.random.default_rng([_NOISE_STREAM, seed])
    released, _ = release_table(X, mechanism, epsilon, delta, clip_norm, random_state=noise_rng)
    loso = LOSOEvaluation(threshold_grid=DP_GRID, random_state=seed, nested=protocol == "nested")
    utility = loso.evaluate(released, y, np.arange(len(y))).metrics[protocol]
    reid = reidentification_rows(released, auxiliary, ["euclidean"], [1], clip_norm,
                                 np.random.default_rng([_CONTROL_STREAM, seed]))
    top1 = next(row for row in reid if row["metric"] == "top1_accuracy")
    return {"balanced_accuracy": float(utility["balanced_accuracy"]), "top1_accuracy": float(top1["value"])}


class Objective:
    """Suggests (mechanism, ε, C), scores every noise seed (in ``parallel``'s workers) and returns the means."""

    def __init__(self, problem: ReleaseProblem, cfg: dict, parallel):
        self.problem, self.cfg, self.parallel = problem, cfg, parallel

    def __call__(self, trial) -> tuple[float, float]:
        from joblib import delayed

        space = self.cfg["search_space"]
        mechanism = trial.suggest_categorical("mechanism", list(space["mechanisms"]))
        epsilon = trial.suggest_float("epsilon", *map(float, space["epsilon"]), log=True)
        clip_norm = trial.suggest_float("clip_norm", *map(float, space["clip_norm"]), log=True)
        p, delta, protocol = self.problem, float(self.cfg["delta"]), self.cfg["protocol"]
        per_seed = self.parallel(delayed(score_seed)(p.X, p.y, p.auxiliary, mechanism, epsilon, delta, clip_norm,
                                                     protocol, seed) for seed in range(self.cfg["noise_seeds"]))
        return tuple(search.set_seed_attrs(trial, name, [s[name] for s in per_seed]) for name in OBJECTIVES)


# ---- the study -------------------------------------------------------------------------------------------------
def study_fingerprint(problem: ReleaseProblem, cfg: dict) -> str:
    """Hash of everything a trial's numbers (or the sampler's proposals) depend on; ``n_trials``, ``n_jobs``,
    ``storage`` and the heartbeat are left out, so raising the target resumes the same study."""
    keys = ("dataset", "label", "release_condition", "auxiliary_condition", "delta", "search_space",
            "noise_seeds", "protocol", "sampler", "population_size", "seed")
    return config_key({**{k: cfg[k] for k in keys}, "dataset_version": problem.windows.dataset_version,
                       "features_hash": problem.windows.features_hash,
                       "code_hash": code_hash("optuna_study_a.py") + stage_code_hash()})[:12]


# ---- outputs ---------------------------------------------------------------------------------------------------
def hypervolume(front: list[tuple[float, float]], reference=(0.5, 1.0)) -> float:
    """Area dominated by the front (balanced accuracy up, re-identification down) inside the box between the
    reference (chance utility, certain re-identification) and the ideal (1, 0)."""
    return search.hypervolume(front, reference)


def trial_rows(study, front_numbers: set[int], problem: ReleaseProblem, cfg: dict) -> pd.DataFrame:
    """One row per (trial, objective): mean over noise seeds, t-interval, per-seed values, chance; trials that
    did not complete keep their row with empty values, so failures stay visible."""
    return search.trial_rows(study, OBJECTIVES, ("mechanism", "epsilon", "clip_norm"), chance(problem),
                             front_numbers, cfg["noise_seeds"], {"study": "a", "dataset": problem.windows.dataset})


def chance(problem: ReleaseProblem) -> dict:
    return {"balanced_accuracy": 0.5, "top1_accuracy": 1.0 / len(problem.auxiliary)}


def front_summary(study, problem: ReleaseProblem, cfg: dict) -> dict:
    head = {"dataset": problem.windows.dataset, "synthetic": problem.windows.synthetic,
            "study_name": study.study_name, "objectives": dict(zip(OBJECTIVES, DIRECTIONS)),
            "protocol": cfg["protocol"], "noise_seeds": cfg["noise_seeds"], "n_subjects": problem.n_subjects}
    return search.front_summary(study, OBJECTIVES, (0.5, 1.0), chance(problem), head)


def pareto_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    """All complete trials by mechanism, the front as a step line, chance levels and the no-release point."""
    search.pareto_figure(
        tidy, OBJECTIVES, "mechanism", path, xlabel="re-identification top-1 accuracy (nearest neighbour) ↓",
        ylabel=f"LOSO balanced accuracy ({summary['protocol']} threshold) ↑",
        title=titled(f"{summary['dataset']}: privacy–utility search, {summary['n_trials']} trials, "
                     f"mean of {summary['noise_seeds']} noise seeds", summary["synthetic"]),
        chance=summary["chance"], chance_point="no release",
        chance_labels={"balanced_accuracy": "chance balanced accuracy (0.5)",
                       "top1_accuracy": f"re-identification chance (1/K = 1/{summary['n_subjects']})"})


# ---- the stage -------------------------------------------------------------------------------------------------
def run(args) -> int:
    import optuna
    from joblib import Parallel

    cfg = load_params(args.params, "optuna_study_a")
    problem = load_problem(cfg, args.features_dir)
    url = args.storage or cfg["storage"]
    name = args.study_name or f"study_a-{problem.windows.dataset}-{study_fingerprint(problem, cfg)}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = search.open_study(url, name, cfg, DIRECTIONS)

    windows = problem.windows

    def tags(seed, **extra):
        return required_tags(study="a", stage=STAGE, dataset=windows.dataset, dataset_version=windows.dataset_version,
                             synthetic=windows.synthetic, seed=seed, dvc_stage=STAGE, model="mlp",
                             attack="reidentification", attacker="nearest_neighbour_euclidean", **extra)

    def child_tags(trial):
        mechanism = trial.params["mechanism"]
        gaussian = mechanism.startswith("gaussian")
        return tags(cfg["seed"], epsilon=trial.params["epsilon"], mechanism=mechanism,
                    delta=cfg["delta"] if gaussian else 0.0)

    parent_params = {"optuna_study_a": {**cfg, "storage": search.public_url(url)}, "study_name": name,
                     "n_subjects": problem.n_subjects, "features_hash": windows.features_hash}
    child_params = {"noise_seeds": cfg["noise_seeds"], "protocol": cfg["protocol"], "sampler": cfg["sampler"]}
    with start_run(study="a", tags=tags(cfg["seed"]), params=parent_params, run_name=f"{STAGE}-{windows.dataset}") \
            as parent:
        children = MLflowChildRuns("a", parent.info.run_id, child_tags, child_params, OBJECTIVES)
        with Parallel(n_jobs=min(cfg["n_jobs"], cfg["noise_seeds"])) as parallel:
            search.optimize_to_target(study, Objective(problem, cfg, parallel), cfg["n_trials"], [children],
                                      progress=not args.no_progress)
        summary = front_summary(study, problem, cfg)
        front_numbers = {entry["trial"] for entry in summary["front"]}
        tidy = trial_rows(study, front_numbers, problem, cfg)
        search.write_outputs(summary, tidy, args.metrics, args.trials_csv, args.figure, pareto_figure,
                             children.logged)
    print(f"{windows.dataset}: study {name}: {children.logged} new trial(s), {summary['n_trials']} complete, "
          f"Pareto front {summary['front_size']}, hypervolume {summary['hypervolume']:.4f} -> {args.metrics}")
    return 0
