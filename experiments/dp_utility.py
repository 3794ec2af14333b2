"""Stage ``dp_utility`` (study A): patient-level LOSO MLP on the original table, a permuted-label control and
every DP release, with the paper's optimistic and the honest nested threshold protocols."""

from __future__ import annotations

from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.table import load_patient_table, write_rows
from eegprivacy.studies.release.utility import utility_sweeps


def run(args) -> int:
    release = DPReleaseConfig.load(args.params, "dp_release")
    label = release.datasets[args.dataset].label
    table = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    frames = utility_sweeps(table, release, args.config, label, cells_dir=args.cells, progress=not args.no_progress)
    out = args.out or f"metrics/dp_utility_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    print(f"{args.dataset}: utility rows for {tidy['config_key'].nunique()} configs -> {out}")
    return 0
