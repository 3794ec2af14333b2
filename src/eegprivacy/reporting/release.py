"""Outputs of study A's release stages (``dp_aggregate``, ``dp_scaling_aggregate``, ``dp_scenarios``): the
headline JSON DVC tracks, the plot data and the figures, from summaries the study modules computed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eegprivacy.reporting.release_figures import (
    confusion_matrices,
    intrinsic_vs_epsilon,
    plot_data,
    release_vs_null,
    scenarios_vs_epsilon,
)

PROTOCOLS = ("optimistic", "nested")
SCENARIO_HEADLINE_METRICS = ("balanced_accuracy", "auroc", "patient_epsilon")
SCENARIO_PANELS = [("balanced_accuracy", "optimistic"), ("auroc", "threshold_free")]


def paper_rows(agg: pd.DataFrame) -> pd.DataFrame:
    """The per-seed aggregate without the matched-null rows, in the paper's shape (one row per mechanism and ε)."""
    return agg[agg["arm"] != "matched_null"].drop(columns="arm")


def release_figures(agg: pd.DataFrame, utility: pd.DataFrame, dataset: str, synthetic: bool,
                    epsilon: float) -> dict[str, Figure]:
    """One dataset's figures by file name: release vs matched null vs ε (the headline, from the ``dp_utility``
    summary), intrinsic utility vs ε, and the paper's confusion matrices at ε (optimistic protocol)."""
    paper = paper_rows(agg)
    return {f"dp_utility_{dataset}.png": release_vs_null(utility, synthetic=synthetic),
            f"dp_intrinsic_{dataset}.png": intrinsic_vs_epsilon(paper, synthetic=synthetic),
            f"dp_confusion_{dataset}.png": confusion_matrices(paper, epsilon=epsilon, synthetic=synthetic)}


def balanced_accuracy_plot_rows(agg: pd.DataFrame) -> pd.DataFrame:
    """DVC plot rows of balanced accuracy vs ε, both threshold protocols (``protocol`` column); releases only (the
    matched nulls are in the summary CSV and the figure)."""
    paper = paper_rows(agg)
    return pd.concat([plot_data(paper, "balanced_accuracy", p).assign(protocol=p) for p in PROTOCOLS],
                     ignore_index=True)


def epsilon_part(epsilon: float) -> str:
    """ε in a headline key: ``none`` for the noiseless rows, else ``eps_<ε>``."""
    return "none" if not np.isfinite(epsilon) else f"eps_{epsilon:g}"


def write_keyed_headline(summary: pd.DataFrame, key_columns: Sequence[str], fields: Sequence[str], path) -> None:
    """Headline numbers for DVC: one entry per row of ``summary``, keyed by its ``key_columns`` joined with "/"
    (``epsilon`` written by :func:`epsilon_part`), holding its ``fields`` (non-finite values as null)."""
    out = {}
    for record in summary.to_dict("records"):
        key = "/".join(epsilon_part(record[c]) if c == "epsilon" else record[c] for c in key_columns)
        out[key] = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record.items()
                    if k in fields}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def write_scenarios_headline(summary: pd.DataFrame, path) -> None:
    """``dp_scenarios``' headline: balanced accuracy, AUROC and patient ε per scenario, arm (release, matched null,
    release − null), mechanism, ε, protocol, with what each interval is over and ε's unit."""
    keep = summary[summary["metric"].isin(SCENARIO_HEADLINE_METRICS)]
    write_keyed_headline(keep, ["scenario", "arm", "mechanism", "epsilon", "protocol", "metric"],
                         ("value", "ci_low", "ci_high", "n_seeds", "chance", "ci_over", "eps_unit"), path)


def scenarios_figure(summary: pd.DataFrame, dataset: str, n_hospitals: int, synthetic: bool,
                     visits: str = "recordings") -> Figure:
    """Balanced accuracy (optimistic) and AUROC (threshold-free) of each scenario against ε; the title says what a
    shared patient's visits are when they are not whole recordings."""
    shared = "" if visits == "recordings" else f"; visits: recording {visits}"
    return scenarios_vs_epsilon(summary, panels=SCENARIO_PANELS, synthetic=synthetic,
                                title=f"{dataset}: deployment scenarios ({n_hospitals} hospitals{shared})")
