"""``reports/calibration.md`` and its figure: every test's measured size and every interval's coverage, drawn from
the rows :mod:`eegprivacy.studies.calibration.run` measured (``metrics/calibration.csv``)."""

from __future__ import annotations

import math

import pandas as pd

from eegprivacy.evaluation.calibration import ALPHA, COVERAGE_FLOOR, SIZE_TOLERANCE

#: The mark a report puts beside a test the calibration found inflated (or an interval that undercovers).
MARK = "⚠"
#: The mark beside a test whose size the calibration could not resolve: too few null data sets for the Wilson
#: upper bound to reach 0.065 (the row says why fewer); not shown to be wrong, not shown to hold.
UNRESOLVED = "†"
#: The mark beside a printed test or interval no calibration case runs (the list and its reasons:
#: :mod:`eegprivacy.studies.calibration.not_measured`).
NOT_MEASURED_MARK = "‡"


def _interval(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _power(row: pd.Series) -> str:
    cells = [f"{row[c]:.2f} at {c.split('@', 1)[1]}" for c in row.index
             if c.startswith("power@") and pd.notna(row[c])]
    return "; ".join(cells) or "—"


def anchor(name: str) -> str:
    """The row's anchor in ``reports/calibration.md`` (what other reports link to)."""
    return "cal-" + name.replace(".", "-").replace("_", "-")


def flagged(table: pd.DataFrame) -> list[str]:
    """The cases whose size is inflated or whose interval undercovers (the reports that use them mark them)."""
    bad = (table["size_verdict"] == "inflated") | (table["coverage_verdict"] == "undercovers")
    return list(table.loc[bad, "name"])


def unresolved(table: pd.DataFrame) -> list[str]:
    """The cases whose size is undecided (too few data sets to tell) and not already flagged."""
    return [n for n in table.loc[table["size_verdict"] == "undecided", "name"] if n not in flagged(table)]


def size_mark(verdict: str) -> str:
    """The mark a size verdict carries in a table (empty when it holds or there is no test)."""
    return {"inflated": f" {MARK}", "undecided": f" {UNRESOLVED}"}.get(verdict, "")


def not_measured() -> tuple:
    """The printed tests and intervals without a case (:data:`eegprivacy.studies.calibration.not_measured.
    NOT_MEASURED`)."""
    from eegprivacy.studies.calibration.not_measured import NOT_MEASURED

    return NOT_MEASURED


def not_measured_lines(report: str, calibration: str = "calibration.md") -> list[str]:
    """One line per printed-and-not-measured entry ``report`` (a path such as ``reports/study-c.md``) prints,
    linked to its row, with the mark."""
    out = []
    for m in not_measured():
        where = [u.split(":", 1)[1].strip() for u in m.used_in if u.split(":", 1)[0].strip() == report]
        if where:
            out.append(f"- [`{m.name}`]({calibration}#{anchor(m.name)}) {NOT_MEASURED_MARK} ({'; '.join(where)}): "
                       f"{m.what}; not measured: {m.why}.")
    return out


def markdown(table: pd.DataFrame, meta: dict) -> str:
    """The report: how to read it, one row per test, and the details of each case."""
    lines = [
        "# Calibration: the measured size, coverage and power of every test and interval the reports print",
        "",
        f"Each row runs a test through the function its stage runs, on data sets where the answer is known "
        f"(**synthetic** data shaped like the cohort the report uses: its subjects, windows per subject and class "
        f"balance, with a subject effect so that windows of one subject correlate). **Size**: the share of null "
        f"data sets the test rejects at α = {ALPHA:g}; it *holds* when the Wilson 95 % upper bound is ≤ "
        f"{SIZE_TOLERANCE:g} (α within its Monte Carlo error at 1,000 data sets), is *inflated* when the lower "
        f"bound exceeds α, and is *undecided* otherwise (too few data sets to tell). **Coverage**: the share of "
        f"95 % intervals that hold the true value on null data sets; it *holds* at ≥ {COVERAGE_FLOOR:g} and "
        f"*undercovers* when the Wilson upper bound is below 0.95. **Power**: the share of planted-effect data sets "
        f"rejected, at the effect sizes in the case's unit. Intervals in brackets are Wilson 95 % over data sets.",
        "",
        f"Seed {meta['seed']}, scale {meta['scale']:g} of each case's default counts, data sets of size "
        f"'{meta['size']}'; {len(table)} cases in {meta['seconds']:.0f} s on {meta['n_jobs']} worker(s).",
        "",
        "| test | used in | sided | n | size [95 %] | verdict | coverage [95 %] | verdict | power |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        cov_mark = f" {MARK}" if r["coverage_verdict"] == "undercovers" else ""
        lines.append(
            f"| <a id=\"{anchor(r['name'])}\"></a>`{r['name']}` | {r['used_in']} | {r['sided']} | {int(r['n_null'])} "
            f"| {_interval(r['size'], r['size_low'], r['size_high'])} "
            f"| {r['size_verdict']}{size_mark(r['size_verdict'])} "
            f"| {_interval(r['coverage'], r['coverage_low'], r['coverage_high'])} | {r['coverage_verdict']}{cov_mark} "
            f"| {_power(r)} |")
    bad = flagged(table)
    lines += ["", "## Tests the reports must mark", ""]
    lines += ([f"- `{n}` ({MARK}): every report that prints it carries the mark until it is fixed." for n in bad]
              or [f"- none with {MARK}: no measured size is inflated and no interval undercovers."])
    lines += [f"- `{n}` ({UNRESOLVED}): its size is not resolved at {int(table.set_index('name').loc[n, 'n_null'])} "
              "null data sets (the case says why fewer); every report that prints it carries the mark until more "
              "data sets decide it." for n in unresolved(table)]
    lines += [f"- every entry of *Printed and not measured* below ({NOT_MEASURED_MARK}): every report that prints "
              "it names it beside its measured tests."]
    lines += ["", "## Printed and not measured", "",
              f"Tests and intervals the reports print that no case above runs on null data ({NOT_MEASURED_MARK}), "
              "each with why and what bounds the risk (`src/eegprivacy/studies/calibration/not_measured.py`; an "
              "entry leaves the list when a case measures it).", "",
              "| test | used in | what | why not measured |", "|---|---|---|---|"]
    lines += [f"| <a id=\"{anchor(m.name)}\"></a>`{m.name}` {NOT_MEASURED_MARK} | {'; '.join(m.used_in)} | {m.what} "
              f"| {m.why} |" for m in not_measured()]
    lines += ["", "## The cases", ""]
    for _, r in table.iterrows():
        lines += [f"### `{r['name']}`", "",
                  f"- **Test**: {r['test']}",
                  f"- **Null model**: {r['null_model']} (shaped like `{r['cohort']}`)",
                  f"- **Planted effects**: {_power(r)} ({r['effect_unit'] or 'no planted effect'})",
                  f"- **Data sets**: {int(r['n_null'])} null"
                  + (f" — fewer than 1,000 because {r['why_fewer']}" if isinstance(r["why_fewer"], str)
                     and r["why_fewer"] else "") + f"; {r['seconds']:.0f} s", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_figure(table: pd.DataFrame, path) -> None:
    """Size with its Wilson interval per test, against α and the tolerance; coverage beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.45 * n + 1.5), sharey=True)
    y = range(n)
    for ax, (value, low, high, ref, label) in zip(axes, (
            ("size", "size_low", "size_high", ALPHA, "size at α = 0.05 (Wilson 95 %)"),
            ("coverage", "coverage_low", "coverage_high", 0.95, "coverage of 95 % intervals (Wilson 95 %)"))):
        v = table[value].to_numpy(float)
        err = [v - table[low].to_numpy(float), table[high].to_numpy(float) - v]
        ax.errorbar(v, list(y), xerr=err, fmt="o", color="k", capsize=3)
        ax.axvline(ref, color="tab:blue", lw=1)
        ax.set_xlabel(label)
    axes[0].axvline(SIZE_TOLERANCE, color="tab:red", lw=1, ls="--")
    axes[1].axvline(COVERAGE_FLOOR, color="tab:red", lw=1, ls="--")
    axes[0].set_yticks(list(y), list(table["name"]))
    axes[0].invert_yaxis()
    fig.suptitle("Calibration on synthetic null data shaped like each cohort")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def calibration_runs(uri: str, experiment: str) -> pd.DataFrame:
    """The newest ``calibration`` run per case in ``experiment`` (empty when the stage has not run)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=[experiment], filter_string="tags.stage = 'calibration'",
                                  order_by=["attributes.start_time DESC"])
    except Exception:  # noqa: BLE001  (no such experiment yet)
        return pd.DataFrame()
    if runs.empty or "params.case" not in runs:
        return pd.DataFrame()
    return runs.drop_duplicates("params.case").sort_values("params.case").reset_index(drop=True)


def section_lines(runs: pd.DataFrame, report: str = "calibration.md") -> list[str]:
    """The section a study report ends its lead with: each of its tests' measured size and interval coverage, read
    from the ``calibration`` runs (:func:`calibration_runs`), the verdicts recomputed from the logged counts, a
    mark (⚠) on a test whose size is inflated or whose interval undercovers, and a link to its row."""
    from eegprivacy.evaluation.calibration import coverage_verdict, size_verdict

    if runs.empty:
        return []
    lines = ["## Calibration of this report's tests", "",
             f"Each test and interval below was run through the function its stage runs on synthetic null data "
             f"shaped like its cohort (stage `calibration`; every row of [`{report}`]({report})). A {MARK} marks a "
             "test whose measured size exceeds α = 0.05 beyond its Monte Carlo error, or an interval that misses "
             f"the truth more often than 5 %: read its p-values and intervals in this report with that in mind. A "
             f"{UNRESOLVED} marks a test whose size too few null data sets resolve (not shown wrong, not shown to "
             "hold; its row says why fewer).", "",
             "| test | n null | size [Wilson 95 %] | verdict | coverage [Wilson 95 %] | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for _, r in runs.iterrows():
        name = str(r["params.case"])
        get = lambda k: float(r.get(f"metrics.{k}", math.nan))  # noqa: E731
        n, rej, m, cov_n = get("n_null"), get("rejections"), get("n_intervals"), get("n_covered")
        sv = size_verdict(int(rej), int(n)) if math.isfinite(rej) and n > 0 and math.isfinite(get("size")) \
            else "no test"
        cv = coverage_verdict(int(cov_n), int(m)) if math.isfinite(cov_n) and m > 0 else "no interval"
        mark = lambda v: (f"{v} {MARK}" if v in ("inflated", "undercovers")  # noqa: E731
                          else f"{v} {UNRESOLVED}" if v == "undecided" else v)
        lines.append(f"| [`{name}`]({report}#{anchor(name)}) | {int(n) if math.isfinite(n) else '—'} "
                     f"| {_interval(get('size'), get('size_low'), get('size_high'))} | {mark(sv)} "
                     f"| {_interval(get('coverage'), get('coverage_low'), get('coverage_high'))} | {mark(cv)} |")
    return [*lines, ""]


def tests_lines(report: str, calibration: str = "calibration.md") -> list[str]:
    """The section a stage's report ends with: each test and interval the report prints (the calibration cases
    whose ``used_in`` names ``report``, a path such as ``reports/federated_lira.md``), by name, what it is, and a
    link to its row of ``reports/calibration.md``.

    Why a link and not the numbers: stage ``calibration`` runs after this report's stage (it reads the stages'
    outputs for the cohorts' shapes), so the measured size, coverage and any mark live in its row and in the
    study report's calibration section, which ``eegprivacy report`` rebuilds after it."""
    from eegprivacy.studies.calibration import cases

    found = []
    for name, case in cases().items():
        where = [u.split(":", 1)[1].strip() if ":" in u else "" for u in case.used_in
                 if u.split(":", 1)[0].strip() == report]
        if where:
            found.append(f"- [`{name}`]({calibration}#{anchor(name)})"
                         + (f" ({'; '.join(w for w in where if w)})" if any(where) else "")
                         + f": {case.test}.")
    unmeasured = not_measured_lines(report, calibration)
    if not found and not unmeasured:
        return []
    return ["## Tests behind this report's p-values and intervals", "",
            "Each is run through the function this stage runs on null and planted-signal data shaped like its "
            f"cohort (stage `calibration`); its row of [`{calibration}`]({calibration}) gives the measured size "
            f"at α = 0.05, the coverage of its 95 % interval, the verdict, a {MARK} where the test is inflated "
            f"or the interval undercovers and a {UNRESOLVED} where too few null data sets resolve its size; a "
            f"{NOT_MEASURED_MARK} marks what this report prints that no case runs, with why.", "",
            *found, *unmeasured, ""]
