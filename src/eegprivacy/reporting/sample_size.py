"""Study A's sample-size section (stage ``dp_sample_size``, SYNTHETIC), read from MLflow: how many private patients
an end-to-end private release needs, the horizon ε against n per design, and the generator's check against the
real cohort. Every number is a metric of the newest finished ``dp_sample_size-<dataset>-summary`` run (logged by
:func:`eegprivacy.studies.release.sample_size.log_summary`); drawing is apart from parsing."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from eegprivacy.reporting import end_to_end
from eegprivacy.reporting.end_to_end import LABELS

STAGE = "dp_sample_size"
_DIFF = re.compile(r"metrics\.(?P<arm>release_minus_null|baseline|noise_free)/(?P<mechanism>[a-z_]+)/n_(?P<n>\d+)"
                   r"(?:/eps_(?P<eps>[0-9.e+]+))?/auroc_kfold$")
_HORIZON = re.compile(r"metrics\.horizon/(?P<mechanism>[a-z_]+)/n_(?P<n>\d+)$")
_NEEDED = re.compile(r"metrics\.patients_needed/(?P<mechanism>[a-z_]+)/eps_(?P<eps>[0-9.e+]+)$")


def summary_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest finished ``dp_sample_size-<dataset>-summary`` run per dataset."""
    return end_to_end.summary_runs(uri, experiment, STAGE)


def tidy(run: pd.Series) -> pd.DataFrame:
    """The run's k-fold AUROC rows: arm, mechanism, n, ε (inf for the no-noise arms), value, interval, mde, power."""
    rows = []
    for column in run.index:
        match = _DIFF.match(column)
        if not match or pd.isna(run[column]):
            continue
        rows.append({"arm": match["arm"], "mechanism": match["mechanism"], "n": int(match["n"]),
                     "epsilon": math.inf if match["eps"] is None else float(match["eps"]), "value": run[column],
                     **{k: run.get(f"{column}_{k}", np.nan) for k in ("ci_low", "ci_high", "mde", "power")}})
    return pd.DataFrame(rows, columns=["arm", "mechanism", "n", "epsilon", "value", "ci_low", "ci_high", "mde",
                                       "power"])


def horizons(run: pd.Series) -> pd.DataFrame:
    """Per design and n, the horizon ε (NaN: no ε of the grid reaches the power)."""
    grid = [int(n) for n in str(run.get("tags.n_patients", "")).split(",") if n]
    designs = [d for d in str(run.get("tags.designs", "")).split(",") if d]
    found = {(m["mechanism"], int(m["n"])): run[c] for c in run.index if (m := _HORIZON.match(c)) and pd.notna(run[c])}
    return pd.DataFrame([{"mechanism": d, "n": n, "horizon": found.get((d, n), math.nan)} for d in designs
                         for n in grid])


def _eps(value: float) -> str:
    return "none ≤ the grid's largest ε" if not math.isfinite(value) else f"{value:g}"


def needed_table(run: pd.Series) -> pd.DataFrame:
    """Patients needed for a horizon ≤ each target ε, per design ("more than N" where no n of the grid)."""
    grid = [int(n) for n in str(run.get("tags.n_patients", "")).split(",") if n]
    targets = [float(e) for e in str(run.get("tags.horizon_targets", "")).split(",") if e]
    out = []
    for design in [d for d in str(run.get("tags.designs", "")).split(",") if d]:
        entry = {"design": LABELS.get(design, design)}
        for target in targets:
            value = run.get(f"metrics.patients_needed/{design}/eps_{target:g}")
            entry[f"horizon ≤ {target:g}"] = (f"{int(value)}" if value is not None and pd.notna(value)
                                              else f"more than {max(grid)}" if grid else "—")
        out.append(entry)
    return pd.DataFrame(out)


