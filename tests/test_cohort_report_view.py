"""The cohort audit's report as its reader sees it (issue 36, point 4): the plain-language verdict
(:func:`eegprivacy.reporting.cohort.verdict_text`) on hand-made summaries and on two small real audits, every table's
"Columns:" list, legends off the data, no tag badges, and two pages in headless Chromium — the report's top is the
verdict, and the MLflow UI opened on study A's experiment with the README's filter shows the runs table.

The audits run through the Python API (``run_audit``) on 12 MSU patients (``MiniMSU``) and on a 12-subject
white-noise cohort (``NoiseCohort``), each in a store of its own, with the tiny knobs of tests/test_audit_cohort.py.
"""

from __future__ import annotations

import copy
import html
import re
import urllib.parse
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from _cohort_audit_data import TREE_KEY, MiniMSU, NoiseCohort

from eegprivacy.reporting import cohort as report
from eegprivacy.studies.cohort.config import AuditConfig
from eegprivacy.studies.cohort_audit import run_audit
from eegprivacy.studies.release.utility import eps_covers_note

REPO = Path(__file__).resolve().parents[1]
# tests/test_audit_cohort.py's tiny knobs: two noise seeds still test the AUROC horizon.
CONFIG = AuditConfig(mechanisms=("gaussian_analytic",), epsilons=(1, 10), noise_seeds=2, baseline_seeds=2,
                     permutations=3, nested_seeds=1, bootstrap=400, membership_trials=4)
NOISE_CONFIG = AuditConfig(mechanisms=("gaussian_analytic",), epsilons=(5,), noise_seeds=2, baseline_seeds=2,
                           permutations=2, nested_seeds=1, bootstrap=400, membership_trials=2, split_halves=False)
# The README's study A filter for the MLflow UI ("A first session", "Comparing runs in the MLflow UI").
README_FILTER = "tags.mechanism = 'gaussian_analytic' and params.epsilon = '10'"
NO_CHROMIUM = ("no chromium binary: apt-get install -y --no-install-recommends chromium (.ci/run does this when it "
               "runs as root)")


# ---- hand-made summaries (the shape summary_document writes) --------------------------------------------------
def _entry(value, low=None, high=None, **extra):
    return {"value": value, "ci_low": low, "ci_high": high, "mlflow_metric": "x", **extra}


