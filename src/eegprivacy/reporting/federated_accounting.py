"""Study B accounting's outputs: the headline JSON, the markdown tables and the cumulative-ε figure, all drawn
from the rows :mod:`eegprivacy.studies.federated.accounting` computed."""

from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from eegprivacy.privacy.accounting import CALIBRATIONS, PRIVACY_UNITS, ROUND_BASES
from eegprivacy.reporting.format import large_number
from eegprivacy.studies.federated.accounting import (
    CLOSING_NOTE_EPSILON,
    COVERAGE_NOTE,
    CSP_NOTE,
    UNIT_NOTE,
    Accounting,
    finals,
)


def _num(value: float):
    """JSON has no infinity or NaN: ε = ∞ (no noise) is written as "inf", a skipped accountant as null (its
    reason is in ``skipped``)."""
    if math.isnan(value):
        return None
    return "inf" if math.isinf(value) else round(float(value), 4)


def _fmt(value: float) -> str:
    return "skipped†" if math.isnan(value) else large_number(value)


def _skipped(tidy: pd.DataFrame) -> pd.Series:
    return tidy.detail.astype(str).str.startswith("skipped")


def summary_json(accounting: Accounting, delta: float) -> dict:
    """The headline JSON: per (protocol, dataset, model, ε, calibration, unit) the per-step, per-round and
    cumulative ε of every accountant, the closing note's cell, the notes on what the numbers cover."""
    tidy, names = accounting.tidy, list(accounting.accountants)
    results = {}
    for row in finals(tidy).itertuples(index=False):
        cell = results.setdefault(row.protocol, {}).setdefault(row.dataset, {}).setdefault(row.model, {}) \
            .setdefault(f"epsilon_{row.epsilon:g}", {}).setdefault(row.calibration, {})
        cell[row.unit] = {
            "num_rounds": int(row.num_rounds), "local_epochs": int(row.local_epochs),
            "steps_per_round": int(row.steps_per_round), "epsilon_per_step": _num(row.per_step),
            "epsilon_per_round": {n: _num(getattr(row, f"per_round_{n}")) for n in names},
            "epsilon_cumulative": {n: _num(getattr(row, f"cumulative_{n}")) for n in names},
            "expected_rounds": int(row.expected_rounds),
            "epsilon_cumulative_expected_not_guaranteed": {n: _num(getattr(row, f"expected_{n}")) for n in names}}
    for row in tidy[_skipped(tidy)].drop_duplicates(
            ["protocol", "dataset", "model", "epsilon", "calibration", "unit", "accountant"]).itertuples(index=False):
        cell = results[row.protocol][row.dataset][row.model][f"epsilon_{row.epsilon:g}"][row.calibration][row.unit]
        cell.setdefault("skipped", {})[row.accountant] = row.detail
    closing = {ds: {m: by_eps.get(f"epsilon_{CLOSING_NOTE_EPSILON:g}")
                    for m, by_eps in by_model.items()} for ds, by_model in results.get("paper", {}).items()}
    return {"study": "b", "delta": delta,
            "accountants": {n: {"class": type(a).__name__, **a.settings()} for n, a in accounting.accountants.items()},
            "privacy_units": PRIVACY_UNITS, "calibrations": CALIBRATIONS, "round_bases": ROUND_BASES,
            "unit_note": UNIT_NOTE, "csp_note": CSP_NOTE, "coverage_note": COVERAGE_NOTE,
            "datasets": accounting.shapes, "closing_note": {
                "configuration": f"per-step nominal epsilon {CLOSING_NOTE_EPSILON:g}, paper protocol, worst case "
                                 "(every round joined)", "results": closing},
            "results": results, "timings_s": accounting.timings}


def closing_note_lines(summary: dict) -> list[str]:
    """One console line per (dataset, model, calibration) of the closing note: cumulative ε per unit."""
    lines = []
    for ds, by_model in summary["closing_note"]["results"].items():
        label = "SYNTHETIC " if summary["datasets"][ds]["synthetic"] else ""
        for model, cell in by_model.items():
            for calibration, by_unit in (cell or {}).items():
                lines.append(f"{label}{ds} {model} {calibration}: " + "; ".join(
                    f"{u}: " + ", ".join(f"{n} {v}" for n, v in r["epsilon_cumulative"].items())
                    for u, r in by_unit.items()))
    return lines


def _settings_text(name: str, settings: dict) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in settings.items() if k != "class")
    return f"{name} ({knobs})" if knobs else name


