"""Study B and C reports (issue 20, multiple comparisons; issue 33, one policy): every attacker is reported (no
post-hoc "strongest"), each table's tests are Holm-adjusted over its cells (study B: the report stage's p_Holm over
the family of its printed table, controls never tested), intervals say what they are over (``t(n−1)`` for a t-interval
over n seeds) and are clipped to [0, 1] for display, marked ``clipped``.

All inputs are SYNTHETIC ``mlflow.search_runs``-like frames built from per-seed values with the sweep's own
aggregation (``mean_ci``), so the expected p-values come from scipy on those values, not from hard-coded numbers.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from eegprivacy.evaluation.intervals import interval_p_value, mean_ci
from eegprivacy.reporting import study_figures
from eegprivacy.reporting import study_reports as report
from eegprivacy.reporting import study_runs
from eegprivacy.studies.federated.report import across_rounds, run_metrics


def tidy_b_rows(cells: dict) -> pd.DataFrame:
    """SYNTHETIC per-round rows of ``federated_mia``: ``cells`` maps (ε, attack, attacker, metric) to per-seed
    values (two rounds each, the same value)."""
    return pd.DataFrame([{"dataset": "synthetic_mi", "synthetic": True, "model": "simplenet", "epsilon": eps,
                          "attack": attack, "attacker": attacker, "metric": metric, "seed": seed, "round": rnd,
                          "value": value, "chance": 0.5}
                         for (eps, attack, attacker, metric), values in cells.items()
                         for seed, value in enumerate(values) for rnd in (1, 2)])


def b_run(index: int, summary: pd.DataFrame) -> dict:
    """The ``federated_mia_report`` run of the summary's dataset as a ``search_runs`` row (what the stage logs:
    :func:`run_metrics`)."""
    metrics, tags = run_metrics(summary, "synthetic_mi")
    row = {"run_id": f"{index:032x}", "start_time": pd.Timestamp("2024-01-01") + pd.Timedelta(minutes=index),
           "tags.mlflow.runName": "federated_mia_report-synthetic_mi", "tags.dataset": "synthetic_mi",
           "tags.dataset_version": "ab" * 32, "tags.synthetic": "true"}
    row.update({f"metrics.{k}": v for k, v in metrics.items()})
    row.update({f"tags.{k}": v for k, v in tags.items()})
    return row


def b_rows(cells: dict) -> pd.DataFrame:
    summary = across_rounds(tidy_b_rows(cells))
    return study_runs.tidy_b(study_runs.latest_parents(pd.DataFrame([b_run(1, summary)])))


def one_sided_p(values, chance: float = 0.5) -> float:
    return float(stats.ttest_1samp(values, chance, alternative="greater").pvalue)


def test_every_attacker_is_reported_not_the_strongest():
    """Two attackers of one attack: both are rows and columns (the old report kept only the larger AUROC)."""
    lr, rf = [0.80, 0.85, 0.90], [0.60, 0.62, 0.70]
    rows = b_rows({(np.inf, "rla", "lr", "auroc"): lr, (np.inf, "rla", "rf", "auroc"): rf,
                   (np.inf, "", "", "utility_accuracy"): [0.7, 0.72, 0.74]})
    attack = rows[rows["attack"] == "rla"]
    assert sorted(attack["attacker"]) == ["lr", "rf"]
    table = report.headline_table("b", rows)
    assert {"AUROC rla (lr)", "AUROC rla (rf)", "utility accuracy"} <= set(table.columns)
    assert table["AUROC rla (rf)"].iloc[0].startswith(f"{np.mean(rf):.3f} [")  # the weaker attacker is kept
    assert "strongest" not in report.INTRO["b"]


def test_study_b_prints_the_report_stages_p_holm_and_never_retests():
    """Issue 33: study-b.md does not re-test: each cell's p_Holm is the one the report stage computed over the
    family of its printed table (here the synthetic_mi LR attack tables), and a control is never tested."""
    weak = [0.50, 0.56, 0.60, 0.58, 0.53]
    cells = {(5.0, "rla", "lr", "auroc"): weak, (5.0, "fla", "lr", "auroc"): [0.47, 0.52, 0.50, 0.53, 0.49],
             (5.0, "rla_untrained_control", "lr", "auroc"): [0.9, 0.92, 0.95, 0.91, 0.93]}
    summary = across_rounds(tidy_b_rows(cells))
    rows = b_rows(cells)
    cell = rows[rows["attack"] == "rla"].iloc[0]
    expected = summary[summary["attack"] == "rla"].iloc[0]
    assert cell["p_value"] == pytest.approx(one_sided_p(weak), rel=1e-9)
    assert cell["p_holm"] == expected["p_holm"] and cell["holm_family"] == "synthetic_mi/attacks/lr"
    assert expected["holm_m"] == 2  # rla and fla: the control is not a hypothesis
    control = rows[rows["attack"] == "rla_untrained_control"].iloc[0]
    assert np.isnan(control["p_holm"]) and not control["significant"]
    table = report.headline_table("b", rows)
    assert "p_Holm" not in table["AUROC rla_untrained_control (lr)"].iloc[0]  # shown, never starred
    text = report.render("b", rows, "sqlite:///synthetic.db", None)
    assert "multiple-comparison correction: Holm" in text and "`synthetic_mi/attacks/lr`" in text


def test_a_strong_cell_stays_significant_after_holm():
    """The correction is not a blanket "never": a clear leak keeps its star (guards against a test that can only
    pass by marking nothing)."""
    rows = b_rows({(np.inf, "rla", "lr", "auroc"): [0.90, 0.92, 0.95, 0.91, 0.93],
                   (np.inf, "fla", "lr", "auroc"): [0.47, 0.52, 0.50, 0.53, 0.49]})
    cell = rows[rows["attack"] == "rla"].iloc[0]
    assert cell["significant"]
    assert report.headline_table("b", rows)["AUROC rla (lr)"].iloc[0].endswith("*)")


def test_three_seed_t2_interval_is_clipped_and_marked():
    """A cell without replicates keeps the 3-seed t(2) interval, logged clipped to [0, 1] by the stage, and its
    `CI over` names seeds and t(2)."""
    values = [0.55, 0.95, 0.99]
    mean, low, high = mean_ci(values)
    assert high > 1.0  # the premise: the t(2) interval leaves the AUROC's range
    rows = b_rows({(1.0, "rla", "lr", "auroc"): values})
    table = report.headline_table("b", rows)
    text = table["AUROC rla (lr)"].iloc[0]
    assert text.startswith(f"{mean:.3f} [{max(low, 0.0):.3f}, 1.000]")
    assert table["CI over"].iloc[0] == "seeds, t(2)"
    assert rows["p_value"].iloc[0] == pytest.approx(one_sided_p(values), rel=1e-6)


def test_figure_shows_every_attacker():
    """The figure draws one line per attacker (no "strongest attack AUROC" panel)."""
    cells = {}
    for eps in (np.inf, 1.0):
        cells.update({(eps, "rla", "lr", "auroc"): [0.8, 0.85, 0.9], (eps, "rla", "rf", "auroc"): [0.6, 0.65, 0.7],
                      (eps, "", "", "utility_accuracy"): [0.7, 0.72, 0.74]})
    fig = Figure()
    study_figures.draw_b(b_rows(cells), fig)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("lr" in label for label in labels) and any("rf" in label for label in labels)
    assert not any("strongest" in ax.get_ylabel() for ax in fig.axes)


@pytest.mark.parametrize("p_exact", [True, False])
def test_interval_p_value_recovers_the_t_test(p_exact):
    """From a logged t-interval over n seeds the one-sided one-sample t-test is exact; without n it is untested."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 10):
        values = rng.normal(0.55, 0.05, size=n)
        mean, low, high = mean_ci(values)
        got = interval_p_value(mean, low, high, 0.5, n if p_exact else np.nan, t_interval=True)
        if p_exact:
            assert got == pytest.approx(one_sided_p(values), rel=1e-6)
        else:
            assert np.isnan(got)