def make_summary(*, horizons=None, synthetic=False, reid=True, label_names=None, per_class=(15, 22)) -> dict:
    """Two mechanisms over ε = 0.5, 4, 20 on 37 patients with 91 features, numbers chosen so that each one the
    verdict prints can be told apart; the verdict's lead points are study A's own rule
    (:func:`eegprivacy.studies.cohort.verdict.headline`)."""
    from eegprivacy.studies.cohort.verdict import headline

    eps = (0.5, 4.0, 20.0)
    mechanisms = ("gaussian_analytic", "laplace_formal")
    horizons = horizons or {"gaussian_analytic": 4.0, "laplace_formal": "none"}

    def attack(metric, base, chance, ci):
        out = {m: {f"{e:g}": {metric: _entry(base[m][i], *ci[m][i], chance=chance, n=37)} for i, e in enumerate(eps)}
               for m in mechanisms}
        return out

    top1 = {"gaussian_analytic": (0.054, 0.162, 0.432), "laplace_formal": (0.027, 0.135, 0.297)}
    top1_ci = {m: [(v / 3, min(1, v * 2)) for v in vals] for m, vals in top1.items()}
    member = {"gaussian_analytic": (0.503, 0.571, 0.688), "laplace_formal": (0.497, 0.534, 0.612)}
    member_ci = {m: [(v - 0.11, v + 0.13) for v in vals] for m, vals in member.items()}
    reid_results = attack("top1_accuracy", top1, 1 / 37, top1_ci)
    reid_results["none"] = {"none": {"top1_accuracy": _entry(0.973, 0.86, 1.0, chance=1 / 37)}}
    member_results = attack("auroc_likelihood", member, 0.5, member_ci)
    release = {"gaussian_analytic": (0.521, 0.684, 0.766), "laplace_formal": (0.508, 0.547, 0.612)}
    null = {"gaussian_analytic": (0.497, 0.505, 0.512), "laplace_formal": (0.493, 0.502, 0.509)}
    utility = {m: {f"{e:g}": {
        "release_auroc": _entry(release[m][i], release[m][i] - 0.081, release[m][i] + 0.077, chance=0.5),
        "matched_null_auroc": _entry(null[m][i], null[m][i] - 0.06, null[m][i] + 0.06, chance=0.5),
        "release_minus_null_auroc": _entry(release[m][i] - null[m][i], release[m][i] - null[m][i] - 0.09,
                                           release[m][i] - null[m][i] + 0.09,
                                           keeps_utility=horizons[m] not in ("none", "not tested")
                                           and e >= float(horizons[m]),
                                           tested=horizons[m] != "not tested")}
        for i, e in enumerate(eps)} for m in mechanisms}
    summary = {
        "dataset": "ward_7", "dataset_version": "ab" * 32, "synthetic": synthetic, "stage": "audit_cohort",
        "eps_unit": "subject",
        "cohort": {"n_patients": sum(per_class), "n_label_1": per_class[0], "n_label_0": per_class[1],
                   "n_features": 91, "label_names": label_names or {}},
        "config": {"mechanisms": list(mechanisms), "epsilons": list(eps), "confidence": 0.95, "delta": 1e-5,
                   "caution_per_class": 8},
        "controls": {"baseline": {"auroc": _entry(0.873, 0.791, 0.944, chance=0.5)}},
        "baseline": {"auroc": _entry(0.873, 0.791, 0.944, chance=0.5)},
        "eps_covers": "features",
        "eps_covers_note": eps_covers_note(),  # study A's own sentence (labels in the clear)
        "mechanism_flags": {m: "" for m in mechanisms},
        "horizons": horizons,
        "horizon_tests": {m: {"auroc": {"horizon": h if isinstance(h, str) else f"{h:g}"}}
                          for m, h in horizons.items()},
        "utility": utility,
        "attacks": {
            "reidentification": ({"applies": True, "kind": "cross-session", "reason": "…",
                                  "results": reid_results} if reid else
                                 {"applies": False, "reason": "re-identification does not apply: one recording per "
                                                              "subject"}),
            "membership": {"applies": True, "results": member_results},
        },
    }
    summary["headline"] = headline(summary)
    return summary


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?%?", text)


def test_verdict_leads_with_one_sentence_per_candidate_epsilon_holding_utility_and_reidentification():
    """Issue 49: the leak is the headline. Per mechanism, at the ε a steward would pick (its utility horizon, else
    the largest ε tried), one sentence holds both what the release keeps (release AUROC with its interval against
    its matched null, and the test's decision) and what it leaks (the share of patients re-identified against
    chance); only then what was released, ε, what it covers and the non-private reference."""
    summary = make_summary()
    sentences = report.verdict_text(summary)
    first, second = sentences[:2]
    assert first.startswith("At ε = 4 per patient with gaussian_analytic (the smallest ε that keeps utility): ")
    assert ("a classifier trained on the released vectors still finds the label with AUROC 0.68 (95% interval 0.60 "
            "to 0.76), better than its matched null's 0.51 (the same noise on a blank table) by a test at the 5% "
            "level") in first
    assert ("an attacker holding a recording of each patient from another session re-identifies 16% of the patients "
            "(95% interval 5% to 32%), against 3% by chance (97% without any noise)") in first
    assert "membership AUROC 0.57 (95% interval 0.46 to 0.70; 0.5 is guessing)" in first
    assert second.startswith("At ε = 20 per patient with laplace_formal (the largest ε tried, since none keeps "
                             "utility): ")
    assert "finds the label with AUROC 0.61 (95% interval 0.53 to 0.69), no better than its matched null's 0.51" in \
        second
    assert "re-identifies 30% of the patients (95% interval 10% to 59%), against 3% by chance" in second
    rest = " ".join(sentences[2:])
    assert sentences[2].startswith("What was released: one noised vector of 91 EEG features per patient for the 37 "
                                   "patients of ward_7 (15 with label 1, 22 with label 0)")
    assert "label released as it is (not noised)" in sentences[2]
    assert "ε = 0.5, 4, 20 per patient" in rest and "gaussian_analytic and laplace_formal mechanisms" in rest
    assert "it does NOT cover the labels" in rest and "scaling of each feature" in rest
    assert "gaussian_analytic keeps utility from ε = 4 upward and laplace_formal at no ε tried" in rest
    assert "a test at the 5% level" in rest and "AUROC 0.87 (95% interval 0.79 to 0.94)" in rest
    assert "Caution" not in rest  # 15 and 22 patients per class


