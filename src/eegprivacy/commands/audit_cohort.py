"""``eegprivacy audit-cohort``: study A's DP feature release audited on your own labelled cohort, as a BIDS App.

    eegprivacy audit-cohort BIDS_DIR OUTPUT_DIR participant --label diagnosis      # check each participant
    eegprivacy audit-cohort BIDS_DIR OUTPUT_DIR group --label diagnosis            # the audit and its report

The computing lives in :mod:`eegprivacy.studies.cohort_audit`; this module is the command line around it: the
BIDS-Apps arguments (https://bids-apps.neuroimaging.io: ``BIDS_DIR OUTPUT_DIR participant|group``,
``--participant-label``, ``--session``, ``--task``), where things go (results and the MLflow store under
OUTPUT_DIR, never in the dataset outside ``derivatives/``; the private work folder outside OUTPUT_DIR), console
output a person reads (one line per problem, an overall progress line, the verdict's lead and a summary sentence at
the end), bad input ending as one line and a non-zero exit with nothing left behind, and Ctrl-C or SIGTERM ending
the MLflow runs KILLED.

One idea over about 680 lines: the command line of one BIDS App, that is its arguments, console output, output
folders and signal handling; no number is computed here.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import warnings
from pathlib import Path

from eegprivacy.commands import key_values

DESCRIPTION = """\
What would a differentially private release of your cohort's EEG features cost and leak? Study A's pipeline on
your own labelled cohort: one feature vector per patient, released by each DP mechanism at each ε (per patient),
scored beside a matched null release with the signal removed; the ε from which a release keeps its utility;
re-identification and membership attacks on the released table; a report with a plain-language verdict first.
"""

EPILOG = """
analysis levels (BIDS Apps):
  participant  checks each selected participant on its own: label, every recording read (truncated, unreadable,
               NaN samples, too short, flat channels), window features computed; one line per problem and
               OUTPUT_DIR/sub-<label>_qc.tsv per participant. Nothing is released. Exit 1 if any participant fails.
  group        the audit of the selected participants together: DP releases beside matched nulls, utility
               horizon, re-identification and membership attacks; OUTPUT_DIR/report.html (verdict first),
               rows.csv, summary.json and two figures, free of subject ids.

what is private and what you may share:
  PRIVATE      the work folder (-w/--work-dir; default $XDG_CACHE_HOME/eegprivacy/audit-cohort/<hash of OUTPUT_DIR>,
               printed at the end): the un-noised window features of every recording, named by subject and file,
               and every finished cell with its per-patient predictions. Never inside OUTPUT_DIR or BIDS_DIR;
               delete it when done. The console output also names files. BIDS_DIR holds your patients' EEG.
  shareable    OUTPUT_DIR: report.html, rows.csv, summary.json, the figures and (unless MLFLOW_TRACKING_URI or
               --tracking-uri names another) the MLflow store mlflow.db + mlartifacts/: aggregates only, no subject
               id, file name or un-noised per-patient value. OUTPUT_DIR may not be BIDS_DIR or inside it, except
               under BIDS_DIR/derivatives/.
A rerun of the same command computes only what is missing, in the same MLflow runs; Ctrl-C or SIGTERM (what a
scheduler sends) stops it cleanly.

