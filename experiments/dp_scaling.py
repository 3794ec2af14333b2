"""Stage ``dp_scaling`` (study A): private (the paper) vs public-reference vs DP-quantile scaling statistics of
the release, at matched total ε, on one dataset's private cohort (see :mod:`eegprivacy.studies.release.scaling`):
every release beside its matched null, LOSO AUROC as the headline, then the summary over patients and seeds
(:mod:`eegprivacy.studies.release.scaling_summary`)."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.pipeline.stage_script import add_params_flags, dataset_entry, read_sections
from eegprivacy.studies.release.config import DPReleaseConfig, DPUtilityConfig
from eegprivacy.studies.release.scaling import predictions_dir, scaling_sweeps
from eegprivacy.studies.release.scaling_summary import summarise
from eegprivacy.studies.release.table import load_patient_table, write_rows


def add_arguments(parser) -> None:
    add_params_flags(parser, release="study A params file: each dataset's patient label and condition, clip_norm, "
                                     "delta and common_random_numbers (dp_release), the bootstrap size and "
                                     "confidence (dp_utility)")


def run(args) -> int:
    config = args.config
    # Label, clipping norm, δ and the noise streams are study A's, read where dp-release reads them, and the
    # intervals are dp-utility's (resamples, confidence), so the stages cannot drift apart.
    release, utility = read_sections(args.release_params, DPReleaseConfig, DPUtilityConfig)
    spec = dataset_entry(args, release.datasets, "dp_release.datasets", source=args.release_params,
                         why="its patient label and condition are read there")
    full = load_patient_table(args.dataset, spec.label, features_dir=args.features_dir, condition=spec.condition)
    plan, frames, cohorts = scaling_sweeps(full, config, release, spec.label, cells_dir=args.cells,
                                           progress=not args.no_progress)
    out = args.out or f"metrics/dp_scaling/dp_scaling_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(plan, predictions_dir(args.cells, args.dataset), cohorts.private.y,
                        n_resamples=utility.bootstrap, confidence=utility.confidence)
    summary = summary.assign(dataset=args.dataset, dataset_version=full.dataset_version, synthetic=full.synthetic,
                             n_public=cohorts.n_public, n_features=int(full.X.shape[1]), eps_unit="subject")
    name = Path(out).name
    summary_out = str(Path(out).with_name(name.replace("dp_scaling_", "dp_scaling_summary_", 1)
                                          if name.startswith("dp_scaling_") else f"{Path(out).stem}_summary.csv"))
    write_rows([summary], summary_out, args.stage.tolerance)
    print(f"{args.dataset}: {len(cohorts.private.X)} private / {cohorts.n_public} public patients, "
          f"{tidy['config_key'].nunique()} configs x {config.noise_seeds} seeds -> {out}; summary -> {summary_out}")
    for row in summary[(summary.arm == "horizon") & (summary.metric == "auroc_horizon_epsilon")].itertuples():
        print(f"  AUROC utility horizon of {row.mechanism} / {row.scaling_source}: "
              f"{'none' if row.value != row.value else f'total ε = {row.value:g}'}")
    return 0
