"""Stage ``optuna_study_b`` (study B): the multi-objective Optuna search of DP federated learning
(:mod:`eegprivacy.studies.federated.search`): maximise the global model's AUROC, minimise the record-level
attack's TPR at 1 % FPR. A resumable RDB study shared by workers; the Pareto front JSON, the trials CSV and the
figure; an MLflow parent (``study-b-federated-mia``) per invocation with one child per trial."""

from __future__ import annotations

import math

from eegprivacy.pipeline import search
from eegprivacy.reporting.federated import pareto_figure
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.mia import NOTE, load_trials
from eegprivacy.studies.federated.search import (
    DIRECTIONS,
    OBJECTIVES,
    REPORTED,
    Objective,
    front_and_trials,
    study_fingerprint,
    training_config,
    training_knobs,
    trial_epsilon,
)
from eegprivacy.tracking import required_tags, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--training-params", default="params/federated_mia.yaml",
                        help="federated_mia's params: the datasets and every training/attack knob not searched")
    parser.add_argument("--storage", help="SQLAlchemy URL of the study database (default: params' storage); give "
                                          "every worker the same URL to share one study")
    parser.add_argument("--study-name", help="study name (default: derived from the config, so a changed config "
                                             "starts a new study instead of mixing incomparable trials)")
    parser.add_argument("--metrics", default="metrics/optuna_study_b.json", help="Pareto front JSON")
    parser.add_argument("--trials-csv", default="metrics/optuna_study_b_trials.csv", help="tidy table of all trials")
    parser.add_argument("--figure", default="reports/figures/optuna_pareto_study_b.png", help="Pareto figure")


def run(args) -> int:
    import optuna
    from joblib import Parallel

    cfg, stage = args.config, args.stage.name
    training = FederatedMIAConfig.load(args.training_params, "federated_mia")
    spec = training.dataset_spec(cfg.dataset, args.training_params)
    train = training_config(training, cfg)
    dataset, trials = load_trials(cfg.dataset, spec)
    version, synthetic = dataset.version(), bool(trials.synthetic)
    url = args.storage or cfg.storage
    fingerprint = study_fingerprint(cfg, train, spec, version, args.stage.code_hash())
    name = args.study_name or f"study_b-{cfg.dataset}-{cfg.model}-{fingerprint}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = search.open_study(url, name, cfg.to_dict(), DIRECTIONS)

    def tags(**extra):
        return required_tags(study="b", stage=stage, dataset=cfg.dataset, dataset_version=version,
                             synthetic=synthetic, seed=cfg.seed, dvc_stage=stage, model=cfg.model, attack="rla",
                             attacker="max(" + ",".join(train.attackers) + ")", split="per_subject_80_20", **extra)

    def child_tags(trial):
        eps = trial_epsilon(trial)
        return tags(epsilon=f"{eps:.6g}" if math.isfinite(eps) else "inf", mechanism=trial.params["mechanism"])

    parent_params = {stage: {**cfg.to_dict(), "storage": search.public_url(url)}, "federated_mia": training_knobs(train),
                     "study_name": name, "epsilon_scope": NOTE, "synthetic": synthetic}
    child_params = {"noise_seeds": cfg.noise_seeds, "num_rounds": cfg.num_rounds, "sampler": cfg.sampler}
    with start_run(study="b", tags=tags(), params=parent_params, run_name=f"{stage}-{cfg.dataset}") as parent:
        children = search.MLflowChildRuns("b", parent.info.run_id, child_tags, child_params, OBJECTIVES, REPORTED)
        with Parallel(n_jobs=min(cfg.n_jobs, cfg.noise_seeds)) as parallel:
            search.optimize_to_target(study, Objective(trials, cfg, train, parallel), cfg.n_trials, [children],
                                      progress=not args.no_progress)
        summary, tidy = front_and_trials(study, cfg, train, synthetic, len(trials.subjects()))
        search.write_outputs(summary, tidy, args.metrics, args.trials_csv, args.figure, pareto_figure,
                             children.logged)
    print(f"{cfg.dataset}: study {name}: {children.logged} new trial(s), {summary['n_trials']} complete, "
          f"Pareto front {summary['front_size']}, hypervolume {summary['hypervolume']:.4f} -> {args.metrics}")
    return 0
