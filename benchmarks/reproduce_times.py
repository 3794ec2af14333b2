"""``make reproduce`` wall time on the default profile, per stage, without rerunning the pipeline.

Two sources, both read-only:

1. ``benchmarks/reproduce_wall.json``, written by ``make reproduce`` itself (``record`` below): start, end, total
   seconds and exit status, the machine (cores, processor, platform, Python), and per stage the wall time from
   process start and the peak RSS, from the line each ``eegprivacy`` command appends to
   ``$EEGPRIVACY_STAGE_LOG``. Stages DVC found up to date do not run and are not listed. The file keeps one
   record per profile: the latest run at the top level (as before), the latest run of every other profile under
   ``other_profiles``.
2. The MLflow store (``eegprivacy.tracking.runs.tracking_uri()``), read from a snapshot taken through a read-only
   connection: the most recent pipeline run's parent runs, grouped by their ``dvc_stage`` tag. Runs miss what a
   stage does before it opens its first run (imports, loading; the features stage opens its run after computing)
   and stages that log none (``dataset_version``), so this total is a lower bound; it is there for past runs.

Before ``dvc repro``, ``make reproduce`` also turns (1) into a *plan* (``plan`` below): the stages DVC is expected to
run and each one's recorded seconds, from which every stage prints one overall progress line as it starts and ends
(stage k of n, elapsed, ETA; ``eegprivacy.reproduce_progress``).

A pipeline run ("batch") is found by walking parent runs from the newest back: DVC runs each stage once, in one
process, so the batch ends where a stage already seen reappears, where a stage's runs come from another process
(``owner_pid`` tag), or after an idle gap of more than an hour.

The benchmark row (``run``) never times anything: ``make bench`` does not run the pipeline, so the row reports a
*stored record* and says so (when, on which machine, from scratch or not, which profile). Two-core machines differ
2.5-4x in speed, so the 2,700-s target (issue 37; stretch goal 1,800 s) is judged (``passed`` True/False) only on
a record from scratch, every stage run, made on a machine like this one (same core count and processor model);
otherwise ``passed`` is None and ``note`` says why. The machine-independent form of the target is a ratio measured
side by side: the default profile's from-scratch wall time over another profile's, reported only when both records
are from scratch, on the same machine and from the same sitting (started within 24 h of each other).

    python benchmarks/reproduce_times.py                 # breakdown of the latest batch (and the Makefile record)
    python benchmarks/reproduce_times.py --batches 3     # the three latest batches
    python benchmarks/reproduce_times.py record ...      # what `make reproduce` calls when it ends
    python benchmarks/reproduce_times.py plan ...        # and before `dvc repro`: each stage's progress line
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

# The stage a log line names, and DVC's name for it: one definition, shared with the stages' own progress line.
from eegprivacy.atomic import write_text_atomic
from eegprivacy.reproduce_progress import clock, dvc_name, stage_label

NAME = "reproduce"
DESCRIPTION = ("make reproduce wall time on the default profile (target <= 2700 s on 2 cores, stretch 1800 s), per "
               "stage: a stored record, judged only when from scratch on a machine like this one")
TARGET_S = 2700.0  # issue 37: 45 min on 2 cores from scratch (stretch goal STRETCH_S)
STRETCH_S = 1800.0
HERE = Path(__file__).resolve().parent
WALL_PATH = HERE / "reproduce_wall.json"
MAX_GAP_S = 3600.0
JUDGED_PROFILE = "default"  # the profile the 2,700-s target and the side-by-side ratio's numerator refer to
REFERENCE_PROFILE = "reduced"  # the "today's reduced default": the ratio's denominator when recorded
RATIO_TARGET_MAX = 0.5  # issue 22: the default takes at most 0.5x the reduced profile's wall time
SAME_SITTING_S = 24 * 3600.0  # two records started at most this far apart count as one sitting


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def cpu_model() -> str | None:
    """The processor's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere), None if unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def this_machine() -> dict:
    """What a record says about the machine it ran on. Seconds compare only between machines with the same core
    count and processor model (``same_machine``); the platform string (kernel build included, which changes
    between boots of one kind of virtual machine) and Python are kept as information."""
    return {"cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "platform": platform.platform(),
            "python": platform.python_version()}