def horizon_table(run: pd.Series) -> pd.DataFrame:
    """Horizon ε per design (rows) and n (columns)."""
    frame = horizons(run)
    if frame.empty:
        return frame
    table = frame.pivot(index="mechanism", columns="n", values="horizon")
    table = table.reindex([d for d in dict.fromkeys(frame.mechanism)])
    out = pd.DataFrame({"design": [LABELS.get(d, d) for d in table.index]})
    for n in table.columns:
        out[f"n = {n}"] = [_eps(v) for v in table[n]]
    return out


def calibration_table(run: pd.Series, rows: pd.DataFrame) -> pd.DataFrame:
    """The generator against the real cohort at the real private size: the calibrated no-DP AUROC, and what was
    not calibrated — each design's noise-free AUROC (stratified k-fold)."""
    n_real = int(float(run.get("metrics.calibration/n_real_private", 0) or 0))
    out = [{"quantity": "no-DP AUROC (calibrated: the effect scale is fitted to it)",
            "real private patients": f"{run.get('metrics.calibration/target_auroc', np.nan):.3f}",
            f"SYNTHETIC, n = {n_real}": f"{run.get('metrics.calibration/synthetic_auroc', np.nan):.3f}"}]
    for design in [d for d in str(run.get("tags.designs", "")).split(",") if d]:
        real = run.get(f"metrics.calibration/noise_free_real/{design}")
        synthetic = rows[(rows.arm == "noise_free") & (rows.mechanism == design) & (rows.n == n_real)]
        if real is None or pd.isna(real) or synthetic.empty:
            continue
        s = synthetic.iloc[0]
        out.append({"quantity": f"noise-free AUROC, {LABELS.get(design, design)} (not calibrated)",
                    "real private patients": f"{real:.3f}",
                    f"SYNTHETIC, n = {n_real}": f"{s.value:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}]"})
    return pd.DataFrame(out)


def learning_lines(rows: pd.DataFrame) -> list[str]:
    """The synthetic cohorts' no-DP and noise-free k-fold AUROC against n (what the answer assumes about learning:
    the generator's classes separate more with more patients; a real cohort's curve may flatten lower)."""
    if rows.empty:
        return []
    parts = []
    # sorted: no-DP ("baseline") first, whatever order the store returned the runs in
    for (arm, mechanism), part in rows[rows.arm.isin(["baseline", "noise_free"])].groupby(["arm", "mechanism"]):
        name = "no-DP" if arm == "baseline" else f"noise-free {LABELS.get(mechanism, mechanism)}"
        curve = ", ".join(f"{int(r.n)}: {r.value:.3f}" for r in part.sort_values("n").itertuples())
        parts.append(f"{name} — {curve}")
    return ["SYNTHETIC cohorts' k-fold AUROC against n (mean over cohorts): " + "; ".join(parts) + ". The "
            "generator's classes separate more with every added patient; a real cohort's curve may flatten lower, "
            "which would make the patients needed above an underestimate.", ""]


