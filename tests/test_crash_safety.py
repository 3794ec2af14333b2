"""Crash safety of sweeps: a sweep killed with SIGKILL resumes without redoing finished cells, never reads a
half-written file, returns the rows a clean run returns, and the runs the dead process left RUNNING are marked
FAILED and then reopened by the rerun (one parent, one child per cell)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _crash_sweep as victim
import mlflow
import pandas as pd
import pytest

from eegprivacy.tracking import fail_orphaned_runs, required_tags, start_run, tracking_uri
from eegprivacy.tracking.runs import _host_key

REPO = Path(__file__).resolve().parents[1]


def _runs_by_status(client) -> dict[str, list]:
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run.info.status, []).append(run)
    return out


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _kill_mid_sweep(out_dir: Path, marker: Path) -> int:
    """Start the victim sweep in a child process, wait until it hangs inside cell BLOCK_AT, SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests"),
                                                        os.environ.get("PYTHONPATH", "")])}
    output = marker.with_suffix(".log")  # a file, not a pipe: a chatty child can never block on a full pipe
    with open(output, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "_crash_sweep.py"), str(out_dir),
                                 str(marker)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240  # imports alone take a while on a loaded 2-core machine
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"the victim sweep exited early ({proc.returncode}):\n{output.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("the victim sweep never reached the cell it hangs in")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.pid


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_skips_finished_cells_and_fails_the_dead_runs(tmp_path):
    out_dir = tmp_path / "cells"
    victim_pid = _kill_mid_sweep(out_dir, tmp_path / "hanging")
    client = mlflow.MlflowClient(tracking_uri())

    # what the kill left: the finished cells whole, the parent and the hanging cell's child RUNNING
    runner = victim.make_runner(out_dir)
    finished = [c for c in victim.CELLS if runner.cell_path(c).exists()]
    assert finished == victim.CELLS[:victim.BLOCK_AT]
    for cell in finished:
        assert len(pd.read_csv(runner.cell_path(cell))) == 2
    status = _runs_by_status(client)
    assert len(status["RUNNING"]) == 2 and len(status["FINISHED"]) == victim.BLOCK_AT
    assert {r.data.tags["owner_pid"] for r in status["RUNNING"]} == {str(victim_pid)}
    dead_runs = {r.info.run_id for r in status["RUNNING"]}

    # a kill in the middle of a write leaves a partial temporary file; one of a live writer must survive
    hanging = victim.CELLS[victim.BLOCK_AT]
    partial = runner.cell_path(hanging).with_suffix(f".{_host_key()}-{victim_pid}.tmp")
    partial.write_text("study,dataset,config_key,seed,metric,va")
    live = runner.cell_path(victim.CELLS[-1]).with_suffix(f".{_host_key()}-1.tmp")  # pid 1 never exits
    live.write_text("metric,value\n")
    stamps = {c.key: runner.cell_path(c).stat().st_mtime_ns for c in finished}

    computed = []
    resumed = runner.run(victim.CELLS, lambda config, seed: computed.append((config, seed)) or
                         victim.rows(config, seed))

    # finished cells were skipped and left untouched; the rest ran, the partial file was not taken for one
    assert len(computed) == len(victim.CELLS) - victim.BLOCK_AT
    assert {c.key: runner.cell_path(c).stat().st_mtime_ns for c in finished} == stamps
    assert not partial.exists() and live.exists()
    assert pd.read_csv(runner.cell_path(hanging))["value"].notna().all()

    # the rerun marked the dead process's runs FAILED (fail_orphaned_runs) and then reopened them: one parent and
    # one child per cell, all FINISHED, the two reopened ones tagged resumed=1 and no longer carrying a failed_reason
    status = _runs_by_status(client)
    assert set(status) == {"FINISHED"}
    rerun_parent = [r for r in status["FINISHED"] if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in status["FINISHED"] if "mlflow.parentRunId" in r.data.tags]
    assert len(rerun_parent) == 1 and rerun_parent[0].info.run_id in dead_runs
    assert len(children) == len(victim.CELLS) == len({r.info.run_name for r in children})
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {rerun_parent[0].info.run_id}
    assert {r.info.run_id for r in status["FINISHED"] if r.data.tags.get("resumed") == "1"} == dead_runs
    assert not any("failed_reason" in r.data.tags for r in status["FINISHED"])
    assert rerun_parent[0].data.metrics["cells_resumed"] == victim.BLOCK_AT
    assert rerun_parent[0].data.metrics["cells"] == len(victim.CELLS)

    # and the resumed table is exactly a clean run's, bit for bit
    clean = victim.make_runner(tmp_path / "clean").run(victim.CELLS, victim.rows)
    pd.testing.assert_frame_equal(resumed, clean, check_exact=True)
    assert resumed.loc[0, "value"] == victim.rows(victim.CELLS[0].config, victim.CELLS[0].seed)[0]["value"]


