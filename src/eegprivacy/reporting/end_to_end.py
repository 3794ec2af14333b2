"""Study A's lead table and figure: the end-to-end private releases (stage ``dp_end_to_end``), read from MLflow.

Every number is a metric of a finished ``dp_end_to_end-<dataset>-summary`` run (logged by
:func:`eegprivacy.studies.release.end_to_end.log_summary`): per design its fixed-sequence utility horizon, and at
that ε (or, where no ε keeps utility, at the largest ε: how far it gets) the release, its matched null and their
difference, each with its interval over patients and seeds; beside them the paper's own mechanism as
``dp_utility`` ran it (scaling fitted on the private patients, outside ε). Drawing is apart from parsing, on a
``Figure`` passed in, as in :mod:`eegprivacy.reporting.study_reports`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

STAGE = "dp_end_to_end"
FILTER = f"tags.stage = '{STAGE}' and attributes.status = 'FINISHED'"
_KEY = re.compile(r"metrics\.(?P<arm>[a-z_]+)/(?P<mechanism>[a-z_]+)/k_(?P<k>\d+)/eps_(?P<eps>[0-9.e+]+|inf)/auroc$")
LABELS = {"paper_public_scaling": "paper's mechanism, public scaling (all d features)",
          "public_pca": "public PCA projection", "public_pls": "public PLS projection",
          "dp_pca": "DP-PCA (Analyze-Gauss) projection", "marginal_synthesis": "DP synthetic patients (mbi)"}


def summary_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest finished ``dp_end_to_end-<dataset>-summary`` run per dataset."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=[experiment], filter_string=FILTER)
    finally:
        mlflow.set_tracking_uri(previous)
    if runs.empty:
        return runs
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    return runs.sort_values("start_time", ascending=False).drop_duplicates("tags.dataset").reset_index(drop=True)


def tidy(run: pd.Series) -> pd.DataFrame:
    """One summary run's metrics as rows: arm, mechanism, k, ε, value, ci_low, ci_high, p_value, p_mc_error."""
    rows = []
    for column in run.index:
        match = _KEY.match(column)
        if not match or pd.isna(run[column]):
            continue
        base = column
        rows.append({"arm": match["arm"], "mechanism": match["mechanism"], "k": int(match["k"]),
                     "epsilon": math.inf if match["eps"] == "inf" else float(match["eps"]), "value": run[base],
                     **{name: run.get(f"{base}_{name}", np.nan) for name in ("ci_low", "ci_high", "p_value",
                                                                               "p_mc_error")}})
    return pd.DataFrame(rows)


def _cell(row) -> str:
    if row is None:
        return "—"
    return f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _pick(rows: pd.DataFrame, arm: str, mechanism: str, k: int, epsilon: float):
    hit = rows[(rows.arm == arm) & (rows.mechanism == mechanism) & (rows.k == k)
               & np.isclose(rows.epsilon.replace(math.inf, 1e300), 1e300 if math.isinf(epsilon) else epsilon)]
    return None if hit.empty else hit.iloc[0]


def design_table(run: pd.Series) -> pd.DataFrame:
    """Per design of the run's headline family: horizon, and release / null / difference at the horizon ε (or at
    the largest ε where none), with the difference at ε = 10 (the issue's goal) beside it."""
    rows = tidy(run)
    out = []
    logged = {c.removeprefix("tags.utility_horizon/") for c in run.index
              if c.startswith("tags.utility_horizon/") and pd.notna(run[c])}
    designs = [d for d in LABELS if d in logged] + sorted(logged - set(LABELS))
    for design in designs:
        k = int(run.get(f"tags.n_components/{design}", 0) or 0)
        horizon = str(run[f"tags.utility_horizon/{design}"])
        tested = rows[(rows.arm == "release_minus_null") & (rows.mechanism == design) & (rows.k == k)]
        if tested.empty:
            continue
        at = float(horizon) if horizon != "none" else float(tested.epsilon.max())
        diff = _pick(rows, "release_minus_null", design, k, at)
        at10 = _pick(rows, "release_minus_null", design, k, 10.0)
        out.append({"design": LABELS.get(design, design), "k": k or "d (all)",
                    "horizon ε per patient": horizon, "at ε": f"{at:g}" + ("" if horizon != "none" else " (largest)"),
                    "release AUROC": _cell(_pick(rows, "release", design, k, at)),
                    "matched null": _cell(_pick(rows, "matched_null", design, k, at)),
                    "release − null": _cell(diff),
                    "p (MC error)": "—" if diff is None else f"{diff['p_value']:.4f} ({diff['p_mc_error']:.4f})",
                    "release − null at ε = 10": _cell(at10),
                    "noise-free AUROC": _cell(_pick(rows, "noise_free", design, k, math.inf)),
                    "what ε covers": str(run.get(f"tags.eps_covers_note/{design}", ""))})
    return pd.DataFrame(out)


