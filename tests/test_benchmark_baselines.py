"""The benchmarks compare like with like: the plain baselines give the project's numbers (features) and noise
distribution (DP release), and the reproduce-time reader splits MLflow runs into pipeline runs correctly.

Correctness only: no timing is asserted here (that is `make bench`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ks_2samp

from _benchmarks import load_benchmark
from eegprivacy.privacy.mechanisms import make_mechanism
from eegprivacy.signal.features import BANDS, FEATURE_NAMES, FeatureConfig, window_features

baselines = load_benchmark("baselines")
reproduce_times = load_benchmark("reproduce_times")


def _windows(n_windows: int, n_channels: int, n_samples: int, sfreq: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n_samples) / sfreq
    tone = 30e-6 * np.sin(2 * np.pi * 10.0 * t + rng.uniform(0, 2 * np.pi, (n_windows, n_channels, 1)))
    return rng.standard_normal((n_windows, n_channels, n_samples)) * 20e-6 + tone


@pytest.mark.parametrize("sfreq, n_samples", [(500.0, 1000), (256.0, 512), (173.61, 347), (100.0, 200),
                                              (500.0, 100)])
def test_reference_loop_gives_the_vectorised_features(sfreq, n_samples):
    """Default rate, bin-aligned band edges (df = 1 Hz), an irrational rate, a band past Nyquist (dropped: NaN in
    both, never clipped), a short window."""
    windows = _windows(7, 4, n_samples, sfreq)
    ours, _ = window_features(windows, sfreq)
    theirs = baselines.reference_features_loop(windows, sfreq)
    assert theirs.shape == ours.shape == (7, 4, len(FEATURE_NAMES))
    dropped = [FEATURE_NAMES.index(name) for name, (_, hi) in BANDS.items() if hi > sfreq / 2]
    assert bool(dropped) == (sfreq == 100.0)  # high gamma (45-70 Hz) only at 100 Hz
    assert np.isnan(theirs[..., dropped]).all() and np.isnan(ours[..., dropped]).all()
    assert np.isfinite(np.delete(theirs, dropped, axis=-1)).all()
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=0)


def test_reference_loop_is_an_independent_check():
    """It follows the documented definitions (so it would catch a change in the vectorised code): a 20-Hz sine
    of amplitude A puts A²/2 in beta, its RMS is A/√2, it crosses zero 40 times per second and its line length
    over 2 s is 4·A·20·2."""
    sfreq, amplitude = 500.0, 40e-6
    t = np.arange(1000) / sfreq
    window = (amplitude * np.sin(2 * np.pi * 20.0 * t + 0.3))[None, None, :]
    feats = dict(zip(FEATURE_NAMES, baselines.reference_features_loop(window, sfreq)[0, 0]))
    a_uv = amplitude * 1e6
    assert feats["beta"] == pytest.approx(a_uv ** 2 / 2, rel=1e-3)
    assert feats["alpha"] + feats["gamma"] < 1e-3 * feats["beta"]
    assert feats["rms"] == pytest.approx(a_uv / math.sqrt(2), rel=1e-3)
    assert feats["zero_crossing_rate"] == pytest.approx(40.0, abs=0.5)
    assert feats["line_length"] == pytest.approx(4 * a_uv * 20 * 2, rel=0.01)
    assert 20.0 < feats["sef95"] < 25.0
    config = FeatureConfig(bands={"low": (0.5, 9.0), "high": (9.0, 70.0)})  # another band split moves the power
    other = baselines.reference_window_features(window[0], sfreq, config)[0]
    assert other[4] < other[5]


MECHANISM_CASES = [("gaussian_analytic", 1.0), ("gaussian_classic", 0.5), ("laplace_implemented", 1.0),
                   ("laplace_formal", 2.0)]


@pytest.mark.parametrize("name, epsilon", MECHANISM_CASES)
def test_scalar_diffprivlib_loop_draws_the_project_noise_distribution(name, epsilon):
    """Same calibration (scales equal) and same distribution (two-sample KS), and the test has power: the same
    comparison rejects noise 25 % too wide. Seeds are fixed, so the verdicts are too."""
    clip_norm, dim, delta, n = 2.0, 363, 1e-5, 20_000
    mechanism = make_mechanism(name, epsilon, delta)
    calibration = mechanism.calibrate(clip_norm, dim)
    reference = baselines.diffprivlib_mechanism(name, epsilon, delta, clip_norm, dim, random_state=11)
    scale = getattr(reference, "_scale", None) or reference.sensitivity / reference.epsilon
    assert calibration.noise_scale == pytest.approx(scale, rel=1e-12)

    values = np.random.default_rng(5).uniform(-0.2, 0.2, n)  # randomise(x) - x is the noise
    theirs = baselines.scalar_release(values, reference) - values
    ours = mechanism.sample(n, calibration, np.random.default_rng(3))
    assert ks_2samp(ours, theirs).pvalue > 1e-3
    assert ks_2samp(1.25 * ours, theirs).pvalue < 1e-6


def _run(stage, start, end, pid=None, status="FINISHED", children=0):
    return {"stage": stage, "start": start, "end": end, "status": status, "owner_pid": pid, "git_commit": "abc",
            "children": children}


def test_pipeline_runs_are_split_where_a_stage_comes_back():
    old = [_run("features@x", 0, 10), _run("dp_release@x", 11, 20), _run("dp_release@x", 20, 30)]
    new = [_run("features@x", 100, 101, pid="7"), _run("dp_release@x", 105, 110, pid="8", children=4),
           _run("dp_release@x", 110, 112, pid="8", children=4), _run("table_attacks@x", 115, None, pid="9",
                                                                      status="RUNNING")]
    found = reproduce_times.batches(old + new)
    assert [len(b) for b in found] == [4, 3]
    latest = reproduce_times.breakdown(found[0])
    assert [s["stage"] for s in latest["stages"]] == ["features@x", "dp_release@x", "table_attacks@x"]
    assert latest["wall_s"] == 15 and not latest["complete"]
    release = latest["stages"][1]
    assert (release["parent_runs"], release["child_runs"], release["runs_s"], release["span_s"]) == (2, 8, 7, 7)
    assert latest["stages"][2]["status"] == "RUNNING"
    # The same stage run again by another process, or after an idle hour, is another pipeline run.
    assert [len(b) for b in reproduce_times.batches([_run("a", 0, 5, pid="1"), _run("a", 6, 9, pid="2")])] == [1, 1]
    assert [len(b) for b in reproduce_times.batches([_run("a", 0, 5), _run("b", 5000, 5001)])] == [1, 1]


def test_stage_log_and_wall_record(tmp_path, monkeypatch, capsys):
    """`eegprivacy` appends a line per command when $EEGPRIVACY_STAGE_LOG is set; `record` folds them in."""
    from eegprivacy.cli import main

    log = tmp_path / "stages.jsonl"
    monkeypatch.setenv("EEGPRIVACY_STAGE_LOG", str(log))
    assert main(["datasets", "--json"]) == 0
    capsys.readouterr()
    (line,) = log.read_text().splitlines()
    entry = json.loads(line)
    assert entry["command"] == "datasets" and entry["rc"] == 0 and entry["seconds"] >= 0
    assert 0 < entry["peak_rss_mb"] < 8192 and entry["cpu_s"] > 0
    with log.open("a") as handle:
        handle.write(json.dumps({"command": "dp-release", "dataset": "eegmat", "seconds": 12.5, "rc": 0,
                                 "peak_rss_mb": 900.0, "peak_child_rss_mb": 0.0}) + "\n")
    doc = reproduce_times.record(1000.0, 1100.0, 0, log, tmp_path / "wall.json")
    assert json.loads((tmp_path / "wall.json").read_text()) == doc
    # the in-process `datasets` entry carries pytest's own peak, which can exceed the made-up 900 MB stage
    assert doc["total_s"] == 100.0 and doc["rc"] == 0
    assert doc["max_stage_peak_rss_mb"] == max(900.0, entry["peak_rss_mb"])
    assert [s["stage"] for s in doc["stages"]] == ["datasets", "dp_release@eegmat"]
    assert reproduce_times.stage_label("version", "eegmat") == "dataset_version@eegmat"
    assert not doc["from_scratch"]  # no pipeline given, no cache count: not a measurement of the target


def test_wall_record_keeps_the_last_from_scratch_run(tmp_path):
    """An incremental `make reproduce` must not hide the from-scratch figure the target is judged on."""
    log, out = tmp_path / "stages.jsonl", tmp_path / "wall.json"
    lines = [{"command": "dp-release", "dataset": d, "seconds": 10.0, "rc": 0} for d in ("eegmat", "x")]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    pipeline = ["dp_release@eegmat", "dp_release@x"]
    full = reproduce_times.record(0.0, 1500.0, 0, log, out, cached_files=0, pipeline=pipeline)
    assert full["from_scratch"] and full["every_stage_ran"] and full["profile"] == "default"
    warm = reproduce_times.record(2000.0, 2100.0, 0, log, out, cached_files=12, pipeline=pipeline)
    assert not warm["from_scratch"] and warm["last_from_scratch"]["total_s"] == 1500.0
    partial = reproduce_times.record(3000.0, 3050.0, 0, log, out, cached_files=0, pipeline=pipeline + ["more"])
    assert not partial["every_stage_ran"] and partial["last_from_scratch"]["total_s"] == 1500.0
    failed = reproduce_times.record(4000.0, 4010.0, 2, log, out, cached_files=0, pipeline=pipeline)
    assert not failed["from_scratch"] and failed["last_from_scratch"]["total_s"] == 1500.0
    other = reproduce_times.record(5000.0, 5010.0, 0, log, out, profile="full", cached_files=3, pipeline=pipeline)
    assert "last_from_scratch" not in other  # a default-profile figure is not a full-profile one
    # a stage without foreach logs `<stage>@<dataset>` (its --dataset); DVC names it `<stage>`
    single = reproduce_times.record(6000.0, 6010.0, 0, log, out, cached_files=0, pipeline=["dp_release"])
    assert single["from_scratch"] and {s["stage"] for s in single["stages"]} == {"dp_release"}


def test_reading_the_mlflow_store_leaves_it_untouched(tmp_path):
    """Real MLflow schema, read through a read-only snapshot: the store's bytes do not change."""
    from eegprivacy.tracking.runs import required_tags, start_run, tracking_uri

    for stage in ("features@synthetic_clinical", "dp_release@synthetic_clinical"):
        tags = required_tags(study="a", stage=stage.split("@")[0], dataset="synthetic_clinical",
                             dataset_version="0" * 64, synthetic=True, seed=0, dvc_stage=stage)
        with start_run(study="a", tags=tags, run_name=stage) as parent:
            with start_run(study="a", tags=tags, parent_run_id=parent.info.run_id):
                pass
    store = reproduce_times.store_path(tracking_uri())
    before = store.read_bytes()
    doc = reproduce_times.mlflow_breakdowns(1)
    assert store.read_bytes() == before
    (batch,) = doc["batches"]
    assert [s["stage"] for s in batch["stages"]] == ["features@synthetic_clinical", "dp_release@synthetic_clinical"]
    assert all(s["parent_runs"] == 1 and s["child_runs"] == 1 for s in batch["stages"]) and batch["complete"]


