"""The names things are keyed by: a cell by the hash of its resolved config, an ε by its shortest exact text.

Cell files, MLflow run names and tags, summary JSON keys and per-cell arrays are all named with these two, by the
studies that write them and by the reports that read them back, so each is defined once and below both.
:func:`config_key` has a module of its own, rather than living in :mod:`eegprivacy.pipeline.sweep`, because the
sweep runner imports the executors and the executors name a failed cell by its key: in either module the two would
import each other.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["config_key", "epsilon_key"]


def config_key(config: Mapping[str, Any]) -> str:
    """Stable short hash of a resolved cell config (seed included)."""
    return hashlib.sha256(json.dumps(dict(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


def epsilon_key(epsilon) -> str:
    """ε as a key or file-name part: ``"inf"`` for no noise, else the shortest exact form (``"0.5"``)."""
    return "inf" if not math.isfinite(float(epsilon)) else f"{float(epsilon):g}"
