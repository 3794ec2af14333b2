"""Stage ``optuna_study_b`` (study B): multi-objective Optuna search for the utility–leakage trade-off of DP
federated learning.

``federated_mia`` answers "what does per-step ε = 10, 5, 1 cost" on a fixed grid; this stage asks which
(ε, clip norm C, local epochs) settings are Pareto-optimal. One trial = one setting, trained as ``federated_mia``
trains a cell (its ``Federation``, ``federate`` and ``utility_rows``; every knob not searched comes from
``params/federated_mia.yaml``, except ``num_rounds``, which this stage's params set) and scored by two
objectives:

- maximise the global model's utility: the client-mean AUROC on every client's non-member trials
  (``federated_mia``'s ``utility_auroc``; chance 0.5);
- minimise the record-level attack's TPR at 1 % FPR on the final global model (``federated_mia``'s RLA,
  members vs non-members, cross-fitted over two folds; chance 0.01): per seed the strongest of the attackers
  run (``federated_mia``'s ``attackers``), since a defender must hold against the best one.

Both are means over ``noise_seeds`` seeds (member split, initialisation, client sampling and DP noise vary
together, as ``federated_mia``'s seeds do); the per-seed values and a t-interval are kept as trial user
attributes, with the strongest attacker's AUROC reported alongside. ``mechanism: none`` trials (no DP, so no ε
and no clipping) put the non-private end of the front into the same search. ε is per local step, not a
cumulative guarantee.

Storage, resuming, several workers and MLflow (``study-b-federated-mia``: one parent per invocation, one child
per trial) work as in ``optuna_study_a``, through :mod:`eegprivacy.tracking.search`.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.attacks.membership import RecordLevelAttack
from eegprivacy.attacks.metrics import attack_summary
from eegprivacy.evaluation.figures import titled
from eegprivacy.params import ParamsError, load_params
from eegprivacy.tracking import required_tags, search, start_run
from eegprivacy.tracking.sweep import config_key
from experiments import federated_mia

NAME = "optuna-study-b"
HELP = ("Study B: Optuna multi-objective search (per-step ε, clip norm, local epochs) of DP federated learning, "
        "maximising the global model's AUROC and minimising the record-level attack's TPR at FPR 0.01; resumable "
        "RDB study, Pareto front JSON/CSV/figure, MLflow parent with one child per trial.")

STAGE = "optuna_study_b"
OBJECTIVES = ("utility_auroc", "rla_tpr_at_fpr_0.01")  # directions: maximise, minimise
DIRECTIONS = ("maximize", "minimize")
REPORTED = ("rla_auroc",)  # the strongest attacker's AUROC, reported next to the objectives
CHANCE = {"utility_auroc": 0.5, "rla_tpr_at_fpr_0.01": 0.01, "rla_auroc": 0.5}
PARAMS = ("mechanism", "epsilon", "clip_norm", "local_epochs")
# federated_mia's knobs a trial uses; the searched ones (clip_norm, local_epochs) and num_rounds are set here.
ATTACK_FOLDS = 2
TRAINING_KEYS = ("test_size", "split_seed", "csp_components", "clients_per_round", "learning_rate", "batch_size",
                 "attackers", "rf_estimators")


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/optuna.yaml", help="search params file")
    parser.add_argument("--training-params", default="params/federated_mia.yaml",
                        help="federated_mia's params: the datasets and every training/attack knob not searched")
    parser.add_argument("--storage", help="SQLAlchemy URL of the study database (default: params' storage); give "
                                          "every worker the same URL to share one study")
    parser.add_argument("--study-name", help="study name (default: derived from the config, so a changed config "
                                             "starts a new study instead of mixing incomparable trials)")
    parser.add_argument("--metrics", default="metrics/optuna_study_b.json", help="Pareto front JSON")
    parser.add_argument("--trials-csv", default="metrics/optuna_study_b_trials.csv", help="tidy table of all trials")
    parser.add_argument("--figure", default="reports/figures/optuna_pareto_study_b.png", help="Pareto figure")
    parser.add_argument("--no-progress", action="store_true")


# ---- one trial -------------------------------------------------------------------------------------------------
def score_seed(fed, model: str, epsilon: float, clip_norm: float, local_epochs: int, train: dict,
               seed: int) -> dict:
    """Utility and the record-level attacks for one seed: one federation trained as federated_mia's cell, scored
    after its last round as federated_mia scores that round (same attack seed). Takes the prepared
    ``Federation``, so a worker process is sent the CSP features, not the raw trials.

    The attack is cross-fitted (every trial scored once by an attacker fitted on the other fold) rather than
    federated_mia's one half-split: eegmat's ~140 non-members halved are too few to resolve a 1 % FPR."""
    from eegprivacy.federated.task import derive_seed

    knobs = {**train, "clip_norm": clip_norm, "local_epochs": local_epochs}
    task, result = federated_mia.federate({"model": model, "epsilon": epsilon}, seed, fed, knobs)
    last = max(result.sent)
    utility = next(r["value"] for r in federated_mia.utility_rows(task, result.weights, fed, last)
                   if r["metric"] == "utility_auroc")
    flat = lambda X: X.reshape(len(X), -1)  # noqa: E731
    (Xm, ym, _), (Xn, yn, _) = fed.pooled(True), fed.pooled(False)
    w = result.weights
    data = (task.predict_proba(w, flat(Xm)), task._targets(ym).numpy(), task.predict_proba(w, flat(Xn)),
            task._targets(yn).numpy(), task.losses(w, flat(Xm), ym), task.losses(w, flat(Xn), yn))
    y = np.r_[np.ones(len(ym), int), np.zeros(len(yn), int)]
    out = {"utility_auroc": float(utility)}
    for attacker in train["attackers"]:
        rla = RecordLevelAttack(attacker=attacker, n_estimators=int(train["rf_estimators"]),
                                random_state=derive_seed(seed, last, 11))
        X, _ = rla.attack_data(*data)  # rows: members, then non-members
        scores = attack_summary(y, rla.cross_fitted_scores(X, y, ATTACK_FOLDS), (0.01,))
        out[f"{attacker}_tpr"], out[f"{attacker}_auroc"] = scores["tpr_at_fpr_0.01"], scores["auroc"]
    return out


class Objective:
    """Suggests (mechanism, ε, C, local epochs), scores every seed (in ``parallel``'s workers), returns the means.
    Each seed's Federation (member split + per-client CSP) is the same for every trial, so it is built once."""

    def __init__(self, trials, cfg: dict, train: dict, parallel):
        self.trials, self.cfg, self.train, self.parallel = trials, cfg, train, parallel
        self._federations = {}

    def federation(self, seed: int):
        from eegprivacy.signal.csp import MODEL_INPUT

        if seed not in self._federations:
            member = federated_mia.seed_split(self.trials, self.train, seed)
            fed = federated_mia.Federation(self.trials, member, MODEL_INPUT[self.cfg["model"]],
                                           int(self.train["csp_components"]))
            if len(fed.pooled(False)[1]) < 100:
                raise ValueError(f"{len(fed.pooled(False)[1])} non-member trials cannot resolve a TPR at 1 % FPR "
                                 "(it needs at least 100): use a larger cohort or test_size")
            self._federations[seed] = fed
        return self._federations[seed]

    def __call__(self, trial) -> tuple[float, float]:
        from joblib import delayed

        space = self.cfg["search_space"]
        mechanism = trial.suggest_categorical("mechanism", list(space["mechanisms"]))
        if mechanism == "laplace_gradient":
            epsilon = trial.suggest_float("epsilon", *map(float, space["epsilon"]), log=True)
            clip_norm = trial.suggest_float("clip_norm", *map(float, space["clip_norm"]), log=True)
        else:  # no DP: no noise and no clipping, so neither knob exists
            epsilon, clip_norm = math.inf, math.nan
        local_epochs = trial.suggest_int("local_epochs", *map(int, space["local_epochs"]))
        seeds = range(self.cfg["noise_seeds"])
        per_seed = self.parallel(delayed(score_seed)(self.federation(seed), self.cfg["model"], epsilon, clip_norm,
                                                     local_epochs, self.train, seed) for seed in seeds)
        attackers = self.train["attackers"]
        for attacker in attackers:
            trial.set_user_attr(f"rla_{attacker}_tpr_at_fpr_0.01_per_seed", [s[f"{attacker}_tpr"] for s in per_seed])
        strongest = [max(attackers, key=lambda a: s[f"{a}_tpr"]) for s in per_seed]
        trial.set_user_attr("strongest_attacker_per_seed", strongest)
        trial.set_user_attr("rla_auroc", search.set_seed_attrs(
            trial, "rla_auroc", [s[f"{a}_auroc"] for s, a in zip(per_seed, strongest)]))
        return (search.set_seed_attrs(trial, "utility_auroc", [s["utility_auroc"] for s in per_seed]),
                search.set_seed_attrs(trial, "rla_tpr_at_fpr_0.01", [s[f"{a}_tpr"] for s, a in zip(per_seed,
                                                                                                  strongest)]))


# ---- the study -------------------------------------------------------------------------------------------------
def training_knobs(train: dict, cfg: dict) -> dict:
    """federated_mia's knobs a trial uses, with this stage's round count."""
    return {**{k: train[k] for k in TRAINING_KEYS}, "num_rounds": int(cfg["num_rounds"])}


def study_fingerprint(cfg: dict, train: dict, spec: dict, dataset_version: str) -> str:
    """Hash of everything a trial's numbers (or the sampler's proposals) depend on; ``n_trials``, ``n_jobs``,
    ``storage`` and the heartbeat are left out, so raising the target resumes the same study."""
    keys = ("dataset", "model", "num_rounds", "search_space", "noise_seeds", "sampler", "population_size", "seed")
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16] + federated_mia.stage_code_hash()
    return config_key({**{k: cfg[k] for k in keys}, "training": {k: train[k] for k in TRAINING_KEYS},
                       "paradigm": spec, "dataset_version": dataset_version, "code_hash": code})[:12]


