"""Study A figures: utility of the DP feature release against ε, per mechanism, beside the non-private baseline.

All functions read one aggregated tidy table (``agg``: dataset, mechanism, epsilon, protocol, metric, value,
ci_low, ci_high, n, chance) and return a matplotlib Figure; the caller saves it. The non-private baseline is the
rows with mechanism ``"none"`` (epsilon = inf). A figure shows one dataset, so the figure functions raise
``ValueError`` when ``agg`` holds several; mechanisms or protocols that are absent are skipped, and a NaN CI
simply draws no band. Colours come from ``MECHANISM_COLOURS`` so a mechanism looks the same in every figure.
The one exception to one dataset per figure is :func:`scaling_vs_epsilon` (``dp_scaling``), a row per dataset.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from eegprivacy.reporting.figures import titled  # noqa: E402

BASELINE = "none"
BASELINE_LABEL = "non-private baseline"
# Negative control: the same evaluation on the original features with patient labels permuted. It shows the
# score a protocol gives when there is nothing to learn (the optimistic threshold protocol sits above 0.5).
CONTROL = "permuted_labels"
CONTROL_LABEL = "label-permuted control"
CHANCE_LABEL = "chance"

# Okabe-Ito (colour-blind safe): Gaussian variants in blues, Laplace variants in oranges, baseline grey.
MECHANISM_COLOURS: dict[str, str] = {
    "gaussian_analytic": "#0072B2",
    "gaussian_classic": "#56B4E9",
    "laplace_implemented": "#D55E00",
    "laplace_formal": "#E69F00",
    BASELINE: "#7F7F7F",
}
MECHANISM_ORDER: tuple[str, ...] = ("gaussian_analytic", "gaussian_classic", "laplace_implemented", "laplace_formal")
_FALLBACK_COLOURS = ("#009E73", "#CC79A7", "#000000", "#F0E442")

_METRIC_LABELS = {
    "balanced_accuracy": "balanced accuracy",
    "snr_db": "SNR (dB)",
    "rmse": "RMSE",
    "mae": "MAE",
    "correlation": "Pearson r (released vs input)",
    "noise_scale": "noise scale (σ or b)",
    "fraction_rows_clipped": "fraction of rows clipped",
}
_COUNTS = ("tn", "fp", "fn", "tp")


def mechanism_colour(mechanism: str) -> str:
    """Fixed colour per mechanism; an unregistered name gets a colour hashed from its name, stable across figures."""
    if mechanism in MECHANISM_COLOURS:
        return MECHANISM_COLOURS[mechanism]
    return _FALLBACK_COLOURS[zlib.crc32(mechanism.encode()) % len(_FALLBACK_COLOURS)]


def _mechanisms_in(frame: pd.DataFrame) -> list[str]:
    """Private mechanisms present, registered ones in a fixed order first, so legends read the same everywhere."""
    present = set(frame["mechanism"].astype(str)) - {BASELINE, CONTROL}
    known = [m for m in MECHANISM_ORDER if m in present]
    return known + sorted(present - set(known))


def _single_dataset(agg: pd.DataFrame) -> str:
    """A figure mixing datasets would silently average unlike cohorts, so refuse it."""
    datasets = agg["dataset"].dropna().astype(str).unique()
    if len(datasets) > 1:
        raise ValueError(f"agg holds several datasets {sorted(datasets)}; filter to one dataset per figure")
    if len(datasets) == 0:
        raise ValueError("agg is empty: nothing to plot")
    return str(datasets[0])


def _rows(agg: pd.DataFrame, metric: str, protocol: str) -> pd.DataFrame:
    rows = agg[(agg["metric"] == metric) & (agg["protocol"] == protocol)]
    key = rows.assign(_eps=rows["epsilon"].astype(float).fillna(np.inf))[["mechanism", "_eps"]]
    dup = key.duplicated(keep=False)
    if dup.any():  # an aggregated table has one row per cell; several means a config column was not split out
        cells = sorted({(m, e) for m, e in key[dup].itertuples(index=False)})
        raise ValueError(f"several rows for {metric}/{protocol} at (mechanism, epsilon) {cells[:5]}; aggregate first")
    return rows


def _finite(x) -> np.ndarray:
    return np.isfinite(np.asarray(x, dtype=float))


def _chance(rows: pd.DataFrame) -> float | None:
    values = pd.to_numeric(rows["chance"], errors="coerce").dropna().unique() if "chance" in rows else []
    if len(values) == 0:
        return None
    if not np.allclose(values, values[0]):
        raise ValueError(f"inconsistent chance levels {sorted(values)} within one panel")
    return float(values[0])


def _panel(ax, rows: pd.DataFrame, eps_ticks: Sequence[float]) -> None:
    """Lines with CI bands per mechanism, then the baseline band and chance line, on a log-ε axis."""
    for mechanism in _mechanisms_in(rows):
        sub = rows[(rows["mechanism"] == mechanism) & _finite(rows["epsilon"])].sort_values("epsilon")
        if sub.empty:
            continue
        colour = mechanism_colour(mechanism)
        eps = sub["epsilon"].to_numpy(float)
        ax.plot(eps, sub["value"].to_numpy(float), marker="o", ms=4, color=colour, label=mechanism)
        low, high = sub["ci_low"].to_numpy(float), sub["ci_high"].to_numpy(float)
        has_ci = _finite(low) & _finite(high)
        if has_ci.any():
            ax.fill_between(eps, low, high, where=has_ci, color=colour, alpha=0.2, linewidth=0, interpolate=False)
    base = rows[rows["mechanism"] == BASELINE]
    if len(base) and np.isfinite(float(base["value"].iloc[0])):
        row = base.iloc[0]
        ax.axhline(float(row["value"]), color=MECHANISM_COLOURS[BASELINE], lw=1.5, label=BASELINE_LABEL)
        if np.isfinite(float(row["ci_low"])) and np.isfinite(float(row["ci_high"])):
            ax.axhspan(float(row["ci_low"]), float(row["ci_high"]), color=MECHANISM_COLOURS[BASELINE], alpha=0.15,
                       linewidth=0)
    control = rows[rows["mechanism"] == CONTROL]
    if len(control) and np.isfinite(float(control["value"].iloc[0])):
        row = control.iloc[0]
        ax.axhline(float(row["value"]), color="#B07AA1", ls=":", lw=1.8, label=CONTROL_LABEL)
        if np.isfinite(float(row["ci_low"])) and np.isfinite(float(row["ci_high"])):
            ax.axhspan(float(row["ci_low"]), float(row["ci_high"]), color="#B07AA1", alpha=0.12, linewidth=0)
    chance = _chance(rows)
    if chance is not None:
        ax.axhline(chance, color="black", ls="--", lw=1, label=CHANCE_LABEL)
    ax.set_xscale("log")
    if len(eps_ticks):
        ax.set_xticks(list(eps_ticks), [f"{e:g}" for e in eps_ticks])
        ax.minorticks_off()
    ax.set_xlabel("ε")
    ax.grid(True, alpha=0.3)


def _eps_grid(rows: pd.DataFrame) -> list[float]:
    eps = rows.loc[~rows["mechanism"].isin([BASELINE, CONTROL]), "epsilon"].astype(float)
    return sorted(eps[np.isfinite(eps)].unique())


def _legend_once(fig: Figure, axes, loc: str = "outside right upper", ncols: int = 1) -> None:
    """One figure-level legend with every label that appears in any panel (first occurrence wins)."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc=loc, ncols=ncols, fontsize=8)