# ---- the Makefile's own record ------------------------------------------------------------------------------

def read_stage_log(path: str | Path) -> list[dict]:
    """The lines ``eegprivacy`` appended during one ``make reproduce`` (see ``eegprivacy.cli``)."""
    path = Path(path)
    if not path.exists():
        return []
    stages = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            stages.append({"stage": stage_label(row["command"], row.get("dataset")), **row})
    return stages


def record(start: float, end: float, rc: int, stage_log: str | Path | None, out: str | Path,
           profile: str = "default", cached_files: int | None = None, pipeline: list[str] | None = None) -> dict:
    """Write ``out`` for one ``make reproduce``: total wall time and the per-stage lines, in the order they ran.

    ``cached_files``: files in the sweep caches (``data/sweeps``, ``data/embedding_audit``, ``data/optuna``) when
    the run started. A run is *from scratch* when that was 0, every stage of ``pipeline`` ran and all exited 0:
    only such a run measures the target. A later run of the same profile that is not one keeps the last one under
    ``last_from_scratch``, so an incremental ``make reproduce`` never hides the full-run figure.

    ``profile`` is a free label (the Makefile passes ``default`` or ``full``). The file keeps one record per
    profile, so a side-by-side ratio between two profiles survives the second run: this run's record at the top
    level, the latest record of every other profile under ``other_profiles`` (see ``read_records``). Returns what
    was written. The machine (``this_machine``) is stored with the record, because seconds from another machine
    are not a measurement of this one."""
    stages = read_stage_log(stage_log) if stage_log else []
    if pipeline is not None:  # a single-dataset stage (`federated_lira`) logs `federated_lira@eegmmidb`: DVC's name
        known = set(pipeline)
        for s in stages:
            s["stage"] = dvc_name(s["stage"], known)
    stage_s = sum(s["seconds"] for s in stages)
    peaks = [max(s.get("peak_rss_mb") or 0, s.get("peak_child_rss_mb") or 0) for s in stages]
    ran = {s["stage"] for s in stages}
    every_stage = pipeline is not None and set(pipeline) <= ran
    doc = {"started": _iso(start), "ended": _iso(end), "total_s": round(end - start, 1), "rc": int(rc),
           "profile": profile, **this_machine(), "cached_files_at_start": cached_files,
           "every_stage_ran": every_stage,
           "from_scratch": bool(every_stage and cached_files == 0 and int(rc) == 0),
           "stages_s": round(stage_s, 1),
           "outside_stages_s": round(end - start - stage_s, 1),  # DVC's own hashing and checks, venv excluded
           "max_stage_peak_rss_mb": max(peaks) if peaks else None,
           "stages": [{k: s[k] for k in ("stage", "seconds", "cpu_s", "rc", "peak_rss_mb", "peak_child_rss_mb")
                       if k in s}
                      for s in stages]}
    records = read_records(out)
    previous = records.pop(profile, None)
    if not doc["from_scratch"] and previous:
        kept = from_scratch_record(previous)
        if kept:
            doc["last_from_scratch"] = {k: v for k, v in kept.items() if k != "last_from_scratch"}
    doc["other_profiles"] = records
    write_text_atomic(out, json.dumps(doc, indent=2) + "\n")
    return doc


def read_wall(path: str | Path = WALL_PATH) -> dict | None:
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def read_records(path: str | Path = WALL_PATH) -> dict[str, dict]:
    """The latest record of each profile, by profile name; ``{}`` when there is no file.

    Reads both shapes: a file from before per-profile records (one record, its profile at the top level) and
    the current one (``other_profiles`` beside the latest record)."""
    doc = read_wall(path)
    if not doc:
        return {}
    records = dict(doc.get("other_profiles") or {})
    records[doc.get("profile", "default")] = {k: v for k, v in doc.items() if k != "other_profiles"}
    return records


def from_scratch_record(record: dict | None) -> dict | None:
    """The record itself when it ran from scratch, else the from-scratch run it kept; None when neither."""
    if not record:
        return None
    return record if record.get("from_scratch") else record.get("last_from_scratch")


# ---- the plan behind each stage's progress line ---------------------------------------------------------------

