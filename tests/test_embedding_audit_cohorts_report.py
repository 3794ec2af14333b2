"""Study C's reporting across cohorts (issue 21): a cohort's report says its task, identity and pretraining design
and shows the subject-level label's table only where the cohort has one; the cross-cohort answers need the score
above its controls (not chance alone); a missing cohort is a clear error; the figures are written.

FIXTURES: today's ``metrics/embedding_audit_eegmat.csv`` (three of its cells) relabelled as the cohort a test
needs, plus SYNTHETIC rows (the ``subject_label`` unit, identity rows of a defense, chosen BPID@1 / L_A
values) written into the test; none of them is a result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eegprivacy.reporting import embedding_audit as ea
from eegprivacy.reporting import embedding_audit_cohorts as cohorts_report
from eegprivacy.reporting import study_reports as report
from eegprivacy.reporting import study_runs
from eegprivacy.studies.embedding_audit.summaries import summarise

REPO = Path(__file__).resolve().parents[1]
TODAY = REPO / "metrics" / "embedding_audit_eegmat.csv"
CELLS = [("bandpower", "none"), ("biot", "self_pretrained"), ("biot", "random_init")]
MSU = {"task": "diagnosis", "task_text": "schizophrenia vs control (diagnosis)", "identity": "halves",
       "identity_text": "first vs second half of the one recording (1 gap window)",
       "pretrain_text": "8 further subjects pretrain the encoders", "subject_level_task": True}


def _today(cohort: str) -> pd.DataFrame:
    """FIXTURE: today's eegmat rows of :data:`CELLS` as a cohort's rows (``cohort`` column, new identity split)."""
    if not TODAY.exists():
        pytest.fail(f"{TODAY} is missing: the fixtures are built from it (`dvc repro embedding_audit@eegmat`)")
    tidy = pd.read_csv(TODAY)
    keep = pd.Series(False, index=tidy.index)
    for e, w in CELLS:
        keep |= (tidy["encoder"] == e) & (tidy["weights"] == w)
    # the defenses' identity rows are left out: the fixtures that need them add their own (SYNTHETIC) ones
    identity = tidy["unit"].str.startswith("defense/") & ((tidy["endpoint"] == "identity")
                                                          | tidy["metric"].str.startswith("closes_identity"))
    tidy = tidy[keep & ~identity].copy()
    tidy["dataset"] = cohort
    tidy["cohort"] = cohort
    return tidy


def _row(template: pd.Series, **values) -> dict:
    return {**template.to_dict(), "ci_low": np.nan, "ci_high": np.nan, "chance": np.nan, "ci_over": "none",
            **values}


def _subject_label(tidy: pd.DataFrame, encoder: str, weights: str, ba: tuple, controls: dict) -> list[dict]:
    """SYNTHETIC ``subject_label`` rows of one cell: BA (value, low, high) and its controls."""
    template = tidy[(tidy["encoder"] == encoder) & (tidy["weights"] == weights)].iloc[0]
    common = {"unit": "subject_label", "endpoint": "diagnosis", "split": "subject_disjoint", "defense": "none",
              "attacker": "logistic_head", "seed": 0, "eps_unit": "none"}
    rows = [_row(template, **common, metric="balanced_accuracy", value=ba[0], ci_low=ba[1], ci_high=ba[2],
                 chance=0.5, ci_over="subjects"),
            _row(template, **common, metric="window_balanced_accuracy", value=ba[0] - 0.02, ci_low=ba[1] - 0.02,
                 ci_high=ba[2] - 0.02, chance=0.5, ci_over="subjects"),
            _row(template, **common, metric="p_value", value=controls.pop("p_value", 0.01))]
    rows += [_row(template, **common, metric=k, value=v, chance=0.5) for k, v in controls.items()]
    return rows


def _set(tidy: pd.DataFrame, encoder: str, weights: str, unit: str, metric: str, **values) -> None:
    """Overwrite one metric of a cell (a SYNTHETIC value in the fixture)."""
    mask = ((tidy["encoder"] == encoder) & (tidy["weights"] == weights) & (tidy["unit"] == unit)
            & (tidy["metric"] == metric))
    if "attacker" in values:
        mask &= tidy["attacker"] == values.pop("attacker")
    assert mask.any(), (encoder, weights, unit, metric)
    for k, v in values.items():
        tidy.loc[mask, k] = v


def _msu() -> pd.DataFrame:
    """FIXTURE: a diagnosis cohort. Band power's BA clears every control; BIOT's lies above chance but not above
    its permuted-label control (so only a rule that ignores controls says yes); the random-init BIOT's interval
    overlaps its q95. Identity rows on one defense, with an identity verdict."""
    tidy = _today("msu_schizophrenia")
    rows = (_subject_label(tidy, "bandpower", "none", (0.80, 0.72, 0.88),
                           {"control_gaussian": 0.50, "control_permuted": 0.51, "control_permuted_q95": 0.60})
            + _subject_label(tidy, "biot", "self_pretrained", (0.72, 0.64, 0.80),
                             {"control_gaussian": 0.50, "control_permuted": 0.70, "control_permuted_q95": 0.78})
            + _subject_label(tidy, "biot", "random_init", (0.66, 0.56, 0.76),
                             {"control_gaussian": 0.50, "control_permuted": 0.50, "control_permuted_q95": 0.60}))
    template = tidy[(tidy["unit"] == "defense/noise/3") & (tidy["encoder"] == "bandpower")].iloc[0]
    for seed in (0, 1, 2):
        common = {"seed": seed, "defense": "noise_3", "unit": "defense/noise/3"}
        rows += [_row(template, **common, endpoint="identity", split="reference_set_by_halves",
                      attacker="centroid_cosine", metric="bpid_at_1", value=0.04 + 0.01 * seed, ci_low=0.0,
                      ci_high=0.12, chance=1 / 28, ci_over="subjects"),
                 _row(template, **common, endpoint="defense", split="subject_disjoint", attacker="centroid_cosine",
                      metric="closes_identity", value=1.0),
                 _row(template, **common, endpoint="defense", split="subject_disjoint", attacker="centroid_cosine",
                      metric="closes_identity_undecided", value=0.0)]
    return pd.concat([tidy, pd.DataFrame(rows)], ignore_index=True)


def _meta(cohort: str, design: dict | None) -> dict:
    meta = {"dataset": cohort, "profile": "test", "synthetic": False, "n_audit_subjects": 28,
            "n_audit_windows": 690, "n_pretrain_subjects": 8, "window_s": 4.0, "deployment_sigma": 1.0,
            "utility_threshold": 0.6, "utility_kept": 0.5, "defense_seeds": 3}
    return {**meta, "cohort": design} if design is not None else meta


def _encoders_meta() -> dict:
    from eegprivacy.embeddings.encoders.base import map_channels

    mapping = map_channels(["Fz", "Cz"], ["FZ", "CZ", "PZ"], "drop").record()  # Pz missing: dropped
    describe = {"n_params": 0, "config": {}, "channels": ["Fz", "Cz"], "channel_mapping": mapping,
                "input_sfreq": 128.0, "expected_sfreq": 200.0}
    return {cell: {"describe": describe, "dim": 8, "ms_per_window": 1.0} for cell in CELLS}


# ----------------------------------------------------------------------------------------------- per cohort

def test_cohort_report_states_its_design_and_the_diagnosis_table():
    summary = summarise(_msu())
    text = ea.report_md(summary, CELLS, _meta("msu_schizophrenia", MSU), _encoders_meta())
    for phrase in (MSU["task_text"], MSU["identity_text"], MSU["pretrain_text"]):
        assert phrase in text
    assert "## Diagnosis (subject-level label) leakage" in text
    assert "| band power | 2 | 2 | PZ (dropped) | none | 0 | 128 → 200 Hz |" in text  # the channel mapping
    assert "0.80 [0.72, 0.88] | 0.50 / 0.51, 0.60 |" in text  # BA [CI] | G / P (mean, q95), from the fixture
    assert f"## Deployment relevance: {MSU['task_text']} of held-out subjects" in text
    assert "rest vs arithmetic" not in text  # nothing of eegmat's task leaks into another cohort's report
    assert "BPID@1 [CI] (chance) | closes identity |" in text and "yes, every seed" in text
    assert "Closing identity: band power noise_3." in text
    for name in ("leakage", "aeds", "defenses"):
        assert f"(figures/embedding_audit_msu_schizophrenia_{name}.png)" in text
    assert "metrics/embedding_audit_msu_schizophrenia.csv" in text
    # it ends with the tests it prints, each linked to its calibration row: the diagnosis's, not eegmat's task test
    tests = text[text.index("## Tests behind this report's p-values and intervals"):]
    assert "calibration.md#cal-study-c-diagnosis" in tests and "cal-study-c-window-task" not in tests


def test_cohort_without_a_subject_label_has_no_diagnosis_table_and_old_meta_still_renders():
    summary = summarise(_today("eegmat"))
    text = ea.report_md(summary, CELLS, _meta("eegmat", None), _encoders_meta())
    assert "subject-level label) leakage" not in text
    assert "rest vs mental arithmetic" in text and "8 further subjects pretrain" in text  # eegmat's fallbacks
    assert "(figures/embedding_audit_leakage.png)" in text  # before cohorts: today's file names
    assert "closes identity" not in text  # no identity rows on the defenses: no empty columns


def test_headline_carries_the_diagnosis_and_identity_verdicts_as_strict_json(tmp_path):
    summary = summarise(_msu())
    payload = ea.headline(summary, CELLS, _meta("msu_schizophrenia", MSU))
    ea.write_headline(tmp_path / "h.json", payload)  # allow_nan=False: no NaN may reach the file
    loaded = json.loads((tmp_path / "h.json").read_text())
    label = loaded["encoders"]["bandpower/none"]["subject_label"]
    assert label["balanced_accuracy"] == pytest.approx({"value": 0.80, "ci_low": 0.72, "ci_high": 0.88})
    assert label["control_permuted_q95"] == pytest.approx(0.60) and label["endpoint"] == "diagnosis"
    assert loaded["defenses_closing_identity"] == ["bandpower/none:noise_3"]
    assert loaded["defense_identity"]["bandpower/none:noise_3"]["closes_identity"] == 1.0
    assert loaded["cohort"]["task_text"] == MSU["task_text"]
    assert summarise(_today("eegmat")).pipe(ea.headline, CELLS, _meta("eegmat", None))["encoders"][
        "bandpower/none"]["subject_label"] is None


def test_figures_are_written_under_the_cohort_prefix(tmp_path):
    summary = summarise(_msu())
    meta = _meta("msu_schizophrenia", MSU)
    paths = ea.figures(summary, CELLS, tmp_path, "msu_schizophrenia", meta=meta)
    names = {p.name for p in paths}
    assert {f"embedding_audit_msu_schizophrenia_{n}.png" for n in ("leakage", "aeds", "defenses")} <= names
    assert all(p.stat().st_size > 0 for p in paths)
    text = ea.report_md(summary, CELLS, meta, _encoders_meta())
    assert all(f"(figures/{name})" in text for name in names)  # every written figure is linked, by its name


# ----------------------------------------------------------------------------------------------- across cohorts

def _put(tidy: pd.DataFrame, encoder: str, weights: str, unit: str, metric: str, value: float) -> pd.DataFrame:
    """Set one metric of a cell, or add it (a SYNTHETIC value in the fixture): a p-value the test decides by."""
    mask = ((tidy["encoder"] == encoder) & (tidy["weights"] == weights) & (tidy["unit"] == unit)
            & (tidy["metric"] == metric))
    if mask.any():
        tidy.loc[mask, "value"] = value
        return tidy
    template = tidy[(tidy["encoder"] == encoder) & (tidy["weights"] == weights)].iloc[0]
    return pd.concat([tidy, pd.DataFrame([_row(template, unit=unit, endpoint=unit.split("/")[-1], metric=metric,
                                               value=value, seed=0, defense="none")])], ignore_index=True)


def _write(folder: Path, cohort: str, tidy: pd.DataFrame, design: dict | None = None) -> Path:
    """The cohort's tidy rows and the claims the stage would build from them (the real claims module)."""
    from eegprivacy.studies.embedding_audit.claims import claims_table
    from eegprivacy.studies.embedding_audit.config import IDENTITY_LINKS
    from eegprivacy.studies.embedding_audit.units import encoder_label

    path = folder / f"embedding_audit_{cohort}.csv"
    tidy.to_csv(path, index=False)
    design = {"identity_link": IDENTITY_LINKS["halves"], **(design or {})}
    claims = claims_table(tidy, cohort, CELLS, design, {c: encoder_label(*c) for c in CELLS},
                          {c: "SYNTHETIC provenance" for c in CELLS})
    claims.to_csv(folder / f"embedding_audit_{cohort}_claims.csv", index=False)
    return path