ε is per patient (one released vector per patient) and covers the released features only: the robust-scaling
statistics are fitted on the private patients outside ε, and the labels travel in the clear. Numbers depend on the recordings,
labels and seeds only (patients are put in a canonical order by their feature vectors), not on subject ids, file
paths or the dataset's name. The default mechanisms are the formally calibrated ones; the paper's
laplace_implemented (no formal guarantee for d > 1) runs only when named, and is flagged so in the report.
"""

USAGE = ("eegprivacy audit-cohort BIDS_DIR OUTPUT_DIR {participant,group} --label COLUMN [options]\n"
         "       eegprivacy audit-cohort --dataset NAME OUTPUT_DIR group [options]")
LEVELS = ("participant", "group")
INTERRUPTED = "interrupted; rerun the same command to resume"

log = logging.getLogger("eegprivacy.audit_cohort")


def _mapping(items: list[str] | None, flag: str) -> dict:
    try:
        return key_values(items, flag)
    except ValueError as err:
        raise UsageError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from eegprivacy.studies.cohort.config import AuditConfig

    d = AuditConfig()
    parser.usage = USAGE
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("bids_dir", nargs="?", metavar="BIDS_DIR", help="root of your cohort's BIDS tree (holds "
                        "participants.tsv and dataset_description.json); patient = BIDS participant")
    parser.add_argument("output_dir", nargs="?", metavar="OUTPUT_DIR", help="where results go (created if absent)")
    parser.add_argument("analysis_level", nargs="?", metavar="{participant,group}", help="see below")
    bids = parser.add_argument_group("BIDS selection")
    bids.add_argument("--participant-label", nargs="+", metavar="LABEL",
                      help="only these participants (labels with or without 'sub-'; default: all)")
    bids.add_argument("--session", metavar="LABEL", help="only this session (with or without 'ses-')")
    bids.add_argument("--task", help="only recordings of this BIDS task")
    bids.add_argument("--label", metavar="COLUMN", help="participants.tsv column holding the patient label (0/1, or "
                      "mapped with --label-map); required with BIDS_DIR")
    bids.add_argument("--label-map", nargs="+", metavar="VALUE=0|1", help="map label values to 0/1, e.g. "
                      "--label-map SZ=1 HC=0")
    bids.add_argument("--dataset", metavar="NAME", help="instead of BIDS_DIR: a registered dataset (e.g. "
                      "msu_schizophrenia; `eegprivacy datasets` lists them)")
    bids.add_argument("--dataset-arg", nargs="+", metavar="KEY=VALUE", help="with --dataset: constructor "
                      "arguments, e.g. folder=/path for clinical_folder")
    audit = parser.add_argument_group("audit settings (all logged to MLflow)")
    audit.add_argument("--epsilons", nargs="+", type=float, default=list(d.epsilons), metavar="EPS",
                       help=f"ε grid, per patient (default: {' '.join(f'{e:g}' for e in d.epsilons)})")
    audit.add_argument("--mechanisms", nargs="+", default=list(d.mechanisms), metavar="NAME",
                       help=f"mechanisms (default: {' '.join(d.mechanisms)}, the formally calibrated ones; the "
                       "paper's laplace_implemented has no formal guarantee for d > 1 and is flagged so)")
    audit.add_argument("--noise-seeds", type=int, default=d.noise_seeds,
                       help=f"noise draws (and MLP seeds) per (mechanism, ε) (default {d.noise_seeds})")
    audit.add_argument("--baseline-seeds", type=int, default=d.baseline_seeds, help="MLP seeds of the baseline and "
                       f"of the scaled+clipped table without noise (default {d.baseline_seeds})")
    audit.add_argument("--permutations", type=int, default=d.permutations, help="label permutations of the "
                       f"permuted-label control, each its own seed (default {d.permutations})")
    audit.add_argument("--nested-seeds", type=int, default=d.nested_seeds, help="first seeds of each cell that also "
                       "run the nested threshold protocol for balanced accuracy (fewer than 2: no balanced-accuracy "
                       f"horizon is tested; default {d.nested_seeds})")
    audit.add_argument("--inner-folds", type=int, default=d.inner_folds,
                       help=f"inner k-fold of the nested threshold protocol (default {d.inner_folds})")
    audit.add_argument("--clip-norm", type=float, default=d.clip_norm, help=f"L2 clip C (default {d.clip_norm:g})")
    audit.add_argument("--delta", type=float, default=d.delta, help=f"δ of the Gaussian mechanisms ({d.delta:g})")
    audit.add_argument("--bootstrap", type=int, default=d.bootstrap, help="patient-level bootstrap resamples of "
                       f"every interval and p-value (default {d.bootstrap})")
    audit.add_argument("--confidence", type=float, default=d.confidence, help="interval level; α = 1 − confidence "
                       f"is the horizon test's, split over the mechanisms (default {d.confidence:g})")
    audit.add_argument("--membership-trials", type=int, default=d.membership_trials,
                       help=f"releases of a random half of the cohort per membership cell ({d.membership_trials})")
    audit.add_argument("--min-patients", type=int, default=d.min_patients,
                       help=f"refuse cohorts with fewer patients (default {d.min_patients})")
    audit.add_argument("--no-split-halves", action="store_true", help="with one recording per subject, skip the "
                       "same-session re-identification (first half released, second half known to the attacker)")
    audit.add_argument("--skip-bad", action=argparse.BooleanOptionalAction, default=d.skip_bad,
                       help="group level: leave out a recording that cannot be used (an unreadable or truncated file, "
                       "NaN samples) and go on, each one console line naming the file and the reason, listed in the "
                       "report and in the work folder's left_out.tsv (default: a cohort always has a few, and one "
                       "should not cost the whole run; the participant level checks each). --no-skip-bad stops at the "
                       "first instead, leaving nothing behind")
    audit.add_argument("--features-params", metavar="FILE", help="a params file with a 'features' section "
                       "(default: the settings shipped with the package, the pipeline's params/features.yaml)")
    where = parser.add_argument_group("where things go, and the console")
    where.add_argument("-w", "--work-dir", metavar="DIR", help="PRIVATE: the un-noised feature table (it names "
                       "subjects) and every finished cell, for resuming; never inside OUTPUT_DIR or BIDS_DIR (default: "
                       "$XDG_CACHE_HOME/eegprivacy/audit-cohort/<hash of OUTPUT_DIR>, printed at the end)")
    where.add_argument("--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI, else "
                       "sqlite:///OUTPUT_DIR/mlflow.db)")
    where.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="processes computing cells ahead (numbers do not depend on it; default %(default)s)")
    where.add_argument("--no-progress", action="store_true", help="hide the progress line")
    where.add_argument("-v", "--verbose", action="store_true", help="also show MNE's and MLflow's messages and "
                       "per-participant detail (same as --log-level info)")
    where.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=None,
                       help="console detail, as MNE's (default warning: problems and the summary only; debug also "
                       "prints the traceback of an input error)")


# ---------------------------------------------------------------------------------------------------------------
# Console
# ---------------------------------------------------------------------------------------------------------------
_LIBRARY_LOGGERS = ("mlflow", "alembic", "mne", "py.warnings", "urllib3", "matplotlib", "numba", "flwr")


class _ConsoleHandler(logging.Handler):
    """stderr through ``tqdm.write``: a message gets a line of its own above the progress line, which is redrawn."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm.auto import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class _ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {text}"
        return text


