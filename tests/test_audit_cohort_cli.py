"""``eegprivacy audit-cohort`` as a data steward meets it, always through the installed command in a subprocess:
BIDS-App arguments and selection, results (and the MLflow store) under OUTPUT_DIR with nothing written to the
working folder, bad recordings each named on the console, label checks before any signal is read, one-line errors
whose hints name flags, a quiet console with one progress line and a readable last line, Ctrl-C then a rerun that
resumes, and ``eegprivacy --help`` with user commands apart from the pipeline's stages.

The cohort is 12 real MSU subjects written as BIDS trees (EDF, and BrainVision where a float sample must be NaN).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _cohort_audit_data import TREE_KEY, MiniMSU

EEGPRIVACY = str(Path(sys.executable).with_name("eegprivacy"))
# The same small settings as tests/test_audit_cohort.py (two noise seeds, ε 1 and 10, one mechanism).
SMALL = ["--epsilons", "1", "10", "--mechanisms", "gaussian_analytic", "--noise-seeds", "2", "--baseline-seeds", "2",
         "--permutations", "3", "--nested-seeds", "1", "--bootstrap", "400", "--membership-trials", "4", "--jobs", "2",
         "--no-progress"]
pytestmark = pytest.mark.realdata


# The user cache the commands' default work folders go to (-w/--work-dir): one throw-away folder for the module,
# never the real ~/.cache.
_USER_CACHE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _user_cache(tmp_path_factory):
    _USER_CACHE["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg"))
    yield
    _USER_CACHE.clear()


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "EEGPRIVACY_CACHE")}
    return {**env, "MPLBACKEND": "Agg", **_USER_CACHE, **extra}


def _run(args, cwd: Path, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    return subprocess.run([EEGPRIVACY, *map(str, args)], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def trees(tmp_path_factory, data_root):
    """The 12 subjects as EDF and as BrainVision BIDS trees (written once, copied and damaged per test)."""
    from eegprivacy.data.bids import to_bids

    tmp = tmp_path_factory.mktemp("trees")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EEGPRIVACY_DATA", str(data_root))
        to_bids(MiniMSU(), tmp / "edf", format="EDF", key=TREE_KEY)
        to_bids(MiniMSU(), tmp / "bv", format="BrainVision", key=TREE_KEY)
    return tmp


def _copy(trees: Path, kind: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trees / kind, tmp_path / f"bids-{kind}"))


def _empty(tmp_path: Path) -> Path:
    folder = tmp_path / "cwd"
    folder.mkdir(exist_ok=True)
    return folder


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


@pytest.fixture(scope="module")
def steward(trees, tmp_path_factory):
    """The steward's group run: a cohort named in its dataset_description.json, labels HC/SZ mapped with
    --label-map, 8 participants selected, run from an empty working folder with the progress line on, its default
    work folder in a user cache of its own; and a steward's usual bad files: sub-03's recording an EDF cut in half
    (read up to its last whole record, flagged), sub-09's an EDF cut inside its first record (no reader opens it)
    and sub-08's with NaN samples (BrainVision, the tree's format: BIDS lets formats differ between subjects)."""
    tmp = tmp_path_factory.mktemp("steward")
    tree = Path(shutil.copytree(trees / "bv", tmp / "bids"))
    description = json.loads((tree / "dataset_description.json").read_text())
    (tree / "dataset_description.json").write_text(json.dumps({**description, "Name": "Steward cohort"}))
    table = pd.read_csv(tree / "participants.tsv", sep="\t", dtype=str)
    table.assign(label=table["label"].map({"0": "HC", "1": "SZ"})).to_csv(tree / "participants.tsv", sep="\t",
                                                                          index=False)
    edf = _as_edf(trees, tree, "03")
    with open(edf, "r+b") as handle:
        handle.truncate(edf.stat().st_size // 2)
    unreadable, nan = _truncated_edf(trees, tree, "09"), _nan_samples(tree, "08")
    cwd, out = _empty(tmp), tmp / "audit"
    labels = ["01", "02", "03", "04", "sub-07", "08", "09", "10"]
    args = ["audit-cohort", tree, None, "group", "--label", "label", "--label-map", "SZ=1", "HC=0",
            "--participant-label", *labels, "--task", "rest", *SMALL]
    with_progress = [arg for arg in args if arg != "--no-progress"]
    with_progress[2] = out
    done = _run(with_progress, cwd, XDG_CACHE_HOME=str(tmp / "xdg"))
    return {"tree": tree, "edf": edf, "unreadable": unreadable, "nan": nan, "cwd": cwd, "out": out, "args": args,
            "done": done, "tmp": tmp}


def test_group_level_from_an_empty_folder_with_participant_selection_and_a_truncated_file(steward):
    """BIDS-App form from an empty working folder: results and MLflow store under OUTPUT_DIR, the private work
    folder in the user cache (never in OUTPUT_DIR, never named in the report), nothing in the working folder;
    --participant-label and --task select; the cohort's name from dataset_description.json titles the report and
    tags the runs; labels mapped with --label-map are named so in the verdict, which the console prints too, with
    the caution of a small cohort; an EDF cut in half is read, flagged and one console line naming the file (the
    two unusable files: the next test); MNE's and MLflow's INFO lines are off; the last line is a sentence."""
    import mlflow

    done, cwd, out, edf, tmp_path = (steward[k] for k in ("done", "cwd", "out", "edf", "tmp"))
    assert done.returncode == 0, done.stderr
    assert list(cwd.iterdir()) == []
    assert {"report.html", "rows.csv", "summary.json", "mlflow.db"} <= {p.name for p in out.iterdir()}
    [work] = (tmp_path / "xdg" / "eegprivacy" / "audit-cohort").iterdir()
    assert not (out / "work").exists() and list(work.glob("features-*.parquet"))
    assert f"work:   {work} (private" in done.stdout
    for name in ("report.html", "summary.json", "rows.csv"):
        assert str(work) not in (out / name).read_text() and "audit-cohort/" not in (out / name).read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dataset"] == "Steward cohort" and summary["cohort"]["n_patients"] == 6  # 8 selected, 2 left out
    assert "Cohort audit: Steward cohort" in (out / "report.html").read_text()
    # the verdict's lead on the console: at the ε a steward would pick, utility and re-identification together
    verdict = [line for line in done.stdout.splitlines() if line.startswith("verdict: ")]
    assert verdict[0].startswith("verdict: At ε = ") and " per patient with gaussian_analytic (" in verdict[0]
    assert "tells SZ from HC with AUROC" in verdict[0] and "of the patients" in verdict[0], verdict
    n = {v: summary["cohort"][f"n_label_{k}"] for k, v in (("1", "SZ"), ("0", "HC"))}
    assert verdict[1] == (f"verdict: Caution: only {n['SZ']} SZ patients and {n['HC']} HC patients (fewer than 8 "
                          "per class): the intervals below are too wide to decide either way; read these numbers as "
                          "a first look, and audit a larger cohort before releasing.")
    assert "label 1" not in html.unescape((out / "report.html").read_text())
    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_summary_run"])
    assert run.data.tags["dataset"] == "Steward cohort"
    # the bad file, by name, once, on the console
    # one overall progress line (tqdm rewrites it in place), with elapsed time and an ETA from the pace measured in
    # each phase: recordings read, then LOSO fits of the cells (tests/test_phase_progress.py)
    bars = [part for part in re.split(r"[\r\n]", done.stderr) if part.startswith("audit: ")]
    assert any(re.match(r"audit: reading recordings: \d+/7 recordings \|.*\| \d+:\d\d elapsed, ETA (\d+:\d\d|\?)$",
                        b) for b in bars), bars
    assert any(re.match(r"audit: utility and attack cells: \d+/\d+ LOSO fits \|.*\| \d+:\d\d elapsed, ETA \d+:\d\d$",
                        b) for b in bars), bars
    warned = [line for line in done.stderr.splitlines() if "truncated" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and str(edf) in warned[0], done.stderr
    # a quiet console: no per-file MNE lines, no MLflow INFO lines, no Python warning source lines
    for noise in ("Reading 0", " INFO ", "Setting up band-pass filter", "warnings.warn("):
        assert noise not in done.stderr + done.stdout, noise
    last = done.stdout.strip().splitlines()[-1]
    ci = r"-?\d\.\d{3} \[-?\d\.\d{3}, -?\d\.\d{3}\]"
    assert re.fullmatch(rf"Steward cohort: 6 patients, non-private AUROC {ci} vs permuted-label control {ci} "
                        rf"\(difference {ci.replace('-?', '[+-]')}\), 95% intervals over subjects\+seeds; "
                        r"gaussian_analytic beats its matched null (from ε = \d+|at no ε ≤ 10) \(ε per patient, on "
                        r"the features; \d+ cells computed, 0 resumed\)\.", last), last
    experiment = client.get_experiment_by_name("study-a-dp-release").experiment_id
    assert re.search(rf"mlflow ui --backend-store-uri sqlite:///{re.escape(str(out / 'mlflow.db'))} --port 5000, then "
                     rf"open http://127\.0\.0\.1:5000/#/experiments/{experiment}/runs\?workflowType=machine_learning"
                     r"&viewStateShareKey=audit_cohort-[0-9a-f]{16}$", done.stdout, re.M), done.stdout


def test_a_session_with_no_recordings_is_one_line(trees, tmp_path):
    cwd = _empty(tmp_path)
    done = _run(["audit-cohort", trees / "edf", tmp_path / "out", "group", "--label", "label", "--session", "2", *SMALL], cwd)
    assert done.returncode == 2
    _no_traceback(done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "in session '2'" in line, line
    assert not (tmp_path / "out").exists()


def _nan_samples(tree: Path, subject: str = "05") -> Path:
    """NaN samples in the middle of a BrainVision recording; returns its header, the file errors name."""
    samples = tree / f"sub-{subject}" / "eeg" / f"sub-{subject}_task-rest_eeg.eeg"
    data = np.fromfile(samples, dtype="<f4")
    data[1000:1010] = np.nan
    data.tofile(samples)
    return samples.with_suffix(".vhdr")


def _as_edf(trees: Path, tree: Path, subject: str) -> Path:
    """The subject's recording in ``tree`` replaced by its EDF copy (BIDS lets formats differ between subjects)."""
    eeg = tree / f"sub-{subject}" / "eeg"
    for path in eeg.iterdir():
        path.unlink()
    for path in (trees / "edf" / f"sub-{subject}" / "eeg").iterdir():
        shutil.copy(path, eeg / path.name)
    return eeg / f"sub-{subject}_task-rest_eeg.edf"


