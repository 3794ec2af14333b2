"""``eegprivacy``: the user commands (``audit-cohort``, ``to-bids``, ``datasets``, ``report``, ``stages``) and,
in a checkout, one subcommand per pipeline stage (DVC calls these).

User commands ship inside the package and run from any folder. Stage subcommands come from the stage registry
(:mod:`eegprivacy.pipeline.stages`): one per stage, its shared flags declared there once, its own in its entry
module under the checkout's ``experiments/`` (``add_arguments``, ``run``). ``eegprivacy --help`` lists the two
groups apart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import eegprivacy
from eegprivacy import reproduce_progress
from eegprivacy.commands import audit_cohort, key_values
from eegprivacy.paths import DATA_ENV, data_root, repo_root
from eegprivacy.pipeline import executors, stages

EPILOG = f"""
data: real public EEG is read from ${DATA_ENV} (else <repo>/data/raw); files are checked against shipped sha256
manifests and nothing is downloaded unless a loader is asked to. Tracking: MLflow in sqlite:///mlflow.db
(override with MLFLOW_TRACKING_URI); `make ui` opens it. Pipeline: `make reproduce` runs `dvc repro`.
Sweeps: cells run in local processes, or as Ray tasks with `--executor ray --address ray://HEAD:10001` (or
EEGPRIVACY_EXECUTOR=ray and RAY_ADDRESS, which `dvc repro` passes on); this process still writes every cell file and
MLflow run, and the rows are the same either way.
"""


def cmd_datasets(args) -> int:
    """Print every registered dataset: local presence, version and counts. A dataset that reads whatever part of
    its public file list a copy holds (it has ``absent()``) also reports how many of the listed recordings are
    present (``recordings`` shown as present/listed), so a cut-down copy is visible here."""
    from eegprivacy.data import REGISTRY, get_dataset
    from eegprivacy.data._local import presence

    rows = []
    for name in REGISTRY:
        if name in ("clinical_folder", "bids"):
            note = ("your own data: needs --folder (see docs)" if name == "clinical_folder"
                    else "any BIDS EEG tree: needs root= and label= (see docs)")
            rows.append({"dataset": name, "present": None, "note": note})
            continue
        try:
            dataset = get_dataset(name)
            row = dataset.summary()
            if not row["present"]:
                try:  # the loader's own message says which file is missing and where to get it
                    dataset.version()
                except Exception as err:  # noqa: BLE001
                    row["note"] = str(err).split(";")[0]
            else:
                row.update(presence(dataset))  # present/listed counts where the copy may be partial
            rows.append(row)
        except Exception as err:  # noqa: BLE001 - a listing must go on past one broken dataset
            rows.append({"dataset": name, "present": False, "note": f"{type(err).__name__}: {err}"})
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    print(f"data root: {data_root()}  (set ${DATA_ENV} to change)")
    print(f"{'dataset':<20} {'synthetic':<9} {'present':<8} {'subjects':>8} {'recordings':>10}  version / note")
    for row in rows:
        present = {True: "yes", False: "no", None: "-"}[row.get("present")]
        version = (row.get("version") or "")[:16]
        note = version + ("…" if version else "") or row.get("note") or ""
        recordings = row.get("recordings") or "-"
        if row.get("absent"):
            recordings = f"{row['n_recordings_present']}/{row['n_recordings_listed']}"
        print(f"{row['dataset']:<20} {str(row.get('synthetic', '-')).lower():<9} {present:<8} "
              f"{row.get('subjects') or '-':>8} {recordings:>10}  {note}")
    if any(row.get("absent") for row in rows):
        print("recordings n/m: n of the m recordings the dataset lists are present in this copy; its absent() names "
              "the others")
    return 0


def cmd_report(args) -> int:
    """Write reports/study-<a|b|c>.md with a figure each from the MLflow runs alone (no stage is rerun). A study
    with no runs gets a report that says so and a warning here; that is not an error."""
    from eegprivacy.reporting.study_reports import STUDIES, write_report
    from eegprivacy.tracking.runs import tracking_uri

    studies = [s.strip().lower() for s in args.study.split(",") if s.strip()]
    unknown = sorted(set(studies) - set(STUDIES))
    if unknown:
        print(f"eegprivacy report: unknown study {unknown}; choose from {','.join(STUDIES)}", file=sys.stderr)
        return 2
    uri = args.tracking_uri or tracking_uri()
    for study in studies:
        path, has_runs = write_report(study, args.out_dir, uri)
        print(f"wrote {path}")
        if not has_runs:
            print(f"eegprivacy report: warning: study {study} has no runs in {uri}; {path} says so", file=sys.stderr)
    return 0


def cmd_to_bids(args) -> int:
    """Write a dataset (your own ``clinical_folder``, or any registered one) as a BIDS-EEG tree with mne-bids, so
    ``audit-cohort BIDS_DIR OUTPUT_DIR group`` (and any BIDS tool) can read it. Subjects become sub-01, sub-02,
    ... numbered in a random order (a keyed hash of the source ids: the numbers say nothing about where a subject
    stood in the source, e.g. controls listed first); the mapping and the key are written nowhere. The
    per-subject label goes to participants.tsv; nothing is left behind on failure. The tree holds your patients'
    EEG: keep it as private as the source."""
    from eegprivacy.data import ChecksumMismatchError, get_dataset
    from eegprivacy.data.bids import RecordingReadError, to_bids
    from eegprivacy.errors import InputDataError

    try:
        kwargs = key_values(args.dataset_arg, "--dataset-arg")
    except ValueError as err:
        print(f"eegprivacy to-bids: {err}", file=sys.stderr)
        return 2
    try:
        key = _key_file(args.key_file)
        conversion = to_bids(get_dataset(args.dataset, **kwargs), args.out, label_column=args.label_column,
                             task=None if args.task == "condition" else args.task, overwrite=args.overwrite,
                             format=args.format, subjects=args.subjects, key=key)
    except (KeyError, ValueError, FileNotFoundError, FileExistsError, ChecksumMismatchError, RecordingReadError,
            InputDataError) as err:  # bad input: every error of the data layer is one line
        print(f"eegprivacy to-bids: {err.args[0] if isinstance(err, KeyError) and err.args else err}",
              file=sys.stderr)
        return 2
    values = ", ".join(f"{value}: {n}" for value, n in conversion.label_counts.items())
    print(f"wrote {len(conversion.subjects)} subjects, {len(conversion.recordings)} recordings to {conversion.root}; "
          f"the label is participants.tsv column {conversion.label_column!r} (participants per value: {values}), "
          f"so audit it with --label {conversion.label_column}")
    return 0


# A key shorter than this is guessable, and a guessed key undoes the shuffle of the subject numbers.
MIN_KEY_BYTES = 16


def _key_file(path: str | None) -> bytes | None:
    """The bytes of ``--key-file`` (None without one: to_bids draws a fresh key); a file that cannot be read or is
    too short is a ValueError naming the flag."""
    if path is None:
        return None
    try:
        key = Path(path).expanduser().read_bytes()
    except OSError as err:
        raise ValueError(f"--key-file {path}: cannot read it ({err.strerror})") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"--key-file {path} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES} random "
                         "bytes, e.g. `head -c 32 /dev/urandom > FILE` (keep the file private)")
    return key


def cmd_stages(args) -> int:
    """List the registered pipeline stages (name, datasets, params section, code hash), or with --missing-runs
    the DVC stages that have no MLflow run in the store yet, one per line: what `make reproduce` reruns after
    `dvc repro`, since DVC skips a stage whose git-tracked outputs already match dvc.lock (e.g. on a fresh
    clone) and so would leave its runs missing."""
    from eegprivacy.tracking.runs import tracking_uri

    if args.missing_runs:
        print("\n".join(stages.stages_without_runs(args.tracking_uri or tracking_uri())))
        return 0
    print(f"{'stage':<22} {'items':<32} {'params section':<40} code hash")
    for stage in stages.STAGES:
        section = f"{stage.params_file}:{stage.section}" if stage.section else "-"
        kind = "" if stage.in_dvc else "  (not in dvc.yaml: runs on your data)"
        print(f"{stage.name:<22} {','.join(stage.items) or '-':<32} {section:<40} {stage.code_hash()}{kind}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eegprivacy",
        description="Measure how much private information leaks from EEG data and models, and how well "
                    "differential privacy stops it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"eegprivacy {eegprivacy.__version__}")
    # Top-level, so one choice covers every stage that sweeps (none of them has a flag of its own).
    parser.add_argument("--executor", choices=executors.EXECUTORS,
                        default=os.environ.get(executors.EXECUTOR_ENV) or "local",
                        help=f"where sweep cells are computed: local processes or a Ray cluster (default: "
                             f"${executors.EXECUTOR_ENV}, else local)")
    parser.add_argument("--address", default=None,
                        help=f"Ray cluster for --executor ray, e.g. ray://HEAD:10001 (default: "
                             f"${executors.ADDRESS_ENV})")
    parser.add_argument("--task-memory", type=float, default=executors.DEFAULT_TASK_MEMORY / 2**30, metavar="GIB",
                        help="memory each Ray task requests from the scheduler, in GiB (default: %(default)g)")
    # No help= on any subparser: the epilog lists user commands and pipeline stages as two groups (_command_groups).
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    audit = sub.add_parser("audit-cohort", description=audit_cohort.DESCRIPTION)
    audit_cohort.add_arguments(audit)
    audit.set_defaults(func=audit_cohort.run)
    datasets = sub.add_parser("datasets", description=cmd_datasets.__doc__)
    datasets.add_argument("--json", action="store_true", help="machine-readable output")
    datasets.set_defaults(func=cmd_datasets)
    report = sub.add_parser("report", description=cmd_report.__doc__)
    report.add_argument("--tracking-uri", default=None,
                        help="MLflow store to read (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    report.add_argument("--out-dir", default=str(repo_root() / "reports"), help="folder for the reports and figures")
    report.add_argument("--study", default="a,b,c", help="comma-separated studies to report (default: a,b,c)")
    report.set_defaults(func=cmd_report)
    listing = sub.add_parser("stages", description=cmd_stages.__doc__)
    listing.add_argument("--missing-runs", action="store_true",
                         help="print the DVC stage names (name@item) that have no finished MLflow run in the store")
    listing.add_argument("--tracking-uri", default=None,
                         help="MLflow store to read (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    listing.set_defaults(func=cmd_stages)
    to_bids = sub.add_parser("to-bids", description=cmd_to_bids.__doc__)
    to_bids.add_argument("--dataset", default="clinical_folder",
                         help="registered dataset to convert (default: clinical_folder)")
    to_bids.add_argument("--dataset-arg", nargs="*", metavar="KEY=VALUE",
                         help="its constructor arguments, e.g. folder=/path/to/my_eeg for clinical_folder")
    to_bids.add_argument("--out", required=True, help="the BIDS root to create (must not exist, see --overwrite)")
    to_bids.add_argument("--label-column", default="label",
                         help="recording metadata column with the per-subject label (default: label)")
    to_bids.add_argument("--task", default="rest",
                         help="BIDS task of every recording, or 'condition' for each recording's own (default: rest)")
    to_bids.add_argument("--format", default="EDF", choices=("EDF", "BrainVision"),
                         help="EDF (16-bit, most widely read) or BrainVision (32-bit float, the signal as read)")
    to_bids.add_argument("--subjects", nargs="+", metavar="SUBJECT", default=None,
                         help="convert only these subjects, as the dataset names them (default: all)")
    to_bids.add_argument("--overwrite", action="store_true", help="replace an existing tree at --out")
    to_bids.add_argument("--key-file", metavar="FILE", default=None,
                         help="a private file of random bytes that keys the order of the subject numbers, so a "
                              "later conversion with the same file numbers the same subjects the same way (default: "
                              "a fresh random key each time); the key is written nowhere, keep the file private")
    to_bids.set_defaults(func=cmd_to_bids)
    stages.add_stage_parsers(sub)
    parser.epilog = _command_groups(set(sub.choices)) + EPILOG
    return parser


# What `eegprivacy --help` lists first: the commands a user runs, with one line each.
USER_COMMANDS = {
    "audit-cohort": "audit a DP release of your own labelled cohort (a BIDS tree): BIDS_DIR OUTPUT_DIR group",
    "to-bids": "write a dataset (e.g. your clinical_folder) as a BIDS-EEG tree",
    "datasets": "list datasets, whether each is present locally, version, subjects",
    "report": "write reports/study-{a,b,c}.md and figures from the MLflow runs",
    "stages": "list the pipeline stages, or those with no MLflow run yet",
}


def _command_groups(registered: set[str]) -> str:
    """The two groups of ``eegprivacy --help``: user commands, then the pipeline's stages (or why they are absent)."""
    lines = ["user commands (`eegprivacy COMMAND --help` for each):"]
    lines += [f"  {name:<24} {text}" for name, text in USER_COMMANDS.items()]
    lines += ["", "pipeline stages (`dvc repro` runs them; `make reproduce`):"]
    stage_lines = [f"  {stage.command:<24} {textwrap.shorten(stage.help, 92, placeholder=' …')}"
                   for stage in stages.STAGES if stage.command in registered]
    lines += stage_lines or ["  (only in a checkout of the repository: they read its params/ and experiments/)"]
    return "\n".join(lines) + "\n"