def _lines_figure(panels: list[tuple[str, pd.DataFrame, str]], title: str, synthetic: bool, sharey: bool) -> Figure:
    eps_ticks = sorted(set().union(*[_eps_grid(rows) for _, rows, _ in panels]))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 2.0, 3.4), sharey=sharey,
                             layout="constrained", squeeze=False)
    axes = axes[0]
    for i, (ax, (panel_title, rows, ylabel)) in enumerate(zip(axes, panels)):
        _panel(ax, rows, eps_ticks)
        ax.set_title(panel_title, fontsize=9)
        ax.set_ylabel(ylabel if i == 0 or not sharey else "")
    _legend_once(fig, axes)
    fig.suptitle(titled(title, synthetic), fontsize=10)
    return fig


def _metric_panels(agg: pd.DataFrame, specs: Sequence[tuple[str, str, str]]) -> list[tuple[str, pd.DataFrame, str]]:
    """(panel title, rows, y label) for each (title, metric, protocol) that has rows, labelled by its metric."""
    return [(title, rows, _METRIC_LABELS.get(metric, metric)) for title, metric, protocol in specs
            if len(rows := _rows(agg, metric, protocol))]


def utility_vs_epsilon(agg: pd.DataFrame, metric: str = "balanced_accuracy",
                       protocols: Sequence[str] = ("optimistic", "nested"), title: str | None = None,
                       synthetic: bool = False) -> Figure:
    """Classification utility against ε, one panel per LOSO protocol, so the privacy cost reads against the
    non-private baseline and chance. Protocols with no rows for ``metric`` are skipped; none at all raises."""
    dataset = _single_dataset(agg)
    panels = _metric_panels(agg, [(protocol, metric, protocol) for protocol in protocols])
    if not panels:
        raise ValueError(f"no rows for metric {metric!r} in protocols {list(protocols)}")
    return _lines_figure(panels, title or f"{dataset}: {metric} vs ε", synthetic, sharey=True)