def configure_console(level: str) -> None:
    """One handler on stderr for this package and the libraries it calls, at ``level``; MNE's per-file "Reading
    0 … 7679" lines and MLflow's (and alembic's) INFO lines are off unless asked for. Python warnings (a
    DataQualityWarning names the file it is about) become one ``warning:`` line each."""
    import mlflow  # noqa: F401 - its import installs MLflow's own INFO handler, which is replaced below
    import mne

    numeric = getattr(logging, level.upper())
    handler = _ConsoleHandler()
    handler.setFormatter(_ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
        logger.setLevel(numeric if numeric <= logging.INFO else max(numeric, logging.WARNING))
    mne.set_log_level(level.upper())
    os.environ.setdefault("MNE_LOGGING_LEVEL", level.upper())  # worker processes start from the environment

    def show(message, category, filename, lineno, file=None, line=None):
        from eegprivacy.data.base import DataQualityWarning

        if issubclass(category, DataQualityWarning) or numeric <= logging.INFO:
            log.warning("%s", message)

    warnings.showwarning = show
    if numeric > logging.INFO:
        # Worker processes (loky) start from the environment: on Ctrl-C scikit-learn's MLP there would print
        # "Training interrupted by user" with a source line, once per worker, after ours.
        # After Ctrl-C or SIGTERM, multiprocessing's resource tracker cleans up what the killed pool left and
        # warns about each: expected (a rerun resumes), so not printed after the "interrupted" line either.
        os.environ.setdefault("PYTHONWARNINGS", "ignore:Training interrupted by user,ignore:resource_tracker")
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)


# Python argument names in library messages -> the flags a command-line user types.
_FLAG_HINTS = (
    (re.compile(r"label_map=\{([^}]*)\}"),
     lambda m: "--label-map " + " ".join(f"{k}={v}" for k, v in re.findall(r"'([^']*)':\s*(\d)", m.group(1)))),
    (re.compile(r"\blabel_map\b"), lambda m: "--label-map"),
    (re.compile(r"\b[Pp]ass label= one of them"), lambda m: "pass --label with one of them"),
    (re.compile(r"\blabel=\s"), lambda m: "--label "),
    (re.compile(r"\bfeatures\.preprocess\.l_freq\b"),
     lambda m: "features.preprocess.l_freq (in a --features-params file)"),
)