def expected_seconds(record: dict | None, pipeline: list[str] | None = None) -> dict[str, dict]:
    """Per DVC stage, the seconds its progress line expects and where they come from (``latest`` or
    ``last_from_scratch``); stages with neither are absent, and their ETA says "unknown".

    The stage's latest successful run in ``record`` (the profile's latest ``make reproduce``) comes first: it ran
    on the code and the cell caches closest to this run. A stage that run skipped takes its time from the run from
    scratch the record kept. A failed run's seconds are left out: they time a crash, not the stage."""
    out: dict[str, dict] = {}
    record = record or {}
    for source, rec in (("last_from_scratch", record.get("last_from_scratch")), ("latest", record)):
        for s in (rec or {}).get("stages") or []:
            if s.get("seconds") is not None and (s.get("rc") or 0) == 0:
                out[dvc_name(s["stage"], pipeline)] = {"seconds": s["seconds"], "source": source}
    return out


def parse_repro_args(repro_args: str | list[str] | None) -> dict:
    """What the plan needs from ``REPRO_ARGS``: ``--force``, ``--single-item`` and the targets (every word that is
    not a flag; ``dvc repro``'s options take no values)."""
    import shlex

    words = shlex.split(repro_args) if isinstance(repro_args, str) else list(repro_args or [])
    return {"force": any(w in ("-f", "--force") for w in words),
            "single": any(w in ("-s", "--single-item") for w in words),
            "targets": [w.removeprefix("dvc.yaml:") for w in words if not w.startswith("-")]}


def stages_named(pipeline: list[str], targets: list[str]) -> list[str]:
    """The stages of ``pipeline`` that ``targets`` name (``dp_utility`` names every ``dp_utility@...``)."""
    return [name for name in pipeline if any(name == t or name.startswith(f"{t}@") for t in targets)]


def _dvc(*args: str) -> str | None:
    """stdout of ``dvc ARGS`` run in the checkout; None when DVC cannot answer."""
    import shutil
    import subprocess

    dvc = shutil.which("dvc") or str(Path(sys.executable).parent / "dvc")
    try:
        return subprocess.run([dvc, *args], capture_output=True, text=True, check=True, timeout=120,
                              cwd=HERE.parent).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def dvc_status(targets: list[str] | None = None, with_deps: bool = False) -> list[str] | None:
    """Names of the stages ``dvc status`` reports changed (those ``dvc repro`` will run first); None on failure."""
    out = _dvc("status", "--json", *(["--with-deps"] if with_deps and targets else []), *(targets or []))
    if out is None:
        return None
    try:
        return list(json.loads(out or "{}"))
    except ValueError:
        return None


def planned_stages(repro_args: str | list[str] | None, pipeline: list[str], status=dvc_status
                   ) -> tuple[list[str], str] | None:
    """The stages ``dvc repro REPRO_ARGS`` is expected to run, in ``pipeline`` order, and how that was decided;
    None when DVC cannot say.

    ``--force`` runs every stage (of the targets, when named). Otherwise DVC runs what ``dvc status`` reports
    changed, plus whatever sits downstream of a stage whose outputs change, which no one can know before it runs:
    those stages make n grow as they start (``eegprivacy.reproduce_progress``). So do the values ``dvc exp run -S``
    writes into params/ (PROFILE=full), which ``dvc status`` does not see beforehand."""
    args = parse_repro_args(repro_args)
    targets = args["targets"]
    if args["force"]:
        return (stages_named(pipeline, targets) if targets else list(pipeline)), "--force: every stage" + (
            " of the targets" if targets else "")
    changed = status(targets, with_deps=not args["single"])
    if changed is None:
        return None
    changed_set = {dvc_name(name, pipeline) for name in changed}
    return [name for name in pipeline if name in changed_set], "dvc status: the stages changed now"


def build_plan(start: float, planned: list[str], basis: str, pipeline: list[str], record: dict | None,
               profile: str = "default") -> dict:
    """The plan each stage's progress line reads (``eegprivacy.reproduce_progress``): when ``make`` started, the
    stages planned, every stage's name and expected seconds from ``record`` (see ``expected_seconds``)."""
    expected = expected_seconds(record, pipeline)
    known = [expected[name]["seconds"] for name in planned if name in expected]
    return {"started": start, "started_iso": _iso(start), "profile": profile, "basis": basis, "stages": planned,
            "pipeline": list(pipeline), "expected_s": {k: v["seconds"] for k, v in expected.items()},
            "expected_from": {k: v["source"] for k, v in expected.items()},
            "planned_known_s": round(sum(known), 1), "planned_unknown": len(planned) - len(known)}


