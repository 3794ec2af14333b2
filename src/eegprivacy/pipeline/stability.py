"""What counts as "changed" for a stage's numbers: bit-identical, or equal within the stage's declared tolerance.

The registry (:mod:`eegprivacy.pipeline.stages`) declares each stage's ``tolerance``: 0 for numbers that are
bit-identical on any machine, a relative tolerance for those whose last bits depend on the machine's BLAS/FFT
build (the Welch features and study A's tables computed from them). Two uses of the one rule:

- :func:`write_csv_within_tolerance`: a stage that reruns on another machine keeps its git-tracked CSV when the
  new rows equal the old within its tolerance (every text column, code hashes included, identical), so a
  last-bit difference rewrites no tracked file and reruns nothing downstream of it;
- :func:`compare_csv` / :func:`compare_json`: compare two runs' metrics (``scripts/compare_metrics.py``), with
  rows matched on their key columns and the columns that name code, runs or timings left out.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import write_text_atomic

# Columns and keys that name code or runs, or time them: they may differ between two runs of the same numbers.
VOLATILE = re.compile(r"(^|_)(code_hash|config_key|run_id|run_ids|seconds|started|finished|wall|cpu_s|timings?)($|_)"
                      r"|_seconds$|^seconds_|elapsed|duration_s$|study_name$")


def _values_equal(a: pd.Series, b: pd.Series, rtol: float) -> np.ndarray:
    both_missing = a.isna().to_numpy() & b.isna().to_numpy()
    if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
        exact = (a.to_numpy() == b.to_numpy()) | both_missing
        return exact | (np.isclose(a, b, rtol=rtol, atol=0.0) if rtol else exact)
    # text (and mixed) columns compare as text; missing equals missing (pandas keeps NaN through astype(str))
    return both_missing | (a.astype(str).to_numpy() == b.astype(str).to_numpy())


def write_csv_within_tolerance(frame: pd.DataFrame, path: str | Path, rtol: float) -> bool:
    """Write ``frame`` to ``path`` as CSV unless the file there already holds the same rows: the same columns
    and text values, and numbers equal within the relative tolerance ``rtol`` (0: bit-identical). Returns
    whether the file was (re)written."""
    path = Path(path)
    text = frame.to_csv(index=False)
    if path.exists():
        old_text = path.read_text()
        if old_text == text:
            return False
        if rtol > 0:
            old, new = pd.read_csv(io.StringIO(old_text)), pd.read_csv(io.StringIO(text))
            if list(old.columns) == list(new.columns) and len(old) == len(new) and all(
                    _values_equal(old[c], new[c], rtol).all() for c in old.columns):
                return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    return True


def compare_csv(old: pd.DataFrame, new: pd.DataFrame, rtol: float) -> list[str]:
    """Every difference between two runs' tables (rows matched on the non-numeric columns), one line each."""
    keep = [c for c in old.columns if not VOLATILE.search(c)]
    if sorted(keep) != sorted(c for c in new.columns if not VOLATILE.search(c)):
        return [f"columns differ: {sorted(set(old.columns) ^ set(new.columns))}"]
    if len(old) != len(new):
        return [f"{len(old)} vs {len(new)} rows"]
    keys = [c for c in keep if not pd.api.types.is_numeric_dtype(old[c])]
    old, new = (f[keep].sort_values(keys, kind="stable").reset_index(drop=True) if keys else f[keep]
                for f in (old, new))
    problems = []
    for column in keep:
        same = _values_equal(old[column], new[column], rtol)
        if not same.all():
            first = int(np.flatnonzero(~same)[0])
            problems.append(f"{column}: {int((~same).sum())} values differ (row {first}: "
                            f"{old[column].iloc[first]!r} -> {new[column].iloc[first]!r})")
    return problems


def compare_json(old, new, rtol: float, path: str = "") -> list[str]:
    """Every difference between two headline JSON documents (volatile keys left out), one line each."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted({k for k in (*old, *new) if not VOLATILE.search(str(k))}, key=str)
        return [d for k in keys for d in ([f"{path}/{k}: only in one run"] if (k in old) != (k in new)
                                          else compare_json(old[k], new[k], rtol, f"{path}/{k}"))]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} vs {len(new)} items"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in compare_json(a, b, rtol, f"{path}[{i}]")]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new))
    if numbers and (old == new or (math.isnan(old) and math.isnan(new))
                    or (rtol > 0 and math.isclose(old, new, rel_tol=rtol))):
        return []
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def tolerance_for(file_name: str) -> float:
    """The registered relative tolerance of the stage that writes ``file_name`` (0 when none declares it)."""
    from eegprivacy.pipeline.stages import STAGES

    for stage in STAGES:
        for out in stage.outs:
            if any(Path(out.replace("{item}", item)).name == file_name for item in stage.items or ("",)):
                return stage.tolerance
    return 0.0