# `make reproduce` sets this to a file; every command then appends one JSON line with its wall time and peak memory,
# which benchmarks/reproduce_times.py turns into the per-stage breakdown, and from which each stage counts the
# stages done for its progress line (eegprivacy.reproduce_progress). Unset, nothing is written or printed.
STAGE_LOG_ENV = "EEGPRIVACY_STAGE_LOG"


def _process_start() -> float:
    """When this process started (epoch s), so a stage's time includes its imports; now if psutil cannot say."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a timing record must never fail a stage
        return time.time()


def _live_children_peak_kib() -> int:
    """Largest peak RSS (Linux VmHWM, KiB) among child processes still alive, e.g. joblib's workers, which are
    only reaped at exit and so are missing from RUSAGE_CHILDREN; 0 where that cannot be read."""
    try:
        import psutil

        peaks = []
        for child in psutil.Process().children(recursive=True):
            status = Path(f"/proc/{child.pid}/status").read_text()
            peaks += [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")]
        return max(peaks, default=0)
    except Exception:  # noqa: BLE001 - a timing record must never fail a stage
        return 0


def _live_children_cpu_s() -> float:
    """CPU seconds (user + system) of the child processes still alive (joblib's reusable workers), which
    RUSAGE_CHILDREN does not count yet; 0 where that cannot be read."""
    try:
        import psutil

        return sum(sum(c.cpu_times()[:2]) for c in psutil.Process().children(recursive=True))
    except Exception:  # noqa: BLE001 - a timing record must never fail a stage
        return 0.0


def _log_stage(path: str, args, started: float, rc: int) -> None:
    """Append this command's wall time, CPU time (its own and its children's: cpu_s / seconds is how many cores
    it kept busy) and peak RSS (its own, and its largest child's) to ``path``."""
    import resource

    per_mb = 1 / 2**20 if sys.platform == "darwin" else 1 / 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    children = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * per_mb, _live_children_peak_kib() / 1024)
    cpu = sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    record = {"command": args.command, "dataset": getattr(args, "dataset", None), "started": round(started, 3),
              "seconds": round(time.time() - started, 3), "rc": rc,
              "cpu_s": round(cpu + _live_children_cpu_s(), 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * per_mb, 1),
              "peak_child_rss_mb": round(children, 1)}
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError as err:
        print(f"eegprivacy: could not append the stage record to {path}: {err}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.executor == "local" and args.address:
        parser.error("--address names a Ray cluster; it needs --executor ray")
    try:
        executors.configure(args.executor, address=args.address, memory=int(args.task_memory * 2**30))
    except ValueError as err:  # e.g. --executor ray without an address, or a bad $EEGPRIVACY_EXECUTOR
        parser.error(str(err))
    log_path = os.environ.get(STAGE_LOG_ENV)
    if not log_path:
        return int(args.func(args) or 0)
    started, rc = _process_start(), 1
    # Under `make reproduce` a stage also says where the whole run stands: one line as it starts, one as it ends.
    progress = reproduce_progress.announce_start(args.command, getattr(args, "dataset", None), log_path)
    try:
        rc = int(args.func(args) or 0)
        return rc
    finally:
        _log_stage(log_path, args, started, rc)
        reproduce_progress.announce_end(progress, time.time() - started, rc)


if __name__ == "__main__":
    sys.exit(main())