# ---- issue 22: stored records are reported as stored, seconds are information ------------------------------

def _stage_log(tmp_path) -> tuple[Path, list[str]]:
    """A made-up stage log (synthetic: two stages of ten seconds) and the pipeline it covers."""
    log = tmp_path / "stages.jsonl"
    lines = [{"command": "dp-release", "dataset": d, "seconds": 10.0, "rc": 0} for d in ("eegmat", "x")]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return log, ["dp_release@eegmat", "dp_release@x"]


def _on(monkeypatch, machine: dict) -> None:
    """Make `record` believe it runs on ``machine``."""
    monkeypatch.setattr(reproduce_times, "this_machine", lambda: dict(machine))


HERE = {"cpu_count": 2, "cpu_model": "Test CPU", "platform": "Linux-test-x86_64", "python": "3.11.7"}
ELSEWHERE = {"cpu_count": 2, "cpu_model": "Other CPU", "platform": "Linux-other-x86_64", "python": "3.11.7"}


def test_a_stored_record_from_another_machine_is_not_judged(tmp_path, monkeypatch):
    """`make bench` does not run the pipeline: the row says it reports a stored record, and seconds recorded on
    another machine (or on one the record does not name) neither pass nor fail the 1,800-s target here."""
    log, pipeline = _stage_log(tmp_path)
    out = tmp_path / "wall.json"
    _on(monkeypatch, ELSEWHERE)
    stored = reproduce_times.record(0.0, reproduce_times.TARGET_S / 2, 0, log, out, cached_files=0,
                                    pipeline=pipeline)
    assert stored["from_scratch"] and stored["platform"] == ELSEWHERE["platform"] and stored["python"]
    monkeypatch.setattr(reproduce_times, "WALL_PATH", out)
    monkeypatch.setattr(reproduce_times, "mlflow_breakdowns", lambda n: {"error": "no store in this test"})
    monkeypatch.setattr(reproduce_times, "pipeline_stages", lambda: pipeline)
    _on(monkeypatch, HERE)
    row = reproduce_times.run()
    assert row["passed"] is None and "another machine" in row["note"]
    assert row["measured_by_this_run"] is False and "stored record" in row["source"]
    assert row["project_s"] == stored["total_s"] and row["recorded_started"] == stored["started"]
    assert row["recorded_on"]["platform"] == ELSEWHERE["platform"] and row["same_machine"] is False
    assert row["from_scratch"] and row["every_stage_ran"] and row["profile"] == "default"
    # a record from before machines were stored (cores only) cannot be matched either
    old = {k: v for k, v in stored.items() if k not in ("cpu_model", "platform", "python", "other_profiles")}
    out.write_text(json.dumps(old))
    row = reproduce_times.run()
    assert row["passed"] is None and "processor" in row["note"] and row["same_machine"] is None


