"""Stage ``table_attacks`` (study A, beyond the paper): re-identification (cross-condition, or same-session halves
for a cohort with one recording per subject) and membership inference on the released patient table, per
mechanism × ε × noise seed (:mod:`eegprivacy.studies.release.table_attacks`)."""

from __future__ import annotations

import os

from eegprivacy.pipeline.sweep import run_prefetched
from eegprivacy.privacy import NO_NOISE
from eegprivacy.reporting.table_attacks import attacks_figure, write_headline
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.table import write_rows
from eegprivacy.studies.release.table_attacks import load_attack_tables, pairing_of, summarise, sweep_plan


def add_arguments(parser) -> None:
    parser.add_argument("--release-params", default="params/dp_release.yaml",
                        help="clip norm and δ of the release (default: %(default)s)")
    parser.add_argument("--metrics", help="headline JSON (default metrics/table_attacks_<dataset>.json)")
    parser.add_argument("--figure", help="figure (default reports/figures/table_attacks_<dataset>.png)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")


def run(args) -> int:
    config = args.config
    release = DPReleaseConfig.load(args.release_params, "dp_release")
    pairing = pairing_of(config, args.dataset, args.params)
    tables = load_attack_tables(args.dataset, pairing, args.features_dir)
    plan, cell_fn = sweep_plan(tables, config, release, args.stage.code_hash(), cells_dir=args.cells,
                               progress=not args.no_progress)
    frames = run_prefetched(plan, cell_fn, n_jobs=args.jobs)
    out = args.out or f"metrics/table_attacks_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(tidy, n_subjects=len(tables.auxiliary))
    write_headline(summary, args.metrics or f"metrics/table_attacks_{args.dataset}.json")
    attacks_figure(summary, tables.windows.dataset, tables.windows.synthetic,
                   args.figure or f"reports/figures/table_attacks_{args.dataset}.png")
    top1 = tidy[(tidy["metric"] == "top1_accuracy") & (tidy["mechanism"] == NO_NOISE)]
    K = len(tables.auxiliary)
    print(f"{args.dataset}: K={K} re-identification ({tables.kind}), N={len(tables.population)} membership; "
          f"top-1 without noise {top1['value'].mean():.3f} (chance {1 / K:.3f}) -> {out}")
    return 0
