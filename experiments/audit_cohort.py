"""Stage ``audit-cohort`` (study A on your own cohort): a thin entry point to :mod:`eegprivacy.studies.cohort_audit`."""

from __future__ import annotations

import os
import sys

from eegprivacy.data import get_dataset

EPILOG = """
Outputs go to --out (default reports/cohort_audit/<dataset>-<version[:8]>/): rows.csv (one row per metric: value,
ci_low, ci_high, ci_over, n, n_seeds, chance, eps_unit, key = its MLflow metric name, and the utility summary's
test columns: p_value, p_mc_error, alpha_tested, p_adjusted, keeps_utility, correction, eps_covers...),
summary.json, two figures and report.html (mne.Report), all free of subject ids. --cache (default data/cache/cohort_audit/...) holds the
feature table and every finished cell: a rerun computes only what is missing. Numbers depend on the recordings,
labels and seeds only (patients are put in a canonical order by their feature vectors), not on subject ids, file
paths or the dataset's name.
ε is per patient (one released vector per patient); labels travel in the clear. The utility part is study A's
dp_utility protocol and summary (baseline, scaled+clipped table without noise, permuted-label control, release and
matched null; per mechanism a fixed-sequence horizon test from the largest ε down at α/m): the same test the
dp_utility stage prints. Default mechanisms are the formally calibrated ones; the paper's laplace_implemented (no
formal guarantee for d > 1) runs only when named, and is flagged so in the report.
"""