def c_run(index: int, encoder: str, metrics: dict, **tags) -> dict:
    """One SYNTHETIC study C parent run as a ``search_runs`` row."""
    row = {"run_id": f"{index:032x}", "start_time": pd.Timestamp("2024-01-01") + pd.Timedelta(minutes=index),
           "tags.mlflow.runName": f"embedding_audit-synthetic_rest_task-{encoder}-pretrained",
           "tags.dataset": "synthetic_rest_task", "tags.dataset_version": "cd" * 32, "tags.synthetic": "true",
           "tags.encoder": encoder, "tags.model": encoder}
    row.update({f"metrics.{k}": v for k, v in metrics.items()})
    row.update({f"tags.{k}": v for k, v in tags.items()})
    return row


def test_c_says_what_its_intervals_are_over_only_as_logged():
    """A run that logs ``ci_over`` is printed with it; one that does not says "as logged" (the stage's intervals
    are changing from window to subject bootstraps: the report must not claim either)."""
    mia = "unit_membership/endpoint_membership_head/split_h/defense_none/attacker_lira_online/auc"
    bpid = "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1"
    metrics = {f"{mia}_mean": 0.62, f"{mia}_ci_low": 0.51, f"{mia}_ci_high": 0.73,
               f"{bpid}_mean": 0.3, f"{bpid}_ci_low": -0.05, f"{bpid}_ci_high": 0.65}
    runs = pd.DataFrame([c_run(1, "biot", metrics, ci_over="subjects"), c_run(2, "labram", metrics)])
    rows = study_runs.tidy_c(study_runs.latest_parents(runs))
    table = report.headline_table("c", rows).set_index("encoder")
    assert table.loc["biot", "CI over"] == "subjects"
    assert table.loc["labram", "CI over"] == "as logged"
    assert "clipped" in table.loc["biot", "BPID@1"]  # BPID@1 is a proportion: [0, 1]
    # issue 35: nothing is re-tested from an interval in this table; the Claims section holds every test
    assert rows["p_value"].isna().all() and rows["p_holm"].isna().all()
    assert "No cell is tested in this table" in report.render("c", rows, "sqlite:///synthetic.db", None)