def intrinsic_vs_epsilon(agg: pd.DataFrame, metrics: Sequence[str] = ("correlation", "snr_db"),
                         title: str | None = None, synthetic: bool = False, protocol: str = "intrinsic") -> Figure:
    """How far the released features are from the mechanism's input, per metric, before any model is trained.
    A baseline row is drawn only where its value is finite (a noise-free SNR is inf and is left out)."""
    dataset = _single_dataset(agg)
    panels = _metric_panels(agg, [(metric, metric, protocol) for metric in metrics])
    if not panels:
        raise ValueError(f"no {protocol!r} rows for metrics {list(metrics)}")
    return _lines_figure(panels, title or f"{dataset}: intrinsic utility vs ε", synthetic, sharey=False)


def _counts(agg: pd.DataFrame, mechanism: str, protocol: str, epsilon: float | None) -> np.ndarray | None:
    """Mean [[tn, fp], [fn, tp]] (rows = true class, scikit-learn layout), or None if a count is missing."""
    rows = agg[(agg["mechanism"] == mechanism) & (agg["protocol"] == protocol) & agg["metric"].isin(_COUNTS)]
    eps = rows["epsilon"].astype(float)
    rows = rows[~np.isfinite(eps)] if epsilon is None else rows[np.isclose(eps, epsilon, rtol=1e-9, atol=0)]
    values = rows.groupby("metric")["value"].agg(list)
    if any(m not in values or len(values[m]) != 1 or not np.isfinite(values[m][0]) for m in _COUNTS):
        return None
    return np.array([[values["tn"][0], values["fp"][0]], [values["fn"][0], values["tp"][0]]], dtype=float)


def confusion_matrices(agg: pd.DataFrame, epsilon: float = 10.0, protocol: str = "optimistic",
                       title: str | None = None, synthetic: bool = False) -> Figure:
    """Mean confusion counts for the baseline and each mechanism at one ε, to show which errors the noise adds
    (e.g. collapsing to one class). Panels share one colour scale and carry no colour bar: the annotations
    (mean over seeds, 1 decimal) are the numbers. Mechanisms without all four counts at ε are skipped."""
    dataset = _single_dataset(agg)
    panels: list[tuple[str, np.ndarray]] = []
    base = _counts(agg, BASELINE, protocol, None)
    if base is not None:
        panels.append((f"{BASELINE_LABEL}\nε = ∞", base))
    for mechanism in _mechanisms_in(agg):
        counts = _counts(agg, mechanism, protocol, epsilon)
        if counts is not None:
            panels.append((f"{mechanism}\nε = {epsilon:g}", counts))
    if not panels:
        raise ValueError(f"no complete tn/fp/fn/tp rows for protocol {protocol!r} (baseline or ε = {epsilon:g})")
    vmax = max(float(c.max()) for _, c in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 2.9), layout="constrained", squeeze=False)
    for i, (ax, (panel_title, counts)) in enumerate(zip(axes[0], panels)):
        sns.heatmap(counts, ax=ax, annot=True, fmt=".1f", cmap="Blues", vmin=0, vmax=vmax, cbar=False,
                    square=True, xticklabels=["0", "1"], yticklabels=["0", "1"], linewidths=0.5)
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true" if i == 0 else "")
        ax.tick_params(axis="y", rotation=0)
    fig.suptitle(titled(title or f"{dataset}: mean confusion counts ({protocol})", synthetic), fontsize=10)
    return fig