def cli_message(text: str) -> str:
    """A library error as the command line says it: hints name flags (``--label-map SZ=1 HC=0``), not Python
    arguments (``label_map={'SZ': 1, 'HC': 0}``)."""
    for pattern, repl in _FLAG_HINTS:
        text = pattern.sub(repl, text)
    return " ".join(str(text).split())


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------
class UsageError(ValueError):
    """The command line is wrong (a missing positional, a flag that needs another)."""


def _positionals(args) -> tuple[str | None, Path, str]:
    """(BIDS_DIR or None with --dataset, OUTPUT_DIR, analysis level), checked."""
    given = [p for p in (args.bids_dir, args.output_dir, args.analysis_level) if p is not None]
    if args.dataset:
        if len(given) != 2:
            raise UsageError("with --dataset NAME give OUTPUT_DIR and the analysis level: "
                             "eegprivacy audit-cohort --dataset NAME OUTPUT_DIR group")
        bids_dir, (output_dir, level) = None, given
    else:
        if len(given) != 3:
            raise UsageError("give BIDS_DIR OUTPUT_DIR and the analysis level (participant or group), e.g. "
                             "eegprivacy audit-cohort /data/my_bids /data/my_audit group --label diagnosis")
        bids_dir, output_dir, level = given
        if not args.label:
            raise UsageError("BIDS_DIR needs --label COLUMN (the participants.tsv column with the patient label)")
    if level not in LEVELS:
        raise UsageError(f"the analysis level is 'participant' or 'group', not {level!r}")
    if args.dataset and level == "participant":
        raise UsageError("the participant level reads a BIDS tree: give BIDS_DIR instead of --dataset")
    for flag in ("participant_label", "session", "task", "label_map"):
        if args.dataset and getattr(args, flag):
            raise UsageError(f"--{flag.replace('_', '-')} selects within a BIDS tree; it does not apply to --dataset")
    return bids_dir, Path(output_dir).expanduser().resolve(), level


def _config(args):
    from eegprivacy.studies.cohort.config import AuditConfig

    return AuditConfig(mechanisms=tuple(args.mechanisms), epsilons=tuple(args.epsilons),
                       noise_seeds=args.noise_seeds, baseline_seeds=args.baseline_seeds,
                       permutations=args.permutations, nested_seeds=args.nested_seeds, inner_folds=args.inner_folds,
                       clip_norm=args.clip_norm, delta=args.delta, bootstrap=args.bootstrap,
                       confidence=args.confidence, membership_trials=args.membership_trials,
                       min_patients=args.min_patients, split_halves=not args.no_split_halves,
                       features_params=args.features_params, skip_bad=args.skip_bad)


def _bids_dataset(args, bids_dir: str, participants: list[str] | None = None, skip_unreadable: bool = False):
    from eegprivacy.data import get_dataset

    kwargs = {"root": bids_dir, "label": args.label, "task": args.task, "session": args.session,
              "participants": participants if participants is not None else args.participant_label,
              "skip_unreadable": skip_unreadable}
    if args.label_map:
        pairs = _mapping(args.label_map, "--label-map")
        bad = {k: v for k, v in pairs.items() if v not in ("0", "1")}
        if bad:
            raise UsageError(f"--label-map maps values to 0 or 1; got {bad}")
        kwargs["label_map"] = {k: int(v) for k, v in pairs.items()}
    return get_dataset("bids", **kwargs)