def plan_summary(plan: dict) -> str:
    """One line for the top of ``make reproduce``: how many stages, how long the recorded ones took."""
    n, unknown = len(plan["stages"]), plan["planned_unknown"]
    expected = ("no recorded stage times" if unknown == n else
                f"about {clock(plan['planned_known_s'])} from recorded stage times"
                + (f" ({unknown} never timed)" if unknown else ""))
    return f"[reproduce] {n} stage{'s' if n != 1 else ''} to run ({plan['basis']}), {expected}"


def write_plan(out: str | Path, start: float, repro_args: str | None = None, profile: str = "default",
               wall: str | Path = WALL_PATH, pipeline: list[str] | None = None, status=dvc_status) -> dict | None:
    """Write the plan to ``out`` (atomically) and return it; when DVC cannot list the stages, remove any old plan
    and return None, so no stage prints a progress line from a stale one."""
    out = Path(out)
    pipeline = pipeline_stages() if pipeline is None else pipeline
    found = planned_stages(repro_args, pipeline, status=status) if pipeline else None
    if found is None:
        out.unlink(missing_ok=True)
        return None
    plan = build_plan(start, *found, pipeline, read_records(wall).get(profile), profile=profile)
    write_text_atomic(out, json.dumps(plan, indent=2) + "\n")
    return plan


# ---- the MLflow store ---------------------------------------------------------------------------------------

def store_path(uri: str | None = None) -> Path | None:
    """The sqlite file behind the tracking URI, or None for any other kind of store."""
    if uri is None:
        from eegprivacy.tracking.runs import tracking_uri

        uri = tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///"))


@contextmanager
def snapshot(path: str | Path):
    """A private copy of the store, taken through a read-only connection (the live store is never written, and
    the copy is consistent even while a pipeline writes to it)."""
    with tempfile.TemporaryDirectory(prefix="eegprivacy-mlflow-") as tmp:
        source = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        copy = sqlite3.connect(Path(tmp) / "mlflow.db")
        try:
            source.backup(copy)
        finally:
            source.close()
        try:
            yield copy
        finally:
            copy.close()


_PARENTS = """
select r.run_uuid, stage.value, r.start_time, r.end_time, r.status, pid.value, commit_.value,
       (select count(*) from tags c where c.key = 'mlflow.parentRunId' and c.value = r.run_uuid)
from runs r
join tags stage on stage.run_uuid = r.run_uuid and stage.key = 'dvc_stage'
left join tags pid on pid.run_uuid = r.run_uuid and pid.key = 'owner_pid'
left join tags commit_ on commit_.run_uuid = r.run_uuid and commit_.key = 'git_commit'
where r.lifecycle_stage = 'active' and stage.value != 'manual'
  and not exists (select 1 from tags p where p.run_uuid = r.run_uuid and p.key = 'mlflow.parentRunId')
order by r.start_time
"""


def parent_runs(conn: sqlite3.Connection) -> list[dict]:
    """Top-level runs of DVC stages (children are counted, not listed), oldest first; times in epoch seconds."""
    return [{"stage": stage, "start": start / 1000, "end": None if end is None else end / 1000, "status": status,
             "owner_pid": pid, "git_commit": commit, "children": int(children)}
            for _, stage, start, end, status, pid, commit, children in conn.execute(_PARENTS)]


def batches(runs: list[dict], max_gap_s: float = MAX_GAP_S) -> list[list[dict]]:
    """Split parent runs into pipeline runs, newest first (see the module docstring)."""
    out: list[list[dict]] = []
    current: list[dict] = []
    closed: set[str] = set()
    for run in sorted(runs, key=lambda r: r["start"], reverse=True):
        if current:
            last = current[-1]
            same_process = (run["stage"] == last["stage"] and
                            (run["owner_pid"] is None or last["owner_pid"] is None or
                             run["owner_pid"] == last["owner_pid"]))
            if not same_process:
                closed.add(last["stage"])
            idle = last["start"] - (run["end"] or run["start"]) > max_gap_s
            if idle or (not same_process and run["stage"] in closed):
                out.append(current)
                current, closed = [], set()
        current.append(run)
    if current:
        out.append(current)
    return [sorted(b, key=lambda r: r["start"]) for b in out]


