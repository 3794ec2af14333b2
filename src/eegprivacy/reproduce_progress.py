"""One overall progress line for ``make reproduce``: stage k of n, time elapsed, time left (issue 37).

DVC names each stage as it starts and the stages draw their own bars, but on a run of two or three hours nothing
said how far the whole run was. Nothing here watches the run from outside: DVC runs its stages one after another,
each as one ``eegprivacy`` process, so each process can say where it stands from two files.

- The *plan* (``$EEGPRIVACY_REPRODUCE_PLAN``), written once by ``make reproduce`` before ``dvc repro``
  (``benchmarks/reproduce_times.py plan``): when ``make`` started, the DVC stages it expects to run (those
  ``dvc status`` reports changed; every stage under ``--force``), every stage's name, and each stage's expected
  seconds from ``benchmarks/reproduce_wall.json`` (its latest recorded run, else the last run from scratch).
- The *stage log* (``$EEGPRIVACY_STAGE_LOG``): one line per finished ``eegprivacy`` command (``eegprivacy.cli``),
  so the stages done so far.

A stage prints one line to stderr when it starts and one when it ends, nothing in between::

    [reproduce] stage 7 of 31: dp_utility@msu_schizophrenia · elapsed 12:04 · ETA 31:10 (from recorded stage times)
    [reproduce] stage 7 of 31 done in 4:07 (expected 4:03)

k counts the stages run so far; n is the plan's length plus every stage that ran without being planned (DVC reruns
a stage downstream of one whose outputs changed, which ``dvc status`` cannot foresee, and ``make reproduce`` reruns
stages that left no MLflow run), so n grows instead of k passing it. The ETA is the expected seconds of the stages
left, this one included; while one of them has no recorded time it says "unknown" (with the part that is known),
because a sum that silently leaves a stage out reads as a promise. It is not scaled by how the finished stages
compared with their records: a stage whose cells were cached finishes in seconds, which says nothing about the
next one. No plan, or an unreadable one, prints nothing: a progress line must never fail or slow a stage.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PLAN_ENV = "EEGPRIVACY_REPRODUCE_PLAN"
PREFIX = "[reproduce]"


def stage_label(command: str, dataset: str | None) -> str:
    """The stage a command ran as, from what the stage log records (``version`` is the ``dataset_version`` stage)."""
    name = "dataset_version" if command == "version" else command.replace("-", "_")
    return f"{name}@{dataset}" if dataset else name


def dvc_name(label: str, pipeline: list[str] | tuple[str, ...] | set[str] | None) -> str:
    """DVC's name for a stage label: a single stage run on one dataset (``federated-lira --dataset eegmmidb``)
    logs ``federated_lira@eegmmidb``, but DVC calls it ``federated_lira``."""
    if pipeline and label not in pipeline and label.split("@")[0] in pipeline:
        return label.split("@")[0]
    return label


def clock(seconds: float) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above (a run takes hours; a stage seconds to an hour)."""
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def read_plan(path: str | Path | None) -> dict | None:
    """The plan ``make reproduce`` wrote, or None when there is none or it cannot be read."""
    if not path:
        return None
    try:
        plan = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) and isinstance(plan.get("stages"), list) else None


def stages_done(stage_log: str | Path | None, pipeline: list[str] | None = None) -> list[str]:
    """DVC names of the stages the log says have finished, in order (commands outside the pipeline left out when
    the pipeline is known). A line that cannot be read is skipped: the log is appended to by other processes."""
    if not stage_log:
        return []
    try:
        lines = Path(stage_log).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    done = []
    for line in lines:
        try:
            row = json.loads(line)
            name = dvc_name(stage_label(row["command"], row.get("dataset")), pipeline)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if not pipeline or name in pipeline:
            done.append(name)
    return done