def test_a_from_scratch_record_on_this_machine_is_judged_against_the_target(tmp_path, monkeypatch):
    log, pipeline = _stage_log(tmp_path)
    out = tmp_path / "wall.json"
    _on(monkeypatch, HERE)
    for total, expected in ((reproduce_times.TARGET_S - 1, True), (reproduce_times.TARGET_S + 1, False)):
        reproduce_times.record(0.0, total, 0, log, out, cached_files=0, pipeline=pipeline)
        row = reproduce_times.stored_row(reproduce_times.read_records(out), HERE)
        assert row["passed"] is expected and row["same_machine"] is True and row["target_s"] == 2700.0
    # an incremental run on this machine is not judged (its from-scratch predecessor is, and is the one shown)
    reproduce_times.record(10_000.0, 10_010.0, 0, log, out, cached_files=5, pipeline=pipeline)
    row = reproduce_times.stored_row(reproduce_times.read_records(out), HERE)
    assert row["passed"] is False and row["project_s"] == reproduce_times.TARGET_S + 1
    assert row["latest_make_reproduce"]["total_s"] == 10.0
    (out.parent / "only_warm.json").write_text(json.dumps(row["latest_make_reproduce"]))
    warm = reproduce_times.stored_row(reproduce_times.read_records(out.parent / "only_warm.json"), HERE)
    assert warm["passed"] is None and "not from scratch" in warm["note"]


