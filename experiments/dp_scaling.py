"""Stage ``dp_scaling`` (study A): private (the paper) vs public-reference vs DP-quantile scaling statistics of
the release, at matched total ε, on one dataset's private cohort (see :mod:`eegprivacy.studies.release.scaling`)."""

from __future__ import annotations

from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.scaling import scaling_sweeps
from eegprivacy.studies.release.table import load_patient_table, write_rows


def add_arguments(parser) -> None:
    parser.add_argument("--release-params", default="params/dp_release.yaml",
                        help="study A params file: each dataset's patient label, clip_norm and delta")


def run(args) -> int:
    config = args.config
    # Label, clipping norm and δ are study A's, read where dp-release reads them so the two stages cannot drift.
    release = DPReleaseConfig.load(args.release_params, "dp_release")
    if args.dataset not in config.datasets:
        raise KeyError(f"{args.dataset!r} is not in dp_scaling.datasets {config.datasets}")
    label = release.datasets[args.dataset].label
    full = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    frames, cohorts = scaling_sweeps(full, config, release, label, cells_dir=args.cells,
                                     progress=not args.no_progress)
    out = args.out or f"metrics/dp_scaling_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    print(f"{args.dataset}: {len(cohorts.private.X)} private / {cohorts.n_public} public patients, "
          f"{tidy['config_key'].nunique()} configs x {config.noise_seeds} seeds -> {out}")
    return 0
