"""Outputs of ``dp_audit``: the headline JSON and the claimed-vs-certified figure, from what
:mod:`eegprivacy.studies.release.mechanism_audit` computed."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def write_headline(summary: dict, path) -> None:
    """The headline JSON, ε and the other symbols kept as written (UTF-8, not escaped)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")


def audit_figure(stats: pd.DataFrame, summary: dict):
    """Claimed ε (x) vs the empirical lower bound (y, mean with min–max over seeds), one panel per d, beside the
    claim (y = x) and the ceiling the evaluation trials can certify."""
    dims = sorted(stats["dim"].unique())
    fig, axes = plt.subplots(1, len(dims), figsize=(5.2 * len(dims), 4.6), sharey=True, squeeze=False)
    ceiling = summary["max_certifiable_epsilon"]
    for ax, dim in zip(axes[0], dims):
        part = stats[stats.dim == dim]
        for mechanism, rows in part.groupby("mechanism", sort=True):
            line, = ax.plot(rows["epsilon"], rows["mean"], marker="o", label=mechanism)
            ax.fill_between(rows["epsilon"], rows["min"], rows["max"], color=line.get_color(), alpha=0.2)
        eps = np.geomspace(part["epsilon"].min(), part["epsilon"].max(), 50)
        ax.plot(eps, eps, color="black", lw=1, ls="--", label="y = x (claim)")
        ax.axhline(ceiling, color="grey", lw=1, ls=":",
                   label=f"ceiling ln(M / ln(2/α)) = {ceiling:.1f}, "
                         f"M = {summary['n_evaluation_per_side']:,} evaluation trials")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.1)  # symlog so a bound of exactly 0 still shows
        ticks = sorted(part["epsilon"].unique())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("claimed ε")
        ax.set_title(f"d = {dim}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(f"empirical ε lower bound ({summary['confidence']:.0%} CP; linear below 0.1)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"DP audit on a worst-case neighbour pair (no data), C = {summary['clip_norm']:g}, "
                 f"N = {summary['n_trials_per_side']:,} per side; line = mean, shade = min–max over "
                 f"{int(stats['count'].max())} seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