def default_work_dir(output_dir: Path) -> Path:
    """The work folder of an audit writing to ``output_dir`` when ``--work-dir`` is not given: in the user cache
    (``$XDG_CACHE_HOME/eegprivacy/audit-cohort/<hash of OUTPUT_DIR>``), outside OUTPUT_DIR and the dataset, like
    fMRIPrep's, and the same on every rerun of the command so it resumes."""
    import hashlib

    from eegprivacy.paths import user_cache_dir

    return user_cache_dir() / "audit-cohort" / hashlib.sha256(str(output_dir).encode()).hexdigest()[:16]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def check_places(bids_dir: str | None, output_dir: Path, work: Path) -> None:
    """Refuse, before anything is written, an OUTPUT_DIR that is the dataset or inside it outside ``derivatives/``
    (BIDS Apps' rule: results never mix with the raw data), and a work folder inside the dataset or inside
    OUTPUT_DIR (it holds the un-noised per-patient features: never beside what is shared)."""
    if bids_dir is not None:
        root = Path(bids_dir).expanduser().resolve()
        if _inside(output_dir, root) and not _inside(output_dir, root / "derivatives"):
            where = "is BIDS_DIR itself" if output_dir == root else f"is inside BIDS_DIR {root}"
            raise UsageError(f"OUTPUT_DIR {output_dir} {where}: results would mix with the dataset; choose a folder "
                             f"outside it, or under {root / 'derivatives'}/ (e.g. "
                             f"{root / 'derivatives' / 'eegprivacy'})")
        if _inside(work, root):
            raise UsageError(f"--work-dir {work} is inside BIDS_DIR {root}: it holds un-noised per-patient features; "
                             "choose a private folder outside the dataset (default: the user cache)")
    if _inside(work, output_dir):
        raise UsageError(f"--work-dir {work} is inside OUTPUT_DIR {output_dir}: it holds un-noised per-patient "
                         "features and OUTPUT_DIR is what you share; choose a private folder outside it (default: the "
                         "user cache)")


def _use_output_dir(args, bids_dir: str | None, output_dir: Path) -> Path:
    """Check where things go (:func:`check_places`); point MLflow inside OUTPUT_DIR and the file-hash cache inside
    the work folder (unless told otherwise), so nothing is written to the working folder. Returns the work folder.
    Nothing is created here: the folders appear once the input has passed its checks."""
    from eegprivacy.paths import CACHE_ENV

    work = Path(args.work_dir).expanduser().resolve() if args.work_dir else default_work_dir(output_dir)
    check_places(bids_dir, output_dir, work)
    if args.tracking_uri:
        os.environ["MLFLOW_TRACKING_URI"] = args.tracking_uri
    else:
        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{output_dir / 'mlflow.db'}")
    os.environ.setdefault(CACHE_ENV, str(work / "cache"))
    return work


# What ``run`` changes for its own duration (the environment its worker processes start from, the console set-up),
# restored when it returns, so calling the command in-process (tests, notebooks) leaves nothing behind.
_SCOPED_ENV = ("MLFLOW_TRACKING_URI", "EEGPRIVACY_CACHE", "PYTHONWARNINGS", "MNE_LOGGING_LEVEL")


