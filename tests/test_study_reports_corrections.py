"""Study B and C reports (issue 20, multiple comparisons): every attacker is reported (no post-hoc "strongest"),
each table's tests are Holm-adjusted over its cells, intervals say what they are over (``t(n−1)`` for a t-interval
over n seeds) and are clipped to [0, 1] for display, marked ``clipped``.

All inputs are SYNTHETIC ``mlflow.search_runs``-like frames built from per-seed values with the sweep's own
aggregation (``mean_ci``), so the expected p-values come from scipy on those values, not from hard-coded numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from eegprivacy.evaluation.intervals import mean_ci
from eegprivacy.reporting import study_reports as report

UTILITY = "attack_nan/attacker_nan/round_10.0/client_nan/utility_accuracy"


def auroc_name(attack: str, attacker: str, rnd: str = "10.0") -> str:
    return f"attack_{attack}/attacker_{attacker}/round_{rnd}/client_nan/auroc"


def aggregates(name: str, per_seed) -> dict[str, float]:
    """A parent's ``<name>_mean/_ci_low/_ci_high`` as the sweep logs them (t-interval over the seeds)."""
    mean, low, high = mean_ci(per_seed)
    return {f"{name}_mean": mean, f"{name}_ci_low": low, f"{name}_ci_high": high}


def b_run(index: int, eps: str, metrics: dict, cells: int | None) -> dict:
    """One SYNTHETIC study B parent run as a ``search_runs`` row (``cells`` = seeds, as the sweep logs it)."""
    row = {"run_id": f"{index:032x}", "start_time": pd.Timestamp("2024-01-01") + pd.Timedelta(minutes=index),
           "tags.mlflow.runName": f"federated_mia-synthetic_mi-simplenet-eps{eps}", "tags.dataset": "synthetic_mi",
           "tags.dataset_version": "ab" * 32, "tags.synthetic": "true", "tags.model": "simplenet",
           "tags.epsilon": eps}
    if cells is not None:
        row["metrics.cells"] = float(cells)
    row.update({f"metrics.{k}": v for k, v in metrics.items()})
    return row


def b_rows(runs: list[dict]) -> pd.DataFrame:
    return report.tidy_b(report.latest_parents(pd.DataFrame(runs)))


def one_sided_p(values, chance: float = 0.5) -> float:
    return float(stats.ttest_1samp(values, chance, alternative="greater").pvalue)


def test_every_attacker_is_reported_not_the_strongest():
    """Two attackers of one attack: both are rows and columns (the old report kept only the larger AUROC)."""
    lr, rf = [0.80, 0.85, 0.90], [0.60, 0.62, 0.70]
    rows = b_rows([b_run(1, "inf", {**aggregates(auroc_name("rla", "lr"), lr),
                                    **aggregates(auroc_name("rla", "rf"), rf),
                                    **aggregates(UTILITY, [0.7, 0.72, 0.74])}, cells=3)])
    attack = rows[rows["attack"] == "rla"]
    assert sorted(attack["attacker"]) == ["lr", "rf"]
    table = report.headline_table("b", rows)
    assert {"AUROC rla (lr)", "AUROC rla (rf)", "utility accuracy"} <= set(table.columns)
    assert table["AUROC rla (rf)"].iloc[0].startswith(f"{np.mean(rf):.3f} [")  # the weaker attacker is kept
    assert "strongest" not in report.INTRO["b"]


def test_holm_over_the_table_turns_an_uncorrected_hit_into_no_decision():
    """Five AUROC cells: one is above chance at p < 0.05 uncorrected but not after Holm over the table; a
    below-chance cell whose interval excludes 0.5 is not "leaky" either (the test is one-sided)."""
    weak = [0.50, 0.56, 0.60, 0.58, 0.53]
    nulls = {"fla": [0.47, 0.52, 0.50, 0.53, 0.49], "gla_sound": [0.51, 0.46, 0.50, 0.48, 0.55],
             "cla": [0.50, 0.49, 0.53, 0.47, 0.51]}
    below = [0.36, 0.40, 0.38, 0.35, 0.41]
    metrics = {**aggregates(auroc_name("rla", "lr"), weak), **aggregates(auroc_name("gla_paper", "lr"), below)}
    for attack, values in nulls.items():
        metrics.update(aggregates(auroc_name(attack, "lr"), values))
    raw = one_sided_p(weak)
    assert raw < 0.05 and min(one_sided_p(v) for v in nulls.values()) > raw  # the premise, from scipy
    assert mean_ci(below)[2] < 0.5  # its uncorrected interval excludes chance (below it)

    rows = b_rows([b_run(1, "5", metrics, cells=5)])
    cell = rows[rows["attack"] == "rla"].iloc[0]
    assert cell["p_value"] == pytest.approx(raw, rel=1e-6)  # recovered exactly from the logged t-interval
    assert cell["p_holm"] >= 0.05 and not cell["significant"]
    assert rows.loc[rows["metric"] == "auroc", "p_holm"].notna().sum() == 5  # the family is the whole table
    assert not rows.loc[rows["attack"] == "gla_paper", "significant"].iloc[0]

    table = report.headline_table("b", rows)
    assert "p_Holm" in table["AUROC rla (lr)"].iloc[0] and "*" not in table["AUROC rla (lr)"].iloc[0]
    text = report.render("b", rows, "sqlite:///synthetic.db", None)
    assert "multiple-comparison correction: Holm" in text and "over the 5 tested cells" in text


