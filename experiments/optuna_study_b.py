"""Stage ``optuna_study_b`` (study B): the multi-objective Optuna search of DP federated learning
(:mod:`eegprivacy.studies.federated.search`): maximise the global model's AUROC, minimise the record-level
attack's TPR at 1 % FPR. A resumable RDB study shared by workers; the Pareto front JSON, the trials CSV and the
figure; an MLflow parent (``study-b-federated-mia``) per invocation with one child per trial."""

from __future__ import annotations

import math

from eegprivacy.pipeline import search
from eegprivacy.pipeline.stage_script import add_params_flags, read_section, stage_tags
from eegprivacy.reporting.federated import pareto_figure
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.mia import NOTE, versioned_trials
from eegprivacy.studies.federated.search import DIRECTIONS, OBJECTIVES, REPORTED, Objective, front_and_trials
from eegprivacy.studies.federated.search import study_fingerprint, training_config, training_knobs, trial_epsilon
from eegprivacy.tracking import start_run


def add_arguments(parser) -> None:
    add_params_flags(parser,
                     training="federated_mia's params: the datasets and every training/attack knob not searched")
    search.add_search_flags(parser, "study_b")


def run(args) -> int:
    import optuna
    from joblib import Parallel

    cfg, stage = args.config, args.stage.name
    training = read_section(args.training_params, FederatedMIAConfig)
    spec = training.dataset_spec(cfg.dataset, args.training_params)
    train = training_config(training, cfg)
    trials, version, synthetic = versioned_trials(cfg.dataset, spec)
    url = args.storage or cfg.storage
    fingerprint = study_fingerprint(cfg, train, spec, version, args.stage.code_hash())
    name = args.study_name or f"study_b-{cfg.dataset}-{cfg.model}-{fingerprint}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = search.open_study(url, name, cfg.to_dict(), DIRECTIONS)

    tags = stage_tags(study="b", stage=stage, dataset=cfg.dataset, dataset_version=version, synthetic=synthetic,
                      dvc_stage=stage, model=cfg.model, attack="rla",
                      attacker="max(" + ",".join(train.attackers) + ")", split="per_subject_80_20")

    def child_tags(trial):
        eps = trial_epsilon(trial)
        return tags(cfg.seed, epsilon=f"{eps:.6g}" if math.isfinite(eps) else "inf",
                    mechanism=trial.params["mechanism"])

    parent_params = {stage: {**cfg.to_dict(), "storage": search.public_url(url)},
                     "federated_mia": training_knobs(train), "study_name": name, "epsilon_scope": NOTE,
                     "synthetic": synthetic}
    child_params = {"noise_seeds": cfg.noise_seeds, "num_rounds": cfg.num_rounds, "sampler": cfg.sampler}
    with start_run(study="b", tags=tags(cfg.seed), params=parent_params, run_name=f"{stage}-{cfg.dataset}") as parent:
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
