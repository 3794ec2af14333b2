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
    scenarios_vs_epsilon,
    utility_vs_epsilon,
)

PROTOCOLS = ("optimistic", "nested")
SCENARIO_HEADLINE_METRICS = ("balanced_accuracy", "auroc", "patient_epsilon")
SCENARIO_PANELS = [("balanced_accuracy", "optimistic"), ("auroc", "threshold_free")]


def release_figures(agg: pd.DataFrame, dataset: str, synthetic: bool, epsilon: float) -> dict[str, Figure]:
    """The paper's figures of one dataset by file name: utility and intrinsic utility vs ε, confusion at ε."""
    return {f"dp_utility_{dataset}.png": utility_vs_epsilon(agg, synthetic=synthetic),
            f"dp_intrinsic_{dataset}.png": intrinsic_vs_epsilon(agg, synthetic=synthetic),
            f"dp_confusion_{dataset}.png": confusion_matrices(agg, epsilon=epsilon, synthetic=synthetic)}


def balanced_accuracy_plot_rows(agg: pd.DataFrame) -> pd.DataFrame:
    """DVC plot rows of balanced accuracy vs ε, both threshold protocols (``protocol`` column)."""
    return pd.concat([plot_data(agg, "balanced_accuracy", p).assign(protocol=p) for p in PROTOCOLS],
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
    """``dp_scenarios``' headline: balanced accuracy, AUROC and patient ε per scenario, mechanism, ε, protocol."""
    keep = summary[summary["metric"].isin(SCENARIO_HEADLINE_METRICS)]
    write_keyed_headline(keep, ["scenario", "mechanism", "epsilon", "protocol", "metric"],
                         ("value", "ci_low", "ci_high", "n_seeds", "chance"), path)


def scenarios_figure(summary: pd.DataFrame, dataset: str, n_hospitals: int, synthetic: bool) -> Figure:
    """Balanced accuracy (optimistic) and AUROC (threshold-free) of each scenario against ε."""
    return scenarios_vs_epsilon(summary, panels=SCENARIO_PANELS, synthetic=synthetic,
                                title=f"{dataset}: deployment scenarios ({n_hospitals} hospitals)")