def breakdown(batch: list[dict]) -> dict:
    """Per stage, in the order they ran: parent runs, child runs, summed run time, first start to last end."""
    stages: dict[str, dict] = {}
    for run in batch:
        entry = stages.setdefault(run["stage"], {"stage": run["stage"], "parent_runs": 0, "child_runs": 0,
                                                 "runs_s": 0.0, "start": run["start"], "end": run["start"],
                                                 "status": "FINISHED"})
        entry["parent_runs"] += 1
        entry["child_runs"] += run["children"]
        if run["end"] is not None:
            entry["runs_s"] += run["end"] - run["start"]
            entry["end"] = max(entry["end"], run["end"])
        if run["status"] != "FINISHED" and entry["status"] == "FINISHED":
            entry["status"] = run["status"]  # RUNNING, FAILED or KILLED: the stage did not finish cleanly
    rows = []
    for entry in stages.values():
        rows.append({**entry, "runs_s": round(entry["runs_s"], 1), "span_s": round(entry["end"] - entry["start"], 1),
                     "start": _iso(entry["start"]), "end": _iso(entry["end"])})
    start = min(r["start"] for r in batch)
    end = max(r["end"] or r["start"] for r in batch)
    return {"start": _iso(start), "end": _iso(end), "wall_s": round(end - start, 1),
            "runs_s": round(sum(r["runs_s"] for r in rows), 1),
            "complete": all(r["status"] == "FINISHED" for r in batch),
            "git_commits": sorted({(r["git_commit"] or "")[:12] for r in batch}), "stages": rows}


def full_run_estimate(breakdowns: list[dict]) -> dict:
    """What a run that computes every cell would take, from the store's history (breakdowns newest first).

    A resumed pipeline reuses finished sweep cells and opens no child run for them, so the latest batch can be
    far shorter than a fresh ``make reproduce``. Per stage this takes the batches where it opened the most child
    runs (it computed everything) and reports the latest and the fastest of their spans.
    """
    seen: dict[str, list[dict]] = {}
    for batch in breakdowns:
        for stage in batch["stages"]:
            seen.setdefault(stage["stage"], []).append(stage)
    rows = []
    for name, entries in seen.items():
        finished = [s for s in entries if s["status"] == "FINISHED"] or entries
        most = max(s["child_runs"] for s in finished)
        full = [s for s in finished if s["child_runs"] == most]
        rows.append({"stage": name, "child_runs": most, "latest_s": full[0]["span_s"], "latest_start": full[0]["start"],
                     "fastest_s": min(s["span_s"] for s in full)})
    return {"latest_s": round(sum(r["latest_s"] for r in rows), 1),
            "fastest_s": round(sum(r["fastest_s"] for r in rows), 1), "stages": rows,
            "note": "sum over stages of their run spans when they last computed every cell; excludes process "
                    "start-up, loading before a stage's first run (the features stage computes before its run "
                    "opens) and stages without runs (dataset_version): a lower bound"}


def mlflow_breakdowns(n: int = 1, uri: str | None = None) -> dict:
    """The ``n`` latest pipeline runs in the store, newest first, and a full-run estimate; or why there are none."""
    path = store_path(uri)
    if path is None:
        return {"error": "the tracking store is not a sqlite file; nothing to read"}
    if not path.exists():
        return {"error": f"no MLflow store at {path}"}
    with snapshot(path) as conn:
        runs = parent_runs(conn)
    found = [breakdown(b) for b in batches(runs)]
    if not found:
        return {"error": f"no runs of DVC stages in {path}"}
    return {"store": str(path), "batches_found": len(found), "batches": found[:n],
            "full_run_estimate": full_run_estimate(found)}


# ---- the benchmark ------------------------------------------------------------------------------------------

