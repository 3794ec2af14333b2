"""Drawing for the cohort audit: figures and the HTML report (``mne.Report``) from its summary rows alone.

Nothing here computes a statistic: every number drawn or printed is a value of the summary rows that
:func:`eegprivacy.studies.cohort_audit.run_audit` logged to MLflow (``rows``) or of ``summary.json`` (``summary``).
"""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eegprivacy.privacy.mechanisms import guarantee_label  # noqa: E402
from eegprivacy.reporting.figures import titled  # noqa: E402
from eegprivacy.reporting.release_figures import mechanism_colour  # noqa: E402

METRIC_LABELS = {"auroc": "LOSO AUROC (threshold-free)", "balanced_accuracy": "balanced accuracy (nested threshold)"}


def _rows(rows: pd.DataFrame, arm: str, metric: str, mechanism: str | None = None) -> pd.DataFrame:
    part = rows[(rows["arm"] == arm) & (rows["metric"] == metric)]
    if mechanism is not None:
        part = part[part["mechanism"] == mechanism]
    return part.sort_values("epsilon")


def _band(ax, row: pd.Series, colour: str, label: str) -> None:
    """A horizontal line with its interval as a band (the baseline and the permuted control)."""
    ax.axhline(row["value"], color=colour, lw=1.2, label=label)
    if np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"]):
        ax.axhspan(row["ci_low"], row["ci_high"], color=colour, alpha=0.15, lw=0)


def _curve(ax, part: pd.DataFrame, colour: str, label: str, style: str = "-") -> None:
    if part.empty:
        return
    ax.plot(part["epsilon"], part["value"], style, marker="o", ms=3, color=colour, label=label)
    ax.fill_between(part["epsilon"], part["ci_low"], part["ci_high"], color=colour, alpha=0.18, lw=0)


# The non-private arms drawn as bands (any other arm at ε = ∞ gets the last colour).
CONTROL_BANDS = (("baseline", "#4D4D4D", "non-private baseline"),
                 ("clipped", "#1B9E77", "scaled + clipped, no noise"),
                 ("permuted", "#B0B0B0", "permuted-label control"))


def utility_figure(rows: pd.DataFrame, summary: dict):
    """Per mechanism (columns) and metric (rows): release and matched-null curves with intervals, the non-private
    baseline, the noise-free clipped table and the permuted-label control as bands, chance, and the utility
    horizon of the fixed-sequence test."""
    mechanisms = list(summary["config"]["mechanisms"])
    metrics = [m for m in ("auroc", "balanced_accuracy") if not _rows(rows, "release", m).empty]
    fig, axes = plt.subplots(len(metrics), len(mechanisms), figsize=(4.6 * len(mechanisms), 3.4 * len(metrics)),
                             squeeze=False, sharey="row")
    for i, metric in enumerate(metrics):
        for j, mechanism in enumerate(mechanisms):
            ax = axes[i, j]
            colour = mechanism_colour(mechanism)
            for arm, colour_, label in CONTROL_BANDS:
                part = _rows(rows, arm, metric)
                if len(part):
                    _band(ax, part.iloc[0], colour_, label)
            _curve(ax, _rows(rows, "release", metric, mechanism), colour, "DP release")
            _curve(ax, _rows(rows, "matched_null", metric, mechanism), "#000000", "matched null (zero signal)", "--")
            ax.axhline(0.5, color="k", lw=0.6, ls=":", label="chance")
            test = summary.get("horizon_tests", {}).get(mechanism, {}).get(metric) or {}
            horizon = test.get("value")
            if isinstance(horizon, float):
                ax.axvline(horizon, color=colour, lw=1, ls="-.", label=f"horizon ε = {horizon:g}")
            ax.set_xscale("log")
            ax.set_xlabel(f"ε (per {summary['eps_unit']})")
            flag = summary.get("mechanism_flags", {}).get(mechanism)
            ax.set_title(mechanism + (f"\n({flag})" if flag else ""), fontsize=9 if flag else 10)
            if j == 0:
                ax.set_ylabel(METRIC_LABELS[metric])
            if i == 0 and j == len(mechanisms) - 1:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(titled(f"{summary['dataset']}: utility of the DP release vs ε, beside its matched null "
                        f"(intervals over {rows['ci_over'].iloc[0] if len(rows) else 'subjects+seeds'})",
                        summary["synthetic"]), fontsize=10)
    fig.tight_layout()
    return fig