def _answers(tmp_path, tidy_by_cohort: dict) -> pd.DataFrame:
    paths = [_write(tmp_path, c, t) for c, t in tidy_by_cohort.items()]
    table = cohorts_report.answers(cohorts_report.load(paths))
    return table.set_index(["cohort", "encoder", "weights"])


def test_task_answer_is_the_claims_permutation_verdict(tmp_path):
    """The diagnosis is decided by its subject-label permutation p (Holm over the cohort's cells), not by the
    interval: BIOT's BA is far above chance but not above its permuted-label null (SYNTHETIC p 0.3)."""
    tidy = _msu()
    for (e, w), p in zip(CELLS, (0.001, 0.3, 0.08)):
        tidy = _put(tidy, e, w, "subject_label", "p_value", p)
        tidy = _put(tidy, e, w, "subject_label", "n_permutations", 1000)
    table = _answers(tmp_path, {"msu_schizophrenia": tidy})
    assert table.loc[("msu_schizophrenia", "bandpower", "none"), "task_answer"] == "yes"
    assert table.loc[("msu_schizophrenia", "bandpower", "none"), "task_p_holm"] == pytest.approx(0.003)
    assert table.loc[("msu_schizophrenia", "biot", "self_pretrained"), "task_answer"] == "no evidence"
    assert table.loc[("msu_schizophrenia", "biot", "random_init"), "task_answer"] == "no evidence"  # 0.08 × 2
    assert table.loc[("msu_schizophrenia", "biot", "random_init"), "task_test"] == \
        "subject-label permutation (1,000)"
    assert table.loc[("msu_schizophrenia", "bandpower", "none"), "task"]["source"] == "subject_label"