def _markdown_rows(lines: list[str]) -> list[dict[str, str]]:
    """A Markdown table's rows (header -> cell) from its lines."""
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def _table_after(text: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after the line starting with ``heading``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return _markdown_rows(table)


P_HOLM = re.compile(r"p_Holm (\d\.\d{3})( \*)?")


def test_both_study_b_reports_print_the_same_p_holm_for_the_same_cell():
    """Issue 33, one claim one test: reports/federated_mia_tables.md (``tables_md`` on the summary) and
    reports/study-b.md (``render`` on the report run the stage logs from that summary) print the same p_Holm and
    star for every attack cell both show; cells have subjects+seeds intervals (SYNTHETIC replicates) and the
    controls are printed without a test in both."""
    from eegprivacy.reporting.federated import tables_md, with_test_sizes
    from eegprivacy.studies.federated.replicates import replicate_key

    rng = np.random.default_rng(0)
    cells, replicates = {}, {}
    levels = {"rla": 0.62, "fla": 0.51, "gla_sound": 0.58, "rla_untrained_control": 0.6}
    for eps in (np.inf, 1.0):
        for attack, level in levels.items():
            for attacker in ("lr", "rf"):
                values = list(level + rng.normal(0, 0.02, size=3))
                cells[(eps, attack, attacker, "auroc")] = values
                for seed, value in enumerate(values):
                    replicates.setdefault(("synthetic_mi", "simplenet", f"{eps:g}", seed), {})[
                        replicate_key(attack, attacker, "auroc")] = value + rng.normal(0, 0.03, size=300)
        cells[(eps, "", "", "utility_accuracy")] = [0.7, 0.72, 0.74]
    tidy = tidy_b_rows(cells)
    summary = with_test_sizes(across_rounds(tidy, replicates), tidy)
    attacks = summary[summary["attack"] != ""]
    assert (attacks["ci_over"] == "subjects+seeds").all()
    assert attacks.loc[attacks["attack"].str.endswith("_control"), "p_holm"].isna().all()

    tables = tables_md(summary, {})
    study_b = report.render("b", study_runs.tidy_b(study_runs.latest_parents(pd.DataFrame([b_run(1, summary)]))),
                            "sqlite:///synthetic.db", None)
    b_table = _table_after(study_b, "*Table:")
    compared = 0
    for attacker in ("lr", "rf"):
        fed = _table_after(tables, f"## SYNTHETIC synthetic_mi: attacks, {attacker.upper()} attacker")
        for eps, method in ((np.inf, "FL-SimpleNet"), (1.0, "DP-FL-SimpleNet")):
            fed_row = next(r for r in fed if r["Methods"] == method)
            b_row = next(r for r in b_table if r["ε"] == f"{eps:g}")
            for attack, column in (("rla", "RLA AUROC"), ("fla", "FLA AUROC"), ("gla_sound", "GLA (sound) AUROC")):
                ours, theirs = P_HOLM.search(fed_row[column]), P_HOLM.search(b_row[f"AUROC {attack} ({attacker})"])
                assert ours and theirs and ours.groups() == theirs.groups(), (attacker, eps, attack)
                expected = summary[(summary["epsilon"] == eps) & (summary["attack"] == attack)
                                   & (summary["attacker"] == attacker) & (summary["metric"] == "auroc")]
                assert float(ours.group(1)) == pytest.approx(expected["p_holm"].iloc[0], abs=5e-4)
                compared += 1
            assert "p_Holm" not in b_row[f"AUROC rla_untrained_control ({attacker})"]
    assert compared == 12
    assert "CI over = subjects+seeds" in tables and "Holm family `synthetic_mi/attacks/lr`" in tables
    # attacks over subjects+seeds; utility over seeds (this test gives it no replicates), each labelled
    assert all(set(r["CI over"].split("; ")) == {"subjects+seeds", "seeds, t(2)"} for r in b_table)


def test_a_family_too_large_for_its_bootstrap_count_says_so():
    """The conventions' p-value floor: with B resamples no bootstrap p is below 1/(B+1), so a family of m cells
    with m/(B+1) ≥ α can star nothing, and its caption says so instead of reading as "no leak"."""
    from eegprivacy.reporting.federated import family_caption

    rows = pd.DataFrame({"dataset": "d", "attack": "rla", "attacker": "lr", "metric": "auroc",
                         "p_value": np.linspace(0.001, 0.5, 30), "ci_over": "subjects+seeds",
                         "ci_method": "cluster bootstrap (200 resamples)"}, index=range(30))
    assert "30/(B+1) = 0.149" in family_caption(rows, "d/attacks/lr")
    assert "B = 2000" not in family_caption(rows.assign(ci_method="cluster bootstrap (2000 resamples)"),
                                            "d/attacks/lr")
