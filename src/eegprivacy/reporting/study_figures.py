"""Drawing the studies' figures from the tidy rows of :mod:`eegprivacy.reporting.study_runs`: the one job of this
module (``study-<a|b|c>.png`` of ``eegprivacy report``, and the notebooks' figures).

Figures are drawn on a ``matplotlib.figure.Figure`` passed in (no pyplot, no backend switch), so the same code
renders a PNG in the report (:func:`write_png`, which the lead sections' figures use too) and an inline figure in
a notebook. Error bars are the displayed intervals (:func:`eegprivacy.reporting.study_runs.displayed_interval`:
clipped to the metric's range), as the tables print them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import atomic_path
from eegprivacy.reporting.study_runs import DIAGNOSIS, displayed_interval, epsilon_order


def _title(text: str, synthetic: bool) -> str:
    return f"[SYNTHETIC DATA] {text}" if synthetic else text


def _yerr(part: pd.DataFrame) -> np.ndarray:
    """Error bars from the displayed interval (clipped to the metric's range, :func:`displayed_interval`)."""
    shown = [displayed_interval(r)[:2] for _, r in part.iterrows()]
    bounds = pd.DataFrame(shown, index=part.index, columns=["low", "high"], dtype=float)
    low = (part["mean"] - bounds["low"]).clip(lower=0).fillna(0)
    high = (bounds["high"] - part["mean"]).clip(lower=0).fillna(0)
    return np.vstack([low.to_numpy(), high.to_numpy()])


def draw_a(rows: pd.DataFrame, fig) -> None:
    """Per dataset, LOSO AUROC against ε: each mechanism's release (solid) and matched null (dashed), the
    non-private baseline (black) and the permuted-label control (grey) as levels with their bands; intervals over
    patients + seeds."""
    datasets = sorted(rows["dataset"].unique())
    fig.set_size_inches(5.5 * len(datasets), 4.0)
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    auroc = rows[rows["metric"] == "auroc"]
    mechanisms = sorted(auroc.loc[auroc["arm"] == "release", "mechanism"].unique())
    colors = {m: f"C{i}" for i, m in enumerate(mechanisms)}
    for ax, dataset in zip(axes, datasets):
        part = auroc[auroc["dataset"] == dataset]
        for arm, color, ls in (("baseline", "black", "-"), ("permuted", "grey", ":")):
            level = part[part["arm"] == arm]
            if len(level):
                ax.axhline(level["mean"].iloc[0], color=color, lw=1, ls=ls, label=level["mechanism"].iloc[0])
                ax.axhspan(level["ci_low"].iloc[0], level["ci_high"].iloc[0], color=color, alpha=0.1)
        for mechanism in mechanisms:
            for arm, ls in (("release", "-"), ("matched_null", "--")):
                line = part[(part["arm"] == arm) & (part["mechanism"] == mechanism)]
                line = line.assign(x=line["epsilon"].map(epsilon_order)).sort_values("x")
                if line.empty:
                    continue
                ax.errorbar(line["x"], line["mean"], yerr=_yerr(line), marker="o" if arm == "release" else "x",
                            capsize=3, ls=ls, color=colors[mechanism],
                            label=mechanism if arm == "release" else f"{mechanism} (matched null)")
        ax.set_xscale("log")
        ax.set(xlabel="ε per patient", ylabel="LOSO AUROC",
               title=_title(f"{dataset}: release vs matched null", part["synthetic"].any()))
        ax.legend(fontsize=6)
    fig.tight_layout()


def draw_b(rows: pd.DataFrame, fig) -> None:
    """Per dataset (a row of panels): utility accuracy vs ε per model, then one panel per attack with the AUROC of
    every attacker (no pick of the strongest: colour = model, marker = attacker) and its untrained-model control
    dotted, with the per-cell 95 % intervals clipped to [0, 1]. ε = inf (no DP) is the rightmost point."""
    datasets = sorted(rows["dataset"].unique())
    attacks = sorted(a for a in rows["attack"].unique() if a != "utility" and not a.endswith("_untrained_control"))
    attacks += sorted({a.removesuffix("_untrained_control") for a in rows["attack"]} - {"utility", *attacks})
    models = sorted(rows["model"].dropna().unique())
    attackers = sorted(a for a in rows["attacker"].unique() if a)
    markers = {a: "osD^v<>"[i % 7] for i, a in enumerate(attackers)}
    fig.set_size_inches(3.6 * (1 + len(attacks)), 3.4 * len(datasets))
    axes = fig.subplots(len(datasets), 1 + len(attacks), squeeze=False)
    for panels, dataset in zip(axes, datasets):
        part = rows[rows["dataset"] == dataset]
        epsilons = sorted(part["epsilon"].unique(), key=lambda e: epsilon_order(e) if e != "inf" else np.inf)
        position = {e: i for i, e in enumerate(epsilons)}
        base = part["attack"].str.removesuffix("_untrained_control")
        panel_rows = [("utility", part["attack"] == "utility", "utility accuracy (mean over rounds)")]
        panel_rows += [(a, base == a, f"AUROC {a} (every attacker)") for a in attacks]
        for ax, (attack, mask, what) in zip(panels, panel_rows):
            for (model, attacker, name), line in part[mask].groupby(["model", "attacker", "attack"]):
                line = line.assign(x=line["epsilon"].map(position)).sort_values("x")
                control = name.endswith("_untrained_control")
                label = model + (f" · {attacker}" if attacker else "") + (" untrained control" if control else "")
                ax.errorbar(line["x"], line["mean"], yerr=_yerr(line), ls=":" if control else "-", capsize=3,
                            marker=markers.get(attacker, "o"), color=f"C{models.index(model)}", label=label)
            if attack != "utility":
                ax.axhline(0.5, color="grey", lw=0.8, ls="--")
            ax.set_xticks(range(len(epsilons)), epsilons)
            ax.set(xlabel="ε", ylabel=what)
            ax.set_title(_title(f"{dataset}:\n{what}", part["synthetic"].any()), fontsize=8)
            if ax.has_data():
                ax.legend(fontsize=6)
    fig.tight_layout()


def draw_c(rows: pd.DataFrame, fig) -> None:
    """One panel per headline endpoint: encoders side by side, one bar per weight setting, 95 % CI bars."""
    metrics = [m for m in ("L_A", "AEDS", "BPID@1", "MIA AUC (head, LiRA)", DIAGNOSIS) if m in set(rows["metric"])]
    fig.set_size_inches(4 * max(len(metrics), 1), 3.8)
    axes = fig.subplots(1, max(len(metrics), 1), squeeze=False)[0]
    synthetic = rows["synthetic"].any()
    weights = sorted(rows["weights"].unique())
    if rows["dataset"].nunique() > 1:  # one bar group per (dataset, encoder), synthetic ones labelled
        names = rows["dataset"] + np.where(rows["synthetic"], " (SYNTHETIC)", "") + "\n" + rows["encoder"]
        rows = rows.assign(encoder=names)
    for ax, metric in zip(axes, metrics):
        part = rows[rows["metric"] == metric]
        encoders = sorted(part["encoder"].unique())
        width = 0.8 / len(weights)
        for i, weight in enumerate(weights):
            bars = part[part["weights"] == weight].set_index("encoder").reindex(encoders).dropna(subset=["mean"])
            x = [encoders.index(e) + (i - (len(weights) - 1) / 2) * width for e in bars.index]
            ax.bar(x, bars["mean"], width, yerr=_yerr(bars), capsize=3, label=weight)
        ax.set_xticks(range(len(encoders)), encoders)
        ax.set(title=_title(metric, synthetic), ylabel=metric)
        ax.legend(fontsize=7)
    provenance = "; ".join(dict.fromkeys(
        p for p, w in zip(rows.get("provenance", pd.Series(dtype=object)), rows["weights"])
        if isinstance(p, str) and p != "—" and w not in ("none", "random_init")))
    if provenance:  # what the encoders' weights are, in the figure's title
        fig.suptitle(f"Study C; neural encoders: {provenance}; random init beside", fontsize=9)
    fig.tight_layout()


DRAW = {"a": draw_a, "b": draw_b, "c": draw_c}


def write_png(draw: Callable, data: pd.DataFrame, png: Path, figsize: tuple[float, float] | None = None,
              **savefig) -> None:
    """Draw ``data`` on a new ``Figure`` and write it to ``png`` at 120 dpi, atomically (a report's figure).

    Parameters
    ----------
    draw
        ``draw(data, fig)``, drawing on the ``matplotlib.figure.Figure`` passed in (e.g. :func:`draw_a`).
    data
        What ``draw`` reads.
    png
        The file to write; it is replaced only once the figure is whole.
    figsize
        The figure's size in inches; None for matplotlib's default (``draw`` may set its own).
    **savefig
        Further arguments of ``Figure.savefig`` (e.g. ``bbox_inches="tight"``).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    draw(data, fig)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120, **savefig)
