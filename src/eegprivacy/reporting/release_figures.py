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
    its CI band, beside it that release's matched null (arm ``matched_null``: thin, crosses, no band) in the
    same colour, each scenario's noiseless value as a dotted line in its colour, and chance."""
    _single_dataset(agg)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 2.0, 3.4), layout="constrained",
                             squeeze=False)
    styles = ("-", "--", "-.", ":")
    arms = {"release": dict(marker="o", ms=4, alpha=1.0, band=0.15, suffix=""),
            "matched_null": dict(marker="x", ms=5, alpha=0.6, band=0.0, suffix=", matched null")}
    for ax, (metric, protocol) in zip(axes[0], panels):
        rows = agg[(agg["metric"] == metric) & (agg["protocol"] == protocol) & agg["arm"].isin(list(arms))]
        private = rows[rows["mechanism"] != BASELINE]
        mechanisms = sorted(private["mechanism"].unique())
        for scenario, part in rows.groupby("scenario", sort=True):
            colour = SCENARIO_COLOURS.get(scenario, mechanism_colour(scenario))
            for style, mechanism in zip(styles, mechanisms):
                name = f"{scenario} ({mechanism})" if len(mechanisms) > 1 else scenario
                for arm, look in arms.items():
                    sub = part[(part["mechanism"] == mechanism) & (part["arm"] == arm)].sort_values("epsilon")
                    if sub.empty:
                        continue
                    eps = sub["epsilon"].to_numpy(float)
                    ax.plot(eps, sub["value"], marker=look["marker"], ms=look["ms"], color=colour, ls=style,
                            alpha=look["alpha"], lw=1.5 if arm == "release" else 1.0, label=name + look["suffix"])
                    if look["band"]:
                        ax.fill_between(eps, sub["ci_low"].to_numpy(float), sub["ci_high"].to_numpy(float),
                                        color=colour, alpha=look["band"], linewidth=0)
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


def _scaling_panel(ax, s: pd.DataFrame, mechanism: str, difference: bool) -> None:
    """One dataset × mechanism of the ``dp_scaling`` summary (LOSO AUROC, intervals over patients and seeds):
    each scaling source's release (solid, band) beside its matched null (dashed) with the no-DP level and chance,
    or (``difference``) release − null, markers filled where the table's Holm correction keeps it above 0."""
    auroc = s[(s.metric == "auroc") & (s.mechanism == mechanism)]
    for source, (colour, marker, label) in SOURCE_STYLE.items():
        mine = auroc[auroc.scaling_source == source]
        arms = (("release_minus_null", "-", label),) if difference else \
            (("release", "-", label), ("matched_null", "--", None))
        for arm, ls, name in arms:
            sub = mine[mine.arm == arm].sort_values("epsilon")
            if sub.empty:
                continue
            eps = sub.epsilon.to_numpy(float)
            # the paper's private scaling drawn wider, so it shows where an honest source lies on top of it
            width = (2.6 if source == "private" else 1.4) if ls == "-" else 1.0
            ax.plot(eps, sub.value.to_numpy(float), ls=ls, color=colour, lw=width, label=name)
            ax.fill_between(eps, sub.ci_low.to_numpy(float), sub.ci_high.to_numpy(float), color=colour,
                            alpha=0.15 if ls == "-" else 0.06, linewidth=0)
            kept = sub["keeps_utility"].astype(str).eq("True").to_numpy() if difference else np.ones(len(sub), bool)
            ax.scatter(eps, sub.value.to_numpy(float), marker=marker if ls == "-" else "x", s=18, color=colour,
                       facecolors=np.where(kept, colour, "none"), zorder=3)
    if difference:
        ax.axhline(0.0, color="#444444", ls="--", lw=1, label="release = its matched null")
    else:
        ax.plot([], [], color="#444444", ls="--", lw=1.0, label=NULL_LABEL)
        base = s[s.arm == "baseline"]
        if len(base):
            _band(ax, base[base.metric == "auroc"].iloc[0], "#009E73", "no DP (private cohort)", "-.")
        ax.axhline(0.5, color="black", ls=":", lw=1, label=CHANCE_LABEL)
    ax.set_xscale("log")
    ticks = sorted(auroc.loc[auroc.arm == "release", "epsilon"].astype(float).unique())
    if ticks:
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
    ax.minorticks_off()
    ax.set_xlabel("total ε (scaling + release)")
    ax.grid(True, alpha=0.3)


def scaling_vs_epsilon(summary: pd.DataFrame, datasets: Sequence[str]) -> Figure:
    """LOSO AUROC vs total ε by source of the scaling statistics, from the ``dp_scaling`` summaries (``dataset``
    column): per dataset a row of each release beside its matched null and a row of release − null (filled
    markers: significant after Holm), a column per mechanism, a line (band: interval over patients and seeds) per
    source. Unlike the other figures this takes several datasets, each row titled SYNTHETIC where it is."""
    mechanisms = sorted(set(summary.loc[summary.arm == "release", "mechanism"]))
    fig, axes = plt.subplots(2 * len(datasets), len(mechanisms), squeeze=False, sharey="row", layout="constrained",
                             figsize=(4.3 * len(mechanisms), 2.9 * 2 * len(datasets) + 0.9))
    for i, dataset in enumerate(datasets):
        for row, difference in ((2 * i, False), (2 * i + 1, True)):
            for j, mechanism in enumerate(mechanisms):
                ax = axes[row, j]
                _scaling_panel(ax, summary[summary.dataset == dataset], mechanism, difference)
                if j == 0:
                    ax.set_ylabel("AUROC − matched null" if difference else "LOSO AUROC")
                what = "release − matched null" if difference else "release and matched null"
                ax.set_title(titled(f"{dataset} — {mechanism}", dataset.startswith("synthetic")) + f"\n{what}",
                             fontsize=8.5)
    _legend_once(fig, axes.ravel(), loc="outside lower center", ncols=3)
    fig.suptitle("Utility by source of the scaling statistics at equal total ε\n(LOSO AUROC; intervals over patients "
                 "and seeds" + ("; panels marked SYNTHETIC DATA are synthetic)" if any(d.startswith("synthetic")
                                                                            for d in datasets) else ")"), fontsize=10)
    return fig