@contextlib.contextmanager
def _scoped_process_state():
    import mne

    env = {key: os.environ.get(key) for key in _SCOPED_ENV}
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    loggers = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers),
                      logging.getLogger(name).propagate) for name in _LIBRARY_LOGGERS}
    showwarning, filters, mne_level = warnings.showwarning, list(warnings.filters), mne.utils.logger.level
    try:
        yield
    finally:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        root.handlers[:], root.level = handlers, level
        for name, (lvl, hs, propagate) in loggers.items():
            logger = logging.getLogger(name)
            logger.setLevel(lvl)
            logger.handlers[:] = hs
            logger.propagate = propagate
        warnings.showwarning = showwarning
        warnings.filters[:] = filters
        mne.utils.logger.setLevel(mne_level)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a scheduler or ``kill`` sends), met as Ctrl-C: every open MLflow run ends KILLED, the finished
    cells stay on disk, and the same command resumes."""


# Code a signal must not interrupt: the MLflow store's writes (SQLAlchemy, sqlite3). Cut in half, a write leaves
# the sqlite store locked, and the runs could then not be marked KILLED.
_STORE_CODE = tuple(f"{os.sep}{name}{os.sep}" for name in ("sqlalchemy", "sqlite3", "store"))
_RETRY_S = 0.05


def _in_store_call(frame) -> bool:
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _STORE_CODE):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _interrupts_between_store_writes():
    """Within the block, Ctrl-C raises KeyboardInterrupt and SIGTERM (what a scheduler or ``kill`` sends)
    :class:`Terminated` in the main thread, but never inside a write to the MLflow store: a signal that arrives
    there is sent again 50 ms later, until the write is done. The previous handlers come back after the block. Off
    the main thread (a notebook's worker) signals cannot be set: nothing changes there."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _in_store_call(frame):
            threading.Timer(_RETRY_S, os.kill, (os.getpid(), signum)).start()
            return
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run(args) -> int:
    level = args.log_level or ("info" if args.verbose else "warning")
    with _scoped_process_state(), _interrupts_between_store_writes():
        configure_console(level)
        code = _guarded(args, level)
    if code in (130, 143):
        _quiet_interrupted_workers()
    return code


def _end_interrupted_runs() -> None:
    """After Ctrl-C or SIGTERM, every MLflow run this process left open ends KILLED (the ``with`` blocks end the
    runs they hold; a run created just as the signal arrived is ended here), so none stays RUNNING; a rerun
    reopens them. A second signal or a store that cannot be reached only leaves them to the next run, which marks
    runs of a dead process FAILED and reopens them."""
    import signal

    from eegprivacy.tracking.runs import end_own_runs

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    try:
        end_own_runs("a")
    except Exception as err:  # noqa: BLE001 - the message that follows matters more
        log.info("could not end the interrupted MLflow runs (%s); the next run will", err)
    finally:
        signal.signal(signal.SIGINT, previous)


def _quiet_interrupted_workers() -> None:
    """After Ctrl-C the worker pool (joblib/loky) winds down in background threads after this command has returned:
    a finished cell's callback finds the pool shut and logs a traceback, and joblib warns that computed cells went
    unused or that running ones were cancelled. All are expected (a rerun resumes from the cells on disk), so none
    reaches the console."""
    pool = logging.getLogger("concurrent.futures")
    pool.addHandler(logging.NullHandler())
    pool.propagate = False
    for message in (r"\d+ tasks have been successfully executed", r"\d+ tasks which were still being processed"):
        warnings.filterwarnings("ignore", message=message, category=UserWarning)


def _guarded(args, level: str) -> int:
    """The command's exit code: 0, 2 for bad input (one line), 130 after Ctrl-C and 143 after SIGTERM (128 + the
    signal), when the runs it left open are ended KILLED."""
    code, interrupted = _interruptible(args, level)
    if interrupted is None:
        return code
    # Out of the except block, the interrupted frames (and a store connection one held mid-write) are gone.
    import gc

    gc.collect()
    _end_interrupted_runs()
    print(INTERRUPTED, file=sys.stderr)
    return 143 if isinstance(interrupted, Terminated) else 130


def _interruptible(args, level: str) -> tuple[int, KeyboardInterrupt | None]:
    """(exit code, None), or (0, the interrupt that stopped the command: Ctrl-C or SIGTERM), without its frames."""
    try:
        return _checked(args, level), None
    except KeyboardInterrupt as err:
        return 0, type(err)()


def _checked(args, level: str) -> int:
    try:
        return _run(args)
    except UsageError as err:
        print(f"eegprivacy audit-cohort: error: {err}\nusage: {USAGE}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - bad input ends as one line; anything else keeps its traceback
        from eegprivacy.errors import InputDataError
        from eegprivacy.params import ParamsError

        if level == "debug" or not isinstance(err, (InputDataError, ParamsError, FileNotFoundError)):
            raise
        print(f"error: {cli_message(str(err))}", file=sys.stderr)
        return 2


def _run(args) -> int:
    bids_dir, output_dir, level = _positionals(args)
    try:
        config = _config(args)
    except ValueError as err:  # a knob out of range (ε <= 0, an unknown mechanism): before any data is read
        raise UsageError(str(err)) from None
    work = _use_output_dir(args, bids_dir, output_dir)
    fresh = [top for top in map(_topmost_missing, (output_dir, work)) if top is not None]
    try:
        if level == "participant":
            return participant_level(args, bids_dir, output_dir, config)
        return group_level(args, bids_dir, output_dir, work, config)
    except Exception as err:
        _remove_if_input_error(err, fresh)
        raise


def _topmost_missing(path: Path) -> Path | None:
    """The highest folder of ``path`` (itself included) that does not exist yet: what creating it would create."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _remove_if_input_error(err: Exception, fresh: list[Path]) -> None:
    """After bad input (which stops a run before any result: labels, headers, a recording with --no-skip-bad),
    remove the folders this run created (OUTPUT_DIR, the work folder with its file-hash cache), so a failed run
    leaves nothing behind. Anything else (Ctrl-C, a crash) keeps them: the next run resumes from them."""
    import shutil

    from eegprivacy.errors import InputDataError
    from eegprivacy.params import ParamsError

    if isinstance(err, (InputDataError, ParamsError, FileNotFoundError)):
        for path in fresh:
            shutil.rmtree(path, ignore_errors=True)


def participant_level(args, bids_dir: str, output_dir: Path, config) -> int:
    """Each selected participant on its own (BIDS Apps' participant level): label checked, recordings read and
    their window features computed with the audit's settings; one ``sub-<label>_qc.tsv`` each. A participant that
    fails is one ``error:`` line and the next one goes on."""
    import pandas as pd
    from tqdm.auto import tqdm

    from eegprivacy.atomic import atomic_paths
    from eegprivacy.errors import InputDataError
    from eegprivacy.signal.table import dataset_window_features
    from eegprivacy.studies.cohort.loading import feature_settings

    everyone = _bids_dataset(args, bids_dir)
    table = everyone.participants()  # every selected label checked before any signal is read
    output_dir.mkdir(parents=True, exist_ok=True)
    labels = [p.removeprefix("sub-") for p in table["participant_id"]]
    features = feature_settings(config)
    failed = []
    bar = tqdm(labels, desc="participants", unit="participant", disable=args.no_progress, dynamic_ncols=True)
    for label in bar:
        dataset = _bids_dataset(args, bids_dir, [label])
        try:
            frame = dataset_window_features(dataset, features, progress=False)
            meta = dataset.metadata()
        except InputDataError as err:
            tqdm.write(f"error: sub-{label}: {cli_message(str(err))}", file=sys.stderr)
            failed.append(label)
            continue
        windows = frame.groupby("recording").size()
        log.info("sub-%s: %d recording(s), %d window(s), %d channel(s) kept", label, len(meta), len(frame),
                 len({c.split(":", 1)[0] for c in frame.columns if ":" in c}))
        flags = frame.drop_duplicates("recording").set_index("recording")["flags"].fillna("")
        qc = pd.DataFrame({
            "file": [Path(str(s)).relative_to(Path(bids_dir).resolve()).as_posix() if s else ""
                     for s in (dataset.recordings()[i].source for i in range(len(meta)))],
            "task": meta.get("task"), "session": meta.get("session"), "run": meta.get("run"),
            "sfreq": meta["sfreq"], "duration_s": meta["duration_s"],
            "windows": [int(windows.get(r, 0)) for r in meta["recording"]],
            "flags": [";".join(sorted(set(filter(None, f"{m or ''};{flags.get(r, '')}".split(";")))))
                      for r, m in zip(meta["recording"], meta.get("flags", [""] * len(meta)))],
        })
        with atomic_paths(output_dir / f"sub-{label}_qc.tsv") as (tmp,):
            qc.to_csv(tmp, sep="\t", index=False, na_rep="n/a")
    bar.close()
    ok = len(labels) - len(failed)
    print(f"participant level: {ok} of {len(labels)} participant(s) passed"
          + (f"; failed: {', '.join('sub-' + f for f in failed)}" if failed else "")
          + f"; checks in {output_dir}/sub-<label>_qc.tsv", file=sys.stderr if failed else sys.stdout)
    return 1 if failed else 0


def group_level(args, bids_dir: str | None, output_dir: Path, work: Path, config) -> int:
    from eegprivacy.data import get_dataset
    from eegprivacy.reporting import cohort as cohort_report
    from eegprivacy.reporting.cohort import lead_text
    from eegprivacy.studies.cohort.loading import LEFT_OUT_FILE
    from eegprivacy.studies.cohort_audit import run_audit
    from eegprivacy.tracking.runs import tracking_uri

    if bids_dir is not None:
        dataset = _bids_dataset(args, bids_dir, skip_unreadable=config.skip_bad)
    else:
        try:
            dataset = get_dataset(args.dataset, **_mapping(args.dataset_arg, "--dataset-arg"))
        except KeyError as err:  # an unknown name: the message lists the known ones
            raise UsageError(f"--dataset: {err.args[0]}") from None
        except TypeError as err:  # a constructor argument the dataset does not take
            raise UsageError(f"--dataset-arg: {err}") from None
    # OUTPUT_DIR appears once the labels and headers have passed (run_audit checks them before reading a signal).
    result = run_audit(dataset, config, output_dir, report=cohort_report, cache_dir=work,
                       progress=not args.no_progress, n_jobs=args.jobs)
    uri = tracking_uri()
    print(f"report: {result.paths['report']}")
    print(f"runs:   {runs_link(uri, result.cohort.dataset)}")
    print(f"work:   {work} (private: the un-noised features, named by subject; delete it when done)")
    left_out = result.cohort.summary["left_out"]
    if left_out:
        print(f"left out: {len(left_out)} recording(s), each named in a warning above and in {work / LEFT_OUT_FILE}")
    summary = result.summary
    for sentence in lead_text(summary):  # the report's lead: per mechanism, what the release keeps and leaks
        print(f"verdict: {sentence}")
    print(f"test:   utility horizon by {summary['horizon_test']}; ε covers {summary['eps_covers']}"
          + (f" ({summary['eps_covers_note']})" if summary.get("eps_covers_note") else ""))
    print(summary_line(summary, result.counts))
    return 0


def runs_link(uri: str, dataset: str, port: int = 5000) -> str:
    """How to open the audit's runs: for a local store the ``mlflow ui`` command and the address of the runs table
    (``workflowType=machine_learning``: MLflow 3's UI otherwise opens an experiment on its GenAI pages, whatever
    the experiment's kind tag says), opened on the cohort's view (``viewStateShareKey``: this cohort's audits, one
    row each, with the ε, AUROC and re-identification columns; :func:`~eegprivacy.tracking.runs.share_view`)."""
    import mlflow

    from eegprivacy.studies.cohort_audit import runs_view_key
    from eegprivacy.tracking.runs import EXPERIMENTS, RUNS_PAGE_QUERY

    experiment = mlflow.MlflowClient(uri).get_experiment_by_name(EXPERIMENTS["a"])
    page = (f"#/experiments/{experiment.experiment_id}/runs?{RUNS_PAGE_QUERY}&viewStateShareKey="
            f"{runs_view_key(dataset)}" if experiment else "#/")
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    return f"mlflow ui --backend-store-uri {uri} --port {port}, then open http://127.0.0.1:{port}/{page}"


def summary_line(summary: dict, counts: dict) -> str:
    """The last console line: the cohort, its non-private AUROC beside the permuted-label control (and the
    difference, what is tested), and per mechanism from which ε the release beats its matched null."""
    def ci(entry: dict, sign: str = "") -> str:
        return f"{entry['value']:{sign}.3f} [{entry['ci_low']:{sign}.3f}, {entry['ci_high']:{sign}.3f}]"

    controls = summary.get("controls") or {}
    base = summary["baseline"]["auroc"]
    gap = (controls.get("baseline_minus_permuted") or {}).get("auroc")
    permuted = (controls.get("permuted") or summary.get("permuted_labels") or {}).get("auroc")
    parts = []
    for mechanism, horizon in summary["horizons"].items():
        if isinstance(horizon, (int, float)) and math.isfinite(horizon):
            parts.append(f"{mechanism} beats its matched null from ε = {horizon:g}")
        elif horizon == "not tested":
            parts.append(f"{mechanism} not tested (too few noise seeds)")
        else:
            parts.append(f"{mechanism} beats its matched null at no ε ≤ {max(summary['config']['epsilons']):g}")
    control = (f" vs permuted-label control {ci(permuted)} (difference {ci(gap, '+')})"
               if permuted and gap else "")
    synthetic = "SYNTHETIC " if summary.get("synthetic") else ""
    return (f"{synthetic}{summary['dataset']}: {summary['cohort']['n_patients']} patients, non-private AUROC "
            f"{ci(base)}{control}, 95% intervals over {base.get('ci_over', 'subjects')}; " + "; ".join(parts)
            + f" (ε per patient, on the features; {counts['cells_computed']} cells computed, "
            f"{counts['cells_resumed']} resumed).")