def test_a_strong_cell_stays_significant_after_holm():
    """The correction is not a blanket "never": a clear leak keeps its star (guards against a test that can only
    pass by marking nothing)."""
    strong = [0.90, 0.92, 0.95, 0.91, 0.93]
    metrics = {**aggregates(auroc_name("rla", "lr"), strong),
               **aggregates(auroc_name("fla", "lr"), [0.47, 0.52, 0.50, 0.53, 0.49])}
    rows = b_rows([b_run(1, "inf", metrics, cells=5)])
    cell = rows[rows["attack"] == "rla"].iloc[0]
    assert cell["significant"]
    assert report.headline_table("b", rows)["AUROC rla (lr)"].iloc[0].endswith("*)")


def test_three_seed_t2_interval_is_clipped_and_marked():
    """A 3-seed t(2) interval reaching past 1 is displayed clipped to [0, 1], says so, and its `CI over` names
    seeds and t(2); the test uses the interval as logged, not the clipped one."""
    values = [0.55, 0.95, 0.99]
    mean, low, high = mean_ci(values)
    assert high > 1.0  # the premise: the t(2) interval leaves the AUROC's range
    rows = b_rows([b_run(1, "1", aggregates(auroc_name("rla", "lr"), values), cells=3)])
    table = report.headline_table("b", rows)
    text = table["AUROC rla (lr)"].iloc[0]
    assert text.startswith(f"{mean:.3f} [{max(low, 0.0):.3f}, 1.000] clipped")
    assert table["CI over"].iloc[0] == "seeds, t(2)"
    assert rows["p_value"].iloc[0] == pytest.approx(one_sided_p(values), rel=1e-6)
    assert "`clipped` (1 here)" in report.caption("b", rows)


def test_figure_shows_every_attacker():
    """The figure draws one line per attacker (no "strongest attack AUROC" panel)."""
    runs = [b_run(i, eps, {**aggregates(auroc_name("rla", "lr"), [0.8, 0.85, 0.9]),
                           **aggregates(auroc_name("rla", "rf"), [0.6, 0.65, 0.7]),
                           **aggregates(UTILITY, [0.7, 0.72, 0.74])}, cells=3) for i, eps in enumerate(("inf", "1"))]
    fig = Figure()
    report.draw_b(b_rows(runs), fig)
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
        got = report.interval_p_value(mean, low, high, 0.5, n if p_exact else np.nan, t_interval=True)
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
    rows = report.tidy_c(report.latest_parents(runs))
    table = report.headline_table("c", rows).set_index("encoder")
    assert table.loc["biot", "CI over"] == "subjects"
    assert table.loc["labram", "CI over"] == "as logged"
    assert "clipped" in table.loc["biot", "BPID@1"]  # BPID@1 is a proportion: [0, 1]
    mia_rows = rows[rows["metric"] == "MIA AUC (head, LiRA)"]
    assert mia_rows["p_holm"].notna().all()  # tested against 0.5, Holm over the table's 2 MIA cells
    assert rows.loc[rows["metric"] == "BPID@1", "p_value"].isna().all()  # no chance level logged: untested
    assert "multiple-comparison correction: Holm" in report.render("c", rows, "sqlite:///synthetic.db", None)


def test_b_runs_whose_rows_grew_key_columns_are_still_read():
    """The stage's aggregate names carry every key column of its rows; columns added later (``sent_to_server``,
    ``detail``) sit between ``client`` and the metric and must not hide a run from the report (SYNTHETIC)."""
    grown = "client_nan/sent_to_server_nan/detail_nan"
    metrics = {**aggregates(UTILITY.replace("client_nan", grown), [0.6, 0.62, 0.64]),
               **aggregates(auroc_name("rla", "lr").replace("client_nan", grown), [0.7, 0.72, 0.74])}
    tidy = report.tidy_b(pd.DataFrame([b_run(0, "1", metrics, cells=3)]))
    assert set(tidy["attack"]) == {"utility", "rla"}