def sweep_lines(rows: pd.DataFrame) -> list[str]:
    """What limits the projections, measured: release − null against k at each swept ε (the component sweep;
    effect sizes with intervals over patients + seeds, not tested), beside each k's release AUROC."""
    swept = rows[(rows.arm == "release_minus_null") & rows.mechanism.isin(["public_pca", "public_pls"])]
    if swept.k.nunique() < 2:
        return []
    out = []
    for mechanism, part in swept.groupby("mechanism"):
        common = sorted(set.intersection(*(set(g.epsilon) for _, g in part.groupby("k"))))  # the swept ε
        for k in sorted(part.k.unique()):
            entry = {"design": LABELS[mechanism], "k": int(k)}
            for epsilon in common:
                entry[f"release AUROC, ε = {epsilon:g}"] = _cell(_pick(rows, "release", mechanism, int(k), epsilon))
                entry[f"release − null, ε = {epsilon:g}"] = _cell(_pick(rows, "release_minus_null", mechanism,
                                                                          int(k), epsilon))
            out.append(entry)
    table = pd.DataFrame(out)
    return ["Utility against k (component sweep: each k a release and its matched null; effect sizes with 95 % "
            "intervals over patients + seeds, not tested — they choose nothing in the table above, whose k were "
            "fixed in the params before the run):", "", table.to_markdown(index=False, disable_numparse=True), ""]


def lead_lines(runs: pd.DataFrame, paper_horizons: dict[str, str]) -> list[str]:
    """The Markdown that opens study A's report: one table per dataset of the end-to-end designs, the test, the
    no-DP reference on the same private patients and the paper's mechanism as dp_utility ran it."""
    if runs.empty:
        return []
    lines = ["## End-to-end private releases (the lead result)", ""]
    for _, run in runs.iterrows():
        rows = tidy(run)
        base = _pick(rows, "baseline", "none", 0, math.inf)
        dataset = str(run.get("tags.dataset"))
        synthetic = " — **SYNTHETIC**" if str(run.get("tags.synthetic")) == "true" else ""
        n_private = run.get("tags.n_private_patients")
        n_public = run.get("tags.n_public_patients")
        test = str(run.get("tags.horizon_test", ""))
        lines += [f"### {dataset}{synthetic}", "",
                  f"Every design is private end to end: each data-dependent step is fitted on {n_public} public "
                  f"patients (never released, never scored) or paid for in ε, and ε is per patient for the whole "
                  f"pipeline. Utility is LOSO AUROC of the study's MLP on the {n_private} private patients only "
                  "(synthetic patients: trained on the synthetic table, scored on every private patient); each "
                  "release beside its matched null (the same design and noise on a zero-signal table); intervals "
                  f"are 95 % over patients + seeds (stratified cluster bootstrap crossed with seeds). Horizon: the "
                  f"smallest ε of the unbroken run of rejections from the largest ε down ({test}); `none` when "
                  f"the largest ε fails, and then the columns show how far the design gets at the largest ε. "
                  f"No-DP reference on the same private patients: AUROC {_cell(base)}. Run `{run['run_id'][:8]}`.",
                  ""]
        table = design_table(run)
        if not table.empty:
            lines += [table.to_markdown(index=False, disable_numparse=True), ""]
        lines += sweep_lines(rows)
        mine = {m: h for (d, m), h in paper_horizons.items() if d == dataset}
        if mine:
            text = ", ".join(f"{m}: {h}" for m, h in sorted(mine.items()))
            lines += [f"Beside it, the paper's mechanism as `dp_utility` runs it on all {dataset} patients "
                      f"(robust scaling fitted on the private patients, outside ε; labels in the clear), AUROC "
                      f"horizon per patient — {text} (table below).", ""]
    return lines


def draw(runs: pd.DataFrame, fig) -> None:
    """Release − null AUROC against total ε per design (headline k), 95 % intervals over patients + seeds; one
    panel per dataset."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    axes = fig.subplots(1, max(len(runs), 1), squeeze=False)[0]
    for ax, (_, run) in zip(axes, runs.iterrows()):
        rows = tidy(run)
        for offset, (design, label) in enumerate(LABELS.items()):
            k = int(run.get(f"tags.n_components/{design}", -1) or 0) if f"tags.n_components/{design}" in run else -1
            part = rows[(rows.arm == "release_minus_null") & (rows.mechanism == design) & (rows.k == k)]
            part = part.sort_values("epsilon")
            if part.empty:
                continue
            err = np.vstack([part.value - part.ci_low, part.ci_high - part.value])
            dodge = 1.0 + 0.04 * (offset - (len(LABELS) - 1) / 2)  # side by side on the log axis
            ax.errorbar(part.epsilon * dodge, part.value, yerr=np.clip(err, 0, None), marker="o", capsize=3,
                        label=f"{label} (k = {k or 'd'})")
        ax.axhline(0.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        grid = sorted(rows.loc[rows.arm == "release_minus_null", "epsilon"].unique())
        ax.xaxis.set_major_locator(FixedLocator(grid))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("total ε per patient (end to end)")
        ax.set_ylabel("LOSO AUROC: release − matched null")
        title = str(run.get("tags.dataset"))
        if str(run.get("tags.synthetic")) == "true":
            title += " (SYNTHETIC)"
        ax.set_title(f"{title}: end-to-end private releases")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
        fig.subplots_adjust(bottom=0.3)
    fig.set_size_inches(7.5 * max(len(runs), 1), 5.5)