def test_the_stretch_goal_is_met_only_below_its_own_seconds(tmp_path, monkeypatch):
    log, pipeline = _stage_log(tmp_path)
    out = tmp_path / "wall.json"
    _on(monkeypatch, HERE)
    cases = ((reproduce_times.STRETCH_S - 1, True, True), (reproduce_times.TARGET_S - 1, True, False),
             (reproduce_times.TARGET_S + 1, False, False))
    for total, passed, stretch in cases:
        reproduce_times.record(0.0, total, 0, log, out, cached_files=0, pipeline=pipeline)
        row = reproduce_times.stored_row(reproduce_times.read_records(out), HERE)
        assert row["passed"] is passed and row["stretch_met"] is stretch and row["stretch_s"] == 1800.0
    # a record that is not judged (not from scratch) says nothing about the stretch goal either
    reproduce_times.record(10_000.0, 10_010.0, 0, log, out, cached_files=5, pipeline=pipeline)
    (out.parent / "only_warm.json").write_text(json.dumps(
        reproduce_times.stored_row(reproduce_times.read_records(out), HERE)["latest_make_reproduce"]))
    warm = reproduce_times.stored_row(reproduce_times.read_records(out.parent / "only_warm.json"), HERE)
    assert warm["passed"] is None and warm["stretch_met"] is None


