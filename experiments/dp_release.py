"""Stage ``dp_release`` (study A): DP releases of the patient feature table over ε × mechanism × noise seeds,
scored by intrinsic utility (RMSE, MAE, correlation, SNR) against the mechanism's input."""

from __future__ import annotations

from eegprivacy.studies.release.intrinsic import release_sweeps
from eegprivacy.studies.release.table import load_patient_table, write_rows


def run(args) -> int:
    config = args.config
    spec = config.datasets[args.dataset]
    label = spec.label
    table = load_patient_table(args.dataset, label, features_dir=args.features_dir, condition=spec.condition)
    frames = release_sweeps(table, config, label, cells_dir=args.cells, progress=not args.no_progress)
    out = args.out or f"metrics/dp_release/dp_release_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    print(f"{args.dataset}: {tidy['config_key'].nunique()} configs x {config.noise_seeds} seeds -> {out}")
    return 0
