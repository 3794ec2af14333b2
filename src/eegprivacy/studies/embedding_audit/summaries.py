"""Study C's rows, tidied and summarised over seeds, and the interval each summary row carries.

A row computed once (seed 0) keeps its subject-bootstrap CI; a row repeated over noise seeds gets the t-interval
across seeds (the mean of its per-seed bootstrap bounds is kept beside it), so every number in the report and the
headline has an interval that says what varies. Membership and AEDS repeat over seeds that redraw the head's
member subjects: their summary keeps the mean of the per-seed subject-bootstrap bounds (**ours**: the interval of
the comonotone average, so never narrower than the average of the draws allows) rather than a t-interval over
three seeds. The column ``ci_over`` says what every interval is over (``subjects``, ``windows``,
``subjects+seeds``, ``seeds``, or ``none`` for a row without an interval).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eegprivacy.pipeline.sweep import aggregate, metric_name

TEXT_COLUMNS = ("endpoint", "split", "defense", "attacker", "encoder", "weights", "unit")
# Cache-key columns of the cell configs: they say which code and data computed a row, not what it measured.
KEY_COLUMNS = ("dataset_version", "code_hash", "embedding_key", "embedding_keys", "audit_knobs", "bridge_knobs",
               "cohort_key")
SUMMARY_KEYS = ["encoder", "weights", "unit", "endpoint", "split", "defense", "attacker"]
# Units whose seeds redraw the member subjects (not noise): pooled over seeds by their bootstrap bounds.
MEMBER_DRAW_UNITS = ("membership", "aeds")
# Endpoints whose interval is a window bootstrap (none now: every membership attack passes its subjects).
WINDOW_CI_ENDPOINTS: tuple[str, ...] = ()


def interval_unit(tidy: pd.DataFrame) -> pd.Series:
    """What each row's interval resamples: ``none`` without an interval, ``windows`` for the endpoints still on a
    window bootstrap, ``subjects`` for every other one (all of study C's endpoints resample subjects)."""
    has_ci = tidy["ci_low"].notna() | tidy["ci_high"].notna()
    over = np.where(tidy["endpoint"].isin(WINDOW_CI_ENDPOINTS), "windows", "subjects")
    return pd.Series(np.where(has_ci, over, "none"), index=tidy.index)


def tidy_table(frames: list[pd.DataFrame], synthetic: bool) -> pd.DataFrame:
    """Every runner's rows in one table: text columns filled, the synthetic flag on, the cache keys off."""
    tidy = pd.concat(frames, ignore_index=True)
    for column in TEXT_COLUMNS:
        tidy[column] = tidy[column].fillna("none").astype(str)
    tidy["synthetic"] = synthetic
    tidy["ci_over"] = interval_unit(tidy)
    return tidy.drop(columns=[c for c in KEY_COLUMNS if c in tidy])


def summarise(tidy: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (encoder, weights, unit, endpoint, split, defense, attacker, metric). Rows computed once
    keep their bootstrap CI; rows repeated over noise seeds get the t-interval across seeds, and the mean of the
    per-seed bootstrap bounds is kept in ``boot_low``/``boot_high``; rows repeated over member draws
    (:data:`MEMBER_DRAW_UNITS`) take that mean as their interval. ``ci_over`` says which it is."""
    if "ci_over" not in tidy:
        tidy = tidy.assign(ci_over=interval_unit(tidy))
    keys = SUMMARY_KEYS + (["eps_unit"] if "eps_unit" in tidy else [])  # ε keeps its unit (window/subject)
    agg = aggregate(tidy, keys)
    boot = tidy.groupby(keys + ["metric"], dropna=False).agg(boot_low=("ci_low", "mean"),
                                                                     boot_high=("ci_high", "mean"),
                                                                     seeds=("seed", "nunique"),
                                                                     row_ci_over=("ci_over", "first")).reset_index()
    out = agg.merge(boot, on=keys + ["metric"], how="left")
    single = out["seeds"] == 1
    pooled = ~single & out["unit"].isin(MEMBER_DRAW_UNITS)  # a row without a per-seed interval keeps none
    keep = single | pooled
    out.loc[keep, "ci_low"] = out.loc[keep, "boot_low"]
    out.loc[keep, "ci_high"] = out.loc[keep, "boot_high"]
    out["ci_over"] = np.where(single, out["row_ci_over"], np.where(pooled, out["row_ci_over"] + "+seeds", "seeds"))
    out.loc[out["ci_low"].isna() & out["ci_high"].isna(), "ci_over"] = "none"
    return out.drop(columns="row_ci_over")


def summary_row(summary: pd.DataFrame, **where) -> pd.Series | None:
    """The first summary row whose columns equal ``where`` (compared as text); None when there is none."""
    mask = np.ones(len(summary), bool)
    for k, v in where.items():
        mask &= (summary[k].astype(str) == str(v)).to_numpy()
    part = summary[mask]
    return None if part.empty else part.iloc[0]


def aggregate_keys(summary: pd.DataFrame) -> list[str]:
    """The columns, in order, that name a parent run's aggregates: the varying cell knob (``unit``) then the row
    columns the sweep adds (:meth:`~eegprivacy.pipeline.sweep.SweepRunner.run`), ``eps_unit`` included -- so the
    bootstrap CIs and ``ci_over`` tags land on the very names the sweep logged its per-seed t-intervals under and
    replace them, instead of sitting beside them under names a report never reads (the issue-20 code left out
    ``eps_unit``, and the MLflow report printed zero-width intervals)."""
    return ["unit", "endpoint", "split", "defense", "attacker"] + (["eps_unit"] if "eps_unit" in summary else [])


def ci_over_tags(summary: pd.DataFrame, encoder: str, weights: str) -> dict[str, str]:
    """What each of a cell's logged intervals is over, as parent-run tags ``<aggregate name>_ci_over`` (the names
    of :func:`bootstrap_ci_metrics` and the sweep's own aggregates), so a report built from MLflow alone states
    ``subjects``, ``subjects+seeds`` or ``seeds`` as the run says, not as it assumes."""
    keys = aggregate_keys(summary)
    part = summary[(summary["encoder"] == encoder) & (summary["weights"] == weights) & (summary["ci_over"] != "none")]
    return {metric_name(record, keys, "ci_over"): str(record["ci_over"]) for record in part.to_dict("records")}


def bootstrap_ci_metrics(summary: pd.DataFrame, encoder: str, weights: str) -> dict[str, float]:
    """The subject-bootstrap CIs of the rows computed once, and the pooled ones of the member-draw units, under the
    names of the sweep's own aggregates (``<unit/endpoint/...>/<metric>_ci_low``): the parent's t-interval over one
    seed is empty (over three member draws, a t(2) interval), so these replace it and the parent run carries every
    headline number with its interval."""
    keys = aggregate_keys(summary)
    bootstrap = (summary["seeds"] == 1) | summary["unit"].isin(MEMBER_DRAW_UNITS)
    part = summary[(summary["encoder"] == encoder) & (summary["weights"] == weights) & bootstrap]
    out = {}
    for record in part.to_dict("records"):
        for stat in ("ci_low", "ci_high"):
            if np.isfinite(record[stat]):
                out[metric_name(record, keys, stat)] = record[stat]
    return out
