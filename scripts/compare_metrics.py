"""Compare two runs' ``metrics/`` folders value by value: the check that a refactor moved no number.

    python scripts/compare_metrics.py OLD_METRICS_DIR NEW_METRICS_DIR

Every ``*.csv`` and ``*.json`` present in either is compared (:mod:`eegprivacy.pipeline.stability`): rows are
matched on their key (non-numeric) columns and every value column must be equal — bit-identical, except for
stages the registry declares stable only to a relative tolerance across machines (``Stage.tolerance``). Columns
and keys that name code or runs (``code_hash``, ``config_key``, ``run_id``, an Optuna study name) or time them
(and LiRA's ``shadow_key``) are left out. Prints one line per file; exits 1 when any file differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from eegprivacy.pipeline.stability import compare_csv, compare_json, tolerance_for

# Cache keys written beside the numbers (they hash the code, like config_key): not numbers, left out here too.
CACHE_KEYS = re.compile(r"^shadow_key$")


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if CACHE_KEYS.search(c)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the reference run's metrics/ folder")
    parser.add_argument("new", type=Path, help="the run to check")
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
        problems = (compare_json(json.loads(old.read_text()), json.loads(new.read_text()), rtol)
                    if name.endswith(".json") else compare_csv(_numbers(pd.read_csv(old)), _numbers(pd.read_csv(new)), rtol))
        print(f"{'DIFFERS' if problems else 'same   '}  {name}" + (f" (rtol {rtol:g})" if rtol else "")
              + "".join(f"\n           {p}" for p in problems[:5]))
        failed += bool(problems)
    print(f"{len(names) - failed} of {len(names)} files equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