def pipeline_stages() -> list[str] | None:
    """Every stage of dvc.yaml (foreach expanded), from ``dvc stage list``; None when DVC cannot say."""
    out = _dvc("stage", "list", "--name-only")
    if out is None:
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def recorded_on(record: dict) -> dict:
    """The machine a record ran on; all but ``cpu_count`` are None in records from before they were stored."""
    return {k: record.get(k) for k in ("cpu_count", "cpu_model", "platform", "python")}


def same_machine(a: dict, b: dict) -> bool | None:
    """Same core count and processor model; None when either side does not say."""
    keys = ("cpu_count", "cpu_model")
    if any(side.get(k) is None for side in (a, b) for k in keys):
        return None
    return all(a[k] == b[k] for k in keys)


def _machine_text(machine: dict) -> str:
    return f"{machine.get('cpu_count')} cores, {machine.get('cpu_model') or 'processor not recorded'}"


def judge(record: dict | None, here: dict, target_s: float = TARGET_S) -> tuple[bool | None, str]:
    """(passed, note) for a stored record against ``target_s``.

    True/False only for a record from scratch (no cached cell, every stage ran, exit 0) made on a machine like
    ``here``: two-core machines differ 2.5-4x, so seconds from another one say nothing about this one."""
    if record is None:
        return None, "no stored record: run `make reproduce-scratch` once on this machine"
    if not record.get("from_scratch"):
        return None, (f"not judged: the stored record is not from scratch (cached files at start "
                      f"{record.get('cached_files_at_start')}, every stage ran {record.get('every_stage_ran')}, "
                      f"rc {record.get('rc')}): cached cells say nothing about a full run")
    match = same_machine(recorded_on(record), here)
    if match is None:
        return None, (f"not judged: the record does not say which processor it ran on ({_machine_text(record)}), so "
                      f"it cannot be matched to this machine ({_machine_text(here)}); rerun "
                      f"`make reproduce-scratch` here")
    if not match:
        return None, (f"not judged: recorded on another machine ({_machine_text(record)}) than this one "
                      f"({_machine_text(here)}); seconds are not comparable across machines, the side-by-side "
                      f"ratio is")
    return record["total_s"] <= target_s, f"from scratch on this machine: {record['total_s']:g} s vs {target_s:g} s"


def _started(record: dict) -> datetime:
    return datetime.fromisoformat(record["started"])


def side_by_side(records: dict[str, dict], profile: str = JUDGED_PROFILE,
                 same_sitting_s: float = SAME_SITTING_S) -> dict[str, dict]:
    """Per other profile: ``ratio`` = ``profile``'s from-scratch wall time / that profile's, or None and why.

    A ratio cancels the machine's speed only when both runs saw the same machine in the same state: both from
    scratch, same core count and processor, started within ``same_sitting_s`` of each other."""
    mine = from_scratch_record(records.get(profile))
    out = {}
    for other_name, other_record in records.items():
        if other_name == profile:
            continue
        other = from_scratch_record(other_record)
        ratio, note = None, None
        if mine is None or other is None:
            missing = [name for name, rec in ((profile, mine), (other_name, other)) if rec is None]
            note = f"no from-scratch record of {' and '.join(repr(m) for m in missing)}"
        elif not same_machine(recorded_on(mine), recorded_on(other)):
            note = (f"different or unrecorded machines ({_machine_text(mine)} vs {_machine_text(other)}): "
                    f"not side by side")
        elif abs((_started(mine) - _started(other)).total_seconds()) > same_sitting_s:
            note = (f"not the same sitting: started {mine['started']} and {other['started']}, more than "
                    f"{same_sitting_s / 3600:g} h apart")
        else:
            ratio = round(mine["total_s"] / other["total_s"], 3)
            note = f"{profile} {mine['total_s']:g} s / {other_name} {other['total_s']:g} s, same machine and sitting"
        out[other_name] = {"ratio": ratio, "note": note,
                           f"{profile}_started": None if mine is None else mine["started"],
                           f"{other_name}_started": None if other is None else other["started"]}
    return out


def _without_nested(record: dict | None) -> dict | None:
    """A record without the records it keeps (they are reported on their own)."""
    return None if record is None else {k: v for k, v in record.items()
                                        if k not in ("last_from_scratch", "other_profiles")}


