"""The ``calibration`` stage's computation: every selected case measured, and one MLflow run per case.

Writing the table and the report is :mod:`eegprivacy.reporting.calibration`'s job; the stage script
(``experiments/calibration.py``) is glue between the two.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from eegprivacy.evaluation.calibration import CalibrationCase, CalibrationResult, calibrate
from eegprivacy.studies.calibration import cases as registered_cases
from eegprivacy.studies.calibration.config import CalibrationConfig

STAGE = "calibration"
#: MLflow experiment of each case, by the study its name starts with.
STUDY_OF = {"study_a": "a", "audit_cohort": "a", "study_b": "b", "study_c": "c"}


def selected_cases(config: CalibrationConfig) -> list[CalibrationCase]:
    """The cases ``config.cases`` names (all registered ones when null), in registry order; an unknown name is
    an error that lists the known ones."""
    from eegprivacy.studies.calibration import study_c

    study_c.configure(**config.null_model.to_dict())
    known = registered_cases()
    wanted = list(known) if config.cases is None else list(config.cases)
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ValueError(f"params/calibration.yaml: calibration.cases names unknown case(s) {unknown}; known: "
                         f"{', '.join(known)}")
    return [known[c] for c in wanted]


def counts(case: CalibrationCase, scale: float) -> tuple[int, int]:
    """(null, per-effect) data-set counts of ``case`` at ``scale`` (at least 20 and 10)."""
    return max(20, round(case.n_null * scale)), max(10, round(case.n_power * scale))


def measure(config: CalibrationConfig, size: str = "cohort", progress: bool = False) -> list[tuple[CalibrationResult,
                                                                                                  float]]:
    """(result, seconds) of every selected case at ``size``."""
    out = []
    for case in selected_cases(config):
        n_null, n_power = counts(case, config.scale)
        total = n_null + n_power * len(case.effects)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc=f"calibration: {case.name}", unit="data set", leave=False)
        start = time.perf_counter()
        result = calibrate(case, seed=config.seed, n_null=n_null, n_power=n_power, size=size,
                           n_jobs=config.n_jobs, progress=bar.update if bar else None)
        if bar:
            bar.close()
        out.append((result, time.perf_counter() - start))
    return out


def table(measured: list[tuple[CalibrationResult, float]]) -> pd.DataFrame:
    """One row per case: ``metrics/calibration.csv``."""
    return pd.DataFrame([{**r.row(), "seconds": round(s, 1)} for r, s in measured])


def _dataset_version(cohort: str) -> str:
    path = Path("data/versions") / f"{cohort}.json"
    if not path.exists():
        return "none"
    return str(json.loads(path.read_text()).get("version", "none"))


def log_to_mlflow(measured: list[tuple[CalibrationResult, float]], config: CalibrationConfig,
                  artifacts: list[tuple[str, str]]) -> None:
    """One run per case in its study's experiment (tags: the cohort its data sets are shaped like, synthetic,
    the seed), its size, coverage and power as metrics, the stage's outputs as artifacts of each run."""
    from eegprivacy.tracking.runs import log_artifact, log_metrics, required_tags, start_run

    for result, seconds in measured:
        case = result.case
        study = STUDY_OF[case.name.split(".", 1)[0]]
        cohort = case.cohort or "none"
        tags = required_tags(study=study, stage=STAGE, dataset=cohort, dataset_version=_dataset_version(cohort),
                             synthetic=True, seed=config.seed, dvc_stage=STAGE)
        params = {STAGE: config.to_dict(), "case": case.name, "n_null": result.n_null,
                  "effects": list(case.effects), "sided": case.sided}
        with start_run(study=study, tags=tags, run_name=f"{STAGE}-{case.name}", params=params):
            row = result.row()
            metrics = {k: float(v) for k, v in row.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and pd.notna(v)}
            log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()} | {"seconds": seconds})
            for path, folder in artifacts:
                log_artifact(path, folder)