@dataclass(frozen=True)
class Position:
    """Where one stage stands in the run when it starts."""

    k: int                      # this stage's position among the stages run so far (1-based)
    n: int                      # stages planned, plus those that ran without being planned
    stage: str
    expected_s: float | None    # this stage's recorded time; None when never recorded
    elapsed_s: float | None     # since `make reproduce` started; None when the plan does not say
    known_left_s: float         # expected seconds of the stages left (this one included) that have a record
    unknown_left: int           # stages left (this one included) without one

    @property
    def eta_s(self) -> float | None:
        return None if self.unknown_left else self.known_left_s


def position(plan: dict, done: list[str], stage: str, now: float | None = None) -> Position:
    """Stage ``stage`` starting after the stages ``done``, against ``plan``.

    Each stage run takes one planned slot of its name if one is left; a stage that finds none (unplanned, or run
    a second time) adds one to n. What is left is the planned slots not taken, plus this stage."""
    left = list(plan.get("stages") or [])
    extra = 0
    for name in [*done, stage]:
        if name in left:
            left.remove(name)
        else:
            extra += 1
    expected = plan.get("expected_s") or {}
    ahead = [stage, *left]
    known = [expected[name] for name in ahead if expected.get(name) is not None]
    started = plan.get("started")
    now = time.time() if now is None else now
    return Position(k=len(done) + 1, n=len(plan.get("stages") or []) + extra, stage=stage,
                    expected_s=expected.get(stage), elapsed_s=None if started is None else now - float(started),
                    known_left_s=float(sum(known)), unknown_left=len(ahead) - len(known))


def start_line(pos: Position) -> str:
    """The line a stage prints when it starts."""
    parts = [f"{PREFIX} stage {pos.k} of {pos.n}: {pos.stage}"]
    if pos.elapsed_s is not None:
        parts.append(f"elapsed {clock(pos.elapsed_s)}")
    if pos.eta_s is not None:
        parts.append(f"ETA {clock(pos.eta_s)} (from recorded stage times)")
    elif pos.known_left_s:
        stages = "stage" if pos.unknown_left == 1 else "stages"
        parts.append(f"ETA unknown ({clock(pos.known_left_s)} recorded + {pos.unknown_left} {stages} never timed)")
    else:
        parts.append("ETA unknown (no recorded stage times)")
    return " · ".join(parts)


def end_line(pos: Position, seconds: float, rc: int = 0) -> str:
    """The line a stage prints when it ends: its time beside the recorded one."""
    expected = f"expected {clock(pos.expected_s)}" if pos.expected_s is not None else "no recorded time"
    if rc == 0:
        return f"{PREFIX} stage {pos.k} of {pos.n} done in {clock(seconds)} ({expected})"
    return f"{PREFIX} stage {pos.k} of {pos.n} failed (exit {rc}) after {clock(seconds)} ({expected})"


def announce_start(command: str, dataset: str | None, stage_log: str | None, env=None, stream=None) -> Position | None:
    """Print the start line of this command when ``make reproduce`` left a plan and the command is one of the
    pipeline's stages; return its position for :func:`announce_end`, else None. Never raises."""
    env = os.environ if env is None else env
    try:
        plan = read_plan(env.get(PLAN_ENV))
        if plan is None or not stage_log:
            return None
        pipeline = plan.get("pipeline") or None
        stage = dvc_name(stage_label(command, dataset), pipeline)
        if pipeline and stage not in pipeline:
            return None  # a user command run with the log set (e.g. `eegprivacy stages`) is no stage of the run
        pos = position(plan, stages_done(stage_log, pipeline), stage)
        print(start_line(pos), file=stream or sys.stderr, flush=True)
        return pos
    except Exception:  # noqa: BLE001 - a progress line must never fail a stage
        return None


def announce_end(pos: Position | None, seconds: float, rc: int, stream=None) -> None:
    """Print the end line of a stage :func:`announce_start` announced. Never raises."""
    if pos is None:
        return
    try:
        print(end_line(pos, seconds, rc), file=stream or sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - a progress line must never fail a stage
        pass