def test_verdict_names_the_labels_as_given():
    """With --label-map SZ=1 HC=0 (or a tree's Levels) the verdict says SZ and HC, never "label 1 / label 0"."""
    summary = make_summary(label_names={"1": "SZ", "0": "HC"})
    sentences = report.verdict_text(summary)
    text = " ".join(sentences)
    assert "still tells SZ from HC with AUROC 0.68" in sentences[0] and "tells SZ from HC with AUROC 0.61" in \
        sentences[1]
    assert "(15 SZ, 22 HC)" in text
    assert "label 1" not in text and "label 0" not in text
    page = report.cohort_html(summary | {"cohort": summary["cohort"] | {
        "n_recordings": 37, "n_recordings_listed": 37, "n_windows": 1, "n_channels": 1, "channels": ["Cz"],
        "sfreqs": [128.0], "duration_s_total": 1.0, "duration_s_median_per_recording": 1.0, "n_sessions": 1,
        "n_runs": 1, "recordings_per_subject_max": 1, "n_subjects_with_2plus_recordings": 0, "tasks": [],
        "n_features": 91}})
    assert "SZ / HC" in page and "label 1 / label 0" not in page


def test_a_cohort_under_eight_patients_per_class_gets_a_caution():
    summary = make_summary(per_class=(7, 9), label_names={"1": "SZ", "0": "HC"})
    sentences = report.verdict_text(summary)
    [caution] = [s for s in sentences if s.startswith("Caution")]
    assert sentences.index(caution) == 2  # right after the lead sentences
    assert "only 7 SZ patients (fewer than 8 per class)" in caution and "too wide to decide" in caution
    assert not [s for s in report.verdict_text(make_summary(per_class=(8, 8))) if s.startswith("Caution")]


def test_verdict_numbers_come_from_the_summary():
    """Change every number of the summary and the verdict's numbers change with it (none is written in the code,
    beyond the scale's ends: 0/1 labels, AUROC 1 = perfect)."""
    summary = make_summary()
    other = copy.deepcopy(summary)
    other["cohort"].update(n_patients=41, n_label_1=19, n_label_0=22, n_features=77)
    other["config"].update(epsilons=[0.25, 3.0, 30.0], confidence=0.9)
    other["horizons"] = {"gaussian_analytic": 3.0, "laplace_formal": "none"}
    other["controls"]["baseline"]["auroc"].update(value=0.811, ci_low=0.702, ci_high=0.903)
    for kind, metric in (("reidentification", "top1_accuracy"), ("membership", "auroc_likelihood")):
        results = other["attacks"][kind]["results"]
        for mechanism in other["config"]["mechanisms"]:
            by_eps = results[mechanism]
            results[mechanism] = {"0.25": by_eps["0.5"], "3": copy.deepcopy(by_eps["4"]), "30": by_eps["20"]}
        results["gaussian_analytic"]["3"][metric].update(value=0.657 if metric == "auroc_likelihood" else 0.244,
                                                         ci_low=0.21, ci_high=0.81)
    for mechanism in other["config"]["mechanisms"]:
        by_eps = other["utility"][mechanism]
        other["utility"][mechanism] = {"0.25": by_eps["0.5"], "3": copy.deepcopy(by_eps["4"]), "30": by_eps["20"]}
    other["utility"]["gaussian_analytic"]["3"]["release_auroc"].update(value=0.733, ci_low=0.655, ci_high=0.801)
    from eegprivacy.studies.cohort.verdict import headline

    other["headline"] = headline(other)
    text = " ".join(report.verdict_text(other))
    for expected in ("77 EEG features", "41 patients", "19 with label 1", "ε = 0.25, 3, 30", "a test at the 10% level",
                     "from ε = 3 upward", "AUROC 0.81 (90% interval 0.70 to 0.90)", "At ε = 3 per patient with "
                     "gaussian_analytic", "re-identifies 24% of the patients", "(95% interval 21% to 81%)",
                     "AUROC 0.66", "AUROC 0.73 (90% interval 0.66 to 0.80)", "At ε = 30 per patient"):
        assert expected in text, expected
    old = set(_numbers(" ".join(report.verdict_text(summary))))
    assert not {"91", "37", "15", "16%", "0.87", "0.57", "0.68"} & set(_numbers(text)), "a number did not follow"
    assert {"91", "37", "15", "16%", "0.87", "0.57", "0.68"} <= old


