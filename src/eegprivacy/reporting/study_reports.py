"""Per-study Markdown reports drawn from MLflow runs only (``eegprivacy report``): the headline tables, their
captions, study A's privacy statement and utility horizons, and the report put together and written
(:func:`write_report`).

Every number in a report is a metric of a finished parent run (the sweep's aggregates ``*_mean``, ``*_ci_low``,
``*_ci_high``) and its row cites that run, so a report can be checked against the store and rebuilt at any time
without rerunning a stage. The jobs are apart, one a module: :mod:`eegprivacy.reporting.study_runs` reads the store
into tidy rows, :mod:`eegprivacy.reporting.study_figures` draws them, :mod:`eegprivacy.reporting.study_leads`
writes the lead sections from their own stages' runs, and this module prints the tables and writes the report. The
notebooks in ``notebooks/`` reuse the same rows, tables and drawing, so a notebook and the report never disagree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from eegprivacy.atomic import write_text_atomic
from eegprivacy.reporting.study_figures import DRAW, write_png
from eegprivacy.reporting.study_leads import (audit_lead, calibration_lead, claims_lead, control_lead, end_to_end_lead,
                                              lira_lead)
from eegprivacy.reporting.study_runs import (
    ALPHA,
    C_METRICS,
    HEADLINE_STAGE,
    TIDY,
    displayed_interval,
    epsilon_order,
    no_runs_message,
    parent_runs,
)
from eegprivacy.tracking.runs import EXPERIMENTS, portable_uri, tracking_uri

STUDIES = ("a", "b", "c")
TITLES = {"a": "Study A — DP feature release", "b": "Study B — federated membership inference",
          "c": "Study C — embedding audit"}
# Study A's headline columns: which arm a value is, and of which metric.
A_COLUMNS = {"baseline": "value", "permuted": "value", "clipped": "value", "release": "value",
             "matched_null": "matched null", "release_minus_null": "− null", "baseline_minus_permuted": "value",
             "baseline_minus_clipped": "value"}
A_METRICS = {"auroc": "AUROC", "balanced_accuracy": "BA (nested)"}
LABELS = ("dataset", "dataset version", "mechanism", "ε", "model", "encoder", "weights", "CI over",
          "run")  # non-number columns
CORRECTION = "Holm"


# --- headline tables --------------------------------------------------------------------------------------------

def ci_over_text(row) -> str:
    """The ``CI over`` column: what the interval resamples (as the run logs it, else "as logged"), with
    ``t(n−1)`` when it is a Student-t interval over n seeds, so a 3-seed t(2) interval reads as one."""
    over = row.get("ci_over")
    text = "as logged" if over is None or pd.isna(over) else str(over)
    n = row.get("n_seeds", np.nan)
    if row.get("t_interval") and pd.notna(n) and n >= 2:
        text += f", t({int(n) - 1})"
    return text


def tested_text(row) -> str:
    """A B or C table cell: ``mean [low, high]``, ``clipped`` where the interval was, and ``(p_Holm …)`` with
    ``*`` where the Holm-adjusted test is significant."""
    low, high, clipped = displayed_interval(row)
    text = cell(row["mean"], low, high) + (" clipped" if clipped else "")
    p = row.get("p_holm", np.nan)
    if pd.notna(p):
        text += f" (p_Holm {p:.3f}{' *' if p < ALPHA else ''})"
    return text


def cell(mean: float, low: float = np.nan, high: float = np.nan) -> str:
    """``mean [low, high]`` with three decimals (the CI only where the run logs one)."""
    if pd.isna(mean):
        return "—"
    if pd.isna(low) or pd.isna(high):
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _dataset_label(row) -> str:
    return f"{row['dataset']} **SYNTHETIC**" if row["synthetic"] else row["dataset"]


def _wide(rows: pd.DataFrame, keys: list[str], column: str, text) -> pd.DataFrame:
    """One table row per ``keys``, one column per value of ``column``, cells from ``text(row)``."""
    rows = rows.assign(_cell=[text(r) for _, r in rows.iterrows()])
    table = rows.pivot_table(index=keys, columns=column, values="_cell", aggfunc="first", fill_value="—", sort=False)
    return table.reset_index().rename_axis(columns=None)


def b_column(row) -> str:
    """Study B's column for a row: ``utility accuracy`` or ``AUROC <attack> (<attacker>)``, one per attacker."""
    if row["attack"] == "utility":
        return "utility accuracy"
    return f"AUROC {row['attack']} ({row['attacker']})"