def attack_figure(rows: pd.DataFrame, summary: dict):
    """Re-identification top-1 accuracy and membership AUROC vs ε, beside chance and the noiseless table."""
    mechanisms = list(summary["config"]["mechanisms"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    panels = ((axes[0], "reidentification", "top1_accuracy", "re-identification top-1 accuracy"),
              (axes[1], "membership", "auroc_likelihood", "membership AUROC (likelihood attack)"))
    for ax, arm, metric, label in panels:
        part = rows[(rows["arm"] == arm) & (rows["metric"] == metric)]
        if part.empty:
            reason = summary["attacks"].get(arm, {}).get("reason") or "not run"
            ax.text(0.5, 0.5, f"does not apply:\n{reason}", ha="center", va="center", wrap=True, fontsize=8,
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        for mechanism in mechanisms:
            _curve(ax, part[part["mechanism"] == mechanism].sort_values("epsilon"), mechanism_colour(mechanism),
                   mechanism)
        noiseless = rows[(rows["arm"] == arm) & (rows["mechanism"] == "none")
                         & (rows["metric"] == (metric if arm == "reidentification" else "auroc_distance"))]
        if len(noiseless):
            _band(ax, noiseless.iloc[0], "#4D4D4D", "no noise (scaled, clipped)")
        chance = float(part["chance"].dropna().iloc[0])
        ax.axhline(chance, color="k", lw=0.6, ls=":", label=f"chance ({chance:.3g})")
        ax.set_xscale("log")
        ax.set_xlabel(f"ε (per {summary['eps_unit']})")
        kind = summary["attacks"].get(arm, {}).get("kind")
        ax.set_title(label + (f"\n({kind})" if kind else ""), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(titled(f"{summary['dataset']}: attacks on the released patient table", summary["synthetic"]),
                 fontsize=10)
    fig.tight_layout()
    return fig


def figures(rows: pd.DataFrame, summary: dict) -> dict:
    return {"utility": utility_figure(rows, summary), "attacks": attack_figure(rows, summary)}


def close(figs: dict) -> None:
    for fig in figs.values():
        plt.close(fig)


def _fmt(entry) -> str:
    if entry is None:
        return "–"
    value, low, high = entry.get("value"), entry.get("ci_low"), entry.get("ci_high")
    if value is None:
        return "–"
    text = f"{value:.3f}"
    if low is not None and high is not None:
        text += f" [{low:.3f}, {high:.3f}]"
    return text


def _table(header: list[str], body: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in body)
    return f'<table class="table table-sm table-striped"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def cohort_html(summary: dict) -> str:
    c = summary["cohort"]
    body = [["patients (subjects)", c["n_patients"]], ["label 1 / label 0", f"{c['n_label_1']} / {c['n_label_0']}"],
            ["recordings used / listed", f"{c['n_recordings']} / {c['n_recordings_listed']}"],
            ["windows", c["n_windows"]], ["channels", f"{c['n_channels']}: {', '.join(c['channels'])}"],
            ["sampling rate(s), Hz", ", ".join(f"{f:g}" for f in c["sfreqs"])],
            ["duration, total / median per recording (s)",
             f"{c['duration_s_total']:.0f} / {c['duration_s_median_per_recording']:.1f}"],
            ["sessions / runs (distinct labels)", f"{c['n_sessions']} / {c['n_runs']}"],
            ["recordings per subject (max); subjects with ≥ 2",
             f"{c['recordings_per_subject_max']}; {c['n_subjects_with_2plus_recordings']}"],
            ["tasks", ", ".join(c["tasks"]) or "–"], ["features per patient", c["n_features"]],
            ["dataset version", summary["dataset_version"]], ["synthetic", summary["synthetic"]]]
    return _table(["", ""], body)


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def _mechanism(summary: dict, mechanism: str) -> str:
    """A mechanism's name as every table prints it: with its flag (e.g. the paper's mechanism: no formal guarantee
    for d > 1)."""
    flag = summary.get("mechanism_flags", {}).get(mechanism)
    return f"{mechanism} ({flag})" if flag else mechanism


# The release − null columns of the utility summary (eegprivacy.studies.release.utility.summarise), in the order
# the table prints them; any other column the summary adds is printed after them, under its own name.
TEST_COLUMNS = (("p_value", "p (one-sided)"), ("p_mc_error", "Monte-Carlo error of p"),
                ("alpha_tested", "α tested"), ("p_adjusted", "adjusted p"), ("keeps_utility", "keeps utility"),
                ("decision_stable", "decision stable"), ("tested", "tested"))
_NOT_TEST_COLUMNS = {"value", "ci_low", "ci_high", "ci_over", "n", "n_seeds", "chance", "mlflow_metric", "protocol",
                     "eps_unit", "eps_covers", "eps_covers_note", "correction", "note", "attack_kind", "horizon",
                     "horizon_tested"}


def _controls_text(summary: dict) -> str:
    names = {"baseline": "Non-private baseline", "clipped": "Scaled and clipped table, no noise",
             "permuted": "Permuted-label control", "baseline_minus_permuted": "Baseline − permuted control",
             "baseline_minus_clipped": "Baseline − clipped (what scaling and clipping cost)"}
    controls = summary.get("controls") or {"baseline": summary["baseline"], "permuted": summary["permuted_labels"]}
    parts = []
    for arm, by_metric in controls.items():
        auroc, ba = by_metric.get("auroc"), by_metric.get("balanced_accuracy")
        text = f"{names.get(arm, arm)}: AUROC {_fmt(auroc)}, balanced accuracy {_fmt(ba)}"
        p = (auroc or {}).get("p_value")
        if p is not None:
            text += f" (AUROC one-sided p = {_number(p)})"
        parts.append(text)
    return ". ".join(parts) + "."


def horizon_html(summary: dict) -> str:
    """The horizon table: per mechanism and metric, the horizon, the test that decided it (the summary's
    ``correction``), whether it was tested (and why not), whether every decision is stable against the bootstrap's
    Monte-Carlo error, and what the ε covers."""
    body = []
    for mechanism, tests in summary.get("horizon_tests", {}).items():
        for metric, test in tests.items():
            horizon = test.get("horizon", "–")
            body.append([_mechanism(summary, mechanism), METRIC_LABELS.get(metric, metric),
                         f"ε = {horizon}" if horizon not in ("none", "not tested") else horizon,
                         test.get("correction", "–"), _number(test.get("alpha_tested")),
                         _number(test.get("decision_stable")), test.get("note") or "",
                         test.get("eps_covers", "–"), summary["eps_unit"]])
    return _table(["mechanism", "metric", "utility horizon", "test (correction)", "α per test", "decisions stable",
                   "note", "ε covers", "ε unit"], body)


def utility_html(summary: dict) -> str:
    covers = summary.get("eps_covers") or "–"
    intro = (f"<p>{html.escape(_controls_text(summary))} Intervals: 95% patient-level (cluster) bootstrap "
             "combined with seeds (ci_over = subjects+seeds).</p>"
             f"<p><b>Horizon test</b>: {html.escape(summary['horizon_rule'])}. <b>ε covers</b>: "
             f"{html.escape(covers)}"
             + (f" — {html.escape(summary['eps_covers_note'])}" if summary.get("eps_covers_note") else "")
             + ".</p>")
    body, extra = [], []
    for by_eps in summary["utility"].values():
        for cells in by_eps.values():
            for column in (cells.get("release_minus_null_auroc") or {}):
                if column not in _NOT_TEST_COLUMNS and column not in dict(TEST_COLUMNS) and column not in extra:
                    extra.append(column)
    columns = [*TEST_COLUMNS, *((c, c) for c in extra)]
    for mechanism, by_eps in summary["utility"].items():
        for eps, cells in by_eps.items():
            diff = cells.get("release_minus_null_auroc") or {}
            body.append([_mechanism(summary, mechanism), eps, _fmt(cells.get("release_auroc")),
                         _fmt(cells.get("matched_null_auroc")), _fmt(diff),
                         *(_number(diff.get(c)) for c, _ in columns),
                         _fmt(cells.get("release_minus_null_balanced_accuracy"))])
    horizons = ", ".join(f"{_mechanism(summary, m)}: {h if isinstance(h, str) else f'ε = {h:g}'}"
                         for m, h in summary["horizons"].items())
    return (intro + f"<p><b>Utility horizon</b> (AUROC) — {html.escape(horizons)}</p>" + horizon_html(summary)
            + "<h4>Release − matched null, per ε (AUROC)</h4>"
            + _table(["mechanism", "ε", "release AUROC", "null AUROC", "release − null", *(n for _, n in columns),
                      "release − null (BA)"], body))


def attacks_html(summary: dict) -> str:
    parts = []
    for kind, title, metric in (("reidentification", "Re-identification (top-1 accuracy)", "top1_accuracy"),
                                ("membership", "Membership inference (AUROC, likelihood / distance)",
                                 "auroc_likelihood")):
        info = summary["attacks"].get(kind, {})
        if not info.get("applies"):
            parts.append(f"<h4>{title}</h4><p>Does not apply: {html.escape(info.get('reason', ''))}</p>")
            continue
        body = []
        for mechanism, by_eps in info["results"].items():
            for eps, cells in by_eps.items():
                main = cells.get(metric) or cells.get("auroc_distance") or cells.get("top1_accuracy")
                other = cells.get("top1_accuracy_shuffled_control") or cells.get("auroc_distance")
                body.append([_mechanism(summary, mechanism), eps, _fmt(main),
                             _fmt(other) if other is not main else "–",
                             f"{main['chance']:.3f}" if main and main.get("chance") is not None else "–",
                             main.get("ci_over", "") if main else ""])
        second = "shuffled-identity control" if kind == "reidentification" else "distance attack"
        note = f" ({html.escape(info.get('kind', ''))}: {html.escape(info.get('reason', ''))})" if kind == \
            "reidentification" else ""
        parts.append(f"<h4>{title}</h4><p>Beside chance{note}.</p>"
                     + _table(["mechanism", "ε", "value [95% CI]", second, "chance", "CI over"], body))
    return "".join(parts)


def guarantees_html(summary: dict) -> str:
    body = [[_mechanism(summary, g["mechanism"]), f"{g['epsilon']:g}", f"{g['delta']:g}", g["eps_unit"],
             f"{g['noise_scale']:.4g}",
             f"{g['sensitivity']:.4g} ({g['sensitivity_norm']})", guarantee_label(g), g["note"]]
            for g in summary["guarantees"]]
    caveats = "".join(f"<li>{html.escape(c)}</li>" for c in summary["caveats"])
    header = ["mechanism", "ε", "δ", "ε unit", "noise scale", "sensitivity", "formal guarantee", "scope"]
    return (_table(header, body)
            + f"<h4>Caveats</h4><ul>{caveats}</ul>")


def quality_html(summary: dict) -> str:
    c = summary["cohort"]
    body = [[flag, count] for flag, count in c["flags"].items()]
    text = _table(["flag (recordings)", "count"], body) if body else "<p>No recording carries a flag.</p>"
    if c["features_dropped_nonfinite"]:
        text += (f"<p>{len(c['features_dropped_nonfinite'])} feature(s) left out (not finite for every patient): "
                 f"{html.escape(', '.join(c['features_dropped_nonfinite'][:20]))}</p>")
    if c["warnings"]:
        text += "<ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in c["warnings"]) + "</ul>"
    return text


def write_html(path: str | Path, rows: pd.DataFrame, summary: dict, images: dict) -> Path:
    """The report, as one self-contained page (``mne.Report``), embedding the figures' PNG files
    (``images["utility"]``, ``images["attacks"]``): handed the Figures instead, MNE 1.13 embedded them sheared
    (seen in Chromium), while the PNG files saved from the same figures are right."""
    import mne

    title = ("[SYNTHETIC DATA] " if summary["synthetic"] else "") + f"Cohort audit: {summary['dataset']}"
    report = mne.Report(title=title, verbose="error")
    report.add_html(cohort_html(summary), title="Cohort summary", section="Cohort")
    report.add_html(utility_html(summary), title="Utility vs ε", section="Utility")
    report.add_image(images["utility"], title="Utility vs ε with matched null and horizon", section="Utility",
                     caption="Release (solid) and matched null (dashed) with 95% intervals over subjects+seeds; "
                             "bands: non-private baseline, scaled and clipped table without noise, permuted-label "
                             "control; dash-dot: the horizon of the fixed-sequence test.")
    report.add_html(attacks_html(summary), title="Re-identification and membership", section="Attacks")
    report.add_image(images["attacks"], title="Attacks vs ε beside chance", section="Attacks")
    report.add_html(guarantees_html(summary), title="Guarantees and caveats", section="Guarantees")
    report.add_html(quality_html(summary), title="Data-quality flags", section="Data quality")
    report.save(str(path), open_browser=False, overwrite=True, verbose="error")
    return Path(path)


__all__ = ["figures", "utility_figure", "attack_figure", "horizon_html", "write_html", "close"]