def plot_data(agg: pd.DataFrame, metric: str, protocol: str) -> pd.DataFrame:
    """Tidy rows (dataset, mechanism, epsilon, value, ci_low, ci_high) for a DVC plot of ``metric`` vs ε.

    DVC/Vega cannot take inf, so every ±inf becomes NaN: the baseline rows are kept, with epsilon NaN (a log-ε
    plot drops them; filter on mechanism == "none" to draw them as a reference). Unlike the figures this accepts
    several datasets, since the dataset column keeps them apart. Sorted by dataset, mechanism, epsilon.
    """
    cols = ["dataset", "mechanism", "epsilon", "value", "ci_low", "ci_high"]
    rows = agg.loc[(agg["metric"] == metric) & (agg["protocol"] == protocol), cols].copy()
    for col in ("epsilon", "value", "ci_low", "ci_high"):
        rows[col] = rows[col].astype(float).replace([np.inf, -np.inf], np.nan)
    order = {m: i for i, m in enumerate((BASELINE, *MECHANISM_ORDER))}
    rows["_order"] = rows["mechanism"].map(order).fillna(len(order))
    rows = rows.sort_values(["dataset", "_order", "mechanism", "epsilon"], na_position="first")
    return rows.drop(columns="_order").reset_index(drop=True)


def panels_vs_epsilon(agg: pd.DataFrame, panels: Sequence[tuple[str, str, str, str]], title: str,
                      synthetic: bool = False, sharey: bool = False) -> Figure:
    """Any metrics against ε, one panel per (panel title, metric, protocol, y label): attack success and
    utility read the same way, with the noiseless ``none`` row and the chance level in every panel."""
    _single_dataset(agg)
    drawn = [(name, rows, ylabel) for name, metric, protocol, ylabel in panels
             if len(rows := _rows(agg, metric, protocol))]
    if not drawn:
        raise ValueError(f"no rows for any of the panels {[p[1] for p in panels]}")
    return _lines_figure(drawn, title, synthetic, sharey=sharey)


SCENARIO_COLOURS = {"client_side": "#0072B2", "server_side": "#009E73", "decentralised": "#CC79A7"}


def scenarios_vs_epsilon(agg: pd.DataFrame, panels: Sequence[tuple[str, str]], title: str,
                         synthetic: bool = False) -> Figure:
    """Deployment scenarios against ε, one panel per (metric, protocol): a line per (scenario, mechanism) with
    its CI band, each scenario's noiseless value as a dotted line in its colour, and chance."""
    _single_dataset(agg)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 2.0, 3.4), layout="constrained",
                             squeeze=False)
    styles = ("-", "--", "-.", ":")
    for ax, (metric, protocol) in zip(axes[0], panels):
        rows = agg[(agg["metric"] == metric) & (agg["protocol"] == protocol)]
        private = rows[rows["mechanism"] != BASELINE]
        mechanisms = sorted(private["mechanism"].unique())
        for scenario, part in rows.groupby("scenario", sort=True):
            colour = SCENARIO_COLOURS.get(scenario, mechanism_colour(scenario))
            for style, mechanism in zip(styles, mechanisms):
                sub = part[part["mechanism"] == mechanism].sort_values("epsilon")
                if sub.empty:
                    continue
                eps = sub["epsilon"].to_numpy(float)
                ax.plot(eps, sub["value"], marker="o", ms=4, color=colour, ls=style,
                        label=f"{scenario} ({mechanism})" if len(mechanisms) > 1 else scenario)
                ax.fill_between(eps, sub["ci_low"].to_numpy(float), sub["ci_high"].to_numpy(float), color=colour,
                                alpha=0.15, linewidth=0)
            base = part[part["mechanism"] == BASELINE]
            if len(base):
                ax.axhline(float(base["value"].iloc[0]), color=colour, ls=":", lw=1.2,
                           label=f"{scenario}, no noise")
        chance = _chance(rows)
        if chance is not None:
            ax.axhline(chance, color="black", ls="--", lw=1, label=CHANCE_LABEL)
        ticks = sorted(private["epsilon"].astype(float).unique())
        ax.set_xscale("log")
        if ticks:
            ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
            ax.minorticks_off()
        ax.set_xlabel("ε (per release)")
        ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
        ax.set_title(f"{metric} ({protocol})", fontsize=9)
        ax.grid(True, alpha=0.3)
    _legend_once(fig, axes[0])
    fig.suptitle(titled(title, synthetic), fontsize=10)
    return fig