def _truncated_edf(trees: Path, tree: Path, subject: str) -> Path:
    """The subject's recording as EDF, cut inside its first data record, as an interrupted copy leaves it: no
    reader can open it."""
    edf = _as_edf(trees, tree, subject)
    with open(edf, "r+b") as handle:
        handle.truncate(256 * (1 + 16) + 500)  # the header (16 channels) and 500 bytes of a 4,096-byte record
    return edf


def test_bad_recordings_are_left_out_and_the_group_run_finishes(steward):
    """A steward's cohort always has some bad recordings: here one truncated EDF that no reader can open and one
    recording with NaN samples. The group run goes on without them (the default, --skip-bad): each is one console
    line naming the file and the reason; summary.json and the report list both, file names and subjects redacted;
    the private work folder's left_out.tsv names them; no feature or cell cache holds anything of them."""
    from eegprivacy.tracking.leaks import scan_for_identifiers

    done, out, edf, vhdr = steward["done"], steward["out"], steward["unreadable"], steward["nan"]
    [work] = (steward["tmp"] / "xdg" / "eegprivacy" / "audit-cohort").iterdir()
    assert done.returncode == 0, done.stderr
    _no_traceback(done.stderr)
    for path, reason in ((edf, "cannot read"), (vhdr, "NaN/infinite sample(s)")):
        named = [line for line in done.stderr.splitlines() if str(path) in line]
        assert len(named) == 1 and named[0].startswith("warning: ") and reason in named[0], done.stderr
        assert named[0].endswith("; left out"), named[0]
    summary = json.loads((out / "summary.json").read_text())
    left_out = summary["cohort"]["left_out"]
    assert len(left_out) == 2 and all(e["unusable"] for e in left_out)
    assert any("cannot read" in e["reason"] for e in left_out) and any("NaN" in e["reason"] for e in left_out)
    report = (out / "report.html").read_text()
    assert "Left out" in report and "2 recording(s) were left out" in report
    ids = {"subject": ["sub-08", "sub-09"], "file": [edf.name, vhdr.name, "sub-08_task-rest", "sub-09_task-rest"]}
    assert scan_for_identifiers([out], ids, whole_words=["subject"]) == []
    table = pd.read_csv(work / "left_out.tsv", sep="\t")
    assert sorted(table["file"]) == sorted([str(edf), str(vhdr)]) and table["reason"].str.len().min() > 20
    assert f"left out: 2 recording(s), each named in a warning above and in {work / 'left_out.tsv'}" in done.stdout
    features = pd.read_parquet(next(work.glob("features-*.parquet")))
    assert set(features["subject"]) == {f"sub-{i}" for i in ("01", "02", "03", "04", "07", "10")}
    assert scan_for_identifiers([work / "cells"], ids, whole_words=["subject"]) == []


