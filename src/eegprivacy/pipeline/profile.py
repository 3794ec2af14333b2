"""The pipeline profile: which cohorts each per-cohort stage runs on (``params/profile.yaml``).

``dvc.yaml`` reads the same file as DVC vars (``foreach: ${profile.study_a}``), so the stage list, the aggregates'
inputs and the registry's DVC names (:meth:`eegprivacy.pipeline.stages.Stage.dvc_names`) follow one statement.
The default profile holds the headline cohorts; ``make reproduce PROFILE=full`` sets the full lists.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from eegprivacy.paths import checkout_root

__all__ = ["PROFILE_FILE", "PROFILE_LISTS", "cohorts", "profile_name"]

PROFILE_FILE = "params/profile.yaml"
PROFILE_LISTS = ("study_a", "study_a_attacks", "study_b")


def _section(params_file: str | Path | None = None) -> dict:
    path = Path(params_file) if params_file is not None else checkout_root() / PROFILE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: the pipeline profile (which cohorts each stage runs on) is missing")
    section = (yaml.safe_load(path.read_text()) or {}).get("profile")
    if not isinstance(section, dict):
        raise ValueError(f"{path}: expected a 'profile:' section with the lists {', '.join(PROFILE_LISTS)}")
    return section


def cohorts(key: str, params_file: str | Path | None = None) -> tuple[str, ...]:
    """The cohorts of list `key` (one of :data:`PROFILE_LISTS`) in the active profile, in the file's order."""
    if key not in PROFILE_LISTS:
        raise KeyError(f"unknown profile list {key!r}; lists: {', '.join(PROFILE_LISTS)}")
    values = _section(params_file).get(key)
    if isinstance(values, dict):  # cohort -> the file that versions its data (study B)
        values = list(values)
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{params_file or PROFILE_FILE}: profile.{key} must name at least one cohort")
    return tuple(values)


def profile_name(params_file: str | Path | None = None) -> str:
    """``default`` or ``full`` (what the profile file says it is)."""
    return str(_section(params_file).get("name", "default"))
