"""`make reproduce`'s overall progress line (issue 37): the plan written before `dvc repro`, and the line each stage
prints from it and the stage log as it starts and ends.

No DVC run and no pipeline stage: `dvc status` is a stand-in, the stage log and the stored record are written here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from _benchmarks import load_benchmark
from eegprivacy import reproduce_progress as progress

reproduce_times = load_benchmark("reproduce_times")

PIPELINE = ["dataset_version@eegmat", "features@eegmat", "dp_utility@eegmat", "dp_utility@msu_schizophrenia",
            "dp_aggregate", "federated_lira"]


def _record(tmp_path: Path) -> Path:
    """A stored record: the latest run (incremental, one stage failed) keeping an older run from scratch."""
    wall = tmp_path / "wall.json"
    scratch = {"started": "2026-01-01T00:00:00+00:00", "total_s": 900.0, "from_scratch": True, "stages": [
        {"stage": "dataset_version@eegmat", "seconds": 5.0, "rc": 0},
        {"stage": "features@eegmat", "seconds": 60.0, "rc": 0},
        {"stage": "dp_utility@eegmat", "seconds": 200.0, "rc": 0},
        {"stage": "dp_aggregate", "seconds": 30.0, "rc": 0}]}
    latest = {"started": "2026-01-02T00:00:00+00:00", "total_s": 300.0, "profile": "default", "from_scratch": False,
              "last_from_scratch": scratch, "stages": [
                  {"stage": "dataset_version@eegmat", "seconds": 4.0, "rc": 0},
                  {"stage": "dp_utility@eegmat", "seconds": 240.0, "rc": 0},
                  {"stage": "dp_aggregate", "seconds": 3.0, "rc": 1},  # a crash times nothing
                  {"stage": "federated_lira@eegmmidb", "seconds": 50.0, "rc": 0}]}  # logged before DVC's name
    wall.write_text(json.dumps(latest))
    return wall


def _log(path: Path, *rows: tuple[str, str | None, float]) -> Path:
    with path.open("a") as handle:
        for command, dataset, seconds in rows:
            handle.write(json.dumps({"command": command, "dataset": dataset, "seconds": seconds, "rc": 0}) + "\n")
    return path


def test_expected_times_take_the_latest_successful_run_then_the_last_from_scratch(tmp_path):
    record = reproduce_times.read_records(_record(tmp_path))["default"]
    expected = reproduce_times.expected_seconds(record, PIPELINE)
    assert {k: (v["seconds"], v["source"]) for k, v in expected.items()} == {
        "dataset_version@eegmat": (4.0, "latest"), "features@eegmat": (60.0, "last_from_scratch"),
        "dp_utility@eegmat": (240.0, "latest"), "dp_aggregate": (30.0, "last_from_scratch"),
        "federated_lira": (50.0, "latest")}
    assert reproduce_times.expected_seconds(None, PIPELINE) == {}


def test_plan_from_dvc_status_or_force(tmp_path):
    wall = _record(tmp_path)
    asked = []

    def status(targets, with_deps=False):
        asked.append((targets, with_deps))
        return ["dp_aggregate", "dataset_version@eegmat", "dp_utility@msu_schizophrenia", "data.dvc"]

    out = tmp_path / "cache" / "plan.json"
    plan = reproduce_times.write_plan(out, 1000.0, "", wall=wall, pipeline=PIPELINE, status=status)
    assert json.loads(out.read_text()) == plan
    # pipeline order, not DVC's; what is no stage (a .dvc file) is left out
    assert plan["stages"] == ["dataset_version@eegmat", "dp_utility@msu_schizophrenia", "dp_aggregate"]
    assert plan["started"] == 1000.0 and plan["pipeline"] == PIPELINE and plan["basis"].startswith("dvc status")
    assert plan["planned_known_s"] == 34.0 and plan["planned_unknown"] == 1  # MSU's dp_utility never recorded
    assert reproduce_times.plan_summary(plan) == ("[reproduce] 3 stages to run (dvc status: the stages changed now), "
                                                  "about 0:34 from recorded stage times (1 never timed)")
    forced = reproduce_times.write_plan(out, 1000.0, "--force", wall=wall, pipeline=PIPELINE, status=status)
    assert forced["stages"] == PIPELINE and len(asked) == 1  # --force asks DVC nothing: every stage runs
    targeted = reproduce_times.write_plan(out, 1000.0, "-f -s dp_utility", wall=wall, pipeline=PIPELINE,
                                          status=status)
    assert targeted["stages"] == ["dp_utility@eegmat", "dp_utility@msu_schizophrenia"]
    reproduce_times.write_plan(out, 1000.0, "dp_aggregate", wall=wall, pipeline=PIPELINE, status=status)
    assert asked[-1] == (["dp_aggregate"], True)  # `dvc repro TARGET` also runs what the target depends on
    # DVC cannot answer: no plan (an old one is removed), so no stage prints a stale line
    assert reproduce_times.write_plan(out, 1000.0, "", wall=wall, pipeline=PIPELINE,
                                      status=lambda *a, **k: None) is None
    assert not out.exists()


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (59.6, "1:00"), (754, "12:34"), (3600, "1:00:00"),
                                               (7322, "2:02:02"), (-3, "0:00")])
def test_clock(seconds, text):
    assert progress.clock(seconds) == text


def _plan(**expected) -> dict:
    return {"started": 1000.0, "stages": ["a", "b", "c", "d"], "pipeline": ["a", "b", "c", "d", "e", "x"],
            "expected_s": expected}


def test_position_and_lines():
    plan = _plan(a=60.0, b=243.0, c=1200.0, d=600.0)
    pos = progress.position(plan, ["a"], "b", now=1000.0 + 724)
    assert (pos.k, pos.n, pos.expected_s, pos.eta_s) == (2, 4, 243.0, 2043.0)
    assert progress.start_line(pos) == ("[reproduce] stage 2 of 4: b · elapsed 12:04 · ETA 34:03 "
                                        "(from recorded stage times)")
    assert progress.end_line(pos, 247.0) == "[reproduce] stage 2 of 4 done in 4:07 (expected 4:03)"
    assert progress.end_line(pos, 12.0, rc=1) == "[reproduce] stage 2 of 4 failed (exit 1) after 0:12 (expected 4:03)"


def test_unknown_times_say_unknown_until_they_are_behind():
    plan = _plan(a=60.0, b=120.0, d=600.0)  # c never recorded
    first = progress.position(plan, [], "a", now=1000.0)
    assert first.eta_s is None and first.known_left_s == 780.0 and first.unknown_left == 1
    assert progress.start_line(first).endswith("ETA unknown (13:00 recorded + 1 stage never timed)")
    assert progress.end_line(progress.position(plan, ["a", "b"], "c", now=1000.0), 30.0) == (
        "[reproduce] stage 3 of 4 done in 0:30 (no recorded time)")
    last = progress.position(plan, ["a", "b", "c"], "d", now=1000.0)
    assert last.eta_s == 600.0  # known again once c is done
    bare = progress.position({"stages": ["a"], "expected_s": {}}, [], "a", now=5.0)
    assert progress.start_line(bare) == "[reproduce] stage 1 of 1: a · ETA unknown (no recorded stage times)"


def test_unplanned_stages_make_n_grow():
    plan = _plan(a=60.0, b=60.0, c=60.0, d=60.0, e=30.0)
    # DVC ran `e` (downstream of a changed output) and reran `a`: each takes no planned slot, so n grows
    pos = progress.position(plan, ["a", "e", "b", "a"], "c", now=1000.0)
    assert (pos.k, pos.n) == (5, 6) and pos.eta_s == 120.0  # c and d are left
    after = progress.position(plan, ["a", "e", "b", "a", "c", "d"], "x", now=1000.0)
    assert (after.k, after.n) == (7, 7) and after.eta_s is None  # x: unplanned and never recorded


def test_announce_reads_the_plan_and_the_stage_log(tmp_path):
    plan = {**_plan(dp_utility=240.0), "stages": ["dataset_version@eegmat", "dp_utility@eegmat", "federated_lira"],
            "pipeline": PIPELINE, "expected_s": {"dataset_version@eegmat": 4.0, "dp_utility@eegmat": 240.0,
                                                 "federated_lira": 50.0}}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    log = _log(tmp_path / "stages.jsonl", ("dataset-version", "eegmat", 4.0), ("datasets", None, 1.0))
    env = {progress.PLAN_ENV: str(plan_file)}
    out = io.StringIO()
    pos = progress.announce_start("dp-utility", "eegmat", str(log), env=env, stream=out)
    assert (pos.k, pos.n, pos.eta_s) == (2, 3, 290.0)  # `datasets` is no stage of the pipeline: not counted
    progress.announce_end(pos, 250.0, 0, stream=out)
    start, end = out.getvalue().splitlines()
    assert start.startswith("[reproduce] stage 2 of 3: dp_utility@eegmat · elapsed ")
    assert start.endswith("ETA 4:50 (from recorded stage times)")
    assert end == "[reproduce] stage 2 of 3 done in 4:10 (expected 4:00)"
    # a single stage run on one dataset logs `federated_lira@eegmmidb`; DVC's name is `federated_lira`
    lira = progress.announce_start("federated-lira", "eegmmidb", str(log), env=env, stream=out)
    assert lira.stage == "federated_lira" and lira.expected_s == 50.0
    # no plan, an unreadable plan, no stage log, or a command outside the pipeline: silence
    silent = io.StringIO()
    assert progress.announce_start("dp-utility", "eegmat", str(log), env={}, stream=silent) is None
    (tmp_path / "bad.json").write_text("{not json")
    bad = {progress.PLAN_ENV: str(tmp_path / "bad.json")}
    assert progress.announce_start("dp-utility", "eegmat", str(log), env=bad, stream=silent) is None
    assert progress.announce_start("dp-utility", "eegmat", None, env=env, stream=silent) is None
    assert progress.announce_start("stages", None, str(log), env=env, stream=silent) is None
    progress.announce_end(None, 1.0, 0, stream=silent)
    assert silent.getvalue() == ""


def test_cli_prints_the_lines_around_a_command(tmp_path, monkeypatch, capsys):
    """`eegprivacy` itself prints both lines to stderr when the Makefile set the plan and the log."""
    from eegprivacy.cli import main

    plan_file, log = tmp_path / "plan.json", tmp_path / "stages.jsonl"
    plan_file.write_text(json.dumps({"started": 0.0, "stages": ["datasets"], "pipeline": ["datasets"],
                                     "expected_s": {"datasets": 2.0}}))
    monkeypatch.setenv("EEGPRIVACY_STAGE_LOG", str(log))
    monkeypatch.setenv(progress.PLAN_ENV, str(plan_file))
    assert main(["datasets", "--json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[reproduce] stage 1 of 1: datasets · elapsed ") and "ETA 0:02" in lines[0]
    assert lines[-1].startswith("[reproduce] stage 1 of 1 done in ") and lines[-1].endswith("(expected 0:02)")
    assert len(log.read_text().splitlines()) == 1