def test_verdict_without_a_horizon_leads_with_the_largest_epsilon():
    summary = make_summary(horizons={"gaussian_analytic": "none", "laplace_formal": "none"})
    sentences = report.verdict_text(summary)
    assert any("no mechanism keeps utility at any ε tried, up to ε = 20" in s for s in sentences)
    assert sentences[0].startswith("At ε = 20 per patient with gaussian_analytic (the largest ε tried, since none "
                                   "keeps utility)")
    assert "re-identifies 43% of the patients" in sentences[0] and "AUROC 0.69" in sentences[0]
    assert sentences[1].startswith("At ε = 20 per patient with laplace_formal")


def test_verdict_when_reidentification_does_not_apply_says_why():
    summary = make_summary(reid=False)
    first = report.verdict_text(summary)[0]
    assert ("re-identification (matching a released vector back to a patient) could not be tested: each patient has "
            "only one recording, so an attacker has no second recording to match against") in first
    assert "membership AUROC 0.57" in first  # membership still read at the horizon


def test_verdict_of_a_synthetic_cohort_says_synthetic():
    sentences = report.verdict_text(make_summary(synthetic=True))
    assert sentences[0].startswith("SYNTHETIC DATA (not real patients): At ε = 4")
    assert any(s.startswith("What was released") for s in sentences)


def test_verdict_with_a_horizon_not_tested():
    sentences = report.verdict_text(make_summary(horizons={"gaussian_analytic": "not tested",
                                                           "laplace_formal": "not tested"}))
    assert sentences[0].startswith("At ε = 20 per patient with gaussian_analytic (the largest ε tried; utility not "
                                   "tested: too few noise draws)")
    assert "against its matched null's 0.51 (the same noise on a blank table; not tested)" in sentences[0]
    assert any(s.startswith("Usefulness was not tested") for s in sentences)


def test_verdict_with_labels_by_randomized_response_does_not_call_them_in_the_clear():
    summary = make_summary()
    summary["eps_covers_note"] = eps_covers_note(2.0)  # study A's sentence for labels by randomized response
    sentences = report.verdict_text(summary)
    assert any("randomly flipped before release (randomized response)" in s for s in sentences)
    covers = next(s for s in sentences if s.startswith("ε protects"))
    assert "NOT cover the scaling of each feature" in covers and "the labels, which" not in covers


