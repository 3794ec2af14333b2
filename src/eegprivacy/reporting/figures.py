"""Figures shared by the studies. Synthetic data says so in every title."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def titled(title: str, synthetic: bool) -> str:
    return f"[SYNTHETIC DATA] {title}" if synthetic else title


def band_power_by_condition(table: pd.DataFrame, bands: list[str], title: str, synthetic: bool):
    """Per-recording mean log10 band power (µV², averaged over channels and windows), one panel per band."""
    per_recording = []
    for band in bands:
        cols = [c for c in table.columns if c.endswith(f":{band}")]
        values = np.log10(table[cols].clip(lower=1e-12)).mean(axis=1)
        grouped = values.groupby([table["subject"], table["recording"], table["condition"]]).mean()
        per_recording.append(grouped.rename(band))
    frame = pd.concat(per_recording, axis=1).reset_index()
    conditions = sorted(frame["condition"].astype(str).unique())
    fig, axes = plt.subplots(1, len(bands), figsize=(2.3 * len(bands), 3.6), sharey=False)
    rng = np.random.default_rng(0)  # horizontal jitter only
    for ax, band in zip(np.atleast_1d(axes), bands):
        data = [frame.loc[frame["condition"].astype(str) == c, band].to_numpy() for c in conditions]
        ax.boxplot(data, showfliers=False)
        for i, values in enumerate(data, start=1):
            ax.scatter(i + rng.uniform(-0.15, 0.15, len(values)), values, s=8, alpha=0.6)
        ax.set_xticks(range(1, len(conditions) + 1), conditions, rotation=30, ha="right", fontsize=8)
        ax.set_title(band, fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("log10 band power (µV²)")
    fig.suptitle(titled(title, synthetic), fontsize=10)
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` (creating the folder) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