def test_the_side_by_side_ratio_needs_two_from_scratch_records_of_one_machine_and_sitting(tmp_path, monkeypatch):
    """ratio = default / reduced only for two from-scratch runs on the same machine within 24 h; else None."""
    log, pipeline = _stage_log(tmp_path)
    hour = 3600.0

    def row_for(reduced_start, reduced_machine, reduced_cached=0, default_machine=HERE):
        out = tmp_path / f"wall-{reduced_start}-{reduced_machine['platform']}-{reduced_cached}.json"
        _on(monkeypatch, reduced_machine)
        reduced = reproduce_times.record(reduced_start, reduced_start + 3000.0, 0, log, out, profile="reduced",
                                         cached_files=reduced_cached, pipeline=pipeline)
        _on(monkeypatch, default_machine)
        default = reproduce_times.record(0.0, 1200.0, 0, log, out, cached_files=0, pipeline=pipeline)
        assert set(reproduce_times.read_records(out)) == {"default", "reduced"}  # one record per profile kept
        return reproduce_times.stored_row(reproduce_times.read_records(out), HERE), default, reduced

    row, default, reduced = row_for(2 * hour, HERE)
    assert row["ratio"] == pytest.approx(default["total_s"] / reduced["total_s"], abs=1e-3)
    assert row["ratio_met"] is (row["ratio"] <= 0.5) and row["side_by_side"]["reduced"]["ratio"] == row["ratio"]
    for args, why in (((2 * hour, ELSEWHERE), "machine"), ((30 * hour, HERE), "sitting"),
                      ((2 * hour, HERE, 7), "from-scratch")):
        row, _, _ = row_for(*args)
        assert row["ratio"] is None and row["ratio_met"] is None and why in row["ratio_note"]


def test_old_single_record_files_are_read_as_one_profile(tmp_path, monkeypatch):
    """The file from before per-profile records is the default profile's; a later run of another profile keeps it."""
    log, pipeline = _stage_log(tmp_path)
    out = tmp_path / "wall.json"
    old = {"started": "2026-11-30T03:46:13+00:00", "ended": "2026-11-30T04:14:27+00:00", "total_s": 1000.0,
           "rc": 0, "profile": "default", "cpu_count": 2, "from_scratch": True, "every_stage_ran": True,
           "stages": []}
    out.write_text(json.dumps(old))
    assert reproduce_times.read_records(out) == {"default": old}
    _on(monkeypatch, HERE)
    reproduce_times.record(0.0, 10.0, 0, log, out, profile="full", cached_files=0, pipeline=pipeline)
    assert reproduce_times.read_records(out)["default"] == old


def test_absolute_seconds_slower_than_the_reference_do_not_fail_the_run(monkeypatch):
    """Seconds measure the machine: a case twice as slow as its reference is reported, never a failure."""
    absolute = load_benchmark("absolute")
    runner = load_benchmark("run")
    monkeypatch.setattr(absolute, "CASES", {"synthetic slow case": (lambda repeats: 2.0, 1.0),
                                             "synthetic missing data": (lambda repeats: None, 1.0)})
    result = absolute.run(quick=True)
    slow, missing = result["cases"]
    assert slow["seconds"] == 2.0 and slow["reference_s"] == 1.0 and slow["ratio_to_reference"] == 2.0
    assert missing["ratio_to_reference"] is None and result["reference_s"] == 1.0
    assert result["passed"] is None and all(c["passed"] is None for c in result["cases"])
    assert result["reference_machine"]["cpu_count"] == 2
    results = {"absolute": {**result, "memory_ok": True}, "features": {"passed": True, "memory_ok": True}}
    assert runner.failed_benchmarks(results) == [] and runner.not_judged(results) == ["absolute"]
    # a failed gate (crash, different numbers, regression) or an over-budget benchmark still fails the run
    assert runner.failed_benchmarks({"a": {"passed": False}, "b": {"passed": None, "memory_ok": False}}) == ["a", "b"]


