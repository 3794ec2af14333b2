"""Stage ``calibration`` (issue 46): every test and interval the reports print, run through the project's own
code on synthetic data sets shaped like its cohort where the answer is known (:mod:`eegprivacy.studies.calibration`),
written as ``metrics/calibration.csv``, ``reports/calibration.md`` and a figure, with one MLflow run per test."""

from __future__ import annotations

import json
import time

from eegprivacy.atomic import atomic_paths
from eegprivacy.pipeline.stage_script import add_output_flags
from eegprivacy.reporting.calibration import flagged, markdown, write_figure
from eegprivacy.studies.calibration.run import log_to_mlflow, measure, table


def add_arguments(parser) -> None:
    parser.add_argument("--size", choices=("cohort", "tiny"), default="cohort",
                        help="data sets shaped like the cohort the report uses (default), or a few subjects (a "
                             "seconds-long check)")
    add_output_flags(parser, "calibration", out="one row per test", summary="counts and flagged tests",
                     report="the table the reports cite", figure=None)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar per case")


def run(args) -> int:
    config = args.config
    start = time.perf_counter()
    measured = measure(config, size=args.size, progress=not args.no_progress)
    rows = table(measured)
    meta = {"seed": config.seed, "scale": config.scale, "size": args.size, "n_jobs": config.n_jobs,
            "seconds": time.perf_counter() - start}
    summary = {**meta, "cases": len(rows), "flagged": flagged(rows),
               "size_verdicts": rows["size_verdict"].value_counts().to_dict(),
               "coverage_verdicts": rows["coverage_verdict"].value_counts().to_dict()}
    with atomic_paths(args.out, args.summary, args.report, args.figure) as (out, js, md, png):
        rows.to_csv(out, index=False)
        js.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        md.write_text(markdown(rows, meta))
        write_figure(rows, png)
    log_to_mlflow(measured, config, [(args.out, "metrics"), (args.report, "reports"), (args.figure, "figures")])
    for _, r in rows.iterrows():
        print(f"{r['name']}: size {r['size']:.3f} [{r['size_low']:.3f}, {r['size_high']:.3f}] ({r['size_verdict']}), "
              f"coverage {r['coverage']:.3f} ({r['coverage_verdict']}), n = {int(r['n_null'])}, {r['seconds']:.0f} s")
    print(f"calibration: {len(rows)} tests -> {args.out}, {args.report} in {meta['seconds']:.0f} s; flagged: "
          f"{', '.join(summary['flagged']) or 'none'}")
    return 0
