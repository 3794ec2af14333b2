"""Glue shared by study A's stages: the patient table a release starts from, one release, the release cells of
a sweep, its runner and run tags.

Patient identifiers stay in this process: the table handed on has a 0..n-1 index and no id column.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.data import get_dataset
from eegprivacy.pipeline.stability import write_csv_within_tolerance
from eegprivacy.pipeline.sweep import SweepRunner, expand_grid
from eegprivacy.privacy import DPFeatureReleaser, make_mechanism, patient_vectors
from eegprivacy.signal.table import INDEX_COLUMNS, FeaturesParams, read_feature_table
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.tracking import required_tags

# Mixed with the (mechanism, ε) code and the seed: the release noise stream of study A (privacy.release's tag).
NOISE_STREAM_TAG = 0x44505245

# Patient labels derived from dataset metadata (name -> function of the per-subject metadata rows).
METADATA_LABELS = {
    # eegmat: the minority class (bad counters, count quality 0) is the positive class
    "bad_counter": lambda meta: (meta["count_quality"] == 0).astype(int),
}


@dataclass
class PatientTable:
    dataset: str
    dataset_version: str
    features_hash: str
    synthetic: bool
    X: pd.DataFrame  # one row per patient, features only
    y: np.ndarray
    groups: np.ndarray  # positions 0..n-1: what LOSO splits on; the real ids never leave load_patient_table

    @property
    def base_config(self) -> dict:
        """What every cell of a study-A sweep depends on besides its own knobs; stages add ``code_hash`` (their
        registered code, :func:`eegprivacy.pipeline.stages.code_hash`) so a cached cell is never reused after the
        code that computed it changed."""
        return {"dataset_version": self.dataset_version, "features_hash": self.features_hash,
                "n_patients": int(len(self.X)), "n_features": int(self.X.shape[1])}


@dataclass
class WindowTable:
    """A dataset's current window-feature table with what every run tags it by."""

    dataset: str
    dataset_version: str
    features_hash: str
    synthetic: bool
    frame: pd.DataFrame  # window rows: index columns + features; carries subject ids, stays in-process
    metadata: pd.DataFrame

    @property
    def feature_columns(self) -> list[str]:
        return [c for c in self.frame.columns if c not in INDEX_COLUMNS]


def load_window_table(dataset_name: str, features_params: str | Path = "params/features.yaml",
                      features_dir: str | Path = "data/features") -> WindowTable:
    """Window features of the dataset's current version (refuses a table built from other data or config)."""
    params = FeaturesParams.load(features_params, "features")
    dataset = get_dataset(dataset_name, **params.dataset_kwargs(dataset_name))
    version = dataset.version()
    config = params.pipeline(dataset_name)
    table = read_feature_table(Path(features_dir) / f"{dataset_name}.parquet", dataset_version=version,
                               config=config)
    return WindowTable(dataset_name, version, config.config_hash(), dataset.synthetic, table, dataset.metadata())


def labelled_windows(windows: WindowTable, label: str) -> pd.DataFrame:
    """The window frame with ``label`` set to the study's patient label (the table's own or from metadata)."""
    if label == "label":
        return windows.frame
    if label not in METADATA_LABELS:
        raise KeyError(f"unknown patient label {label!r}; use 'label' or one of {sorted(METADATA_LABELS)}")
    meta = windows.metadata.drop_duplicates("subject").set_index("subject")
    return windows.frame.assign(label=windows.frame["subject"].map(METADATA_LABELS[label](meta)))


def load_patient_table(dataset_name: str, label: str, features_params: str | Path = "params/features.yaml",
                       features_dir: str | Path = "data/features", condition: str | None = None) -> PatientTable:
    """Window features of the dataset's current version -> patient-level vectors and labels.

    A patient vector is the mean over the windows of one condition: ``condition`` selects it (e.g. eegmat's
    ``arithmetic``, recorded for every subject). Without it every patient's windows must already share one
    condition; vectors that mix a resting and a task recording would describe different things per patient."""
    windows = load_window_table(dataset_name, features_params, features_dir)
    table = labelled_windows(windows, label)
    if condition is not None:
        present = sorted(table["condition"].astype(str).unique())
        if condition not in present:
            raise ValueError(f"{dataset_name}: no window of condition {condition!r}; the table holds {present}")
        table = table[table["condition"] == condition]
    else:
        mixed = int((table.groupby("subject")["condition"].nunique() > 1).sum())
        if mixed:
            raise ValueError(f"{dataset_name}: {mixed} patients have windows of more than one condition "
                             f"({sorted(table['condition'].astype(str).unique())}); set dp_release.datasets."
                             f"{dataset_name}.condition so each patient vector describes one condition")
    X, y, _private_ids = patient_vectors(table, windows.feature_columns, group="subject", label="label")
    dropped = [c for c in X.columns if not np.isfinite(X[c].to_numpy()).all()]
    if dropped:  # e.g. a band the signal layer dropped above Nyquist: NaN for every patient
        X = X.drop(columns=dropped)
    return PatientTable(dataset_name, windows.dataset_version, windows.features_hash, windows.synthetic, X,
                        y.astype(int), np.arange(len(X)))


