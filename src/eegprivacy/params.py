"""Reading ``params/*.yaml``: the single source of every knob a stage uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_params(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Load a params file (optionally one top-level section), with a clear error when it is missing."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file {path} not found (run from the repository root)")
    params = yaml.safe_load(path.read_text()) or {}
    if section is None:
        return params
    if section not in params:
        raise KeyError(f"{path} has no section {section!r}; sections: {sorted(params)}")
    return params[section]
