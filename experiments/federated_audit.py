"""Stage ``federated_audit`` (study B): the one-run canary audit of every DP setting of study B (the paper's
per-step Laplace grid and record-level DP-SGD at a total per-record ε), and DP-SGD's utility and attack − control
(:mod:`eegprivacy.studies.federated.audit`). Per setting one MLflow parent with a child per seed; the audit rows
(empirical ε beside certified ε) go to ``metrics/federated_audit.csv``, the DP-SGD rows to
``metrics/federated_audit_dpsgd.csv``, both to ``reports/federated_audit.md`` and a summary run."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.profile import profile_name
from eegprivacy.pipeline.stage_script import (add_jobs_flag, add_output_flags, add_params_flags, cell_base,
                                              dataset_section, drop_cells_without_arrays, log_run, output_paths,
                                              read_section, stage_tags, sweep_runner, workers_help, write_csv)
from eegprivacy.pipeline.sweep import expand_grid, iter_prefetched
from eegprivacy.reporting.federated_audit import draw, metrics_of, report_md
from eegprivacy.studies.federated.audit import (audit_cell_rows, audit_summary, certified_epsilons, dp_sgd_steps,
                                                settings)
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.studies.federated.control import FederatedControlConfig, summarise
from eegprivacy.studies.federated.mia import versioned_trials


def add_arguments(parser) -> None:
    add_params_flags(parser, training="federated_mia's params: the dataset's spec and every training knob",
                     control="federated_control's params: calibration block, control folds, attackers")
    add_output_flags(parser, "federated_audit", out="audit rows: empirical ε beside certified ε",
                     dpsgd=("metrics/federated_audit_dpsgd.csv", "DP-SGD's utility and attack − control rows"),
                     report="markdown tables", figure="empirical vs certified ε figure")
    add_jobs_flag(parser, workers_help())


def run(args) -> int:
    config, stage = args.config, args.stage.name
    training, spec = dataset_section(FederatedMIAConfig, args.training_params, config.dataset)
    control = read_section(args.control_params, FederatedControlConfig)
    trials, version, synthetic = versioned_trials(config.dataset, spec)
    label = "SYNTHETIC " if synthetic else ""
    audit_knobs = {key: getattr(config, key) for key in ("canaries_per_client", "canary_radius", "guesses",
                                                         "confidence", "delta")}
    base = cell_base(args, version, **audit_knobs, test_size=training.test_size, split_seed=training.split_seed,
                     csp_components=training.csp_components, clients_per_round=training.clients_per_round,
                     learning_rate=training.learning_rate, calibration_fraction=control.calibration_fraction,
                     control_folds=control.control_folds, attackers=",".join(control.attackers))
    tags_of = stage_tags(study="b", stage=stage, dataset=config.dataset, dataset_version=version, synthetic=synthetic,
                         dvc_stage=stage, split="per_subject_60_20_20", model="simplenet")
    n_clients = len(trials.subjects())
    plan = []
    for setting in settings(config, training):
        eps, protocol = float(setting["epsilon"]), setting["protocol"]
        cells = expand_grid({k: [v] for k, v in setting.items()}, seeds=range(config.seeds), base=base)
        tags = functools.partial(tags_of, epsilon=f"{eps:g}", mechanism=setting["mechanism"],
                                 preprocessing=setting["preprocessing"], delta=f"{config.delta:g}")
        name = f"{stage}-{config.dataset}-{protocol}-eps{eps:g}"
        params = {**audit_knobs, **setting, "seeds": config.seeds, "epsilon_unit": setting["epsilon_unit"],
                  "canaries": config.canaries_per_client * n_clients, "privacy_unit": "example"}
        runner = sweep_runner(args, name, Path(stage, config.dataset, name), study="b", dataset=config.dataset,
                              tags=tags, params={"federated_audit": params, "synthetic": synthetic})
        plan.append((setting, runner, cells))
    arrays_dir = Path(args.cells) / stage / config.dataset / "arrays"
    sweeps = [(runner, cells) for _, runner, cells in plan]
    drop_cells_without_arrays(sweeps, arrays_dir)
    compute = functools.partial(audit_cell_rows, trials=trials, training=training, control=control, config=config,
                                arrays_dir=arrays_dir)
    done = []
    for runner, cells, _ in iter_prefetched(sweeps, compute, n_jobs=args.jobs,
                                            cost=lambda c, s: c["num_rounds"] * c["local_epochs"]):
        for cell in cells:
            with np.load(arrays_dir / f"{cell.key}.npz") as data:
                done.append((cell.config, cell.seed, {k: data[k] for k in data.files}))
        print(f"{label}{config.dataset}: {runner.name} done")

    certified = {(s["protocol"], float(s["epsilon"])): certificate(s, config, training, control, trials)
                 for s, _, _ in plan}
    audit = audit_summary(done, config, certified).assign(dataset=config.dataset, dataset_version=version,
                                                          synthetic=synthetic)
    dp_cells = [(c, s, a) for c, s, a in done if c["protocol"] == "dp_sgd"]
    dpsgd = summarise(dp_cells, n_clients, config.bootstrap, control.confidence)
    dpsgd = dpsgd.merge(audit[audit["protocol"].eq("dp_sgd")][["epsilon", "noise_multiplier", "empirical_epsilon",
                                                                 "certified_epsilon_rdp", "certified_epsilon_pld"]],
                        on="epsilon", how="left").assign(dataset=config.dataset, dataset_version=version,
                                                         synthetic=synthetic)
    meta = {"dataset": config.dataset, "dataset_version": version, "synthetic": synthetic, "profile": profile_name(),
            "n_subjects": n_clients, "seeds": config.seeds, **audit_knobs,
            "canaries_per_run": config.canaries_per_client * n_clients, "dp_sgd_steps": dp_sgd_steps(config),
            "dp_sgd_sample_rate": config.dp_sgd_sample_rate, "dp_sgd_local_epochs": config.dp_sgd_local_epochs,
            "dp_sgd_num_rounds": config.dp_sgd_num_rounds, "dp_sgd_clip_norm": config.dp_sgd_clip_norm,
            "dp_sgd_learning_rate": config.dp_sgd_learning_rate,
            "paper_rounds": training.num_rounds, "paper_local_epochs": training.local_epochs,
            "clients_per_round": training.clients_per_round, "bootstrap": config.bootstrap}
    out, dp_out, md, fig_path = output_paths(args.out, args.dpsgd, args.report, args.figure)
    write_csv(audit, out)
    write_csv(dpsgd, dp_out)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2))
    draw(audit, dpsgd, fig)
    with atomic_path(fig_path) as tmp:
        fig.savefig(tmp, dpi=120)
    write_text_atomic(md, report_md(audit, dpsgd, meta))
    tags = tags_of(None, epsilon="various", mechanism="laplace_gradient,gaussian_example",
                   preprocessing=f"{config.paper_preprocessing},{config.dp_sgd_preprocessing}",
                   delta=f"{config.delta:g}")
    log_run("b", tags, f"{stage}-{config.dataset}-summary",
            params={"federated_audit": {**audit_knobs, "seeds": config.seeds, "profile": meta["profile"],
                                        "canaries": meta["canaries_per_run"], "privacy_unit": "example"},
                    "synthetic": synthetic},
            metrics=metrics_of(audit, dpsgd), artifacts=(out, dp_out, md, fig_path), folder="report")
    worst = audit["empirical_over_certified"].max()
    print(f"{label}{config.dataset}: {len(audit)} audited settings -> {out} (largest empirical/certified ε "
          f"{worst:.3g}; {int(audit['exceeds_certified'].sum())} exceed); {len(dpsgd)} DP-SGD rows -> {dp_out}; {md}")
    return 0


def certificate(setting: dict, config, training, control, trials) -> dict:
    """The certified per-record ε (RDP, PLD) of one setting's training, for the model on its preprocessing's
    input and a client's mean member count."""
    from eegprivacy.federated.preprocessing import PREPROCESSING
    from eegprivacy.signal.csp import MODEL_INPUT
    from eegprivacy.studies.federated.control import _dim

    labels = trials.metadata["subject"].to_numpy()
    n_members = int(round(np.mean([(labels == s).sum() for s in trials.subjects()])
                          * (1 - training.test_size - control.calibration_fraction)))
    size = PREPROCESSING[setting["preprocessing"]].n_features(MODEL_INPUT["simplenet"], training.csp_components)
    return certified_epsilons(setting, delta=config.delta, dim=_dim("simplenet", (size,)),
                              n_members=max(n_members, 1), batch_size=training.batch_size,
                              clip_norm=training.clip_norm, steps=dp_sgd_steps(config))
