"""The ``dp_release`` sweep: every mechanism's release of the patient table at each ε over noise seeds, scored
against the mechanism's own input.

Intrinsic utility (RMSE, MAE, correlation, SNR of the released vectors against the clipped ones the noise was
added to) says what the noise alone does to the table before any model sees it; the clipping distortion says
what scaling and clipping did before that. Both are per seed, so the aggregate can put intervals over seeds on
them. The sweep runs in this process: a release is cheap beside the utility stage's model fits.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.evaluation.utility import clipping_distortion, intrinsic_utility
from eegprivacy.pipeline.stages import code_hash
from eegprivacy.privacy import DPFeatureReleaser
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.table import PatientTable, release, release_cells, run_sweep


def quality_rows(releaser: DPFeatureReleaser, released: np.ndarray) -> list[dict]:
    """Intrinsic utility of ``released`` against the releaser's clipped input, then what clipping distorted."""
    rows = [{"protocol": "intrinsic", "metric": k, "value": v}
            for k, v in intrinsic_utility(releaser.clipped_, released).items()]
    return rows + [{"protocol": "clipping", "metric": k, "value": v}
                   for k, v in clipping_distortion(releaser.scaled_, releaser.clipped_).items()]


def noise_scale_row(noise_scale: float) -> dict:
    """The calibrated noise scale (σ or b) beside the intrinsic rows, so a figure can show it against ε."""
    return {"protocol": "intrinsic", "metric": "noise_scale", "value": noise_scale}


def release_cell(config: dict, seed: int, *, table: PatientTable) -> list[dict]:
    """One seeded release of ``table`` with the cell's mechanism, ε, δ and C, and its intrinsic rows."""
    releaser, released = release(table.X.to_numpy(), config["mechanism"], config["epsilon"], config["delta"],
                                 config["clip_norm"], seed,
                                 common_random_numbers=bool(config.get("common_random_numbers", False)))
    return [*quality_rows(releaser, released), noise_scale_row(config["noise_scale"])]


def release_sweeps(table: PatientTable, config: DPReleaseConfig, label: str, *, cells_dir: str | Path,
                   progress: bool) -> list[pd.DataFrame]:
    """One sweep (MLflow parent run) per mechanism over ε × noise seeds; each returns its per-seed rows."""
    params = {"dp_release": config.to_dict(), "label": label, **table.base_config}
    extra = {"code_hash": code_hash("dp_release"), "common_random_numbers": bool(config.common_random_numbers)}
    cell_fn = functools.partial(release_cell, table=table)
    return [run_sweep(table, "dp_release", mechanism, release_cells(table, config, mechanism, extra), cell_fn,
                      cells_dir=cells_dir, params=params, progress=progress, mechanism=mechanism, delta=config.delta)
            for mechanism in config.mechanisms]
