"""``eegprivacy audit-cohort`` end to end on a small real cohort (12 MSU subjects from the mirror): outputs, the
numbers in summary.json against the MLflow store, resume, order invariance, the same cohort written as a BIDS tree
and audited as a BIDS App (same numbers as through the MSU loader), the report in a browser, a no-signal
cohort, bad input, and one horizon test with study A's dp_utility (the same rows as its summary, the report naming
the fixed-sequence test)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _cohort_audit_data import TREE_KEY, MiniMSU, NoiseCohort

from eegprivacy.evaluation.cluster_bootstrap import bootstrap_indices, combine_seeds
from eegprivacy.reporting import cohort as cohort_report
from eegprivacy.studies.cohort.config import AuditConfig
from eegprivacy.studies.cohort.loading import CohortError, canonical_order, load_cohort
from eegprivacy.studies.cohort_audit import run_audit

# Small on purpose (the defaults are dp_utility's: 10 noise seeds, 40 permutations, 10,000 resamples): two noise
# seeds still test the AUROC horizon; one nested seed leaves the balanced-accuracy horizon "not tested".
ARGS = ["--epsilons", "1", "10", "--mechanisms", "gaussian_analytic", "--noise-seeds", "2", "--baseline-seeds", "2",
        "--permutations", "3", "--nested-seeds", "1", "--bootstrap", "400", "--membership-trials", "4",
        "--no-progress", "--jobs", "2"]
CONFIG = AuditConfig(mechanisms=("gaussian_analytic",), epsilons=(1, 10), noise_seeds=2, baseline_seeds=2,
                     permutations=3, nested_seeds=1, bootstrap=400, membership_trials=4)
UTILITY_ARMS = ["baseline", "clipped", "permuted", "release", "matched_null", "baseline_minus_permuted",
                "baseline_minus_clipped", "release_minus_null"]
HELPERS = {"mini_msu": "_cohort_audit_data:MiniMSU", "one_class_msu": "_cohort_audit_data:OneClassMSU",
           "unlabelled_msu": "_cohort_audit_data:UnlabelledMSU"}


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def _leaves(node, out):
    """Every summary.json entry that names the MLflow metric it was logged under."""
    if isinstance(node, dict):
        if "mlflow_metric" in node:
            out.append(node)
        for value in node.values():
            _leaves(value, out)
    elif isinstance(node, list):
        for value in node:
            _leaves(value, out)
    return out


@pytest.fixture(scope="module")
def audit(tmp_path_factory, data_root):
    """Run the command twice (the second run resumes) in a store of its own."""
    from eegprivacy.cli import main
    from eegprivacy.data import REGISTRY

    tmp = tmp_path_factory.mktemp("audit")
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        mp.setenv("EEGPRIVACY_DATA", str(data_root))
        for name, target in HELPERS.items():
            mp.setitem(REGISTRY, name, target)
        command = ["audit-cohort", "--dataset", "mini_msu", str(out), "group", "--work-dir", str(tmp / "cache"), *ARGS]
        assert main(command) == 0
        first = json.loads((out / "summary.json").read_text())
        first_rows = pd.read_csv(out / "rows.csv")
        assert main(command) == 0
        second = json.loads((out / "summary.json").read_text())
        assert main(command) == 0  # a second rerun: it too reuses the audit's runs (issue 49)
    return {"out": out, "tmp": tmp, "uri": f"sqlite:///{tmp / 'mlflow.db'}", "first": first, "second": second,
            "first_rows": first_rows}


def test_command_writes_report_rows_and_summary(audit):
    out, summary = audit["out"], audit["second"]
    for name in ("report.html", "rows.csv", "summary.json", "utility_vs_epsilon.png", "attacks_vs_epsilon.png"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob(".*.tmp*")), "a temporary file was left behind"
    html = (out / "report.html").read_text()
    for section in ("Cohort summary", "Utility vs ε", "Re-identification and membership", "Guarantees and caveats",
                    "Data-quality flags", "lowpass_clipped", "in the clear"):
        assert section in html, section
    assert f"{summary['baseline']['auroc']['value']:.3f}" in html
    cohort = summary["cohort"]
    assert (cohort["n_patients"], cohort["n_label_1"], cohort["n_label_0"]) == (12, 6, 6)
    assert cohort["sfreqs"] == [128.0] and cohort["n_channels"] == 16
    assert summary["eps_unit"] == "subject"
    # 128 Hz under the shared settings (a user cohort has no per-dataset entry): the 70-Hz low-pass is moved below
    # Nyquist and the 45-70 Hz high-gamma band dropped, and both say so
    assert {"lowpass_clipped:60.8", "band_dropped:high_gamma"} <= set(cohort["flags"])
    # one recording per subject: re-identification runs on the two halves, labelled as same-session
    assert summary["attacks"]["reidentification"]["kind"] == "same-session halves"
    rows = pd.read_csv(out / "rows.csv")
    assert {"value", "ci_low", "ci_high", "ci_over", "n", "chance", "eps_unit", "key", "protocol", "p_value",
            "p_mc_error", "p_adjusted", "keeps_utility", "correction", "eps_covers"} <= set(rows.columns)
    utility = rows[rows["arm"].isin(UTILITY_ARMS)]
    assert set(utility["arm"]) == set(UTILITY_ARMS)
    assert set(utility["ci_over"]) == {"subjects+seeds"}
    assert set(summary["horizons"]) == {"gaussian_analytic"}
    # the horizon rows name their test and what ε covers, and the report prints both
    horizon = rows[rows["arm"] == "horizon"]
    assert len(horizon) == 2 and horizon["correction"].str.contains("fixed sequence").all()
    assert set(horizon["eps_covers"]) == {"features"}
    assert summary["horizon_tests"]["gaussian_analytic"]["balanced_accuracy"]["horizon"] == "not tested"
    for text in (horizon["correction"].iloc[0], "ε covers", horizon["eps_covers_note"].iloc[0],
                 "Monte-Carlo error of p", "Scaled and clipped table, no noise", "not tested"):
        assert html_unescape(html).count(text), text
    assert summary["mechanism_flags"] == {"gaussian_analytic": ""}  # a formal guarantee at every ε: no flag


def test_summary_numbers_equal_the_mlflow_runs(audit):
    import mlflow

    summary = audit["second"]
    client = mlflow.MlflowClient(audit["uri"])
    run = client.get_run(summary["mlflow_summary_run"])
    logged = run.data.metrics
    assert run.data.tags["stage"] == "audit_cohort" and run.data.tags["dataset"] == "mini_msu"
    assert run.data.tags["dataset_version"] == summary["dataset_version"]
    entries = _leaves(summary, [])
    assert len(entries) > 20
    checked = set()
    for entry in entries:
        key = entry["mlflow_metric"]
        for field, value in entry.items():
            if field in ("n", "n_seeds", "chance") or isinstance(value, (bool, str)) or value is None:
                continue
            name = key if field == "value" else f"{key}_{field}"
            assert logged[name] == value, name
            checked.add(field)
    assert {"value", "ci_low", "ci_high", "p_value", "p_mc_error", "p_adjusted", "alpha_tested"} <= checked
    # point estimates are the means of the per-seed child metrics of each sweep
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], "tags.stage = 'audit_cohort'", max_results=5000)
    for run_ in runs:
        for tag in ("study", "stage", "dataset", "dataset_version", "synthetic", "seed", "git_commit", "dvc_stage"):
            assert run_.data.tags.get(tag), (run_.info.run_name, tag)
    by_id = {r.info.run_id: r for r in runs}
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in by_id]

    def child_mean(sweep, metric, **params):
        values = [r.data.metrics[metric] for r in children
                  if by_id[r.data.tags["mlflow.parentRunId"]].info.run_name == f"audit_cohort-mini_msu-{sweep}"
                  and all(r.data.params.get(k) == v for k, v in params.items()) and metric in r.data.metrics]
        assert values, (sweep, metric, params)
        return float(np.mean(values))

    auroc = "protocol_threshold_free/auroc"  # study A's utility cell: one row per (protocol, metric)
    assert summary["baseline"]["auroc"]["value"] == pytest.approx(child_mean("utility-baseline", auroc), abs=1e-12)
    assert summary["permuted_labels"]["auroc"]["value"] == pytest.approx(child_mean("utility-permuted", auroc),
                                                                         abs=1e-12)
    assert summary["controls"]["clipped"]["auroc"]["value"] == pytest.approx(child_mean("utility-clipped", auroc),
                                                                             abs=1e-12)
    cell = summary["utility"]["gaussian_analytic"]["10"]
    release = child_mean("utility-gaussian_analytic", auroc, arm="release", epsilon="10")
    null = child_mean("utility-gaussian_analytic", auroc, arm="matched_null", epsilon="10")
    assert cell["release_auroc"]["value"] == pytest.approx(release, abs=1e-12)
    assert cell["release_minus_null_auroc"]["value"] == pytest.approx(release - null, abs=1e-12)
    reid = summary["attacks"]["reidentification"]["results"]["gaussian_analytic"]["10"]["top1_accuracy"]
    assert reid["value"] == pytest.approx(child_mean("reidentification-gaussian_analytic", "top1_accuracy",
                                                     epsilon="10"), abs=1e-12)
    # nothing per patient reaches MLflow
    assert not any("patient" in k or "proba" in k for r in runs for k in r.data.metrics)


def test_no_subject_id_in_the_report_or_the_store(audit):
    """Subject ids (here the MSU file stems) appear nowhere in the outputs, the cell cache or the MLflow store;
    only the private feature table in --work-dir holds them."""
    from _cohort_audit_data import msu_subjects

    from eegprivacy.tracking.leaks import scan_for_identifiers

    ids = {"subject id": msu_subjects(6)}
    tmp = audit["tmp"]
    paths = [audit["out"], tmp / "cache" / "cells", *tmp.glob("mlflow.db*"), *tmp.glob("mlartifacts")]
    assert scan_for_identifiers(paths, ids, whole_words=["subject id"]) == []
    features = next((tmp / "cache").glob("features-*.parquet"))
    assert scan_for_identifiers([features], ids, whole_words=["subject id"])  # the scan does find them there


def test_rerun_resumes_every_cell_with_identical_numbers(audit):
    import mlflow

    first, second = audit["first"], audit["second"]
    assert first["counts"]["cells_computed"] == first["counts"]["cells"] > 0
    assert second["counts"] == {"sweeps": first["counts"]["sweeps"], "cells": first["counts"]["cells"],
                                "cells_computed": 0, "cells_resumed": first["counts"]["cells"]}
    client = mlflow.MlflowClient(audit["uri"])
    run = client.get_run(second["mlflow_summary_run"])
    assert run.data.metrics["sweep/cells_resumed"] == first["counts"]["cells"]
    rows = pd.read_csv(audit["out"] / "rows.csv")
    pd.testing.assert_frame_equal(rows, audit["first_rows"])


def test_reruns_keep_one_run_per_audit_and_one_per_sweep(audit):
    """Issue 49: the same inputs and parameters reuse their runs (an idempotency key in the tags): after a run and
    two reruns the experiment holds one top-level run for the audit, one run per sweep under it, and no child
    twice; the top-level run carries the headline columns a steward reads (ε, AUROC, re-identified)."""
    import mlflow

    client = mlflow.MlflowClient(audit["uri"])
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], "tags.stage = 'audit_cohort'", max_results=5000)
    tops = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.run_name for r in tops] == ["audit_cohort-mini_msu"]
    [top] = tops
    assert top.info.run_id == audit["second"]["mlflow_summary_run"] == audit["first"]["mlflow_summary_run"]
    assert top.data.tags["idempotency_key"] and top.data.tags["resumed"] == "2" and top.info.status == "FINISHED"
    sweeps = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == top.info.run_id]
    names = [r.info.run_name for r in sweeps]
    assert len(names) == len(set(names)) == audit["first"]["counts"]["sweeps"] > 5
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in {s.info.run_id for s in sweeps}]
    assert len(children) == audit["first"]["counts"]["cells"]  # one per cell, none twice
    point = audit["second"]["headline"][0]
    assert top.data.metrics["ε gaussian_analytic"] == point["epsilon"]
    assert top.data.metrics["AUROC gaussian_analytic"] == pytest.approx(point["release_auroc"]["value"], abs=5e-4)
    assert top.data.metrics["re-identified gaussian_analytic"] == pytest.approx(point["reidentification"]["value"],
                                                                               abs=5e-4)
    assert top.data.metrics["re-identified by chance"] == pytest.approx(point["reidentification"]["chance"],
                                                                       abs=5e-4)


def test_numbers_do_not_depend_on_subject_ids_or_order(audit, tmp_path):
    """The same recordings under other subject ids, listed in reverse, give the same numbers."""
    result = run_audit(MiniMSU(name="renamed_msu", rename=True, reverse=True), CONFIG, tmp_path / "out",
                       report=cohort_report, cache_dir=tmp_path / "cache", progress=False, n_jobs=2)
    columns = ["arm", "mechanism", "epsilon", "metric", "value", "ci_low", "ci_high", "n", "n_seeds"]
    expected = audit["first_rows"][columns].reset_index(drop=True)
    got = result.rows[columns].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


@pytest.fixture(scope="module")
def bids_audit(tmp_path_factory, data_root):
    """The same 12 MSU subjects written as a BIDS tree (``to_bids``, BrainVision: float32 samples), audited through
    ``audit-cohort BIDS_DIR OUTPUT_DIR group`` as a user would, in a store of its own."""
    from eegprivacy.cli import main
    from eegprivacy.data.bids import to_bids

    tmp = tmp_path_factory.mktemp("bids_audit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EEGPRIVACY_DATA", str(data_root))
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        to_bids(MiniMSU(), tmp / "bids", format="BrainVision", key=TREE_KEY)
        command = ["audit-cohort", str(tmp / "bids"), str(tmp / "out"), "group", "--label", "label",
                   "--work-dir", str(tmp / "cache"), *ARGS]
        assert main(command) == 0
    return {"out": tmp / "out", "tmp": tmp, "uri": f"sqlite:///{tmp / 'mlflow.db'}",
            "summary": json.loads((tmp / "out" / "summary.json").read_text()),
            "rows": pd.read_csv(tmp / "out" / "rows.csv")}


def test_msu_as_bids_gives_the_msu_loaders_numbers(audit, bids_audit):
    """Issue 24's acceptance test: MSU through a BIDS tree and through its own loader, same seeds, same numbers.
    The tree holds the signal as float32 (relative error ~3e-8), so features agree to ~1e-7 and every utility,
    interval and attack number to 1e-6; the only difference is the dataset's version. The tree's name is the
    ``Name`` its dataset_description.json holds (to_bids writes the source dataset's)."""
    summary = bids_audit["summary"]
    assert summary["dataset"] == audit["first"]["dataset"] == "mini_msu"
    assert summary["cohort"]["n_patients"] == audit["first"]["cohort"]["n_patients"] == 12
    keys = ["arm", "mechanism", "epsilon", "metric"]
    loader = audit["first_rows"].set_index(keys).sort_index()
    bids = bids_audit["rows"].set_index(keys).sort_index()
    assert list(bids.index) == list(loader.index)
    for column in ("value", "ci_low", "ci_high", "n", "n_seeds", "chance"):
        np.testing.assert_allclose(bids[column].to_numpy(float), loader[column].to_numpy(float), rtol=0, atol=1e-6,
                                   equal_nan=True, err_msg=column)
    assert summary["horizons"] == audit["first"]["horizons"]
    # and the report's numbers are those MLflow holds for the BIDS run
    import mlflow

    run = mlflow.MlflowClient(bids_audit["uri"]).get_run(summary["mlflow_summary_run"])
    assert run.data.tags["dataset"] == "mini_msu" and run.data.tags["dataset_version"] == summary["dataset_version"]
    for entry in _leaves(summary, []):
        if entry["value"] is not None:  # a horizon that no ε reaches is NaN, not logged
            assert run.data.metrics[entry["mlflow_metric"]] == entry["value"], entry["mlflow_metric"]


def test_report_opens_in_chromium_without_console_errors(bids_audit, tmp_path):
    """The HTML report as a person opens it: headless Chromium over the DevTools protocol loads it from disk with
    no console error, failed resource or uncaught exception, and renders it (a screenshot of the whole page)."""
    from _mlflow_server import ui

    if ui.find_chromium() is None:
        pytest.skip("no chromium binary: apt-get install -y --no-install-recommends chromium (.ci/run does this "
                    "when it runs as root)")
    page = ui.browse((bids_audit["out"] / "report.html").as_uri(), tmp_path / "report.png")
    assert page.errors == []
    from PIL import Image

    with Image.open(page.screenshot) as image:
        width, height = image.size
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert width == 1400 and height > 2000  # the whole report, not one screen
    assert colours is None or len(colours) > 100, "the screenshot is (nearly) blank"


def test_mlflow_compare_page_shows_release_and_null_against_epsilon(bids_audit, tmp_path, capsys):
    """The README's comparison: the children of one mechanism's utility sweep, opened in the MLflow UI's compare
    page, are drawn on the axes that differ between them (release vs matched null, ε and its noise scale: study A's
    utility cells carry their calibration) and the headline metric (LOSO AUROC, threshold-free), not on seeds and
    units alone."""
    import mlflow
    from _mlflow_server import serve, ui

    if ui.find_chromium() is None:
        pytest.skip("no chromium binary: apt-get install -y --no-install-recommends chromium (.ci/run does this "
                    "when it runs as root)")
    client = mlflow.MlflowClient(bids_audit["uri"])
    experiment = client.get_experiment_by_name("study-a-dp-release")
    [parent] = client.search_runs([experiment.experiment_id],
                                  "attributes.run_name = 'audit_cohort-mini_msu-utility-gaussian_analytic'")
    with serve(bids_audit["uri"], tmp_path) as base:
        assert ui.main(["--url", base, "--experiment", "study-a-dp-release", "--parent", parent.info.run_id,
                        "--out", str(tmp_path / "compare.png")]) == 0
    out = capsys.readouterr().out
    assert "parallel-coordinates axes: ['arm', 'epsilon', 'noise_scale', 'protocol_threshold_free/auroc']" in out, out


def test_no_signal_cohort_sits_at_its_null(tmp_path):
    config = AuditConfig(mechanisms=("gaussian_analytic",), epsilons=(5,), noise_seeds=2, baseline_seeds=2,
                         permutations=2, nested_seeds=1, bootstrap=400, membership_trials=2, split_halves=False)
    result = run_audit(NoiseCohort(), config, tmp_path / "out", report=cohort_report, cache_dir=tmp_path / "cache",
                       progress=False, n_jobs=2)
    rows = result.rows.set_index(["arm", "mechanism", "epsilon", "metric"])
    base = rows.loc[("baseline", "none", math.inf, "auroc")]
    assert base["ci_low"] <= 0.5 <= base["ci_high"]
    diff = rows.loc[("release_minus_null", "gaussian_analytic", 5.0, "auroc")]
    assert diff["ci_low"] <= 0.0 <= diff["ci_high"]
    assert result.summary["horizons"] == {"gaussian_analytic": "none"}
    assert result.summary["attacks"]["reidentification"]["applies"] is False
    assert "[SYNTHETIC DATA]" in (tmp_path / "out" / "report.html").read_text()


@pytest.mark.parametrize("name, message", [("one_class_msu", "both classes"), ("unlabelled_msu", "no patient label")])
def test_bad_cohorts_are_refused_clearly(name, message, tmp_path, data_root, monkeypatch, capsys):
    from eegprivacy.cli import main
    from eegprivacy.data import REGISTRY

    monkeypatch.setitem(REGISTRY, name, HELPERS[name])
    assert main(["audit-cohort", "--dataset", name, str(tmp_path / "out"), "group", "--work-dir",
                 str(tmp_path / "cache"), *ARGS]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "report.html").exists()


def _break_participants(tree: Path) -> str:
    (tree / "participants.tsv").unlink()
    return r"participants\.tsv not found"


def _third_label(tree: Path) -> str:
    table = pd.read_csv(tree / "participants.tsv", sep="\t", dtype=str)
    table.loc[2, "label"] = "2"
    table.to_csv(tree / "participants.tsv", sep="\t", index=False)
    return r"column 'label' has value\(s\) '2' outside 0/1, for participant\(s\) sub-03"


def _empty_subject(tree: Path) -> str:
    for path in (tree / "sub-02" / "eeg").iterdir():
        path.unlink()
    return r"sub-02 holds no eeg recording"


def _unreadable(tree: Path) -> str:
    header = next((tree / "sub-01" / "eeg").glob("*.vhdr"))
    header.write_text("not a BrainVision header\n")
    return r"cannot read .*sub-01_task-rest_eeg\.vhdr"


@pytest.mark.parametrize("damage", [_break_participants, _third_label, _empty_subject, _unreadable],
                         ids=["no_participants_tsv", "third_label_value", "subject_without_recordings",
                              "unreadable_file"])
def test_bad_bids_input_is_one_clear_error_and_nothing_written(damage, tmp_path, data_root, monkeypatch, capsys):
    """Through the command as a user runs it: exit 2, one line naming the file or column, no output folder, no
    work folder, no MLflow run. An unreadable recording stops the run only with --no-skip-bad (by default it is
    left out: tests/test_audit_cohort_cli.py)."""
    from eegprivacy.cli import main
    from eegprivacy.data.bids import to_bids

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    to_bids(MiniMSU(3), tmp_path / "bids", format="BrainVision", key=TREE_KEY)
    message = damage(tmp_path / "bids")
    stop = ["--no-skip-bad"] if damage is _unreadable else []
    assert main(["audit-cohort", str(tmp_path / "bids"), str(tmp_path / "out"), "group", "--label", "label",
                 "--work-dir", str(tmp_path / "work"), *stop, *ARGS]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "work").exists()


def test_to_bids_command_converts_a_clinical_folder(tmp_path, data_root, capsys):
    """The README's conversion step: a clinical folder (recordings + metadata.csv) to a BIDS tree in one command,
    read back by the BIDS dataset; a second run refuses to overwrite."""
    from bad_inputs import corpus

    from eegprivacy.cli import main
    from eegprivacy.data import get_dataset

    folder = corpus.truncated_edf(tmp_path / "folder", data_root)
    command = ["to-bids", "--dataset-arg", f"folder={folder}", "--out", str(tmp_path / "bids")]
    assert main(command) == 0
    assert "wrote 2 subjects" in capsys.readouterr().out
    tree = get_dataset("bids", root=tmp_path / "bids", label="label")
    assert sorted(tree.metadata().subject) == ["sub-01", "sub-02"]
    assert main(command) == 2 and "already exists" in capsys.readouterr().err


def test_too_few_patients_are_refused(data_root):
    with pytest.raises(CohortError, match="at least 8"):
        load_cohort(MiniMSU(3), AuditConfig(min_patients=8))


@pytest.mark.parametrize("knob, message", [(["--epsilons", "1", "-2"], "epsilons must be positive"),
                                           (["--bootstrap", "50"], "dp_utility.bootstrap = 50 is invalid")])
def test_a_knob_out_of_range_is_refused_before_any_data_is_read(knob, message, tmp_path, capsys):
    """Including a utility knob outside study A's dp_utility constraints (the audit runs that protocol)."""
    from eegprivacy.cli import main

    assert main(["audit-cohort", "/nonexistent", str(tmp_path / "out"), "group", "--label", "x", *knob]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bids_needs_a_label(tmp_path, capsys):
    from eegprivacy.cli import main

    assert main(["audit-cohort", "/nonexistent", str(tmp_path / "out"), "group"]) == 2
    assert "--label" in capsys.readouterr().err


# ---- pieces ----------------------------------------------------------------------------------------------------
def test_horizon_rows_are_study_a_summarise_rows_for_the_same_cells(audit):
    """One claim, one test: the audit's utility rows (horizons, release − null with its p-values, every arm) are
    the rows study A's ``utility.summarise`` gives for dp_utility's own plan of the same table (the same cells,
    found by their cache keys among the audit's kept predictions), number for number."""
    from eegprivacy.studies.cohort.config import study_a_configs
    from eegprivacy.studies.cohort.sweeps import patient_table
    from eegprivacy.studies.release import utility

    first = audit["first_rows"]
    cohort = load_cohort(MiniMSU(), CONFIG, cache_dir=audit["tmp"] / "cache", progress=False)
    release_config, utility_config = study_a_configs(CONFIG, cohort.dataset)
    plan = utility.utility_plan(patient_table(cohort), release_config, utility_config, "label",
                                cells_dir=audit["tmp"] / "unused", progress=False)
    expected = utility.summarise(plan, audit["tmp"] / "cache" / "cells", cohort.y, n_resamples=CONFIG.bootstrap,
                                 confidence=CONFIG.confidence, epsilons=list(CONFIG.epsilons))
    got = first[first["arm"].isin(set(expected["arm"]))].reset_index(drop=True)
    assert len(got) == len(expected) and (expected["arm"] == "horizon").sum() == 2
    for column in expected.columns:
        want, have = expected[column].to_numpy(), got[column].to_numpy()
        if expected[column].dtype.kind == "f":
            np.testing.assert_allclose(have.astype(float), want, rtol=0, atol=1e-12, equal_nan=True, err_msg=column)
        else:  # text and decisions (rows.csv reads an empty text back as NaN)
            assert list(map(_text, have)) == list(map(_text, want)), column
    horizon = got[got["arm"] == "horizon"]
    assert list(horizon["correction"]) == list(expected.loc[expected["arm"] == "horizon", "correction"])


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def test_audit_cohort_command_prints_the_fixed_sequence_test(bids_audit, tmp_path):
    """``eegprivacy audit-cohort`` as a user runs it (a subprocess, on the BIDS tree of the small cohort, resuming
    its cells): the report and the command's line name the horizon's fixed-sequence test and what ε covers, and
    the paper's mechanism, asked for by name, is flagged as having no formal guarantee for d > 1."""
    command = [str(Path(sys.executable).with_name("eegprivacy")), "audit-cohort", str(bids_audit["tmp"] / "bids"),
               str(tmp_path / "out"), "group", "--label", "label", "--work-dir", str(bids_audit["tmp"] / "cache"),
               *ARGS]
    command[command.index("gaussian_analytic")] = "laplace_implemented"
    command.remove("1")  # ε = 10 only: the new mechanism's cells are all this run computes
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(tmp_path / "out" / "rows.csv")
    [correction] = set(rows.loc[rows["arm"] == "horizon", "correction"])
    assert correction.startswith("fixed sequence from the largest ε")
    assert correction in done.stdout and "ε covers features" in done.stdout
    report = html_unescape((tmp_path / "out" / "report.html").read_text())
    assert correction in report and "Horizon test" in report and "ε covers" in report
    assert "laplace_implemented (the paper's mechanism (b = 2C/ε): no formal guarantee for d > 1)" in report
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["horizon_test"] == correction and summary["eps_covers"] == "features"
    assert summary["mechanism_flags"]["laplace_implemented"].endswith("no formal guarantee for d > 1")


def test_formal_mechanisms_are_the_default():
    assert AuditConfig().mechanisms == ("gaussian_analytic", "laplace_formal")


def test_canonical_order_follows_values_not_positions():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(10, 4)), rng.integers(0, 2, 10)
    perm = rng.permutation(10)
    a, b = X[canonical_order(X, y)], X[perm][canonical_order(X[perm], y[perm])]
    np.testing.assert_array_equal(a, b)
    noisy = X * (1 + 1e-12)  # another file format's rounding does not reorder
    np.testing.assert_array_equal(canonical_order(noisy, y), canonical_order(X, y))


def test_bootstrap_keeps_both_classes_and_combines_seeds():
    y = np.array([0, 0, 0, 1, 1])
    idx = bootstrap_indices(y, 200)
    assert ((y[idx] == 1).sum(1) == 2).all()
    per_seed = np.array([[0.0] * 200, [1.0] * 200])
    reps = combine_seeds(per_seed, np.array([[0, 0], [1, 1], [0, 1]] * 66 + [[0, 0], [1, 1]]))
    assert set(np.round(reps, 6)) == {0.0, 0.5, 1.0}


def test_reidentification_links_first_session_to_second():
    """Subjects with two sessions: the first session's vector is released, the second is the attacker's."""
    from eegprivacy.studies.cohort.loading import _reidentification_tables

    rng = np.random.default_rng(0)
    rows, meta = [], []
    for s in range(5):
        subject = rng.normal(size=3) + 10 * s
        for session in ("2", "1"):  # listed out of order on purpose
            base = subject + (0.5 if session == "2" else 0.0)
            for w in range(4):
                rows.append({"subject": f"sub{s}", "recording": f"ses-{session}", "t_start": float(w),
                             **{f"C{j}:f": base[j] + 0.01 * w for j in range(3)}})
            meta.append({"subject": f"sub{s}", "recording": f"ses-{session}", "session": session, "run": "1"})
    frame, meta = pd.DataFrame(rows), pd.DataFrame(meta)
    features = ["C0:f", "C1:f", "C2:f"]
    release, auxiliary, kind, _ = _reidentification_tables(frame, features, meta, split_halves=True)
    assert kind == "cross-session" and release.shape == auxiliary.shape == (5, 3)
    np.testing.assert_allclose(auxiliary - release, 0.5)  # rows aligned by subject, session 1 released
    one = frame[frame["recording"] == "ses-1"]
    release, auxiliary, kind, _ = _reidentification_tables(one, features, meta, split_halves=True)
    assert kind == "same-session halves" and len(release) == 5
    assert _reidentification_tables(one, features, meta, split_halves=False)[2] == "none"


# ---- where things go (issue 49, point 2) -------------------------------------------------------------------------
def _listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _stub_tree(root: Path) -> Path:
    """A BIDS root the refusals below never read past (they come before any file is opened)."""
    (root / "sub-01" / "eeg").mkdir(parents=True)
    (root / "participants.tsv").write_text("participant_id\tlabel\nsub-01\t0\n")
    (root / "dataset_description.json").write_text('{"Name": "stub", "BIDSVersion": "1.9.0"}')
    (root / "sub-01" / "eeg" / "sub-01_task-rest_eeg.edf").write_bytes(b"0" * 256)
    return root


@pytest.mark.parametrize("output, work, message", [
    ("{bids}", None, r"OUTPUT_DIR .* is BIDS_DIR itself"),
    ("{bids}/results", None, r"OUTPUT_DIR .*/results is inside BIDS_DIR"),
    ("{bids}/sub-01/audit", None, r"OUTPUT_DIR .*/sub-01/audit is inside BIDS_DIR"),
    ("{tmp}/out", "{bids}/derivatives/work", r"--work-dir .*/derivatives/work is inside BIDS_DIR"),
    ("{tmp}/out", "{tmp}/out/work", r"--work-dir .*/out/work is inside OUTPUT_DIR"),
], ids=["bids_dir_itself", "inside_bids_dir", "inside_a_subject", "work_in_bids_dir", "work_in_output_dir"])
@pytest.mark.parametrize("level", ["participant", "group"])
def test_output_or_work_dir_in_the_dataset_is_refused_and_nothing_written(output, work, message, level, tmp_path,
                                                                          capsys):
    """BIDS Apps' rule: results go outside the dataset or under its derivatives/, and the private work folder
    (un-noised per-patient features) neither into the dataset nor into OUTPUT_DIR; one line naming the flag,
    exit 2, nothing written anywhere."""
    from eegprivacy.cli import main

    bids = _stub_tree(tmp_path / "bids")
    before, xdg = _listing(tmp_path), tmp_path / "xdg"
    command = ["audit-cohort", str(bids), output.format(bids=bids, tmp=tmp_path), level, "--label", "label"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(xdg))
        mp.delenv("EEGPRIVACY_CACHE")
        mp.delenv("MLFLOW_TRACKING_URI")
        code = main(command + (["--work-dir", work.format(bids=bids, tmp=tmp_path)] if work else []) + ARGS)
    err = capsys.readouterr().err
    assert code == 2, err
    assert re.search(message, err.splitlines()[0]), err
    assert "derivatives" in err.splitlines()[0] or "--work-dir" in err.splitlines()[0]
    # no output folder, no work folder, no store, no cache (a library's own cache under xdg/ may appear)
    assert [p for p in _listing(tmp_path) if not p.startswith("xdg")] == before
    assert not (xdg / "eegprivacy").exists()


def test_results_under_derivatives_are_accepted_and_leave_the_dataset_version(tmp_path, data_root, capsys):
    """OUTPUT_DIR under BIDS_DIR/derivatives/ (BIDS Apps' place for results) is accepted, and what is written there
    does not change the dataset's version (derivatives are not raw data), so a rerun finds its caches."""
    from eegprivacy.cli import main
    from eegprivacy.data.bids import BIDSDataset, to_bids

    to_bids(MiniMSU(3), tmp_path / "bids", format="BrainVision", key=TREE_KEY)
    version = BIDSDataset(tmp_path / "bids", label="label").version()
    out = tmp_path / "bids" / "derivatives" / "eegprivacy"
    assert main(["audit-cohort", str(tmp_path / "bids"), str(out), "participant", "--label", "label",
                 "--participant-label", "01", "--work-dir", str(tmp_path / "work"), "--no-progress"]) == 0, \
        capsys.readouterr().err
    assert (out / "sub-01_qc.tsv").exists()
    assert BIDSDataset(tmp_path / "bids", label="label").version() == version