def test_an_unmet_goal_is_a_goal_and_a_regression_fails_the_gate():
    """``judge``: below its target but at its recorded figure, a benchmark passes (goal_met False); below 0.8 × the
    recorded ratio, or of any model's, it fails; different numbers always fail; a stored reproduce record is
    gated against its recorded seconds only where the module judged it (this machine, from scratch)."""
    judge = load_benchmark("run").judge
    below_goal = judge({"ratio": 1.7, "target_ratio": 5.0, "passed": False, "same_numbers": True}, {"ratio": 1.8})
    assert below_goal["goal_met"] is False and below_goal["passed"] is True and below_goal["regressions"] == []
    regressed = judge({"ratio": 3.0, "target_ratio": 1.0, "passed": True, "same_numbers": True,
                       "ratios": {"simplenet": 3.0, "eegnet": 0.7}}, {"ratio": 1.0, "ratios": {"eegnet": 1.0}})
    assert regressed["goal_met"] is True and regressed["passed"] is False
    assert regressed["regressions"] == ["ratios.eegnet 0.7 < 0.8 × recorded 1"]
    assert judge({"ratio": 9.0, "target_ratio": 1.0, "passed": False, "same_numbers": False}, None)["passed"] is False
    assert judge({"passed": False, "error": "exited 1"}, None)["passed"] is False
    slow = {"target_s": 2700.0, "project_s": 9000.0, "ratio": None}
    assert judge({**slow, "passed": False}, {"total_s": 6000.0})["passed"] is False
    assert judge({**slow, "project_s": 6500.0, "passed": False}, {"total_s": 6000.0})["passed"] is True
    assert judge({**slow, "passed": None}, {"total_s": 6000.0})["passed"] is None  # another machine: not judged


def test_gates_read_the_record_of_this_processor_else_the_lowest_figures():
    """``recorded_figures``: the record whose processor (cores, model) is this one's; on an unrecorded processor,
    each ratio the lowest any record holds, and no from-scratch seconds (never judged across machines). The
    committed ``benchmarks/recorded.json`` parses into records that each name their processor."""
    runner = load_benchmark("run")
    doc = {"records": [
        {"recorded_on": {"cpu_count": 2, "cpu_model": "Xeon"}, "date": "d1",
         "benchmarks": {"loso_mlp": {"ratio": 1.87}, "federated_round": {"ratio": 1.0, "ratios": {"simplenet": 2.5}},
                        "reproduce": {"total_s": 6600.0}}},
        {"recorded_on": {"cpu_count": 2, "cpu_model": "EPYC"}, "date": "d2",
         "benchmarks": {"loso_mlp": {"ratio": 1.19}, "federated_round": {"ratio": 1.1, "ratios": {"simplenet": 3.1}},
                        "reproduce": {"total_s": 5600.0}}}]}
    figures, basis = runner.recorded_figures(doc, {"cpu_count": 2, "cpu_model": "EPYC", "platform": "x"})
    assert figures["loso_mlp"] == {"ratio": 1.19} and figures["reproduce"] == {"total_s": 5600.0}
    assert "EPYC" in basis and "d2" in basis
    figures, basis = runner.recorded_figures(doc, {"cpu_count": 4, "cpu_model": "EPYC"})
    assert figures["loso_mlp"] == {"ratio": 1.19} and figures["federated_round"] == {"ratio": 1.0,
                                                                                  "ratios": {"simplenet": 2.5}}
    assert "total_s" not in figures["reproduce"] and "no record of this processor" in basis
    assert runner.judge({"ratio": 1.2, "target_ratio": 1.8, "passed": False, "same_numbers": True},
                        figures["loso_mlp"])["passed"] is True
    committed = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "recorded.json").read_text())
    assert committed["records"] and all(r["recorded_on"]["cpu_model"] and r["benchmarks"]
                                        for r in committed["records"])