def test_fail_orphaned_runs_touches_only_dead_owners_on_this_host():
    client = mlflow.MlflowClient(tracking_uri())
    tags = required_tags(study="a", stage="crash_test", dataset="toy", dataset_version="v1", synthetic=True,
                         seed=None)
    with start_run(study="a", tags=tags):  # creates the experiment; this process owns the run
        pass
    experiment = client.get_experiment_by_name("study-a-dp-release").experiment_id
    me, host = str(os.getpid()), _host_key()
    from eegprivacy.tracking.runs import owner_tags

    mine = owner_tags()
    owners = {
        "alive": mine,
        "dead": {**mine, "owner_pid": str(_dead_pid())},
        "reused_pid": {**mine, "owner_start": "another-boot:12345"},  # our pid, but not the process that ran
        "other_host": {**mine, "owner_host": "0" * 16, "owner_pid": str(_dead_pid())},
        "no_owner": {},
    }
    runs = {name: client.create_run(experiment, tags={**tags, **owner}, run_name=name).info.run_id
            for name, owner in owners.items()}
    assert mine["owner_pid"] == me and mine["owner_host"] == host

    failed = fail_orphaned_runs("a")
    assert sorted(failed) == sorted([runs["dead"], runs["reused_pid"]])
    status = {name: client.get_run(run_id).info.status for name, run_id in runs.items()}
    assert status == {"alive": "RUNNING", "dead": "FAILED", "reused_pid": "FAILED", "other_host": "RUNNING",
                      "no_owner": "RUNNING"}
    assert fail_orphaned_runs("a") == []  # idempotent
    assert fail_orphaned_runs("c") == []  # an experiment that does not exist yet


def test_unreadable_cell_file_is_recomputed_not_trusted(tmp_path):
    runner = victim.make_runner(tmp_path / "cells")
    cells = victim.CELLS[:2]
    runner.run(cells, victim.rows)
    runner.cell_path(cells[0]).write_text("")  # e.g. a file system that lost the data of a renamed file
    runner.cell_path(cells[1]).write_text("unrelated,columns\n1,2\n")
    calls = []
    tidy = runner.run(cells, lambda config, seed: calls.append(seed) or victim.rows(config, seed))
    assert len(calls) == 2 and len(tidy) == 4
    assert not list((tmp_path / "cells").glob("*.tmp"))


def test_config_hashes_and_text_values_survive_the_round_trip(tmp_path):
    """A hex hash made only of digits and ``e`` would read back as a float; resumed rows must keep the text."""
    from eegprivacy.pipeline.sweep import expand_grid

    cells = expand_grid({"code_hash": ["1234567890e12345", "00012"]}, seeds=[0])
    runner = victim.make_runner(tmp_path / "cells")
    first = runner.run(cells, lambda config, seed: [{"metric": "m", "value": 0.1}])
    again = runner.run(cells, lambda config, seed: pytest.fail("every cell is on disk"))
    assert first["code_hash"].tolist() == ["1234567890e12345", "00012"]
    pd.testing.assert_frame_equal(first, again, check_exact=True)