def test_identity_answer_is_its_permutation_test_and_pretraining_a_paired_test(tmp_path):
    """SYNTHETIC p-values: identity is decided by its reference-label permutation p; "pretraining adds identity"
    by the paired test against the random-init twin (only on the pretrained cell, "–" elsewhere)."""
    def table(identity_p, paired_p):
        tidy = _today("eegmmidb")
        for (e, w), p in zip(CELLS, identity_p):
            tidy = _put(tidy, e, w, "identity", "p_value", p)
        unit = "claim/pretraining_adds_identity"
        for metric, value in (("difference", 0.1), ("reference", 0.3), ("p_value", paired_p),
                              ("n_permutations", 9999), ("exact", 0.0), ("n_units", 16)):
            tidy = _put(tidy, "biot", "self_pretrained", unit, metric, value)
        return _answers(tmp_path, {"eegmmidb": tidy})

    low = table((1e-4, 1e-4, 1e-4), 0.4)
    assert (low["identity_answer"] == "yes").all()
    assert low.loc[("eegmmidb", "biot", "self_pretrained"), "pretraining_adds_identity"] == "no evidence"
    assert low.loc[("eegmmidb", "bandpower", "none"), "pretraining_adds_identity"] == "–"
    assert low.loc[("eegmmidb", "biot", "random_init"), "pretraining_adds_identity"] == "–"
    high = table((1e-4, 0.2, 1e-4), 0.001)
    assert high.loc[("eegmmidb", "biot", "self_pretrained"), "pretraining_adds_identity"] == "yes"
    assert high.loc[("eegmmidb", "biot", "self_pretrained"), "identity_answer"] == "no evidence"
    # a window-label cohort's task is read from the unit its claim is tested on (its permuted-label null)
    assert low.loc[("eegmmidb", "biot", "self_pretrained"), "task"]["source"] == "window_label"


