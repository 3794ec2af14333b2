"""Compare two runs' ``metrics/`` folders value by value: the check that a refactor moved no number.

    python scripts/compare_metrics.py OLD_METRICS_DIR NEW_METRICS_DIR
    python scripts/compare_metrics.py --within-intervals OLD.csv NEW.csv


Every ``*.csv`` and ``*.json`` present in either is compared (:mod:`eegprivacy.pipeline.stability`): rows are
matched on their key (non-numeric) columns and every value column must be equal — bit-identical, except for
stages the registry declares stable only to a relative tolerance across machines (``Stage.tolerance``). Columns
and keys that name code or runs (``code_hash``, ``config_key``, ``run_id``, an Optuna study name) or time them
(and LiRA's ``shadow_key``) are left out. Prints one line per file; exits 1 when any file differs or is missing on one side.

``--within-intervals``: when a change is allowed to move numbers (e.g. batched training drawing in another order,
issue 37), the evidence is that every cell's new value lies inside its old interval. Rows of OLD with a finite
``ci_low``/``ci_high`` are the cells; each is matched to NEW on the key columns and counted as equal, inside or
outside. Prints the counts and the cells outside; exits 1 when fewer than ``--min-share`` (0.95) are inside.
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


def within_intervals(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per cell of `old` (a row with a finite interval): its old value and interval, the new value, and whether
    the new one is ``equal``, ``inside`` the old interval or ``outside`` it (``missing`` if NEW lacks the row)."""
    from eegprivacy.pipeline.stability import VOLATILE

    keys = [c for c in old.columns if not pd.api.types.is_numeric_dtype(old[c]) and c in new.columns
            and not VOLATILE.search(c) and not CACHE_KEYS.search(c) and c not in ("note", "significant")]
    keys += [c for c in ("epsilon", "fpr", "seed", "shadow") if c in old.columns and c in new.columns
             and c not in keys]
    cells = old[old["ci_low"].notna() & old["ci_high"].notna()]
    new = new[new["ci_low"].notna() & new["ci_high"].notna()]
    merged = cells.merge(new[keys + ["value"]], on=keys, how="left", suffixes=("_old", "_new"),
                         validate="one_to_one")
    same = (merged.value_old == merged.value_new) | (merged.value_old.isna() & merged.value_new.isna())
    inside = merged.value_new.between(merged.ci_low, merged.ci_high)
    merged["verdict"] = ["equal" if e else "inside" if i else "missing" if pd.isna(v) else "outside"
                         for e, i, v in zip(same, inside, merged.value_new)]
    return merged[keys + ["value_old", "ci_low", "ci_high", "value_new", "verdict"]]


def _interval_main(args) -> int:
    table = within_intervals(pd.read_csv(args.old), pd.read_csv(args.new))
    counts = table.verdict.value_counts().to_dict()
    share = counts.get("equal", 0) + counts.get("inside", 0)
    print(f"{args.new}: {len(table)} cells with an old interval; equal {counts.get('equal', 0)}, inside the old "
          f"interval {counts.get('inside', 0)}, outside {counts.get('outside', 0)}, missing {counts.get('missing', 0)}"
          f" -> {share / max(len(table), 1):.1%} equal or inside (needed {args.min_share:.0%})")
    for row in table[table.verdict.isin(["outside", "missing"])].head(20).itertuples():
        print(f"  {row.verdict}: {row._asdict()}")
    return 0 if share >= args.min_share * len(table) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the reference run's metrics/ folder (a CSV with --within-intervals)")
    parser.add_argument("new", type=Path, help="the run to check")
    parser.add_argument("--within-intervals", action="store_true",
                        help="count the cells whose new value lies inside the old interval (ci_low, ci_high)")
    parser.add_argument("--min-share", type=float, default=0.95, help="with --within-intervals: the share needed")
    args = parser.parse_args(argv)
    if args.within_intervals:
        return _interval_main(args)
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