def _mapping(items: list[str] | None, what: str) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: {what} {item!r} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def add_arguments(parser) -> None:
    from eegprivacy.studies.cohort_audit import AuditConfig

    d = AuditConfig()
    parser.epilog = EPILOG
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--bids", metavar="PATH", help="BIDS root of your cohort (patient = BIDS subject)")
    source.add_argument("--dataset", metavar="NAME", help="a registered dataset instead (e.g. msu_schizophrenia)")
    parser.add_argument("--label", metavar="COLUMN", help="with --bids: participants.tsv column holding the patient "
                        "label (0/1, or mapped with --label-map)")
    parser.add_argument("--label-map", nargs="*", metavar="VALUE=0|1", help="with --bids: map label values to 0/1, "
                        "e.g. --label-map SCZ=1 HC=0")
    parser.add_argument("--task", help="with --bids: only recordings of this BIDS task")
    parser.add_argument("--dataset-arg", nargs="*", metavar="KEY=VALUE", help="with --dataset: constructor "
                        "arguments, e.g. folder=/path for clinical_folder")
    parser.add_argument("--epsilons", nargs="+", type=float, default=list(d.epsilons), metavar="EPS",
                        help="ε grid, per patient "
                        f"(default: {' '.join(f'{e:g}' for e in d.epsilons)})")
    parser.add_argument("--mechanisms", nargs="+", default=list(d.mechanisms), metavar="NAME",
                        help=f"mechanisms (privacy.mechanisms.MECHANISMS; default: {' '.join(d.mechanisms)}, the "
                        "formally calibrated ones; the paper's laplace_implemented has no formal guarantee for d > 1 "
                        "and is flagged so)")
    parser.add_argument("--noise-seeds", type=int, default=d.noise_seeds, help="noise draws (and MLP seeds) per "
                        f"(mechanism, ε) (default {d.noise_seeds})")
    parser.add_argument("--baseline-seeds", type=int, default=d.baseline_seeds,
                        help="MLP seeds of the baseline and of the scaled+clipped table without noise (default "
                        f"{d.baseline_seeds})")
    parser.add_argument("--permutations", type=int, default=d.permutations,
                        help=f"label permutations of the permuted-label control, each its own seed "
                        f"(default {d.permutations})")
    parser.add_argument("--nested-seeds", type=int, default=d.nested_seeds, help="first seeds of each cell that "
                        "also run the nested threshold protocol for balanced accuracy (fewer than 2: no "
                        f"balanced-accuracy horizon is tested; default {d.nested_seeds})")
    parser.add_argument("--inner-folds", type=int, default=d.inner_folds,
                        help=f"inner k-fold of the nested threshold protocol (default {d.inner_folds})")
    parser.add_argument("--clip-norm", type=float, default=d.clip_norm, help=f"L2 clip C (default {d.clip_norm})")
    parser.add_argument("--delta", type=float, default=d.delta, help=f"δ of the Gaussian mechanisms ({d.delta:g})")
    parser.add_argument("--bootstrap", type=int, default=d.bootstrap, help="patient-level bootstrap resamples of "
                        f"every interval and p-value (default {d.bootstrap})")
    parser.add_argument("--confidence", type=float, default=d.confidence, help="interval level; α = 1 − confidence "
                        f"is the horizon test's, split over the mechanisms (default {d.confidence:g})")
    parser.add_argument("--membership-trials", type=int, default=d.membership_trials,
                        help=f"releases of a random half of the cohort per membership cell ({d.membership_trials})")
    parser.add_argument("--min-patients", type=int, default=d.min_patients,
                        help=f"refuse cohorts with fewer patients (default {d.min_patients})")
    parser.add_argument("--no-split-halves", action="store_true", help="with one recording per subject, skip the "
                        "same-session re-identification (first half released, second half known to the attacker)")
    parser.add_argument("--features-params", default=d.features_params, help="feature pipeline params")
    parser.add_argument("--out", help="output folder (default reports/cohort_audit/<dataset>-<version[:8]>)")
    parser.add_argument("--cache", help="feature table and finished cells, for resuming (default "
                        "data/cache/cohort_audit/<dataset>-<version[:8]>; it holds subject ids: keep it private)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (numbers do not depend on it)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args) -> int:
    from eegprivacy.data import ChecksumMismatchError
    from eegprivacy.data.bids import BIDSLabelError, RecordingReadError
    from eegprivacy.studies.cohort_audit import AuditConfig, CohortError, run_audit

    try:
        config = AuditConfig(mechanisms=tuple(args.mechanisms), epsilons=tuple(args.epsilons),
                             noise_seeds=args.noise_seeds, baseline_seeds=args.baseline_seeds,
                             permutations=args.permutations, nested_seeds=args.nested_seeds,
                             inner_folds=args.inner_folds, clip_norm=args.clip_norm,
                             delta=args.delta, bootstrap=args.bootstrap, confidence=args.confidence,
                             membership_trials=args.membership_trials,
                             min_patients=args.min_patients, split_halves=not args.no_split_halves,
                             features_params=args.features_params)
    except ValueError as err:  # a knob out of range (e.g. ε <= 0, an unknown mechanism): before any data is read
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.bids:
            if not args.label:
                raise CohortError("--bids needs --label COLUMN (the participants.tsv column with the patient label)")
            kwargs = {"root": args.bids, "label": args.label, "task": args.task}
            if args.label_map:
                kwargs["label_map"] = {k: int(v) for k, v in _mapping(args.label_map, "--label-map").items()}
            dataset = get_dataset("bids", **kwargs)
        else:
            dataset = get_dataset(args.dataset, **_mapping(args.dataset_arg, "--dataset-arg"))
        result = run_audit(dataset, config, args.out, cache_dir=args.cache, progress=not args.no_progress,
                           n_jobs=args.jobs)
    except (CohortError, KeyError, FileNotFoundError, BIDSLabelError, RecordingReadError,
            ChecksumMismatchError) as err:  # bad input: one line naming the file, column or value; no traceback
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
    s, counts = result.summary, result.counts
    base = s["baseline"]["auroc"]
    print(f"{s['dataset']}: {s['cohort']['n_patients']} patients; baseline AUROC {base['value']:.3f} "
          f"[{base['ci_low']:.3f}, {base['ci_high']:.3f}]; horizons {s['horizons']} ({s['horizon_test']}; "
          f"ε covers {s['eps_covers']}); "
          f"{counts['cells_computed']} cells computed, {counts['cells_resumed']} resumed -> {result.paths['report']}")
    return 0