def trial_epsilon(trial) -> float:
    return trial.params.get("epsilon", math.inf)


def pareto_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    """All complete trials by mechanism, the front as a step line, chance levels and the chance point."""
    search.pareto_figure(
        tidy, OBJECTIVES, "mechanism", path, xlabel="record-level attack TPR at 1 % FPR (strongest attacker) ↓",
        ylabel="global model AUROC on non-members (client mean) ↑",
        title=titled(f"{summary['dataset']} {summary['model']}: DP federated learning search, "
                     f"{summary['n_trials']} trials, {summary['num_rounds']} rounds, mean of "
                     f"{summary['noise_seeds']} seeds", summary["synthetic"]),
        chance=summary["chance"], chance_point="chance (no information)",
        chance_labels={"utility_auroc": "chance AUROC (0.5)", "rla_tpr_at_fpr_0.01": "attack chance (TPR = FPR = 0.01)"})


# ---- the stage -------------------------------------------------------------------------------------------------
def run(args) -> int:
    import optuna
    from joblib import Parallel

    cfg = load_params(args.params, STAGE)
    all_training = load_params(args.training_params, "federated_mia")
    federated_mia.validate(all_training, args.training_params)
    if cfg["dataset"] not in all_training["datasets"]:
        raise ParamsError(f"{args.training_params}: federated_mia.datasets has no entry for {cfg['dataset']!r}")
    spec = all_training["datasets"][cfg["dataset"]]
    train = training_knobs(all_training, cfg)
    dataset, trials = federated_mia.load_trials(cfg["dataset"], spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    url = args.storage or cfg["storage"]
    name = args.study_name or f"study_b-{cfg['dataset']}-{cfg['model']}-{study_fingerprint(cfg, train, spec, version)}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = search.open_study(url, name, cfg, DIRECTIONS)

    def tags(**extra):
        return required_tags(study="b", stage=STAGE, dataset=cfg["dataset"], dataset_version=version,
                             synthetic=synthetic, seed=cfg["seed"], dvc_stage=STAGE, model=cfg["model"], attack="rla",
                             attacker="max(" + ",".join(train["attackers"]) + ")", split="per_subject_80_20",
                             **extra)

    def child_tags(trial):
        eps = trial_epsilon(trial)
        return tags(epsilon=f"{eps:.6g}" if math.isfinite(eps) else "inf", mechanism=trial.params["mechanism"])

    parent_params = {STAGE: {**cfg, "storage": search.public_url(url)}, "federated_mia": train, "study_name": name,
                     "epsilon_scope": federated_mia.NOTE, "synthetic": synthetic}
    child_params = {"noise_seeds": cfg["noise_seeds"], "num_rounds": cfg["num_rounds"], "sampler": cfg["sampler"]}
    with start_run(study="b", tags=tags(), params=parent_params, run_name=f"{STAGE}-{cfg['dataset']}") as parent:
        children = search.MLflowChildRuns("b", parent.info.run_id, child_tags, child_params, OBJECTIVES, REPORTED)
        with Parallel(n_jobs=min(cfg["n_jobs"], cfg["noise_seeds"])) as parallel:
            search.optimize_to_target(study, Objective(trials, cfg, train, parallel), cfg["n_trials"], [children],
                                      progress=not args.no_progress)
        head = {"dataset": cfg["dataset"], "synthetic": synthetic, "model": cfg["model"], "study_name": name,
                "objectives": dict(zip(OBJECTIVES, DIRECTIONS)), "attackers": train["attackers"],
                "num_rounds": cfg["num_rounds"], "noise_seeds": cfg["noise_seeds"],
                "n_clients": len(trials.subjects()), "epsilon_scope": federated_mia.NOTE}
        summary = search.front_summary(study, OBJECTIVES, (0.5, 1.0), CHANCE, head, REPORTED)
        for entry in summary["front"]:  # a no-DP trial has no ε or C: JSON gets null, the CSV an empty cell
            for key in PARAMS:
                entry.setdefault(key, None)
        tidy = search.trial_rows(study, OBJECTIVES, PARAMS, CHANCE, {e["trial"] for e in summary["front"]},
                                 cfg["noise_seeds"], {"study": "b", "dataset": cfg["dataset"], "model": cfg["model"]},
                                 REPORTED)
        search.write_outputs(summary, tidy, args.metrics, args.trials_csv, args.figure, pareto_figure,
                             children.logged)
    print(f"{cfg['dataset']}: study {name}: {children.logged} new trial(s), {summary['n_trials']} complete, "
          f"Pareto front {summary['front_size']}, hypervolume {summary['hypervolume']:.4f} -> {args.metrics}")
    return 0
