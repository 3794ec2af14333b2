"""Study C's rows, tidied and summarised over seeds, and the interval each summary row carries.

A row computed once (seed 0) keeps its subject-bootstrap CI; a row repeated over noise seeds gets the t-interval
across seeds (the mean of its per-seed bootstrap bounds is kept beside it), so every number in the report and the
headline has an interval that says what varies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.pipeline.sweep import aggregate, metric_name

TEXT_COLUMNS = ("endpoint", "split", "defense", "attacker", "encoder", "weights", "unit")
# Cache-key columns of the cell configs: they say which code and data computed a row, not what it measured.
KEY_COLUMNS = ("dataset_version", "code_hash", "embedding_key", "embedding_keys", "audit_knobs", "bridge_knobs")
SUMMARY_KEYS = ["encoder", "weights", "unit", "endpoint", "split", "defense", "attacker"]


def tidy_table(frames: list[pd.DataFrame], synthetic: bool) -> pd.DataFrame:
    """Every runner's rows in one table: text columns filled, the synthetic flag on, the cache keys off."""
    tidy = pd.concat(frames, ignore_index=True)
    for column in TEXT_COLUMNS:
        tidy[column] = tidy[column].fillna("none").astype(str)
    tidy["synthetic"] = synthetic
    return tidy.drop(columns=[c for c in KEY_COLUMNS if c in tidy])


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (encoder, weights, unit, endpoint, split, defense, attacker, metric). Rows computed once
    keep their bootstrap CI; rows repeated over noise seeds get the t-interval across seeds, and the mean of the
    per-seed bootstrap bounds is kept in ``boot_low``/``boot_high``."""
    agg = aggregate(tidy, SUMMARY_KEYS)
    boot = tidy.groupby(SUMMARY_KEYS + ["metric"], dropna=False).agg(boot_low=("ci_low", "mean"),
                                                                     boot_high=("ci_high", "mean"),
                                                                     seeds=("seed", "nunique")).reset_index()
    out = agg.merge(boot, on=SUMMARY_KEYS + ["metric"], how="left")
    single = out["seeds"] == 1
    out.loc[single, "ci_low"] = out.loc[single, "boot_low"]
    out.loc[single, "ci_high"] = out.loc[single, "boot_high"]
    return out


def summary_row(summary: pd.DataFrame, **where) -> pd.Series | None:
    """The first summary row whose columns equal ``where`` (compared as text); None when there is none."""
    mask = np.ones(len(summary), bool)
    for k, v in where.items():
        mask &= (summary[k].astype(str) == str(v)).to_numpy()
    part = summary[mask]
    return None if part.empty else part.iloc[0]


def bootstrap_ci_metrics(summary: pd.DataFrame, encoder: str, weights: str) -> dict[str, float]:
    """The subject-bootstrap CIs of the rows computed once, under the names of the sweep's own aggregates
    (``<unit/endpoint/...>/<metric>_ci_low``): the parent's t-interval over one seed is empty, so these replace it
    and the parent run carries every headline number with its interval."""
    keys = ["unit", "endpoint", "split", "defense", "attacker"]
    part = summary[(summary["encoder"] == encoder) & (summary["weights"] == weights) & (summary["seeds"] == 1)]
    out = {}
    for record in part.to_dict("records"):
        for stat in ("ci_low", "ci_high"):
            if np.isfinite(record[stat]):
                out[metric_name(record, keys, stat)] = record[stat]
    return out