def test_attribute_answer_is_holm_corrected_over_the_table(tmp_path):
    """SYNTHETIC L_A intervals: a CI whose lower bound clears 0 (raw one-sided p ~ 0.02: the attribute's test is
    the upper tail) is "yes" alone but "no evidence" once Holm runs over the table's 3 cells; a far one is "yes"
    either way. The permutation p (0.02: its floor at 50 permutations) does not decide: a rule on it could never
    say yes after Holm."""
    from eegprivacy.evaluation.intervals import interval_p_value

    def answers(cis):
        tidy = _today("eegmat")
        for (e, w), (value, low, high) in cis.items():
            _set(tidy, e, w, "attribute/subject_disjoint", "gain", attacker="ridge", value=value, ci_low=low,
                 ci_high=high)
            _set(tidy, e, w, "attribute/subject_disjoint", "p_value", attacker="ridge", value=0.02)
        return _answers(tmp_path, {"eegmat": tidy})["attribute_answer"].to_dict()

    near, null, far = (0.05, 0.0023, 0.0977), (0.0, -0.1, 0.1), (0.30, 0.20, 0.40)
    assert 0.05 / 3 < interval_p_value(*near, 0.0) < 0.05 / 2  # alone yes; Holm: no at step 1, yes at step 2
    first = answers({CELLS[0]: null, CELLS[1]: near, CELLS[2]: null})
    assert first[("eegmat", *CELLS[1])] == "no evidence" and first[("eegmat", *CELLS[0])] == "no evidence"
    second = answers({CELLS[0]: far, CELLS[1]: near, CELLS[2]: null})  # now near is Holm's second step (x 2)
    assert second[("eegmat", *CELLS[0])] == "yes" and second[("eegmat", *CELLS[1])] == "yes"
    assert second[("eegmat", *CELLS[2])] == "no evidence"