def _protocol_table(part: pd.DataFrame, names: list[str]) -> list[str]:
    first = part.iloc[0]
    title = "Closing note and paper protocol" if first.protocol == "paper" else "params/federated_mia.yaml grid"
    lines = [f"## {title}: {int(first.num_rounds)} rounds × {int(first.local_epochs)} local epochs", ""]
    head = (["dataset", "model", "d", "ε (nominal, per step)", "calibration", "unit", "steps/round",
             "per-step ε"] + [f"per-round ε {n}" for n in names] + [f"cumulative ε {n}" for n in names]
            + ["expected rounds", "cumulative ε pld at expected rounds (not a guarantee)"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    exp_name = "pld" if "pld" in names else names[-1]
    for row in part.sort_values(["dataset", "model", "epsilon", "calibration", "unit"],
                                ascending=[True, True, False, False, True]).itertuples(index=False):
        ds = f"{row.dataset} (SYNTHETIC)" if row.synthetic else row.dataset
        cells = ([ds, row.model, f"{int(row.dim):,}", _fmt(row.epsilon), row.calibration, row.unit,
                  str(int(row.steps_per_round)), _fmt(row.per_step)]
                 + [_fmt(getattr(row, f"per_round_{n}")) for n in names]
                 + [_fmt(getattr(row, f"cumulative_{n}")) for n in names]
                 + [str(int(row.expected_rounds)), _fmt(getattr(row, f"expected_{exp_name}"))])
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def markdown(tidy: pd.DataFrame, summary: dict) -> str:
    names = list(summary["accountants"])
    lines = ["# Study B: cumulative ε of the per-step Laplace gradient DP", "",
             f"δ = {summary['delta']:g} for RDP and PLD (basic composition is pure ε, δ = 0). Per-step ε is per "
             "local optimiser step; per-round ε composes one round's steps for the unit; cumulative ε composes all "
             "rounds (worst case: the client joins every round). Accountants: "
             + "; ".join(_settings_text(n, s) for n, s in summary["accountants"].items()) + ".", "",
             f"- **Privacy unit.** {UNIT_NOTE}",
             "- **Calibration.** " + " ".join(f"*{k}*: {v}." for k, v in CALIBRATIONS.items()),
             "- **Rounds.** " + " ".join(f"*{k}*: {v}." for k, v in ROUND_BASES.items()),
             f"- **Per example = per client.** {CSP_NOTE}",
             f"- **Coverage.** {COVERAGE_NOTE}", ""]
    for ds, info in summary["datasets"].items():
        label = "SYNTHETIC " if info["synthetic"] else ""
        channels = info.get("unnoised_channels", {})
        dims = ", ".join(f"{m} d = {v['dim']:,} (BatchNorm buffers: {v['unnoised_buffer_values']}, "
                         f"{info.get('batchnorm_stats', 'shared')}; un-noised channel: "
                         f"{channels.get(m) or 'none'}{', so every ε is ∞' if channels.get(m) else ''})"
                         for m, v in info["models"].items())
        lines.append(f"- {label}{ds}: {info['n_clients']} clients, {info['members_min']}–{info['members_max']} "
                     f"member trials each; {dims}.")
    lines.append("")
    for _, part in finals(tidy).groupby("protocol", sort=False):
        lines += _protocol_table(part, names)
    skipped = sorted(set(tidy.loc[_skipped(tidy), "detail"]))
    if skipped:
        lines += ["† " + "; ".join(d.removeprefix("skipped: ") for d in skipped) + ".", ""]
    lines += [f"Timings (s): {json.dumps(summary['timings_s'])}", ""]
    return "\n".join(lines)


COLOURS = {"basic": "tab:blue", "rdp": "tab:orange", "pld": "tab:green"}
STYLES = {"nominal": "-", "certified": "--"}
WIDTHS = {"basic": 2.6, "rdp": 1.8, "pld": 1.1}  # wide to narrow, so curves that coincide all show
REFERENCE = {"nominal": ":", "certified": "-."}


def _panel(ax, cell: pd.DataFrame) -> None:
    """One (dataset, model, unit): cumulative ε per (calibration, accountant), the per-round ε as references."""
    curves = cell[cell.metric == "epsilon_cumulative"]
    for (calibration, accountant), rows in curves.groupby(["calibration", "accountant"], sort=False):
        ax.plot(rows["round"], rows["value"], color=COLOURS.get(accountant, "black"),
                ls=STYLES.get(calibration, ":"), lw=WIDTHS.get(accountant, 1.2), label=f"{accountant}, {calibration}")
    for calibration, rows in cell[cell.metric == "epsilon_per_round"].groupby("calibration"):
        ref = rows[rows.accountant == ("pld" if "pld" in set(rows.accountant) else rows.accountant.iloc[0])]
        ax.axhline(float(ref["value"].iloc[0]), color="grey", ls=REFERENCE.get(calibration, ":"), lw=1,
                   label=f"per-round ε ({calibration})")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3, which="both")


def figure(tidy: pd.DataFrame, summary: dict):
    """Cumulative ε vs rounds (log y) at the closing-note ε under the paper protocol: colour = accountant,
    solid = nominal, dashed = certified; grey dotted = the per-round ε (PLD) of each calibration."""
    part = tidy[(tidy.protocol == "paper") & (tidy.epsilon == CLOSING_NOTE_EPSILON)]
    panels = list(part[["dataset", "model"]].drop_duplicates().itertuples(index=False))
    units = [u for u in PRIVACY_UNITS if u in set(part.unit)]
    fig, axes = plt.subplots(len(panels), len(units), figsize=(5.4 * len(units), 3.6 * len(panels)),
                             squeeze=False, sharex=True)
    for i, (ds, model) in enumerate(panels):
        synthetic = summary["datasets"][ds]["synthetic"]
        for j, unit in enumerate(units):
            ax = axes[i][j]
            cell = part[(part.dataset == ds) & (part.model == model) & (part.unit == unit)]
            _panel(ax, cell)
            ax.set_title(f"{'SYNTHETIC ' if synthetic else ''}{ds}, {model} (d = {int(cell['dim'].iloc[0]):,}), "
                         f"unit: {unit}", fontsize=9)
            if i == len(panels) - 1:
                ax.set_xlabel("rounds the client joined")
            if j == 0:
                ax.set_ylabel("cumulative ε")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    first = part.iloc[0]
    fig.suptitle(f"Per-step Laplace gradient DP, nominal ε = {CLOSING_NOTE_EPSILON:g} per step, "
                 f"{int(first.local_epochs)} local epochs/round; δ = {summary['delta']:g} (RDP, PLD); "
                 "worst case (every round joined)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    return fig


def write_figure(tidy: pd.DataFrame, summary: dict, path) -> None:
    fig = figure(tidy, summary)
    fig.savefig(path, dpi=110)
    plt.close(fig)