# Scaling sources: the paper's private statistics in grey, the end-to-end alternatives in colour.
SOURCE_STYLE = {"private": ("#7F7F7F", "s", "private scaling (paper; no end-to-end ε)"),
                "public_reference": ("#0072B2", "o", "public reference scaling (end to end)"),
                "dp_quantiles": ("#D55E00", "^", "DP-quantile scaling (end to end)")}


def _scaling_panel(ax, a: pd.DataFrame, mechanism: str) -> None:
    """One dataset × mechanism: a line (CI band) per scaling source, the no-DP level and chance."""
    for source, (colour, marker, label) in SOURCE_STYLE.items():
        sub = a[(a.mechanism == mechanism) & (a.scaling_source == source)].sort_values("epsilon")
        if sub.empty:
            continue
        eps = sub.epsilon.to_numpy(float)
        ax.plot(eps, sub.value, marker=marker, ms=4, color=colour, label=label)
        ax.fill_between(eps, sub.ci_low.to_numpy(float), sub.ci_high.to_numpy(float), color=colour,
                        alpha=0.15, linewidth=0)
    base = a[a.mechanism == BASELINE]
    if len(base):
        ax.axhline(float(base.value.iloc[0]), color="#009E73", lw=1.2, ls="-.", label="no DP (private cohort)")
    ax.axhline(0.5, color="black", ls="--", lw=1, label=CHANCE_LABEL)
    ax.set_xscale("log")
    ticks = sorted(a.loc[a.mechanism == mechanism, "epsilon"].astype(float).unique())
    ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
    ax.minorticks_off()
    ax.set_xlabel("total ε (scaling + release)")
    ax.grid(True, alpha=0.3)


def scaling_vs_epsilon(agg: pd.DataFrame, datasets: Sequence[str]) -> Figure:
    """Balanced accuracy vs total ε by source of the scaling statistics: a row per dataset, a column per
    mechanism, a line (CI band) per source. Unlike the other figures this takes several datasets (``dataset``
    column), each row titled SYNTHETIC where it is."""
    mechanisms = sorted(set(agg.mechanism) - {BASELINE})
    fig, axes = plt.subplots(len(datasets), len(mechanisms), figsize=(4.3 * len(mechanisms), 3.2 * len(datasets) + 0.8),
                             squeeze=False, sharey=True, layout="constrained")
    for i, dataset in enumerate(datasets):
        for j, mechanism in enumerate(mechanisms):
            ax = axes[i, j]
            _scaling_panel(ax, agg[agg.dataset == dataset], mechanism)
            ax.set_ylabel("balanced accuracy (LOSO, optimistic)" if j == 0 else "")
            ax.set_title(titled(f"{dataset} — {mechanism}", dataset.startswith("synthetic")), fontsize=8.5)
    _legend_once(fig, axes.ravel(), loc="outside lower center", ncols=3)
    fig.suptitle("Utility by source of the scaling statistics at equal total ε"
                 + (" (panels marked SYNTHETIC DATA are synthetic)" if any(d.startswith("synthetic") for d in datasets)
                    else ""), fontsize=10)
    return fig
