"""``make reproduce`` wall time on the default profile, per stage, without rerunning the pipeline.

Two sources, both read-only:

1. ``benchmarks/reproduce_wall.json``, written by ``make reproduce`` itself (``record`` below): start, end, total
   seconds and exit status, and per stage the wall time from process start and the peak RSS, from the line each
   ``eegprivacy`` command appends to ``$EEGPRIVACY_STAGE_LOG``. Stages DVC found up to date do not run and are
   not listed. The target applies to it when that run executed every stage of ``dvc.yaml``; after an
   incremental run (cached stages skipped) the MLflow full-run estimate below stands in.
2. The MLflow store (``eegprivacy.tracking.runs.tracking_uri()``), read from a snapshot taken through a read-only
   connection: the most recent pipeline run's parent runs, grouped by their ``dvc_stage`` tag. Runs miss what a
   stage does before it opens its first run (imports, loading; the features stage opens its run after computing)
   and stages that log none (``dataset_version``), so this total is a lower bound; it is there for past runs.

A pipeline run ("batch") is found by walking parent runs from the newest back: DVC runs each stage once, in one
process, so the batch ends where a stage already seen reappears, where a stage's runs come from another process
(``owner_pid`` tag), or after an idle gap of more than an hour.

    python benchmarks/reproduce_times.py                 # breakdown of the latest batch (and the Makefile record)
    python benchmarks/reproduce_times.py --batches 3     # the three latest batches
    python benchmarks/reproduce_times.py record ...      # what `make reproduce` calls
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

NAME = "reproduce"
DESCRIPTION = "make reproduce wall time on the default profile (target <= 1800 s on 2 cores), per stage"
TARGET_S = 1800.0
HERE = Path(__file__).resolve().parent
WALL_PATH = HERE / "reproduce_wall.json"
MAX_GAP_S = 3600.0


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def stage_label(command: str, dataset: str | None) -> str:
    """The ``dvc_stage`` tag a command's runs carry (``version`` is the ``dataset_version`` stage)."""
    name = "dataset_version" if command == "version" else command.replace("-", "_")
    return f"{name}@{dataset}" if dataset else name


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
    only such a run measures the target. A later run that is not one keeps the last one under
    ``last_from_scratch``, so an incremental ``make reproduce`` never hides the full-run figure."""
    stages = read_stage_log(stage_log) if stage_log else []
    if pipeline is not None:  # a single-dataset stage (`table_attacks`) logs `table_attacks@eegmat`: use DVC's name
        known = set(pipeline)
        for s in stages:
            base = s["stage"].split("@")[0]
            if s["stage"] not in known and base in known:
                s["stage"] = base
    stage_s = sum(s["seconds"] for s in stages)
    peaks = [max(s.get("peak_rss_mb") or 0, s.get("peak_child_rss_mb") or 0) for s in stages]
    ran = {s["stage"] for s in stages}
    every_stage = pipeline is not None and set(pipeline) <= ran
    doc = {"started": _iso(start), "ended": _iso(end), "total_s": round(end - start, 1), "rc": int(rc),
           "profile": profile, "cpu_count": os.cpu_count(), "cached_files_at_start": cached_files,
           "every_stage_ran": every_stage,
           "from_scratch": bool(every_stage and cached_files == 0 and int(rc) == 0),
           "stages_s": round(stage_s, 1),
           "outside_stages_s": round(end - start - stage_s, 1),  # DVC's own hashing and checks, venv excluded
           "max_stage_peak_rss_mb": max(peaks) if peaks else None,
           "stages": [{k: s[k] for k in ("stage", "seconds", "cpu_s", "rc", "peak_rss_mb", "peak_child_rss_mb")
                       if k in s}
                      for s in stages]}
    previous = read_wall(out)
    if not doc["from_scratch"] and previous:
        kept = previous if previous.get("from_scratch") else previous.get("last_from_scratch")
        if kept and kept.get("profile", "default") == profile:
            doc["last_from_scratch"] = {k: v for k, v in kept.items() if k != "last_from_scratch"}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return doc


def read_wall(path: str | Path = WALL_PATH) -> dict | None:
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


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
    import shutil
    import subprocess

    dvc = shutil.which("dvc") or str(Path(sys.executable).parent / "dvc")
    try:
        out = subprocess.run([dvc, "stage", "list", "--name-only"], capture_output=True, text=True, check=True,
                             timeout=120, cwd=Path(__file__).resolve().parents[1]).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def run(quick: bool = False) -> dict:
    """The Makefile's record when there is one; else the MLflow full-run estimate (a lower bound)."""
    latest_wall = read_wall()
    store = mlflow_breakdowns(1)
    latest = (store.get("batches") or [None])[0]
    estimate = store.get("full_run_estimate")
    pipeline = pipeline_stages()
    wall = latest_wall if (latest_wall or {}).get("from_scratch") else (latest_wall or {}).get("last_from_scratch")
    full_wall = wall is not None
    if full_wall:
        total, source, complete = (wall["total_s"], "make reproduce from scratch (benchmarks/reproduce_wall.json)",
                                   wall["rc"] == 0)
    elif estimate is not None:  # no from-scratch record: cached cells say nothing about a full run
        total, source, complete = estimate["latest_s"], "MLflow: full-run estimate (a lower bound)", True
    else:
        total, source, complete = None, "no record: run `make reproduce-scratch` once", False
    peak = wall.get("max_stage_peak_rss_mb") if wall else None
    return {"project_s": total, "baseline_s": None, "ratio": None, "target_ratio": None, "target_s": TARGET_S,
            "passed": None if total is None or not complete else total <= TARGET_S, "complete": complete,
            "source": source, "max_stage_peak_rss_mb": peak,
            "stages_within_8gb": None if peak is None else peak <= 8192,
            "make_reproduce": wall, "make_reproduce_was_full_run": full_wall,
            "latest_make_reproduce": None if latest_wall is wall else
            {k: v for k, v in (latest_wall or {}).items() if k != "last_from_scratch"} or None,
            "pipeline_stages": pipeline,
            "mlflow": {**{k: v for k, v in store.items() if k != "batches"}, "latest_batch": latest}}


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
    doc = mlflow_breakdowns(args.batches, args.uri)
    wall = read_wall()
    if args.json:
        print(json.dumps({"make_reproduce": wall, "mlflow": doc}, indent=2))
        return 0
    if wall:
        print(f"make reproduce record: {wall['started']} -> {wall['ended']}, {wall['total_s']:.0f} s, rc {wall['rc']}")
        for s in wall["stages"]:
            cores = f"  {s['cpu_s'] / s['seconds']:.2f} cores busy" if s.get("cpu_s") and s["seconds"] else ""
            print(f"  {s['stage']:<32} {s['seconds']:>8.1f} s  peak RSS {s.get('peak_rss_mb')} MB{cores}")
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
