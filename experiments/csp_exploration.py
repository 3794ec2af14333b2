"""Stage ``csp_exploration`` (study B): what the federated models are fed, before any training — the PCA of
every client's CSP features and the top-10 feature-label correlations
(:mod:`eegprivacy.studies.federated.exploration`), for one dataset under ``params/federated_mia.yaml``."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.atomic import atomic_path
from eegprivacy.reporting.federated import csp_pca_figure, save_png
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.exploration import TOP, explore
from eegprivacy.studies.federated.mia import load_trials
from eegprivacy.tracking import required_tags
from eegprivacy.tracking.runs import log_artifact, log_metrics, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--params", default="params/federated_mia.yaml",
                        help="federated_mia's params: the dataset's spec, the split and the CSP components")
    parser.add_argument("--correlations", help="default metrics/csp_correlations_<dataset>.csv")
    parser.add_argument("--figure", help="default reports/figures/csp_pca_<dataset>.png")


def run(args) -> int:
    config = FederatedMIAConfig.load(args.params, "federated_mia")
    spec = config.dataset_spec(args.dataset, args.params)
    dataset, trials = load_trials(args.dataset, spec)
    found = explore(trials, config, args.dataset)
    table = found.table
    figure = Path(args.figure or f"reports/figures/csp_pca_{args.dataset}.png")
    out = Path(args.correlations or f"metrics/csp_correlations_{args.dataset}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(csp_pca_figure(found.projections, found.explained,
                            f"{args.dataset}: per-client CSP log-variance, PCA on members\n"
                            f"({found.n_clients} clients, each with its own CSP)", trials.synthetic), figure)
    with atomic_path(out) as tmp:
        table.head(TOP).to_csv(tmp, index=False)
    tags = required_tags(study="b", stage=args.stage.name, dataset=args.dataset, dataset_version=dataset.version(),
                         synthetic=bool(trials.synthetic), seed=config.split_seed,
                         dvc_stage=f"{args.stage.name}@{args.dataset}", split="per_subject_80_20")
    run_params = {"csp_components": config.csp_components, "test_size": config.test_size,
                  "split_seed": config.split_seed, "paradigm": spec.paradigm_text()}
    with start_run(study="b", tags=tags, params=run_params, run_name=f"csp-exploration-{args.dataset}"):
        log_metrics({"pca_explained_variance_1": float(found.explained[0]),
                     "pca_explained_variance_2": float(found.explained[1]),
                     "n_member_trials": float(found.n_member_trials), "n_clients": float(found.n_clients),
                     "top_abs_r": float(table["abs_r"].iloc[0])})
        log_artifact(out)
        log_artifact(figure, "figures")
    top = table.iloc[0]
    print(f"{args.dataset}: {found.n_member_trials} member trials, {found.n_clients} clients; strongest feature "
          f"{top['feature']} (r = {top['r']:.2f}) -> {out}, {figure}")
    return 0
