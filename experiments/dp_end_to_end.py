"""Stage ``dp_end_to_end`` (study A): release designs that are private end to end (public-data projections,
DP-PCA, DP synthetic patients, and the paper's mechanism with public scaling as the reference row), each release
beside its matched null, LOSO AUROC over the private patients only, then the summary with a fixed-sequence
horizon per design (see :mod:`eegprivacy.studies.release.end_to_end`)."""

from __future__ import annotations

import math
from pathlib import Path

from eegprivacy.pipeline.stage_script import add_params_flags, dataset_entry, read_section, read_sections
from eegprivacy.studies.release.config import DPReleaseConfig, DPScalingConfig, DPUtilityConfig
from eegprivacy.studies.release.end_to_end import end_to_end_sweeps, log_summary, predictions_dir, summarise
from eegprivacy.studies.release.table import load_patient_table, write_rows


def add_arguments(parser) -> None:
    add_params_flags(parser, release="study A params file: each dataset's patient label and condition, clip_norm and "
                                     "delta (dp_release), the bootstrap size and confidence (dp_utility)",
                     scaling="the public/private split (dp_scaling.public_fraction, split_seed), shared with "
                             "dp-scaling so both stages hold out the same public patients")


def run(args) -> int:
    config, scaling = args.config, read_section(args.scaling_params, DPScalingConfig)
    release, utility = read_sections(args.release_params, DPReleaseConfig, DPUtilityConfig)
    spec = dataset_entry(args, release.datasets, "dp_release.datasets", source=args.release_params,
                         why="its patient label and condition are read there")
    full = load_patient_table(args.dataset, spec.label, features_dir=args.features_dir, condition=spec.condition)
    plan, frames, cohorts = end_to_end_sweeps(full, config, release, spec.label,
                                              public_fraction=scaling.public_fraction, split_seed=scaling.split_seed,
                                              cells_dir=args.cells, progress=not args.no_progress)
    out = args.out or f"metrics/dp_end_to_end_{args.dataset}.csv"
    write_rows(frames, out, args.stage.tolerance)
    summary = summarise(plan, predictions_dir(args.cells, args.dataset), cohorts.private.y,
                        n_resamples=utility.bootstrap, confidence=utility.confidence, headline=config.mechanisms,
                        power=config.power, mc_error_fraction=config.mc_error_fraction)
    summary = summary.assign(dataset=args.dataset, dataset_version=full.dataset_version, synthetic=full.synthetic,
                             n_public=len(cohorts.y_public), n_features=int(full.X.shape[1]), eps_unit="subject",
                             delta=float(release.delta), clip_norm=float(release.clip_norm))
    summary_out = str(Path(out).with_name(Path(out).stem.replace("dp_end_to_end_", "dp_end_to_end_summary_", 1)
                                          if "dp_end_to_end_" in Path(out).stem else f"{Path(out).stem}_summary")
                      ) + ".csv"
    write_rows([summary], summary_out, args.stage.tolerance)
    log_summary(cohorts.private, summary, config, spec.label)
    print(f"{args.dataset}: {len(cohorts.private.X)} private / {len(cohorts.y_public)} public patients -> {out}; "
          f"summary -> {summary_out}")
    for row in summary[summary.arm == "horizon"].itertuples():
        print(f"  {row.mechanism} (k = {row.n_components}): AUROC horizon "
              f"{'none' if not math.isfinite(row.value) else f'ε = {row.value:g} per patient'}")
    return 0