# ---- the report's HTML, without a browser ----------------------------------------------------------------------
def _png(path: Path) -> Path:
    fig = plt.figure(figsize=(2, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def test_every_table_has_its_columns_and_no_badge_is_drawn(tmp_path):
    summary = make_summary()
    summary.update(horizon_rule="fixed sequence", caveats=["c"], guarantees=[], utility={},
                   horizon_tests={m: {"auroc": {"horizon": "none", "correction": "fixed sequence"}}
                                  for m in summary["config"]["mechanisms"]})
    summary["cohort"].update(flags={"lowpass_clipped:60.8": 12}, features_dropped_nonfinite=[], warnings=[],
                             n_recordings=37, n_recordings_listed=37, n_windows=700, n_channels=2,
                             channels=["C3", "C4"], sfreqs=[128.0], duration_s_total=1.0,
                             duration_s_median_per_recording=1.0, n_sessions=1, n_runs=1,
                             recordings_per_subject_max=1, n_subjects_with_2plus_recordings=0, tasks=[])
    path = report.write_html(tmp_path / "report.html", None, summary,
                             {"utility": _png(tmp_path / "u.png"), "attacks": _png(tmp_path / "a.png")})
    page = path.read_text()
    content = page[page.index('id="content"'):]
    first = re.search(r'<div class="accordion-item[^"]*" id="([^"]+)"', content)
    assert first and first.group(1).startswith("Verdict"), "the verdict is not the report's first element"
    tables = content.count('<table class="table')
    assert tables == 7 and content.count("<b>Columns:</b>") == tables - 1  # all but the row-labelled cohort table
    assert "<b>corrected lower bound</b>" in page and "<b>p (one-sided)</b>: bootstrap p-value" in page
    # no tag badge: neither MNE's default tags nor a visible badge of ours
    assert 'data-mne-tag="custom-html"' not in page and 'data-mne-tag="custom-image"' not in page
    assert report.HIDE_BADGES in page


# ---- two small real audits -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def msu_audit(tmp_path_factory, data_root):
    """12 MSU patients (6 per class) written as a BIDS tree, audited with ε = 1, 10 by the installed command as a
    user runs it (a subprocess: ``eegprivacy audit-cohort BIDS_DIR OUTPUT_DIR group``), its MLflow store in
    OUTPUT_DIR. ``result`` holds what the command wrote (summary.json, rows.csv)."""
    import json
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    import pandas as pd

    from eegprivacy.data.bids import to_bids

    tmp = tmp_path_factory.mktemp("msu_audit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EEGPRIVACY_DATA", str(data_root))
        to_bids(MiniMSU(), tmp / "bids", format="BrainVision", key=TREE_KEY)
    out = tmp / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "EEGPRIVACY_CACHE")}
    knobs = ["--epsilons", "1", "10", "--mechanisms", "gaussian_analytic", "--noise-seeds", "2", "--baseline-seeds",
             "2", "--permutations", "3", "--nested-seeds", "1", "--bootstrap", "400", "--membership-trials", "4",
             "--jobs", "2", "--no-progress"]
    done = subprocess.run([str(Path(sys.executable).with_name("eegprivacy")), "audit-cohort", str(tmp / "bids"),
                           str(out), "group", "--label", "label", "--work-dir", str(tmp / "work"), *knobs], cwd=tmp,
                          env={**env, "MPLBACKEND": "Agg"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    result = SimpleNamespace(summary=json.loads((out / "summary.json").read_text()),
                             rows=pd.read_csv(out / "rows.csv"))
    return {"result": result, "out": out, "tmp": tmp, "uri": f"sqlite:///{out / 'mlflow.db'}",
            "stdout": done.stdout}


@pytest.fixture(scope="module")
def msu_ui(msu_audit, tmp_path_factory):
    """``mlflow server`` on the small audit's store (the UI ``mlflow ui`` serves), for the pages below."""
    from _mlflow_server import serve, ui

    if ui.find_chromium() is None:
        pytest.skip(NO_CHROMIUM)
    with serve(msu_audit["uri"], tmp_path_factory.mktemp("msu_ui")) as base:
        yield base


@pytest.fixture(scope="module")
def noise_audit(tmp_path_factory):
    """The white-noise cohort (synthetic, one recording per subject and no halves: no re-identification)."""
    tmp = tmp_path_factory.mktemp("noise_audit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        mp.setenv("EEGPRIVACY_CACHE", str(tmp / "derived"))
        result = run_audit(NoiseCohort(), NOISE_CONFIG, tmp / "out", report=report, cache_dir=tmp / "cache",
                           progress=False, n_jobs=1)
    return {"result": result, "out": tmp / "out"}


def test_no_signal_cohort_verdict_keeps_no_utility(noise_audit):
    summary = noise_audit["result"].summary
    assert summary["horizons"] == {"gaussian_analytic": "none"}
    sentences = report.verdict_text(summary)
    assert sentences[0].startswith("SYNTHETIC DATA (not real patients): At ε = 5 per patient with gaussian_analytic "
                                   "(the largest ε tried, since none keeps utility): ")
    assert ("re-identification (matching a released vector back to a patient) could not be tested: each patient has "
            "only one recording") in sentences[0]
    released = next(s for s in sentences if s.startswith("What was released"))
    assert released.startswith(f"What was released: one noised vector of {summary['cohort']['n_features']} EEG "
                               "features per patient for the 12 patients")
    assert any("no mechanism keeps utility at any ε tried, up to ε = 5" in s for s in sentences)
    page = (noise_audit["out"] / "report.html").read_text()
    assert all(html.escape(s) in page for s in sentences)


def test_figures_keep_their_legends_off_the_data(msu_audit):
    """Both figures: no legend inside any axes, one figure legend below every axes, and the titles kept."""
    result = msu_audit["result"]
    figures = report.figures(result.rows, result.summary)
    try:
        for name, fig in figures.items():
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            assert all(ax.get_legend() is None for ax in fig.axes), name
            [legend] = fig.legends
            box = legend.get_window_extent(renderer)
            for ax in fig.axes:
                if ax.axison:
                    assert box.y1 <= ax.get_window_extent(renderer).y0 + 1e-6, (name, "legend overlaps an axes")
            assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 + 1e-6, (name, "legend wider than the figure")
            assert fig.get_suptitle().startswith(result.summary["dataset"]), name
            labels = [t.get_text() for t in legend.get_texts()]
            assert len(labels) == len(set(labels)) and labels, name
    finally:
        report.close(figures)


def test_report_top_is_the_verdict_in_chromium(msu_audit, tmp_path):
    """The report as a person opens it: the first section is the verdict, its text is verdict_text's sentences,
    no section shows a tag badge, and the verdict is on the first screen (screenshot of the viewport kept)."""
    from _mlflow_server import ui

    if ui.find_chromium() is None:
        pytest.skip(NO_CHROMIUM)
    js = """(() => { const first = document.querySelector('#content > .accordion-item');
      const visible = e => e.offsetParent !== null && getComputedStyle(e).display !== 'none';
      return {title: first.querySelector('.accordion-header').innerText.trim(),
              text: first.querySelector('.accordion-body').innerText.replace(/\\s+/g, ' '),
              top: first.getBoundingClientRect().top, bottom: first.getBoundingClientRect().bottom,
              badges: Array.from(document.querySelectorAll('#content .badge')).filter(visible).length,
              custom: /custom-(html|image)/.test(document.body.innerText)};
    })()"""
    page = ui.browse((msu_audit["out"] / "report.html").as_uri(), tmp_path / "report_top.png", evaluate=js,
                     full_page=False)
    assert page.errors == []
    value = page.value
    assert value["title"] == report.VERDICT_TITLE
    for sentence in report.verdict_text(msu_audit["result"].summary):
        assert sentence in value["text"], sentence
    assert value["badges"] == 0 and value["custom"] is False
    assert 0 < value["top"] < 200 and value["bottom"] < 1000, "the verdict is not on the first screen"
    from PIL import Image

    with Image.open(page.screenshot) as image:
        assert image.size == (1400, 1000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) blank"


def runs_page_url(base: str, experiment_id: str, search_filter: str) -> str:
    """The MLflow 3.17 UI's runs table of an experiment with a search filter (hash router). ``workflowType =
    machine_learning`` selects the "Model training" side of the UI: without it a fresh browser opens
    ``#/experiments/<id>`` on the GenAI Overview whatever the experiment's ``mlflow.experimentKind`` tag says
    (3.17 reads the kind from the workflow type: URL, else the browser's stored choice, else ``genai``)."""
    query = urllib.parse.urlencode({"searchFilter": search_filter, "workflowType": "machine_learning"},
                                   quote_via=urllib.parse.quote)
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


# What the runs page shows: the route, the page heading, the side navigation, the rows and the count line.
RUNS_PAGE_JS = """(() => ({
  hash: location.hash,
  headings: Array.from(document.querySelectorAll('h1, h2, h3')).map(h => h.innerText.trim()),
  nav: Array.from(document.querySelectorAll('nav a, aside a')).map(a => a.innerText.trim()).filter(Boolean),
  rows: document.querySelectorAll('.ag-center-cols-container .ag-row').length,
  matching: (document.body.innerText.match(/(\\d+) matching runs?/) || [null, null])[1],
  search: Array.from(document.querySelectorAll('input')).map(i => i.value)
}))()"""


def test_mlflow_ui_shows_the_runs_table_for_the_readme_filter(msu_audit, msu_ui, tmp_path):
    """Study A's experiment in the MLflow UI with the README's filter (``params.epsilon = '10'``: the canonical ε
    text) is the runs table with the matching runs, not the GenAI Overview or Traces page."""
    import mlflow
    from _mlflow_server import ui

    assert README_FILTER in (REPO / "README.md").read_text()
    client = mlflow.MlflowClient(msu_audit["uri"])
    experiment = client.get_experiment_by_name("study-a-dp-release")
    assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"
    expected = ui.search_runs(msu_ui, experiment.experiment_id, README_FILTER)
    assert expected, f"no run matches the README's filter {README_FILTER!r}"
    page = ui.browse(runs_page_url(msu_ui, experiment.experiment_id, README_FILTER), tmp_path / "runs.png",
                     evaluate=RUNS_PAGE_JS, full_page=False, settle_s=6.0, size=(1600, 1000))
    value = page.value
    assert value["hash"].startswith(f"#/experiments/{experiment.experiment_id}/runs?"), value["hash"]
    assert value["headings"] == ["Runs"], value["headings"]  # GenAI side: "Training runs"; Overview: "Overview"
    assert {"Runs", "Models"} <= set(value["nav"]) and not {"Overview", "Sessions", "Judges"} & set(value["nav"])
    assert README_FILTER in value["search"]
    # the table lists the matching runs under their parents (the sweeps), and counts both
    parents = {ui.run_tags(r).get("mlflow.parentRunId") for r in expected} - {r["info"]["run_id"] for r in expected}
    assert value["rows"] >= 1 and int(value["matching"]) == len(expected) + len(parents - {None})


# The first screen of the address the command prints: rows, the headers with their boxes, the search box, the right
# edge of the table's visible part (MLflow's Assistant panel, which 3.17 opens once in a fresh browser on a local
# server, sits to its right), and whether that panel is open.
FIRST_SCREEN_JS = """(() => {
  const box = e => e.getBoundingClientRect();
  const viewport = document.querySelector('.ag-center-cols-viewport') || document.querySelector('.ag-body-viewport');
  return {hash: location.hash,
          rows: document.querySelectorAll('.ag-center-cols-container .ag-row').length,
          headers: Array.from(document.querySelectorAll('.ag-header-cell')).map(
            h => ({text: h.innerText.trim(), left: box(h).left, right: box(h).right})),
          gridRight: viewport ? box(viewport).right : innerWidth,
          assistant: document.body.innerText.includes('MLflow Assistant'),
          search: Array.from(document.querySelectorAll('input')).map(i => i.value)};
})()"""


def test_mlflow_first_screen_is_one_row_per_audit_with_the_stewards_columns(msu_audit, msu_ui, tmp_path):
    """Issue 49: the address the command prints opens the cohort's experiment on its audits, one row per audit
    (sweeps and cells folded under it), with the columns a steward reads first: ε, AUROC and the share of patients
    re-identified, each whole on the first screen of a 1920 × 1080 display beside the Assistant panel a fresh
    browser opens."""
    from _mlflow_server import ui

    [link] = re.findall(r"then open (http://\S+)", msu_audit["stdout"])
    url = msu_ui + link[link.index("/#/"):]
    assert "viewStateShareKey=" in url and "workflowType=machine_learning" in url
    page = ui.browse(url, tmp_path / "first_screen.png", evaluate=FIRST_SCREEN_JS, full_page=False, settle_s=6.0,
                     size=(1920, 1080))
    value = page.value
    assert value["rows"] == 1, value  # the audit; its sweeps and cells are folded under it
    assert any("tags.dataset = 'mini_msu'" in text for text in value["search"]), value["search"]
    assert value["assistant"], "a fresh browser opens the Assistant panel: the check below is with it open"
    shown = {h["text"]: h for h in value["headers"]}
    for column in ("ε gaussian_analytic", "AUROC gaussian_analytic", "re-identified gaussian_analytic"):
        assert column in shown, (column, list(shown))
        assert shown[column]["right"] <= value["gridRight"] + 1, (column, shown[column], value["gridRight"])
    from PIL import Image

    with Image.open(page.screenshot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) blank"
