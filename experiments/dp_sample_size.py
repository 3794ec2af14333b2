"""Stage ``dp_sample_size`` (study A, SYNTHETIC): the end-to-end designs on synthetic cohorts of n private patients
calibrated to the real cohort, the ε horizon against n and the patients a private release needs (see
:mod:`eegprivacy.studies.release.sample_size`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import pandas as pd

from eegprivacy.data.feature_generator import FeatureTableGenerator
from eegprivacy.pipeline.stage_script import add_params_flags, read_section, read_sections, require_listed
from eegprivacy.studies.release.config import DPEndToEndConfig, DPReleaseConfig, DPScalingConfig, DPUtilityConfig
from eegprivacy.studies.release.end_to_end import end_to_end_cohorts
from eegprivacy.studies.release.sample_size import calibrate_effect_scale, generator_check, log_summary, run_plan
from eegprivacy.studies.release.sample_size import sample_size_cell, sample_size_plan, summarise
from eegprivacy.studies.release.table import load_patient_table, write_rows


def add_arguments(parser) -> None:
    add_params_flags(parser, release="each dataset's patient label (dp_release), clip_norm and delta, the confidence "
                                     "(dp_utility)",
                     scaling="the public/private split (dp_scaling.public_fraction, split_seed), as dp_end_to_end's",
                     designs="the designs' k, noise, ε split, k-fold count and power (dp_end_to_end), so both stages "
                             "release alike")


def run(args) -> int:
    config = args.config
    designs = read_section(args.designs_params, DPEndToEndConfig)
    scaling = read_section(args.scaling_params, DPScalingConfig)
    release, utility = read_sections(args.release_params, DPReleaseConfig, DPUtilityConfig)
    require_listed(args.dataset, config.datasets, "dp_sample_size.datasets")
    anchor_path = Path(f"metrics/dp_end_to_end_summary_{args.dataset}.csv")
    if not anchor_path.exists():
        raise FileNotFoundError(f"{anchor_path} is missing: run `dvc repro dp_end_to_end@{args.dataset}` first (its "
                                "tests' standard errors and no-DP AUROC anchor this stage)")
    anchor = pd.read_csv(anchor_path)
    anchor = anchor[anchor["protocol"].isin(["threshold_free", "kfold"])]
    spec = release.datasets[args.dataset]
    full = load_patient_table(args.dataset, spec.label, features_dir=args.features_dir, condition=spec.condition)
    cohorts = end_to_end_cohorts(full, scaling.public_fraction, scaling.split_seed)
    n_real = len(cohorts.private.y)
    kfold = anchor[anchor["protocol"] == "kfold"]
    target = float(kfold.loc[kfold["arm"] == "baseline", "value"].iloc[0])

    generator = FeatureTableGenerator(random_state=0).fit(full.X.to_numpy(), full.y)
    scale, reached = calibrate_effect_scale(generator, n_real, target, draws=config.calibration_draws,
                                            splits=designs.kfold_splits)
    calibration = {"effect_scale": scale, "target_auroc": target, "synthetic_auroc": reached,
                   "n_real_private": n_real, "separation": generator.separation_ * scale,
                   **generator_check(generator, full.X.to_numpy(), full.y)}
    print(f"{args.dataset}: SYNTHETIC cohorts calibrated to {n_real} private patients: effect_scale {scale:.3f} "
          f"(k-fold AUROC {reached:.3f}, target {target:.3f}); marginals KS median {calibration['ks_median']:.3f}")

    # the runs' tags: the real cohort's name and version (what the generator was calibrated to), marked SYNTHETIC
    table = dataclasses.replace(cohorts.private, synthetic=True)
    params = {"dp_sample_size": config.to_dict(), "dp_end_to_end": designs.to_dict(), "label": spec.label,
              **{f"calibration/{k}": v for k, v in calibration.items()}}
    plan = sample_size_plan(table, config, designs, n_public=len(cohorts.y_public), cells_dir=args.cells,
                            progress=not args.no_progress, params=params, delta=float(release.delta),
                            clip_norm=float(release.clip_norm), effect_scale=scale)
    cell_fn = functools.partial(sample_size_cell, generator=generator, X_public=cohorts.X_public,
                                y_public=cohorts.y_public)
    frames = run_plan(plan, cell_fn, config.n_jobs)
    out = args.out or f"metrics/dp_sample_size_{args.dataset}.csv"
    rows = write_rows(frames, out, args.stage.tolerance)
    loso = anchor[(anchor["protocol"] == "threshold_free") & (anchor["arm"] == "release_minus_null")]
    k_of = anchor[anchor["arm"] == "horizon"].set_index("mechanism")["n_components"]
    headline = loso[loso.apply(lambda r: r.mechanism in k_of and r.n_components == k_of[r.mechanism], axis=1)]
    summary = summarise(rows, headline, n_anchor=n_real, alpha=(1 - utility.confidence) / len(designs.mechanisms),
                        power=designs.power, confidence=utility.confidence, targets=config.horizon_targets)
    noise_free_real = kfold[kfold["arm"] == "noise_free"].set_index("mechanism")["value"]
    summary = summary.assign(dataset=args.dataset, synthetic=True, n_real_private=n_real,
                             n_public=len(cohorts.y_public), effect_scale=scale)
    summary_out = str(Path(out).with_name(Path(out).stem.replace("dp_sample_size_", "dp_sample_size_summary_", 1))
                      ) + ".csv"
    write_rows([summary], summary_out, args.stage.tolerance)
    log_summary(table, summary, calibration, {k: float(v) for k, v in noise_free_real.items()}, config, designs)
    print(f"  rows -> {out}; summary -> {summary_out}")
    for r in summary[summary.arm == "patients_needed"].itertuples():
        needed = "more than the grid holds" if not math.isfinite(r.value) else f"{int(r.value)} private patients"
        print(f"  {r.mechanism}: horizon ≤ ε = {r.epsilon:g} needs {needed}")
    return 0