def _describe(record: dict | None, here: dict) -> dict:
    """What the row says about the stored record it reports: where from, when, on which machine, how complete."""
    if record is None:
        return {"project_s": None, "source": "no stored record", "recorded_started": None, "recorded_ended": None,
                "recorded_on": None, "same_machine": None, "from_scratch": None, "every_stage_ran": None,
                "complete": None, "max_stage_peak_rss_mb": None}
    return {"project_s": record["total_s"],
            "source": f"stored record of `make reproduce` (benchmarks/{WALL_PATH.name}), not measured by this "
                      f"`make bench` run",
            "recorded_started": record.get("started"), "recorded_ended": record.get("ended"),
            "recorded_on": recorded_on(record), "same_machine": same_machine(recorded_on(record), here),
            "from_scratch": bool(record.get("from_scratch")), "every_stage_ran": record.get("every_stage_ran"),
            "complete": record.get("rc") == 0, "max_stage_peak_rss_mb": record.get("max_stage_peak_rss_mb")}


def stored_row(records: dict[str, dict], here: dict, profile: str = JUDGED_PROFILE,
               reference_profile: str = REFERENCE_PROFILE) -> dict:
    """The benchmark row for ``profile`` from stored records alone (nothing is timed here).

    Judges the profile's from-scratch record (its latest record when none is from scratch) with ``judge``, and
    reports the side-by-side ratio to ``reference_profile`` as ``ratio`` (``side_by_side`` lists every profile)."""
    latest = records.get(profile)
    scratch = from_scratch_record(latest)
    record = scratch or latest
    passed, note = judge(record, here)
    ratios = side_by_side(records, profile)
    reference = ratios.get(reference_profile)
    ratio = None if reference is None else reference["ratio"]
    ratio_note = (reference["note"] if reference is not None else
                  f"no record of the reference profile {reference_profile!r} (`record --profile {reference_profile}`)")
    return {"baseline_s": None, "ratio": ratio, "target_ratio": None, "target_s": TARGET_S, "passed": passed,
            "stretch_s": STRETCH_S,
            "stretch_met": None if passed is None else bool(passed and record["total_s"] <= STRETCH_S),
            "note": note, "measured_by_this_run": False, "profile": profile, **_describe(record, here),
            "this_machine": here, "ratio_reference_profile": reference_profile, "ratio_note": ratio_note,
            "ratio_target_max": RATIO_TARGET_MAX, "ratio_met": None if ratio is None else ratio <= RATIO_TARGET_MAX,
            "side_by_side": ratios, "make_reproduce": _without_nested(record),
            "make_reproduce_was_full_run": scratch is not None,
            "latest_make_reproduce": None if latest is None or latest is record else _without_nested(latest)}


def run(quick: bool = False) -> dict:
    """The stored record of the default profile, judged only where honest; the MLflow estimate beside it."""
    row = stored_row(read_records(WALL_PATH), this_machine())
    store = mlflow_breakdowns(1)
    estimate = store.get("full_run_estimate")
    if row["make_reproduce"] is None and estimate is not None:  # a lower bound from past runs, never judged
        row.update(project_s=estimate["latest_s"], source="MLflow store: full-run estimate of past runs (a lower "
                   "bound), not measured by this `make bench` run", note="not judged: no `make reproduce` record")
    peak = row["max_stage_peak_rss_mb"]
    row["stages_within_8gb"] = None if peak is None else peak <= 8192
    row["pipeline_stages"] = pipeline_stages()
    row["mlflow"] = {**{k: v for k, v in store.items() if k != "batches"},
                     "latest_batch": (store.get("batches") or [None])[0]}
    return row


