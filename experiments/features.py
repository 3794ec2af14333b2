"""Stage ``features``: preprocess (band-pass, notch, average reference), cut windows and compute the 11 window
features per channel of one dataset; write the parquet table, metrics JSON and a figure; log an MLflow run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from eegprivacy.atomic import atomic_paths
from eegprivacy.data import get_dataset
from eegprivacy.reporting.figures import band_power_by_condition
from eegprivacy.signal.table import (
    INDEX_COLUMNS,
    dataset_window_features,
    is_current,
    read_feature_table,
    write_feature_table,
)
from eegprivacy.tracking import log_artifact, log_metrics, required_tags, start_run


def add_arguments(parser) -> None:
    parser.add_argument("--out", help="parquet path (default data/features/<dataset>.parquet)")
    parser.add_argument("--metrics", help="metrics JSON (default metrics/features_<dataset>.json)")
    parser.add_argument("--figure", help="figure PNG (default reports/figures/features_<dataset>.png)")
    parser.add_argument("--force", action="store_true", help="recompute even if a current table exists")


def run(args) -> int:
    dataset_kwargs = args.config.dataset_kwargs(args.dataset)
    config = args.config.pipeline(args.dataset)  # the shared blocks with the dataset's own overrides
    out = Path(args.out or f"data/features/{args.dataset}.parquet")
    metrics_path = Path(args.metrics or f"metrics/features_{args.dataset}.json")
    figure_path = Path(args.figure or f"reports/figures/features_{args.dataset}.png")

    dataset = get_dataset(args.dataset, **dataset_kwargs)
    version = dataset.version()
    started = time.perf_counter()
    reused = is_current(out, version, config) and not args.force
    if reused:
        table = read_feature_table(out, dataset_version=version, config=config)
    else:
        table = dataset_window_features(dataset, config, progress=not args.no_progress)
    seconds = time.perf_counter() - started

    feature_cols = [c for c in table.columns if c not in INDEX_COLUMNS]
    values = table[feature_cols].to_numpy()
    flags = sorted({f for cell in table["flags"] for f in str(cell).split(";") if f})
    n_recordings = int(table.groupby(["subject", "recording"]).ngroups)
    metrics = {
        "n_subjects": int(table["subject"].nunique()),
        "n_recordings": n_recordings,
        "n_recordings_skipped": len(dataset.recordings()) - n_recordings,  # too short for filter + one window
        "n_windows": int(len(table)),
        "n_feature_columns": len(feature_cols),
        "n_channels": len(feature_cols) // len(config.features.feature_names),
        "n_nonfinite": int((~np.isfinite(values)).sum()),
        "all_finite": bool(np.isfinite(values).all()),
    }
    # Run facts that differ between two runs on the same data: MLflow only, so the metrics JSON is reproducible.
    run_metrics = {"extraction_seconds": round(seconds, 2), "reused_cached_table": reused}
    bands = [name for name, _ in config.features.bands]
    fig = band_power_by_condition(table, bands, f"{dataset.name}: band power per recording by condition",
                                  dataset.synthetic)
    summary = {"dataset": dataset.name, "dataset_version": version, "synthetic": dataset.synthetic, "flags": flags,
               "sfreqs": sorted(float(f) for f in table["sfreq"].unique()), **metrics}
    # All outputs or none: a failure before they are all written leaves the previous ones untouched.
    with atomic_paths(metrics_path, figure_path, *([] if reused else [out])) as (tmp_metrics, tmp_figure, *tmp_out):
        if tmp_out:
            write_feature_table(table, tmp_out[0], dataset_version=version, config=config,
                                synthetic=dataset.synthetic)
        tmp_metrics.write_text(json.dumps(summary, indent=2) + "\n")
        fig.savefig(tmp_figure, dpi=110)

    seed = dataset_kwargs.get("seed") if dataset.synthetic else None
    tags = required_tags(study="shared", stage="features", dataset=dataset.name, dataset_version=version,
                         synthetic=dataset.synthetic, seed=seed, dvc_stage=f"features@{dataset.name}")
    with start_run(study="shared", tags=tags, run_name=f"features-{dataset.name}",
                   params={"dataset": {"name": dataset.name, **dataset_kwargs}, **config.to_dict()}):
        log_metrics({k: float(v) for k, v in {**metrics, **run_metrics}.items()})
        log_artifact(metrics_path)
        log_artifact(figure_path, "figures")

    print(f"{dataset.name}: {metrics['n_subjects']} subjects, {metrics['n_recordings']} recordings, "
          f"{metrics['n_windows']} windows x {metrics['n_feature_columns']} features, "
          f"all finite={metrics['all_finite']}, {seconds:.1f} s{' (cached)' if reused else ''}")
    return 0
