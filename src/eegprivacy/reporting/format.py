"""The one set of formatting helpers every report, table and headline JSON uses.

Numbers in markdown: :func:`estimate` ("0.802 [0.717, 0.886]", percentages on request); JSON: :func:`json_value`
turns NaN/±∞ into ``null`` so headline files stay valid JSON, and :func:`write_json` writes them atomically. ε in
keys is :func:`eegprivacy.pipeline.keys.epsilon_key`, not here: the studies that write those keys sit below the
reports and must not import them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DASH = "–"  # what a table shows where there is no number


def _finite(value) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def estimate(value, low=None, high=None, *, digits: int = 3, pct: bool = False) -> str:
    """``value [low, high]`` (the interval only when both ends are finite); ``pct`` prints 100× with one
    decimal; a missing or non-finite value is a dash."""
    if not _finite(value):
        return DASH
    scale, places = (100.0, 1) if pct else (1.0, digits)
    text = f"{scale * float(value):.{places}f}"
    if _finite(low) and _finite(high):
        text += f" [{scale * float(low):.{places}f}, {scale * float(high):.{places}f}]"
    return text


def estimate_of(entry: Mapping | None, *, value: str = "value", digits: int = 3, pct: bool = False,
                ci: bool = True) -> str:
    """:func:`estimate` of a row or dict with ``value``/``ci_low``/``ci_high`` entries."""
    if entry is None:
        return DASH
    low, high = (entry.get("ci_low"), entry.get("ci_high")) if ci else (None, None)
    return estimate(entry.get(value), low, high, digits=digits, pct=pct)


def large_number(value) -> str:
    """A count or a large ε: thousands separated, 4 significant digits below 1000, ∞ and a dash as such."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if math.isinf(float(value)):
        return "∞"
    return f"{float(value):,.0f}" if abs(float(value)) >= 1000 else f"{float(value):.4g}"


def json_value(value: Any) -> Any:
    """JSON-safe: NaN and ±∞ become None, NumPy scalars plain Python; containers recursively."""
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | Path, payload: Mapping, *, indent: int = 2) -> Path:
    """Write a headline JSON atomically (NaN/∞ as null), creating the folder."""
    from eegprivacy.atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(json_value(payload), indent=indent) + "\n")
    return path