def lead_lines(runs: pd.DataFrame) -> list[str]:
    """The sample-size section of study A's report (after the end-to-end lead)."""
    if runs.empty:
        return []
    lines = ["## How many patients a private release needs (**SYNTHETIC**, stage `dp_sample_size`)", ""]
    for _, run in runs.iterrows():
        rows = tidy(run)
        metric = lambda name: run.get(f"metrics.calibration/{name}", np.nan)  # noqa: E731
        dataset = str(run.get("tags.dataset"))
        lines += [f"### calibrated to {dataset}", "",
                  "**SYNTHETIC.** Each cell draws a synthetic private cohort of n patients from a Gaussian copula "
                  f"of {dataset}'s patient table (every feature's empirical marginal, the Ledoit–Wolf within-class "
                  "correlation, a per-feature class shift from the cohort's debiased effect sizes, all scaled by "
                  f"one effect scale, {metric('effect_scale'):.3f}, fitted so that the study's MLP under stratified "
                  f"{run.get('tags.kfold_splits')}-fold reads the real private patients' no-DP AUROC on synthetic "
                  "cohorts of their size), releases it with each end-to-end design of `dp_end_to_end` (the same "
                  "public patients, clip norm, δ and ε split), and scores release and matched null under "
                  f"stratified k-fold; {run.get('tags.seeds')} independent cohorts per cell. The power is the "
                  "end-to-end test's (one-sided, α / designs) for the mean release − null difference, its standard "
                  f"error `dp_end_to_end`'s on the {int(float(metric('n_real_private')))} real private patients "
                  "scaled by √(n_real / n); the horizon at n is the smallest ε from which up every ε of the grid "
                  f"reaches {float(run.get('tags.power', 0.8)):.0%} power. It assumes patients like the "
                  "generator's, the same public patients, a test error falling as 1/√n, and the test run as "
                  f"`dp_end_to_end` runs it. Run `{run['run_id'][:8]}`.", "",
                  "Patients needed (smallest n of the grid whose horizon is at most the ε):", "",
                  needed_table(run).to_markdown(index=False, disable_numparse=True), "",
                  "Horizon ε per patient against n:", "",
                  horizon_table(run).to_markdown(index=False, disable_numparse=True), "",
                  *learning_lines(rows),
                  "The generator against the real cohort (a check: only the first row was fitted). Marginals: "
                  f"per-feature two-sample KS statistic against the real table, median {metric('ks_median'):.3f}, "
                  f"largest {metric('ks_max'):.3f} (2,000 synthetic patients); per-feature effect sizes (Cohen's d): "
                  f"correlation real vs synthetic {metric('effect_size_correlation'):.2f}, mean |d| "
                  f"{metric('effect_size_mean_abs_real'):.3f} real (sampling noise included) and "
                  f"{metric('effect_size_mean_abs_synthetic'):.3f} synthetic.", "",
                  calibration_table(run, rows).to_markdown(index=False, disable_numparse=True), ""]
    return lines


def draw(runs: pd.DataFrame, fig) -> None:
    """Left: the horizon ε against n per design (log–log; a missing point: no ε of the grid reaches the power).
    Right: release − null k-fold AUROC against n at ε = 10 (95 % t-intervals over synthetic cohorts) beside the
    minimum detectable effect of the end-to-end test at that n (dotted)."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    run = runs.iloc[0]
    rows, frame = tidy(run), horizons(run)
    left, right = fig.subplots(1, 2)
    for design, part in frame.groupby("mechanism", sort=False):
        left.plot(part.n, part.horizon, marker="o", label=LABELS.get(design, design))
        at10 = rows[(rows.arm == "release_minus_null") & (rows.mechanism == design) & (rows.epsilon == 10.0)]
        at10 = at10.sort_values("n")
        if at10.empty:
            continue
        bars = right.errorbar(at10.n, at10.value, yerr=np.clip(np.vstack([at10.value - at10.ci_low,
                                                                          at10.ci_high - at10.value]), 0, None),
                              marker="o", capsize=3, label=LABELS.get(design, design))
        right.plot(at10.n, at10.mde, ls=":", color=bars.lines[0].get_color())
    grid = sorted(frame.n.unique())
    for ax in (left, right):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(grid))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("SYNTHETIC private patients n")
    left.set_yscale("log")
    left.yaxis.set_major_formatter(ScalarFormatter())
    left.set_ylabel("horizon ε per patient (80 % power)")
    left.set_title("the ε a release of n patients keeps utility at")
    right.axhline(0.0, color="grey", lw=0.8, ls="--")
    right.set_ylabel("k-fold AUROC: release − null at ε = 10")
    right.set_title("effect (points) and detectable effect (dotted)")
    handles, labels = left.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
        fig.subplots_adjust(bottom=0.22, wspace=0.3)
    fig.suptitle(f"SYNTHETIC cohorts calibrated to {run.get('tags.dataset')}: patients a private release needs")
    fig.set_size_inches(12, 5)