def _print(doc: dict) -> None:
    for i, batch in enumerate(doc.get("batches", [])):
        state = "complete" if batch["complete"] else "INCOMPLETE (runs not FINISHED)"
        print(f"batch {i}: {batch['start']} -> {batch['end']}  wall {batch['wall_s']:.0f} s, in runs "
              f"{batch['runs_s']:.0f} s, {state}, commits {', '.join(batch['git_commits'])}")
        for s in batch["stages"]:
            print(f"  {s['stage']:<32} runs {s['runs_s']:>8.1f} s  span {s['span_s']:>8.1f} s  "
                  f"{s['parent_runs']:>3} parent / {s['child_runs']:>5} child runs  {s['status']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="write benchmarks/reproduce_wall.json (called by `make reproduce`)")
    rec.add_argument("--start", type=float, required=True, help="epoch seconds")
    rec.add_argument("--end", type=float, default=None, help="epoch seconds (default: now)")
    rec.add_argument("--rc", type=int, default=0, help="exit status of `dvc repro`")
    rec.add_argument("--stage-log", default=None, help="the $EEGPRIVACY_STAGE_LOG file of that run")
    rec.add_argument("--out", default=str(WALL_PATH))
    rec.add_argument("--profile", default="default", help="params profile of the run (Makefile PROFILE)")
    rec.add_argument("--cached-files", type=int, default=None,
                     help="files in the sweep caches when the run started (0 = from scratch)")
    plan = sub.add_parser("plan", help="write the plan behind each stage's progress line (called by `make reproduce`)")
    plan.add_argument("--start", type=float, required=True, help="epoch seconds `make reproduce` started")
    plan.add_argument("--out", required=True, help="the plan file ($EEGPRIVACY_REPRODUCE_PLAN)")
    plan.add_argument("--profile", default="default", help="params profile of the run: whose record gives the times")
    plan.add_argument("--repro-args", default="", help="the Makefile's REPRO_ARGS (pass as --repro-args=...)")
    plan.add_argument("--wall", default=str(WALL_PATH), help="the stored record to take stage times from")
    parser.add_argument("--batches", type=int, default=1, help="how many of the latest pipeline runs to show")
    parser.add_argument("--uri", default=None, help="tracking URI (default: the project's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "record":
        doc = record(args.start, args.end if args.end is not None else time.time(), args.rc, args.stage_log, args.out,
                     profile=args.profile, cached_files=args.cached_files, pipeline=pipeline_stages())
        kind = "from scratch" if doc["from_scratch"] else "incremental or partial"
        print(f"make reproduce ({doc['profile']} profile, {kind}): {doc['total_s']:.0f} s wall "
              f"({len(doc['stages'])} stages ran) -> {args.out}")
        return 0
    if args.command == "plan":
        found = write_plan(args.out, args.start, args.repro_args, profile=args.profile, wall=args.wall)
        print(plan_summary(found) if found else "[reproduce] DVC could not list the stages: no overall progress line")
        return 0
    doc = mlflow_breakdowns(args.batches, args.uri)
    wall = read_wall()
    if args.json:
        print(json.dumps({"make_reproduce": wall, "mlflow": doc}, indent=2))
        return 0
    if wall:
        print(f"make reproduce record ({wall.get('profile', 'default')} profile, "
              f"{'from scratch' if wall.get('from_scratch') else 'incremental or partial'}, "
              f"{_machine_text(recorded_on(wall))}): {wall['started']} -> {wall['ended']}, {wall['total_s']:.0f} s, "
              f"rc {wall['rc']}")
        for s in wall["stages"]:
            cores = f"  {s['cpu_s'] / s['seconds']:.2f} cores busy" if s.get("cpu_s") and s["seconds"] else ""
            print(f"  {s['stage']:<32} {s['seconds']:>8.1f} s  peak RSS {s.get('peak_rss_mb')} MB{cores}")
        for name, other in (wall.get("other_profiles") or {}).items():
            kept = from_scratch_record(other)
            print(f"  other profile {name}: latest {other['started']}, {other['total_s']:.0f} s"
                  + (f"; from scratch {kept['started']}, {kept['total_s']:.0f} s" if kept else ""))
    if "error" in doc:
        print(doc["error"])
        return 0
    _print(doc)
    est = doc["full_run_estimate"]
    print(f"full-run estimate (every stage as when it last computed every cell): {est['latest_s']:.0f} s "
          f"(fastest seen {est['fastest_s']:.0f} s; target {TARGET_S:.0f} s; a lower bound)")
    for r in est["stages"]:
        print(f"  {r['stage']:<32} {r['latest_s']:>8.1f} s  (fastest {r['fastest_s']:.1f} s, "
              f"{r['child_runs']} child runs, {r['latest_start']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