def computed_patient_vectors(dataset_name: str, features_params: str | Path = "params/features.yaml"):
    """(X, y) arrays of the dataset's patients computed from its recordings, no feature cache read: window features
    finite in every window, averaged per patient, label as int. For benchmarks and tests that need the real table
    before any stage has run."""
    from eegprivacy.signal.table import dataset_window_features

    params = FeaturesParams.load(features_params, "features")
    dataset = get_dataset(dataset_name, **params.dataset_kwargs(dataset_name))
    table = dataset_window_features(dataset, params.pipeline(dataset_name), progress=False)
    features = [c for c in table.columns if c not in INDEX_COLUMNS and np.isfinite(table[c].to_numpy()).all()]
    X, y, _ids = patient_vectors(table, features, group="subject", label="label")
    return X.to_numpy(float), np.asarray(y, dtype=int)


def noise_generator(mechanism: str, epsilon: float, seed: int,
                    common_random_numbers: bool = False) -> np.random.Generator:
    """The noise stream of one release. By default every (mechanism, ε, seed) draws independent noise, so two
    mechanisms or two ε are never the same draw rescaled (which would make curves flat and rows identical).
    ``common_random_numbers`` shares one stream per seed across mechanisms and ε (a variance-reduction option for
    comparing them; the rows are then correlated by construction)."""
    if common_random_numbers:
        return np.random.default_rng([NOISE_STREAM_TAG, int(seed)])
    code = zlib.crc32(f"{mechanism}|{float(epsilon)!r}".encode())
    return np.random.default_rng([NOISE_STREAM_TAG, code, int(seed)])


def release(X: np.ndarray, mechanism: str, epsilon: float, delta: float, clip_norm: float, seed: int, *,
            common_random_numbers: bool = False) -> tuple[DPFeatureReleaser, np.ndarray]:
    """One seeded release of a patient table (scale -> clip -> noise), its noise from :func:`noise_generator`."""
    rng = noise_generator(mechanism, epsilon, seed, common_random_numbers)
    releaser = DPFeatureReleaser(make_mechanism(mechanism, epsilon, delta), clip_norm=clip_norm, random_state=rng)
    released = releaser.fit_transform(np.asarray(X, dtype=float))
    return releaser, released


def calibration(table: PatientTable, mechanism: str, epsilon: float, delta: float, clip_norm: float) -> dict:
    """Calibrated noise scale and guarantee scope, known before any noise is drawn."""
    calib = make_mechanism(mechanism, epsilon, delta).calibrate(clip_norm, table.X.shape[1])
    return {"noise_scale": float(calib.noise_scale), "formal_guarantee": bool(calib.formal_guarantee),
            "sampling": calib.sampling}


def release_cells(table: PatientTable, config: DPReleaseConfig, mechanism: str, extra: dict | None = None) -> list:
    """ε × noise-seed cells of one mechanism; each cell's config carries its calibrated noise scale."""
    cells = []
    for epsilon in config.epsilons:
        base = {**table.base_config, **(extra or {}), "clip_norm": config.clip_norm, "delta": config.delta,
                **calibration(table, mechanism, epsilon, config.delta, config.clip_norm)}
        cells += expand_grid({"mechanism": [mechanism], "epsilon": [float(epsilon)]},
                             seeds=range(config.noise_seeds), base=base)
    return cells


def tags(table: PatientTable, stage: str, seed: int | None, **extra) -> dict:
    """A study-A run's tags; ``dvc_stage`` is the registry's DVC stage name (``stage@dataset`` for a stage run
    per dataset, plain ``stage`` for one that is not), which is how ``make reproduce`` finds the stage's runs."""
    from eegprivacy.pipeline.stages import get_stage

    dvc_stage = f"{stage}@{table.dataset}" if get_stage(stage).items else stage
    return required_tags(study="a", stage=stage, dataset=table.dataset, dataset_version=table.dataset_version,
                         synthetic=table.synthetic, seed=seed, dvc_stage=dvc_stage, **extra)


def sweep_runner(table: PatientTable, stage: str, name: str, *, cells_dir: str | Path, params: dict,
                 progress: bool, **fixed_tags) -> SweepRunner:
    """The runner of one study-A sweep: a parent run with the sweep's fixed tags, a child per cell that adds its
    seed and, where the cell has them, its ε and δ."""
    def child_tags(cell):
        own = {k: cell.config[k] for k in ("epsilon", "delta")
               if k in cell.config and math.isfinite(float(cell.config[k]))}
        return tags(table, stage, cell.seed, **{**fixed_tags, **own})

    return SweepRunner(name=f"{stage}-{table.dataset}-{name}", study="a", dataset=table.dataset,
                       out_dir=Path(cells_dir) / stage / table.dataset / name,
                       parent_tags=tags(table, stage, None, **fixed_tags), tags_fn=child_tags, params=params,
                       progress=progress)


def run_sweep(table: PatientTable, stage: str, name: str, cells, cell_fn, *, cells_dir: str | Path,
              params: dict, progress: bool, **fixed_tags) -> pd.DataFrame:
    """One study-A sweep, its cells computed in this process (see :func:`sweep_runner`)."""
    runner = sweep_runner(table, stage, name, cells_dir=cells_dir, params=params, progress=progress, **fixed_tags)
    return runner.run(cells, cell_fn)


def write_rows(frames: list[pd.DataFrame], out: str | Path, tolerance: float = 0.0) -> pd.DataFrame:
    """Concatenate a stage's per-seed rows into its tidy CSV. An existing file whose rows equal these within the
    stage's relative ``tolerance`` (its registered cross-machine stability) is kept as it is, so a last-bit
    difference on another machine neither rewrites the tracked file nor reruns the stages that read it."""
    tidy = pd.concat(frames, ignore_index=True)
    if not write_csv_within_tolerance(tidy, out, tolerance):
        print(f"{out}: unchanged (equal to the file there within a relative {tolerance:g})")
    return tidy