def test_missing_cohort_names_the_file_and_the_stage(tmp_path):
    present = _write(tmp_path, "eegmat", _today("eegmat"))
    with pytest.raises(FileNotFoundError, match=r"embedding_audit_eegmmidb\.csv.*dvc repro embedding_audit@eegmmidb"):
        cohorts_report.load([present, tmp_path / "embedding_audit_eegmmidb.csv"])


def test_cross_cohort_report_json_and_figure(tmp_path):
    paths = [_write(tmp_path, "eegmat", _today("eegmat")), _write(tmp_path, "msu_schizophrenia", _msu())]
    (tmp_path / "embedding_audit_msu_schizophrenia.json").write_text(
        json.dumps({"meta": _meta("msu_schizophrenia", MSU)}))
    cohorts = cohorts_report.load(paths)
    table = cohorts_report.answers(cohorts)
    text = cohorts_report.report_md(cohorts, table, "figures/embedding_audit_cohorts.png")
    assert "## eegmat" in text and "## msu_schizophrenia" in text
    assert "diagnosis (subject-level label)" in text and "rest vs mental arithmetic" in text
    assert MSU["identity_text"] in text  # the design read from the cohort's headline JSON
    assert "## Claims (one test each)" in text and "ci_over" in text
    # the fixture's one identity verdict (three seeds, one summary row): 1 defense, yes on every seed
    assert "| closes identity | 1 | 1 | 0 | 0 | 0 | band power: noise_3 |" in text
    # identity is counted per link type (a link within one recording is not one across recordings), never summed
    yes_line = next(line for line in text.splitlines() if line.startswith("Yes: "))
    links = {c["design"].get("identity_link") or "link not recorded" for c in cohorts.values()}
    assert all(f" {link}" in yes_line for link in links) and "identity by what it links" in yes_line
    # every test the report prints links its calibration row; the attribute claim says what would make it fail
    assert "calibration.md#cal-study-c-identity" in text and "The attribute claim fails (no evidence) only" in text
    payload = cohorts_report.headline(cohorts, table)
    cohorts_report.write_headline(tmp_path / "c.json", payload)
    loaded = json.loads((tmp_path / "c.json").read_text())
    assert loaded["cohorts"]["msu_schizophrenia"]["encoders"]["bandpower/none"]["task"]["answer"] in (
        "yes", "no evidence")  # the claim's verdict, whatever the fixture's p
    png = cohorts_report.figure(table, tmp_path / "figures" / cohorts_report.FIGURE)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stage_writes_its_outputs_and_one_mlflow_run(tmp_path):
    """``eegprivacy embedding-audit-cohorts`` end to end on FIXTURE tables: the report, JSON and figure, and one
    MLflow run tagged for DVC (``make reproduce`` reruns a stage that left none) holding the answers."""
    import mlflow

    from eegprivacy.cli import main
    from eegprivacy.tracking import tracking_uri

    paths = [_write(tmp_path, "eegmat", _today("eegmat")), _write(tmp_path, "msu_schizophrenia", _msu())]
    out, md, figs = tmp_path / "cohorts.json", tmp_path / "cohorts.md", tmp_path / "figures"
    assert main(["embedding-audit-cohorts", "--inputs", *map(str, paths), "--out", str(out), "--report", str(md),
                 "--figures", str(figs)]) == 0
    assert json.loads(out.read_text())["cohorts"].keys() == {"eegmat", "msu_schizophrenia"}
    assert "figures/embedding_audit_cohorts.png" in md.read_text() and (figs / cohorts_report.FIGURE).exists()
    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-c-embedding-audit")
    run = client.search_runs([experiment.experiment_id], "tags.dvc_stage = 'embedding_audit_cohorts'")[0]
    assert run.data.tags["dataset"] == "eegmat+msu_schizophrenia"
    assert run.data.metrics["msu_schizophrenia/bandpower/none/task_decodable"] == 1.0


