"""Compare two runs' ``metrics/`` folders value by value: the check that a refactor moved no number.

    python scripts/compare_metrics.py OLD_METRICS_DIR NEW_METRICS_DIR

Every ``*.csv`` and ``*.json`` present in both is compared on its key columns (the non-numeric ones): rows are
matched on them, and every value column must be equal. Equal means bit-identical, except for stages the
registry declares stable only to a relative tolerance across machines (``Stage.tolerance``,
:mod:`eegprivacy.pipeline.stages`), which are compared within it. Columns and keys that name code or runs
(``code_hash``, ``config_key``, ``run_id``) or time them (``*seconds*``, ``*_s``, ``started``) may differ and are
left out. Prints one line per file and exits 1 when any file differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

VOLATILE = re.compile(r"(^|_)(code_hash|config_key|run_id|run_ids|seconds|started|finished|wall|cpu_s|timings?)($|_)"
                      r"|_seconds$|^seconds_|elapsed")


def tolerance_for(file_name: str) -> float:
    """The registered relative tolerance of the stage that writes ``metrics/<file_name>`` (0: bit-identical)."""
    from eegprivacy.pipeline.stages import STAGES

    for stage in STAGES:
        for out in stage.outs:
            for item in stage.items or ("",):
                if Path(out.replace("{item}", item)).name == file_name:
                    return stage.tolerance
    return 0.0


def _equal(a, b, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b or (rtol > 0 and math.isclose(a, b, rel_tol=rtol, abs_tol=rtol))
    return a == b


def compare_json(old, new, rtol: float, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = {k for k in (*old, *new) if not VOLATILE.search(str(k))}
        return [d for k in sorted(keys, key=str) for d in (
            [f"{path}/{k}: only in one run"] if (k in old) != (k in new) else compare_json(old[k], new[k], rtol,
                                                                                          f"{path}/{k}"))]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} vs {len(new)} items"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in compare_json(a, b, rtol, f"{path}[{i}]")]
    return [] if _equal(old, new, rtol) else [f"{path}: {old!r} -> {new!r}"]


def compare_csv(old: pd.DataFrame, new: pd.DataFrame, rtol: float) -> list[str]:
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
        a, b = old[column], new[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            same = np.isclose(a, b, rtol=rtol, atol=rtol, equal_nan=True) if rtol else (
                (a == b) | (a.isna() & b.isna()))
        else:
            same = (a.astype(str) == b.astype(str))
        if not bool(np.all(same)):
            first = int(np.flatnonzero(~np.asarray(same))[0])
            problems.append(f"{column}: {int((~np.asarray(same)).sum())} values differ (row {first}: "
                            f"{a.iloc[first]!r} -> {b.iloc[first]!r})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    names = sorted({p.name for d in (args.old, args.new) for p in d.iterdir() if p.suffix in (".csv", ".json")})
    failed = 0
    for name in names:
        old, new = args.old / name, args.new / name
        if not (old.exists() and new.exists()):
            print(f"MISSING  {name}: only in {args.old if old.exists() else args.new}")
            failed += 1
            continue
        rtol = tolerance_for(name)
        if name.endswith(".json"):
            problems = compare_json(json.loads(old.read_text()), json.loads(new.read_text()), rtol)
        else:
            problems = compare_csv(pd.read_csv(old), pd.read_csv(new), rtol)
        print(f"{'DIFFERS' if problems else 'same   '}  {name}" + (f" (rtol {rtol:g})" if rtol else "")
              + "".join(f"\n           {p}" for p in problems[:5]))
        failed += bool(problems)
    print(f"{len(names) - failed} of {len(names)} files equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
