"""Stage ``dp_utility`` (study A): patient-level LOSO MLP on the original table, the same table scaled and clipped
without noise, its permuted-label control, every DP release and each release's matched null (zero-signal table,
same noise), one threshold grid for all; then the summary over patients and seeds, the release − null differences
and each mechanism's utility horizon (a fixed-sequence test from the largest ε, α/m per mechanism)."""

from __future__ import annotations

from pathlib import Path

from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.table import load_patient_table, write_rows
from eegprivacy.studies.release.utility import (
    horizon_text,
    log_summary,
    predictions_dir,
    summarise,
    utility_sweeps,
)


def summary_path(out: str, dataset: str) -> Path:
    """``dp_utility_summary_<dataset>.csv`` beside ``dp_utility_<dataset>.csv`` (what dp_aggregate reads), else
    ``<out stem>_summary.csv``."""
    out = Path(out)
    if out.name == f"dp_utility_{dataset}.csv":
        return out.with_name(f"dp_utility_summary_{dataset}.csv")
    return out.with_name(f"{out.stem}_summary.csv")


def run(args) -> int:
    release = DPReleaseConfig.load(args.params, "dp_release")
    unknown = sorted(set(args.config.mechanisms) - set(release.mechanisms))
    if unknown:
        raise SystemExit(f"{args.params}: dp_utility.mechanisms {unknown} are not in dp_release.mechanisms "
                         f"{release.mechanisms}; fix it there (nothing was computed)")
    spec = release.datasets[args.dataset]
    table = load_patient_table(args.dataset, spec.label, features_dir=args.features_dir, condition=spec.condition)
    plan, frames = utility_sweeps(table, release, args.config, spec.label, cells_dir=args.cells,
                                  progress=not args.no_progress)
    out = args.out or f"metrics/dp_utility/dp_utility_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(plan, predictions_dir(args.cells, args.dataset), table.y, n_resamples=args.config.bootstrap,
                        confidence=args.config.confidence, epsilons=release.epsilons)
    summary_out = summary_path(out, args.dataset)
    summary = summary.assign(dataset=args.dataset, dataset_version=table.dataset_version, synthetic=table.synthetic,
                             eps_unit="subject")
    write_rows([summary], summary_out, args.stage.tolerance)
    log_summary(table, summary, release, args.config, spec.label)
    print(f"{args.dataset}: utility rows for {tidy['config_key'].nunique()} configs -> {out}; summary -> {summary_out}")
    horizons = summary[summary["arm"] == "horizon"]
    for row in horizons.itertuples():
        text = horizon_text(row.value, row.horizon_tested)
        print(f"  utility horizon of {row.mechanism} ({row.metric}): {text if not text[0].isdigit() else f'ε = {text}'}"
              + (f" ({row.note})" if isinstance(row.note, str) and row.note else ""))
    if len(horizons):
        print(f"  test: {horizons['correction'].iloc[0]}; ε covers {horizons['eps_covers_note'].iloc[0]}")
    return 0