def b_column_order(row) -> tuple:
    """Utility first, then each attack beside its untrained control, attackers in name order."""
    attack = row["attack"]
    return (attack != "utility", attack.removesuffix("_untrained_control"), attack, row["attacker"])


def _run_ci_over(rows: pd.DataFrame) -> pd.Series:
    """Each row's run's ``CI over`` text: the distinct :func:`ci_over_text` of the run's cells, sorted and joined
    (one table row per run; sorted, so the text does not follow the order MLflow returns the cells in)."""
    text = pd.Series([ci_over_text(r) for _, r in rows.iterrows()], index=rows.index)
    joined = text.groupby(rows["run_id"]).agg(lambda v: "; ".join(sorted(set(v))))
    return rows["run_id"].map(joined)


def headline_table(study: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The study's headline table: label columns (dataset, version, configuration) then values, then the run."""
    rows = rows.assign(dataset=[_dataset_label(r) for _, r in rows.iterrows()],
                       version=rows["dataset_version"].str.slice(0, 12), run=rows["run_id"].str.slice(0, 8),
                       eps=rows["epsilon"] if "epsilon" in rows else "")
    rows = rows.assign(_eps=rows["eps"].map(epsilon_order).fillna(np.inf))
    if study == "a":
        kind = rows["mechanism"].map(lambda m: 0 if m.startswith("none") else 2 if "control" in m else 1)
        rows = rows.assign(_kind=kind, _column=rows["arm"].map(A_COLUMNS) + " " + rows["metric"].map(A_METRICS))
        rows = rows.sort_values(["dataset", "_kind", "mechanism", "_eps"])
        table = _wide(rows, ["dataset", "version", "mechanism", "eps", "run"], "_column",
                      lambda r: cell(r["mean"], r["ci_low"], r["ci_high"])
                      + (f" ({r['p_label']} {r['p_adjusted']:.3f})" if pd.notna(r.get("p_adjusted")) else ""))
        order = [f"{a} {m}" for m in A_METRICS.values() for a in dict.fromkeys(A_COLUMNS.values())]
        table = table[[c for c in table.columns if c not in order] + [c for c in order if c in table]]
        names = {"eps": "ε"}
    elif study == "b":
        rows = rows.assign(_column=[b_column(r) for _, r in rows.iterrows()],
                           _order=[b_column_order(r) for _, r in rows.iterrows()], ci_over=_run_ci_over(rows))
        rows = rows.sort_values(["dataset", "model", "_eps", "_order"])
        table = _wide(rows, ["dataset", "version", "model", "eps", "ci_over", "run"], "_column", tested_text)
        columns = rows.drop_duplicates("_column").sort_values("_order")["_column"].tolist()
        table = table[[c for c in table.columns if c not in columns] + columns]
        names = {"eps": "ε", "ci_over": "CI over"}
    else:
        rows = rows.assign(ci_over=_run_ci_over(rows)).sort_values(["dataset", "encoder", "weights"])
        table = _wide(rows, ["dataset", "version", "encoder", "weights", "provenance", "identity_link", "ci_over",
                             "run"], "metric", tested_text)
        table = table[[c for c in table.columns if c not in C_METRICS] + [m for m in C_METRICS if m in table]]
        names = {"ci_over": "CI over", "identity_link": "BPID@1 links"}
    table = table.rename(columns={"version": "dataset version", **names})
    return table[[c for c in table.columns if c != "run"] + ["run"]]


# --- the Markdown report ------------------------------------------------------------------------------------------

INTRO = {
    "a": "Leave-one-patient-out MLP on the patient table and on each DP release: LOSO AUROC (threshold-free) and "
         "balanced accuracy with the nested threshold protocol, one threshold grid for every row. `none` is the "
         "non-private table, `permuted labels (control)` the same with permuted labels; `matched null` is the same "
         "mechanism and noise draw applied to a zero-signal table, `none, scaled + clipped (no noise)` the table "
         "after the releases' robust scaling and L2 clipping without noise (what clipping costs apart from noise), "
         "and `− null` the release minus its null, paired by patient resample and seed, with its adjusted "
         "one-sided p-value `p_adj` (m × the largest p at this or a larger ε, m the table's mechanisms). Intervals "
         "are over patients + seeds (stratified cluster bootstrap crossed with seeds); ε is per patient. Each "
         "mechanism's utility horizon is a fixed-sequence test from the largest ε down, each ε at α/m (α = 0.05), "
         "stopping at the first ε that does not keep utility (p_adj < 0.05 at every ε from the largest to the "
         "horizon); what its ε covers is printed beside it.",
    "b": "Per-subject FedAvg: utility accuracy of the global model and, for each attack, the AUROC of every "
         "attacker (named in brackets; none is picked after seeing the scores), each the mean over rounds and "
         "seeds as `federated_mia_report` summarises it (metrics/federated_mia.csv; the same cells as "
         "reports/federated_mia_tables.md). The `*_control` columns are the same attacks on an untrained model "
         "(and the sound GLA's control), shown, never tested: an untrained network's outputs are nearly constant, "
         "so they cannot show what the member-fitted CSP leaks. Each AUROC here is tested against chance 0.5 and so "
         "measures the member-fitted preprocessing and training together; the lead table above (attack − "
         "preprocessing-only control) is the test of training.",
    "c": "Frozen-encoder embedding audit per encoder and weight setting: attribute leakage L_A (with its "
         "permuted-label control), the AEDS decision score, identification BPID@1, and membership AUC against the "
         "head (LiRA) and the encoder, one row per cohort (`dataset`), encoder and weights; on a cohort whose task "
         "is a subject-level label (the diagnosis) its balanced accuracy over held-out subjects, beside its "
         "permuted-label control. Estimates only, with their logged intervals: the claims are tested in the "
         "Claims section above, one test each.",
}


def horizon_lines(rows: pd.DataFrame) -> list[str]:
    """Study A's utility horizons (the summary run's ``utility_horizon/<mechanism>/<metric>`` tags) as a table, each
    with the test that decided it and one sentence on what its ε covers (the run's ``eps_covers`` and
    ``eps_covers_note`` tags)."""
    found = rows[(rows["arm"] == "release_minus_null") & (rows["horizon"] != "")]
    found = found.drop_duplicates(["dataset", "mechanism", "metric"]).sort_values(["dataset", "mechanism", "metric"])
    if found.empty:
        return []
    tests = "; ".join(dict.fromkeys(found["horizon_test"].astype(str)))
    lines = ["## Utility horizons", "",
             f"The smallest ε (per patient) of the unbroken run of ε, from the largest down, whose release − null "
             f"clears 0 (test: {tests}); `none` when the largest ε does not, `not tested` when too few seeds ran "
             "(never read off one seed).", "",
             "| dataset | mechanism | metric | horizon ε | ε covers | what ε covers | run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {_dataset_label(r)} | {r['mechanism']} | {A_METRICS[r['metric']]} | {r['horizon']} | "
              f"{r['eps_covers']} | {r['eps_covers_note']} | {r['run_id'][:8]} |" for _, r in found.iterrows()]
    return [*lines, ""]


def caption(study: str, rows: pd.DataFrame) -> str:
    """The B or C table's caption: what each interval is over, that intervals are clipped, and the multiple-
    comparison correction with the number of cells it runs over (study A's intro names its own Holm)."""
    if study == "a" or "p_value" not in rows:
        return ""
    if study == "b":
        return caption_b(rows)
    if study == "c":
        return caption_c(rows)
    tested = rows["p_value"].notna()
    where = {"b": "each AUROC cell against chance 0.5",
             "c": "each membership AUC and diagnosis BA against chance 0.5"}[study]
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    how = ("a one-sided one-sample t-test recovered from the run's t-interval over n seeds (`t(n−1)` in `CI over`)"
           if study == "b" else
           "a one-sided test from the logged interval (a t-test where the run says `seeds` and logs n, else a normal "
           "approximation)")
    default = {"b": "`seeds` (the sweep's aggregate)", "c": "\"as logged\" (the run does not say)"}[study]
    return (f"*Table: intervals are each cell's own 95 % interval as the run logs it (uncorrected); `CI over` "
            f"says what it resamples: the run's `ci_over` where it logs one, else {default}; `t(n−1)` marks a "
            f"Student-t interval over n seeds (3 seeds: t(2), a wide interval). Intervals reaching outside "
            f"[0, 1] are clipped to it for display and marked `clipped` ({clipped} here). Tests: {where}, {how}; "
            f"p-values {CORRECTION}-adjusted over the {int(tested.sum())} tested cells of this table "
            f"(multiple-comparison correction: {CORRECTION}); `*` marks p_Holm < {ALPHA}. Cells without p_Holm are "
            f"untested.*")


def caption_c(rows: pd.DataFrame) -> str:
    """Study C's caption: estimates with their logged intervals; the tests are the Claims section's."""
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    weights = "; ".join(dict.fromkeys(f"{e} {w} = {p}" for e, w, p in zip(rows["encoder"], rows["weights"],
                                                                          rows["provenance"]) if p != "—"))
    return ("*Table: estimates per cohort, encoder and weights (" + (weights or "provenance not logged") + "), "
            "each with its own 95 % interval as the run logs it (uncorrected); `CI over` says what it resamples "
            "(the run's `ci_over`, else \"as logged\"). `BPID@1 links` says what the identity row links (within "
            "one recording is not across runs). Intervals reaching outside [0, 1] are clipped for display and "
            f"marked `clipped` ({clipped} here). No cell is tested in this table: every claim is decided once, by "
            "the test in the Claims section above, which prints the same test, p, Holm family and verdict as "
            "reports/embedding_audit_cohorts.md.*")


def caption_b(rows: pd.DataFrame) -> str:
    """Study B's caption: intervals over subjects+seeds, and the p_Holm of the report stage with its families."""
    families = rows.loc[rows["p_holm"].notna(), "holm_family"].dropna()
    named = ", ".join(f"`{f}`" for f in sorted(set(families))) or "none"
    clipped = sum(displayed_interval(r)[2] for _, r in rows.iterrows())
    return ("*Table: each cell's 95 % interval as `federated_mia_report` logs it (uncorrected). `CI over` = "
            "subjects+seeds: a cluster bootstrap resampling whole clients (one per subject, the privacy unit) "
            "crossed with a resample of the seeds (percentile interval); `seeds`, `t(n−1)`: a Student-t interval "
            "over n seeds, kept where a number has no per-client reading (CLA, GLA (paper)). Intervals reaching "
            f"outside [0, 1] are clipped to it for display and marked `clipped` ({clipped} here). Tests: each score "
            "against its chance (the bootstrap p-value of score − chance; the one-sample t-test on `seeds` cells); "
            f"p_Holm is the report stage's, {CORRECTION}-adjusted over its family, one per printed table of "
            "reports/federated_mia_tables.md: a dataset's attack tables for one attacker, or its utility table "
            "(families here: " + named + "; each family holds every tested cell of that table, more than this "
            f"table shows; multiple-comparison correction: {CORRECTION}). The two reports print the same p_Holm "
            f"for the same cell. `*` marks p_Holm < {ALPHA}. Controls (`*_control`) are shown, never tested; cells "
            "without p_Holm are untested.*")


def privacy_statement(study: str, runs: pd.DataFrame) -> str:
    """Study A's statement of what its ε means, from the runs' own params: δ, the neighbouring relation, how the
    noise is sampled and which patients are public (issue 47: every table says so)."""
    column = "params.dp_release.delta"
    if study != "a" or runs.empty or column not in runs:
        return ""
    deltas = ", ".join(sorted({f"{float(v):g}" for v in runs[column].dropna()}))
    return (f"ε is per patient at δ = {deltas} (`dp_release.delta`: the Gaussian mechanisms' δ; the Laplace ones "
            "are pure ε), for neighbouring cohorts that differ in one patient's record replaced (replace-one). Noise "
            "is drawn in floating point from seeded numpy generators (idealised sampling: right for measuring a "
            "release, not for releasing real data, where `Mechanism.privatise(..., sampler='opendp')` draws with "
            "OpenDP's exact samplers). No patient is public in these tables: the robust scaling is fitted on the "
            "released patients themselves, outside ε (each horizon says what its ε covers).")


def render(study: str, rows: pd.DataFrame, uri: str, figure: str | None, lead: list[str] | None = None,
           statement: str = "") -> str:
    """The report's Markdown: provenance, the lead section (study A: the end-to-end private releases,
    :mod:`eegprivacy.reporting.end_to_end`), figure, headline table, the cited runs and the dataset versions."""
    end_to_end = any(str(line).startswith("## End-to-end") for line in lead or [])
    stages = (f"stages `dp_end_to_end` (the lead section: its newest summary run per dataset, cited there) and "
              f"`{HEADLINE_STAGE[study]}` (the paper's tables: the newest finished parent run per run name, cited in "
              "each row)" if end_to_end else
              f"stage `{HEADLINE_STAGE[study]}` (the newest finished parent run per run name)")
    lines = [f"# {TITLES[study]}", "",
             f"Generated by `eegprivacy report` from MLflow only: store `{portable_uri(uri)}`, experiment "
             f"`{EXPERIMENTS[study]}`, {stages}. "
             "Every number is a metric of the run its row cites: the mean over seeds with its 95 % CI in brackets (the "
             "parent's `*_mean`, `*_ci_low`, `*_ci_high`; a value without brackets has no CI in the run, e.g. one "
             "seed); a `p_Holm` the run does not log is computed here from those metrics, as the table's caption says. "
             "Rows marked **SYNTHETIC** come from synthetic cohorts (tag `synthetic=true`).", ""]
    lines += lead or []
    if rows.empty:
        return "\n".join([*lines, "**No runs.** " + no_runs_message(study, uri), ""])
    table = headline_table(study, rows)
    if lead:
        lines += [f"## The paper's {'mechanisms' if study == 'a' else 'tables'} (`{HEADLINE_STAGE[study]}`)", ""]
    lines += [INTRO[study], ""]
    if statement:
        lines += [statement, ""]
    if figure:
        lines += [f"![{TITLES[study]}]({figure})", ""]
    if caption(study, rows):
        lines += [caption(study, rows), ""]
    lines += [table.to_markdown(index=False, disable_numparse=True), ""]
    if study == "a":
        lines += horizon_lines(rows)
    lines += ["## Runs", "", "| run | name | MLflow |", "| --- | --- | --- |"]
    runs = rows.drop_duplicates("run_id").sort_values("run_name")
    lines += [f"| {r.run_id[:8]} | {r.run_name} | `runs:/{r.run_id}` |" for r in runs.itertuples()]
    lines += ["", "## Datasets", "", "| dataset | synthetic | dataset_version |", "| --- | --- | --- |"]
    versions = rows.drop_duplicates(["dataset", "dataset_version"]).sort_values("dataset")
    lines += [f"| {r.dataset} | {'**SYNTHETIC**' if r.synthetic else 'no'} | `{r.dataset_version}` |"
              for r in versions.itertuples()]
    return "\n".join([*lines, ""])


def write_report(study: str, out_dir: str | Path, uri: str | None = None) -> tuple[Path, bool]:
    """Write ``study-<s>.md`` (and ``study-<s>.png`` when there are runs) into ``out_dir``; returns the report's
    path and whether the store held runs. A figure left from an earlier report is removed when there are none."""
    uri = uri or tracking_uri()
    out_dir = Path(out_dir)
    runs = parent_runs(study, uri)
    rows = TIDY[study](runs)
    png = out_dir / f"study-{study}.png"
    if rows.empty:
        png.unlink(missing_ok=True)
    else:
        write_png(DRAW[study], rows, png)
    lead = (end_to_end_lead(study, rows, uri, out_dir) + control_lead(study, uri, out_dir) + claims_lead(study, runs)
            + lira_lead(study, uri) + audit_lead(study, uri) + calibration_lead(study, uri))
    text = render(study, rows, uri, None if rows.empty else png.name, lead, privacy_statement(study, runs))
    report = write_text_atomic(out_dir / f"study-{study}.md", text)
    return report, not rows.empty

