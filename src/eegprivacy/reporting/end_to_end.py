"""Study A's lead table and figure: the end-to-end private releases (stage ``dp_end_to_end``), read from MLflow.

Every number is a metric of a finished ``dp_end_to_end-<dataset>-summary`` run (logged by
:func:`eegprivacy.studies.release.end_to_end.log_summary`): per design its fixed-sequence utility horizon, and at
that ε (or, where no ε keeps utility, at the largest ε: how far it gets) the release, its matched null and their
difference, each with its interval over patients and seeds; beside them the paper's own mechanism as
``dp_utility`` ran it (scaling fitted on the private patients, outside ε). Drawing is apart from parsing, on a
``Figure`` passed in, as in :mod:`eegprivacy.reporting.study_figures`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from eegprivacy.tracking.runs import finished_stage_runs

STAGE = "dp_end_to_end"
_KEY = re.compile(r"metrics\.(?P<arm>[a-z_]+)/(?P<mechanism>[a-z_]+)/k_(?P<k>\d+)/eps_(?P<eps>[0-9.e+]+|inf)/"
                  r"(?P<metric>auroc|auroc_kfold)$")
#: What each release − null metric of the summary run carries besides its value (studies.release.end_to_end).
SUFFIXES = ("ci_low", "ci_high", "n_seeds", "p_value", "p_mc_error", "keeps_utility", "mc_error", "seed_spread",
            "half_width", "se", "seeds_settle", "seeds_needed", "mde", "power_observed", "power_noise_free")
LABELS = {"paper_public_scaling": "paper's mechanism, public scaling (all d features)",
          "public_pca": "public PCA projection", "public_pls": "public PLS projection",
          "dp_pca": "DP-PCA (Analyze-Gauss) projection", "marginal_synthesis": "DP synthetic patients (mbi)"}


def summary_runs(uri: str, experiment: str, stage: str = STAGE) -> pd.DataFrame:
    """The newest finished ``<stage>-<dataset>-summary`` run per dataset (``dp_end_to_end`` by default; the
    sample-size section reads ``dp_sample_size``'s the same way)."""
    runs = finished_stage_runs(uri, experiment, stage)
    if runs.empty:
        return runs
    runs = runs[runs["tags.mlflow.runName"].astype(str).str.endswith("-summary")]
    return runs.sort_values("start_time", ascending=False).drop_duplicates("tags.dataset").reset_index(drop=True)


def tidy(run: pd.Series, metric: str = "auroc") -> pd.DataFrame:
    """One summary run's metrics as rows (LOSO ``auroc``, or the stratified k-fold ``auroc_kfold``): arm,
    mechanism, k, ε, value and every :data:`SUFFIXES` column the run logged (NaN where it did not)."""
    rows = []
    for column in run.index:
        match = _KEY.match(column)
        if not match or match["metric"] != metric or pd.isna(run[column]):
            continue
        rows.append({"arm": match["arm"], "mechanism": match["mechanism"], "k": int(match["k"]),
                     "epsilon": math.inf if match["eps"] == "inf" else float(match["eps"]), "value": run[column],
                     **{name: run.get(f"{column}_{name}", np.nan) for name in SUFFIXES}})
    columns = ["arm", "mechanism", "k", "epsilon", "value", *SUFFIXES]
    return pd.DataFrame(rows, columns=columns)


def _cell(row) -> str:
    if row is None:
        return "—"
    return f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _pick(rows: pd.DataFrame, arm: str, mechanism: str, k: int, epsilon: float):
    hit = rows[(rows.arm == arm) & (rows.mechanism == mechanism) & (rows.k == k)
               & np.isclose(rows.epsilon.replace(math.inf, 1e300), 1e300 if math.isinf(epsilon) else epsilon)]
    return None if hit.empty else hit.iloc[0]


def _designs(run: pd.Series) -> list[str]:
    logged = {c.removeprefix("tags.utility_horizon/") for c in run.index
              if c.startswith("tags.utility_horizon/") and pd.notna(run[c])}
    return [d for d in LABELS if d in logged] + sorted(logged - set(LABELS))


def _k(run: pd.Series, design: str) -> int:
    return int(run.get(f"tags.n_components/{design}", 0) or 0)


def design_table(run: pd.Series) -> pd.DataFrame:
    """Per design of the run's headline family: k, its horizon, its noise-free AUROC (LOSO and stratified k-fold:
    the most any release of the design could keep) and what its ε covers."""
    rows, kfold = tidy(run), tidy(run, "auroc_kfold")
    out = []
    for design in _designs(run):
        k = _k(run, design)
        out.append({"design": LABELS.get(design, design), "k": k or "d (all)",
                    "horizon ε per patient": str(run[f"tags.utility_horizon/{design}"]),
                    "noise-free AUROC (LOSO)": _cell(_pick(rows, "noise_free", design, k, math.inf)),
                    "noise-free AUROC (k-fold)": _cell(_pick(kfold, "noise_free", design, k, math.inf)),
                    "what ε covers": str(run.get(f"tags.eps_covers_note/{design}", ""))})
    return pd.DataFrame(out)


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def reading(diff) -> str:
    """How a tested cell reads: an effect only when its fixed-sequence test keeps utility; otherwise no evidence,
    and "could not have detected" where the test had under 50 % power for the effect observed."""
    if diff is None:
        return "—"
    if diff.get("keeps_utility") == 1:
        return "**utility kept** (test passes)"
    power = diff.get("power_observed")
    if pd.notna(power) and power < 0.5:
        return f"no evidence; could not have detected (power {power:.2f})"
    return "no evidence"


def _seeds(diff) -> str:
    needed = diff.get("seeds_needed")
    settled = diff.get("seeds_settle") == 1
    text = f"{int(diff['n_seeds'])} {'✓' if settled else '✗'}"
    if not settled:
        text += " (rule asks ∞)" if needed == -1 else f" (rule asks {int(needed)})" if pd.notna(needed) else ""
    return text


def epsilon_table(run: pd.Series) -> pd.DataFrame:
    """Every tested (design, ε): release − null (LOSO, patients × seeds interval) with its Monte-Carlo error over
    the seeds, p, the reading the test allows, the minimum detectable effect and the power for the effect
    observed; the stratified k-fold release and null AUROC beside (the absolute readings, ≈ 0.5 without signal)."""
    rows, kfold = tidy(run), tidy(run, "auroc_kfold")
    out = []
    for design in _designs(run):
        k = _k(run, design)
        tested = rows[(rows.arm == "release_minus_null") & (rows.mechanism == design) & (rows.k == k)]
        for epsilon in sorted(tested.epsilon.unique(), reverse=True):
            diff = _pick(rows, "release_minus_null", design, k, epsilon)
            interval = f"{_signed(diff['value'])} [{_signed(diff['ci_low'])}, {_signed(diff['ci_high'])}]"
            out.append({"design": LABELS.get(design, design), "ε": f"{epsilon:g}",
                        "release − null (LOSO)": interval if diff.get("keeps_utility") == 1 else f"({interval})",
                        "MC error (seeds)": f"{diff['mc_error']:.3f}" if pd.notna(diff["mc_error"]) else "—",
                        "seeds (rule)": _seeds(diff),
                        "p (MC error)": f"{diff['p_value']:.4f} ({diff['p_mc_error']:.4f})",
                        "reading": reading(diff),
                        "MDE (80 %)": f"{diff['mde']:.3f}" if pd.notna(diff["mde"]) else "—",
                        "power: observed / noise-free": (
                            f"{diff['power_observed']:.2f} / " + (f"{diff['power_noise_free']:.2f}"
                                                                  if pd.notna(diff["power_noise_free"]) else "—")),
                        "release / null AUROC (k-fold)": (
                            f"{_cell(_pick(kfold, 'release', design, k, epsilon))} / "
                            f"{_cell(_pick(kfold, 'matched_null', design, k, epsilon))}")})
    return pd.DataFrame(out)


def headline_sentence(run: pd.Series, limit: float = 10.0) -> str:
    """What the table says at ε ≤ ``limit`` in one sentence, from the run's metrics: which designs keep utility,
    the smallest and largest minimum detectable effect, and the best power any design had for its whole
    noise-free utility."""
    rows = tidy(run)
    cells = rows[(rows.arm == "release_minus_null") & (rows.epsilon <= limit)
                 & rows.apply(lambda r: r.k == _k(run, r.mechanism), axis=1)]
    if cells.empty:
        return ""
    kept = sorted({LABELS.get(m, m) for m in cells.loc[cells.keeps_utility == 1, "mechanism"]})
    n_seeds = int(cells.n_seeds.min())
    what = (f"at ε ≤ {limit:g} per patient, {'; '.join(kept)} keep{'s' if len(kept) == 1 else ''} utility by the test"
            if kept else f"no design shows utility at ε ≤ {limit:g} per patient")
    blind = int((cells.power_observed < 0.5).sum())
    return (f"**Reading:** {what} ({n_seeds}+ noise seeds per cell). At this number of private patients the tests "
            f"could detect a release − null difference of {cells.mde.min():.3f} to {cells.mde.max():.3f} AUROC with "
            f"80 % power (smallest at small ε, where a release and its matched null are nearly the same noise draw "
            f"and their difference barely varies); in "
            f"{blind} of these {len(cells)} cells they could not have detected the effect observed (power below "
            "50 %). How many patients a release would need: the sample-size section below.")


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


def mde_check_text(mde_power: dict[float, float]) -> str:
    """What the calibration stage measured of the MDE column (``{multiple of the MDE: power}``), as a clause."""
    if 1.0 not in mde_power:
        return "the calibration stage measures the power it really reaches (`study_a.end_to_end_mde`, not yet run)"
    others = "; ".join(f"{p:.2f} at {m:g} × MDE" for m, p in mde_power.items() if m != 1.0)
    return (f"the calibration stage plants the MDE this formula gives in null data shaped like the cohort and "
            f"measures the power the summary's bootstrap test really reaches: {mde_power[1.0]:.2f} at the MDE"
            f"{'; ' + others if others else ''} (`study_a.end_to_end_mde` in calibration.md)")


def lead_lines(runs: pd.DataFrame, paper_horizons: dict[str, str],
               mde_power: dict[float, float] | None = None) -> list[str]:
    """The Markdown that opens study A's report: per dataset the one-sentence reading, the designs (horizon,
    noise-free utility, what ε covers), every tested (design, ε) with its interval, seed rule, power and minimum
    detectable effect (``mde_power``: the calibration stage's measured power at multiples of it), the k sweep, and
    the paper's mechanism as dp_utility ran it."""
    if runs.empty:
        return []
    lines = ["## End-to-end private releases (the lead result, stage `dp_end_to_end`)", ""]
    for _, run in runs.iterrows():
        rows = tidy(run)
        base = _pick(rows, "baseline", "none", 0, math.inf)
        base_kfold = _pick(tidy(run, "auroc_kfold"), "baseline", "none", 0, math.inf)
        dataset = str(run.get("tags.dataset"))
        synthetic = " — **SYNTHETIC**" if str(run.get("tags.synthetic")) == "true" else ""
        n_private = run.get("tags.n_private_patients")
        n_public = run.get("tags.n_public_patients")
        test = str(run.get("tags.horizon_test", ""))
        delta = run.get("tags.delta", "the study's δ")
        lines += [f"### {dataset}{synthetic}", ""]
        sentence = headline_sentence(run)
        if sentence:
            lines += [sentence, ""]
        lines += [f"Every design is private end to end: each data-dependent step is fitted on {n_public} public "
                  f"patients or paid for in ε, and ε is per patient for the whole pipeline at δ = {delta}, "
                  "neighbouring cohorts differing in one patient's record replaced (replace-one; a Gaussian "
                  "release's sensitivity is 2C). The public patients are *assumed* public (never released, never "
                  "scored, and not protected by ε). Noise is drawn in floating point from seeded numpy generators "
                  "(idealised sampling: right for measuring a release, not for releasing real data, where "
                  "`Mechanism.privatise(..., sampler='opendp')` draws with OpenDP's exact samplers). Utility is "
                  f"LOSO AUROC of the study's MLP on the {n_private} private patients only (synthetic patients: "
                  "trained on the synthetic table, scored on every private patient); each release beside its "
                  "matched null (the same design and noise on a zero-signal table); intervals are 95 % over "
                  "patients × seeds (stratified cluster bootstrap crossed with a seed bootstrap). Horizon: the "
                  f"smallest ε of the unbroken run of rejections from the largest ε down ({test}); `none` when the "
                  f"largest ε fails. No-DP reference on the same private patients: AUROC {_cell(base)} (LOSO), "
                  f"{_cell(base_kfold)} (stratified k-fold). Run `{run['run_id'][:8]}`.", ""]
        table = design_table(run)
        if not table.empty:
            lines += [table.to_markdown(index=False, disable_numparse=True), ""]
        cells = epsilon_table(run)
        if not cells.empty:
            lines += ["Every tested cell. A difference is printed as an effect only where its test passes; in "
                      "parentheses it is the estimate of a test that did not. *MC error (seeds)*: SD of the "
                      "per-seed differences / √seeds, how far another block of as many seeds would move the "
                      "estimate; *seeds (rule)*: the seeds run, ✓ where the MC error is at most a quarter of the "
                      "interval's half-width, else the seeds the measured spread asks for (∞: the seeds' spread "
                      "is the whole interval, more seeds narrow both). *MDE (80 %)*: the release − null difference "
                      "the cell's one-sided test at α/designs would detect with 80 % power by the normal approximation "
                      f"on the patients × seeds bootstrap SD; {mde_check_text(mde_power or {})}; *power*: for "
                      "the effect observed (below 0.5 exactly when the estimate is under the test's critical "
                      "value) and for the design's whole noise-free utility (noise-free − null). The k-fold "
                      "columns give the absolute readings: LOSO's held-out patient shifts the training prevalence "
                      "against its own label, so a no-signal release reads below 0.5 under LOSO (its matched null "
                      "shares the shift, so the tested difference stays valid) and ≈ 0.5 under stratified folds.",
                      "", cells.to_markdown(index=False, disable_numparse=True), ""]
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
            bars = ax.errorbar(part.epsilon * dodge, part.value, yerr=np.clip(err, 0, None), marker="o", capsize=3,
                               label=f"{label} (k = {k or 'd'})")
            if part.mde.notna().any():  # what the cell's test could have detected (80 % power)
                ax.plot(part.epsilon * dodge, part.mde, ls=":", lw=1.2, color=bars.lines[0].get_color())
        ax.axhline(0.0, color="grey", lw=0.8, ls="--")
        if rows.mde.notna().any():
            ax.plot([], [], ls=":", color="black", label="dotted: minimum detectable effect (80 % power)")
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