# ----------------------------------------------------------------------------------------------- MLflow report

def test_study_c_table_has_the_diagnosis_and_one_row_per_cohort():
    """SYNTHETIC parent runs: the same encoder on two cohorts, one with a diagnosis."""
    ba = "unit_subject_label/endpoint_diagnosis/split_subject_disjoint/defense_none/attacker_logistic_head"
    mia = "unit_membership/endpoint_membership_head/split_h/defense_none/attacker_lira_online/auc"

    def run(index, dataset, metrics):
        row = {"run_id": f"{index:032x}", "start_time": pd.Timestamp("2024-01-01") + pd.Timedelta(minutes=index),
               "tags.mlflow.runName": f"embedding_audit-{dataset}-biot-self_pretrained", "tags.dataset": dataset,
               "tags.dataset_version": "ab" * 32, "tags.synthetic": "true", "tags.encoder": "biot"}
        row.update({f"metrics.{k}": v for k, v in metrics.items()})
        return row

    common = {f"{mia}_mean": 0.6, f"{mia}_ci_low": 0.5, f"{mia}_ci_high": 0.7}
    diagnosis = {f"{ba}/balanced_accuracy_mean": 0.75, f"{ba}/balanced_accuracy_ci_low": 0.65,
                 f"{ba}/balanced_accuracy_ci_high": 0.85, f"{ba}/window_balanced_accuracy_mean": 0.7,
                 f"{ba}/control_permuted_mean": 0.51}
    runs = pd.DataFrame([run(1, "eegmat", common), run(2, "msu_schizophrenia", {**common, **diagnosis})])
    rows = study_runs.tidy_c(study_runs.latest_parents(runs))
    table = report.headline_table("c", rows).set_index("dataset")
    assert len(table) == 2 and set(table["weights"]) == {"self_pretrained"}
    cell = table.loc["msu_schizophrenia **SYNTHETIC**", study_runs.DIAGNOSIS]
    assert cell == "0.750 [0.650, 0.850]"  # the subject-level BA, not the window BA; tested in the Claims section
    assert table.loc["eegmat **SYNTHETIC**", study_runs.DIAGNOSIS] == "—"
    assert table.loc["msu_schizophrenia **SYNTHETIC**", "Diagnosis BA control (permuted)"] == "0.510"
    assert rows["p_holm"].isna().all()  # nothing re-tested from an interval here: the claims decide