def test_no_skip_bad_stops_at_nan_samples_with_one_line_and_leaves_nothing(trees, tmp_path):
    """With --no-skip-bad a bad recording stops the run: one line naming the file, exit 2, and nothing left behind
    (no OUTPUT_DIR, no work folder, no cache file)."""
    tree = _copy(trees, "bv", tmp_path)
    vhdr = _nan_samples(tree)
    done = _run(["audit-cohort", tree, tmp_path / "out", "group", "--label", "label", "--no-skip-bad", *SMALL],
                _empty(tmp_path), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert done.returncode == 2
    _no_traceback(done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(vhdr) in errors[0] and "NaN" in errors[0], done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "xdg" / "eegprivacy").exists()


def test_participant_level_checks_each_participant_and_goes_on(trees, tmp_path):
    """The participant level reads every selected participant on its own: a participant with NaN samples is one
    error line naming its file, the others get their QC table, and the exit status says one failed."""
    tree = _copy(trees, "bv", tmp_path)
    samples = tree / "sub-05" / "eeg" / "sub-05_task-rest_eeg.eeg"
    data = np.fromfile(samples, dtype="<f4")
    data[:4] = np.inf
    data.tofile(samples)
    out = tmp_path / "out"
    done = _run(["audit-cohort", tree, out, "participant", "--label", "label", "--participant-label", "04", "05", "06",
                 "--no-progress"], _empty(tmp_path))
    assert done.returncode == 1
    _no_traceback(done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: sub-05: ") and "sub-05_task-rest_eeg.vhdr" in errors[0]
    assert sorted(p.name for p in out.glob("*_qc.tsv")) == ["sub-04_qc.tsv", "sub-06_qc.tsv"]
    qc = pd.read_csv(out / "sub-04_qc.tsv", sep="\t")
    assert list(qc["file"]) == ["sub-04/eeg/sub-04_task-rest_eeg.vhdr"] and qc["windows"].iloc[0] > 0
    assert "1 of 3 participant(s)" not in done.stdout and "2 of 3 participant(s) passed" in done.stderr


def test_one_class_is_refused_before_any_signal_is_read(trees, tmp_path):
    tree = _copy(trees, "edf", tmp_path)
    table = pd.read_csv(tree / "participants.tsv", sep="\t", dtype=str)
    table["label"] = "1"
    table.to_csv(tree / "participants.tsv", sep="\t", index=False)
    out = tmp_path / "out"
    done = _run(["audit-cohort", tree, out, "group", "--label", "label", *SMALL], _empty(tmp_path))
    assert done.returncode == 2
    _no_traceback(done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert "both classes" in line
    assert not out.exists()  # no feature table, no work folder, no store: nothing was read past the headers


def test_error_hints_name_the_flags_not_python_arguments(trees, tmp_path):
    tree = _copy(trees, "edf", tmp_path)
    table = pd.read_csv(tree / "participants.tsv", sep="\t", dtype=str)
    table["label"] = table["label"].map({"0": "HC", "1": "SZ"})
    table.to_csv(tree / "participants.tsv", sep="\t", index=False)
    done = _run(["audit-cohort", tree, tmp_path / "out", "group", "--label", "label", *SMALL], _empty(tmp_path))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "--label-map HC=0 SZ=1" in line and "label_map" not in line, line
    done = _run(["audit-cohort", tree, tmp_path / "out", "group", "--label", "diagnosis", *SMALL], _empty(tmp_path))
    [line] = done.stderr.strip().splitlines()
    assert "pass --label with one of them" in line and "label=" not in line, line
    mapped = _run(["audit-cohort", tree, tmp_path / "out", "participant", "--label", "label", "--label-map", "HC=0", "SZ=1",
                   "--participant-label", "01", "--no-progress"], _empty(tmp_path))
    assert mapped.returncode == 0, mapped.stderr


def _interrupt(command: list[str], cwd: Path, cells: Path, at_least: int, send) -> subprocess.CompletedProcess:
    """Start ``command``, wait until ``cells`` holds ``at_least`` finished cells, then ``send(process)``."""
    process = subprocess.Popen(command, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(cells.rglob("*.csv"))) < at_least:
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    send(process)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_sigterm_and_ctrl_c_stop_cleanly_and_reruns_resume_to_the_same_results(steward, tmp_path):
    """What a scheduler sends (SIGTERM to the process) and what a terminal sends (Ctrl-C: SIGINT to the whole
    process group), each in the middle of the cells: exit 143 or 130 with the hint, no traceback, the audit's run
    marked KILLED, never left RUNNING. The same command then finishes, resuming the cells already done, to the
    numbers of the steward's uninterrupted run. After the run and its two reruns the store holds one top-level run
    for the audit, one run per sweep and one per cell, all FINISHED (issue 49)."""
    import mlflow

    out, work = tmp_path / "out", tmp_path / "work"
    args = list(steward["args"])
    args[2] = out
    command = [EEGPRIVACY, *map(str, args), "--work-dir", str(work)]
    cwd, uri = _empty(tmp_path), f"sqlite:///{out / 'mlflow.db'}"
    for signum, code, at_least in ((signal.SIGTERM, 143, 3), (signal.SIGINT, 130, 6)):
        send = ((lambda p: p.send_signal(signal.SIGTERM)) if signum == signal.SIGTERM
                else (lambda p: os.killpg(p.pid, signal.SIGINT)))
        stopped = _interrupt(command, cwd, work / "cells", at_least, send)
        assert stopped.returncode == code, stopped.stderr
        _no_traceback(stopped.stderr)
        assert stopped.stderr.strip().splitlines()[-1] == "interrupted; rerun the same command to resume"
        client = mlflow.MlflowClient(uri)
        experiment = client.get_experiment_by_name("study-a-dp-release")
        tops = client.search_runs([experiment.experiment_id], "attributes.run_name = 'audit_cohort-Steward cohort'")
        assert [r.info.status for r in tops] == ["KILLED"], signum
        running = client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")
        assert running == [], [r.info.run_name for r in running]
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert int(re.search(r"(\d+) resumed\)", done.stdout).group(1)) >= 6
    rows = pd.read_csv(out / "rows.csv")
    pd.testing.assert_frame_equal(rows, pd.read_csv(steward["out"] / "rows.csv"))
    assert json.loads((out / "summary.json").read_text())["headline"] == \
        json.loads((steward["out"] / "summary.json").read_text())["headline"]
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    assert {r.info.status for r in runs} == {"FINISHED"}
    tops = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(tops) == 1 and tops[0].data.tags["resumed"] == "2"  # reopened by each rerun, never duplicated
    sweeps = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == tops[0].info.run_id]
    children = [r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") in
                {s.info.run_id for s in sweeps}]
    assert len({r.info.run_name for r in sweeps}) == len(sweeps) and len(set(children)) == len(children)
    # child runs are named for a person: sweep · mechanism, ε, seed (no cache hash)
    release = [n for n in children if " · arm=release mechanism=gaussian_analytic ε=10 " in n]
    assert release and all(re.fullmatch(r"audit_cohort-Steward cohort-utility-gaussian_analytic · arm=release "
                                        r"mechanism=gaussian_analytic ε=10 noise_scale=\d+(\.\d{1,3})? seed=\d", n)
                           for n in release), release


def test_verbose_shows_the_libraries_messages(trees, tmp_path):
    quiet = _run(["audit-cohort", trees / "edf", tmp_path / "q", "participant", "--label", "label", "--participant-label", "01",
                  "--no-progress"], _empty(tmp_path))
    loud = _run(["audit-cohort", trees / "edf", tmp_path / "v", "participant", "--label", "label", "--participant-label", "01",
                 "--no-progress", "--verbose"], tmp_path)
    assert quiet.returncode == loud.returncode == 0, loud.stderr
    detail = re.compile(r"^sub-01: 1 recording\(s\), \d+ window\(s\), 16 channel\(s\) kept$", re.M)
    assert not detail.search(quiet.stderr) and detail.search(loud.stderr), (quiet.stderr, loud.stderr)


def test_help_lists_user_commands_apart_from_pipeline_stages(tmp_path):
    done = _run(["--help"], tmp_path)
    assert done.returncode == 0
    text = done.stdout
    users, stages = text.index("user commands"), text.index("pipeline stages")
    assert users < stages
    user_block, stage_block = text[users:stages], text[stages:]
    for command in ("audit-cohort", "to-bids", "datasets", "report"):
        assert re.search(rf"^  {command} ", user_block, re.M), command
        assert not re.search(rf"^  {command} ", stage_block, re.M), command
    assert re.search(r"^  dp-release ", stage_block, re.M)
    usage = _run(["audit-cohort", "--help"], tmp_path).stdout
    assert "BIDS_DIR OUTPUT_DIR {participant,group}" in usage and "--participant-label" in usage
    # which outputs are private and which may be shared (issue 49)
    assert re.search(r"^  PRIVATE +the work folder \(-w/--work-dir;", usage, re.M), usage
    assert re.search(r"^  shareable +OUTPUT_DIR: report\.html", usage, re.M), usage