_SUMMARY_PANELS = (("auroc", "threshold_free", "LOSO AUROC"),
                   ("balanced_accuracy", "nested", "balanced accuracy (nested threshold)"))
NULL_LABEL = "matched null (zero-signal table, same noise)"
CLIPPED_LABEL = "scaled + clipped, no noise"


def _band(ax, row, colour: str, label: str, ls: str) -> None:
    """A horizontal reference (baseline or control) with its interval as a band."""
    if not np.isfinite(float(row["value"])):
        return
    ax.axhline(float(row["value"]), color=colour, ls=ls, lw=1.5, label=label)
    if np.isfinite(float(row["ci_low"])) and np.isfinite(float(row["ci_high"])):
        ax.axhspan(float(row["ci_low"]), float(row["ci_high"]), color=colour, alpha=0.13, linewidth=0)


def release_vs_null(summary: pd.DataFrame, synthetic: bool = False, title: str | None = None) -> Figure:
    """Study A's headline figure: each mechanism's release (solid) and its matched null (dashed) against ε, with
    intervals over patients and seeds, beside the non-private baseline and the permuted-label control; a dotted
    vertical line marks the mechanism's utility horizon (the end of the unbroken run of ε, from the largest down,
    whose release − null clears 0: a fixed-sequence test at α/m per mechanism), and a dash-dot band the same
    table scaled and clipped without noise, where the summary has it (the clipping loss apart from the noise).
    Rows: LOSO AUROC and nested balanced accuracy; columns: mechanisms.

    ``summary`` holds one dataset's ``dp_utility`` summary rows (arm, mechanism, epsilon, protocol, metric, value,
    ci_low, ci_high)."""
    dataset = _single_dataset(summary)
    mechanisms = _mechanisms_in(summary[summary["arm"] == "release"])
    if not mechanisms:
        raise ValueError("no release rows in the summary")
    eps_ticks = sorted(e for e in summary.loc[summary["arm"] == "release", "epsilon"].astype(float).unique()
                       if np.isfinite(e))
    fig, axes = plt.subplots(len(_SUMMARY_PANELS), len(mechanisms), figsize=(3.4 * len(mechanisms) + 2.2, 5.6),
                             sharey="row", layout="constrained", squeeze=False)
    for r, (metric, protocol, ylabel) in enumerate(_SUMMARY_PANELS):
        rows = summary[(summary["metric"] == metric) & (summary["protocol"] == protocol)]
        for c, mechanism in enumerate(mechanisms):
            ax = axes[r, c]
            colour = mechanism_colour(mechanism)
            for arm, ls, label, alpha in (("release", "-", "release", 0.22), ("matched_null", "--", NULL_LABEL, 0.1)):
                sub = rows[(rows["arm"] == arm) & (rows["mechanism"] == mechanism)].sort_values("epsilon")
                if sub.empty:
                    continue
                eps = sub["epsilon"].to_numpy(float)
                ax.plot(eps, sub["value"].to_numpy(float), ls=ls, marker="o" if arm == "release" else "x", ms=4,
                        color=colour if arm == "release" else "#444444", label=label)
                ax.fill_between(eps, sub["ci_low"].to_numpy(float), sub["ci_high"].to_numpy(float),
                                color=colour if arm == "release" else "#444444", alpha=alpha, linewidth=0)
            base = rows[rows["arm"] == "baseline"]
            if len(base):
                _band(ax, base.iloc[0], MECHANISM_COLOURS[BASELINE], BASELINE_LABEL, "-")
            control = rows[rows["arm"] == "permuted"]
            if len(control):
                _band(ax, control.iloc[0], "#B07AA1", CONTROL_LABEL, ":")
            clipped = rows[rows["arm"] == "clipped"]
            if len(clipped):  # what scaling and clipping cost without noise: the ceiling of every release
                _band(ax, clipped.iloc[0], "#59A14F", CLIPPED_LABEL, "-.")
            horizon = summary[(summary["arm"] == "horizon") & (summary["mechanism"] == mechanism)
                              & (summary["metric"] == f"{metric}_horizon_epsilon")]
            if len(horizon) and np.isfinite(float(horizon["value"].iloc[0])):
                ax.axvline(float(horizon["value"].iloc[0]), color=colour, ls=":", lw=1.2, label="utility horizon")
            ax.axhline(0.5, color="black", ls="--", lw=0.8, label=CHANCE_LABEL)
            ax.set_xscale("log")
            if eps_ticks:
                ax.set_xticks(eps_ticks, [f"{e:g}" for e in eps_ticks])
                ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.set_title(mechanism if r == 0 else "", fontsize=9)
            ax.set_xlabel("ε per patient" if r == len(_SUMMARY_PANELS) - 1 else "")
            ax.set_ylabel(ylabel if c == 0 else "")
    _legend_once(fig, axes.ravel(), loc="outside lower center", ncols=3)
    fig.suptitle(titled(title or f"{dataset}: DP release vs its matched null "
                                 "(intervals over patients + seeds)", synthetic), fontsize=10)
    return fig
