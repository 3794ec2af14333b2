"""Stage ``table_attacks`` (study A, beyond the paper): re-identification (cross-condition, or same-session halves
for a cohort with one recording per subject) and membership inference on the released patient table, per
mechanism × ε × noise seed (:mod:`eegprivacy.studies.release.table_attacks`)."""

from __future__ import annotations

from eegprivacy.pipeline.stage_script import add_headline_flags, add_params_flags, headline_paths, read_section
from eegprivacy.pipeline.sweep import run_prefetched
from eegprivacy.privacy import NO_NOISE
from eegprivacy.reporting.table_attacks import attacks_figure, write_headline
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.table import write_rows
from eegprivacy.studies.release.table_attacks import load_attack_tables, pairing_of, summarise, sweep_plan


def add_arguments(parser) -> None:
    add_params_flags(parser, release="clip norm and δ of the release (default: %(default)s)")
    add_headline_flags(parser, "table_attacks")


def run(args) -> int:
    config, release = args.config, read_section(args.release_params, DPReleaseConfig)
    pairing = pairing_of(config, args.dataset, args.params)
    tables = load_attack_tables(args.dataset, pairing, args.features_dir)
    plan, cell_fn = sweep_plan(tables, config, release, args.stage.code_hash(), cells_dir=args.cells,
                               progress=not args.no_progress)
    frames = run_prefetched(plan, cell_fn, n_jobs=args.jobs)
    out, metrics, figure = headline_paths(args, "table_attacks")
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(tidy, n_subjects=len(tables.auxiliary))
    write_headline(summary, metrics)
    attacks_figure(summary, tables.windows.dataset, tables.windows.synthetic, figure)
    top1 = tidy[(tidy["metric"] == "top1_accuracy") & (tidy["mechanism"] == NO_NOISE)]
    K = len(tables.auxiliary)
    print(f"{args.dataset}: K={K} re-identification ({tables.kind}), N={len(tables.population)} membership; "
          f"top-1 without noise {top1['value'].mean():.3f} (chance {1 / K:.3f}) -> {out}")
    return 0
