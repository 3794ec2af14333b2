"""MLflow runs that follow the project's conventions (see ``shared/spec/conventions.md``).

Every run carries the required tags, the full resolved config as params, and never anything that identifies a
person: :func:`assert_no_identifiers` refuses keys and values that look like pseudonyms or linkage keys.

Every run also records its owner process (``owner_host``: a hash of the host name, ``owner_pid``, ``owner_start``:
boot id and process start time), so a run left RUNNING by a process that was killed can be told from one that is
still working: :func:`fail_orphaned_runs` marks the former FAILED, and every top-level :func:`start_run` calls it.
A run that ended FAILED or KILLED is reopened, not duplicated, when the same run is started again
(:func:`resumable_run`): a sweep interrupted and rerun keeps one parent and one child per cell.

Numbers in params and tags are written in one canonical text form (:func:`param_text`: ``10.0`` → ``'10'``), so a
filter such as ``params.epsilon = '10'`` finds the runs whatever type the config held.

One idea over about 700 lines: the project's contract for an MLflow run, that is its tags, params, identifier
checks, owner and resumption, all applied by :func:`start_run`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import numbers
import os
import re
import socket
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from eegprivacy.paths import repo_root

log = logging.getLogger(__name__)

EXPERIMENTS = {
    "a": "study-a-dp-release",
    "b": "study-b-federated-mia",
    "c": "study-c-embedding-audit",
    "shared": "shared-features",
}

REQUIRED_TAGS = ("study", "stage", "dataset", "dataset_version", "synthetic", "seed", "git_commit", "dvc_stage")
OPTIONAL_TAGS = ("epsilon", "delta", "mechanism", "model", "attack", "attacker", "split", "encoder", "defense",
                 "cohort", "preprocessing")  # cohort: study C's audited cohort (issue 21), beside dataset for
# cross-cohort queries; preprocessing: study B's client preprocessing option (federated_control)

# Names that must never reach MLflow (params, tags, metric keys): identifiers, pseudonyms, linkage secrets.
_FORBIDDEN = re.compile(r"(patient_?id|pseudonym|global_?id|linkage_?key|hmac_?key|secret|subject_?name)", re.I)


# Tags naming the process that owns a run (see fail_orphaned_runs).
OWNER_TAGS = ("owner_host", "owner_pid", "owner_start")
# Tags whose values are numbers written by param_text even when a caller passes them as text ("1.0" -> "1").
NUMERIC_TAGS = ("epsilon", "delta")
# The convention's tags a reopened run must share with the run being started (resumable_run): all but git_commit,
# which changes with every edit of the work tree while the run's cells and config stay what they were.
RESUME_MATCH_TAGS = tuple(t for t in (*REQUIRED_TAGS, *OPTIONAL_TAGS) if t != "git_commit")
# How many times a run was reopened after it ended FAILED or KILLED (resumable_run), or was reused by its
# idempotency key.
RESUMED_TAG = "resumed"
# A run started with an idempotency key carries it in this tag; starting a run with the same key again reopens that
# run, whatever its status (keyed_run), so a rerun of the same inputs and parameters adds no run.
IDEMPOTENCY_TAG = "idempotency_key"

# MLflow 3's UI opens an experiment by its tag ``mlflow.experimentKind``. In mlflow 3.17's bundle
# (server/js/build/static/js/5439.*.chunk.js, the hook that routes an experiment page by its tag) the tab is
# ``let l=s.fM.Runs; Y===s.Gk.GENAI_DEVELOPMENT&&(l=...fM.Overview:fM.Traces)``: every kind but
# ``genai_development`` opens the runs table, and ``o9`` maps ``custom_model_development`` to the
# "Machine learning" workflow (main.*.js: ``CUSTOM_MODEL_DEVELOPMENT="custom_model_development"``, labelled
# "Machine learning"; ``case Gk.CUSTOM_MODEL_DEVELOPMENT: ... return g$.MACHINE_LEARNING``). Without the tag the UI
# guesses the kind from traces and runs, and on a fresh experiment asks in a dialog.
# But in 3.17 the UI's workflow switch comes first: the page follows ``workflowType`` (the address, then the
# browser's stored choice, default ``genai``), and the tag only where the switch is off. Seen in Chromium on a fresh
# profile: a tagged experiment still opened on the GenAI Overview. So the links the project prints carry
# ``?workflowType=machine_learning`` (RUNS_PAGE_QUERY), and the tag is set for UIs that read it.
RUNS_PAGE_QUERY = "workflowType=machine_learning"
# A runs-table view (filter, order, columns) MLflow's UI opens for ``viewStateShareKey=<key>`` in the page's address
# is the experiment tag ``mlflow.sharedViewState.<key>`` (mlflow 3.17 bundle, main.*.js: ``U="viewStateShareKey",
# $="mlflow.sharedViewState."``), a JSON object of search facets and UI state; plain JSON is read as is.
SHARED_VIEW_TAG = "mlflow.sharedViewState."
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


class TrackingPolicyError(ValueError):
    """A run was about to log something the conventions forbid (missing tag, identifier, key)."""


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the repo's ``sqlite:///mlflow.db``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def portable_uri(uri: str, root: Path | None = None) -> str:
    """``uri`` as a committed report may print it, the same on every machine: a sqlite store inside the
    repository (``root``, default :func:`~eegprivacy.paths.repo_root`) relative to it (``sqlite:///mlflow.db``, the
    conventions' form, which MLflow reads from the repository root), a server's address without its credentials,
    anything else as configured."""
    from urllib.parse import urlsplit, urlunsplit

    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if path.is_absolute():
            try:
                relative = path.resolve().relative_to((root or repo_root()).resolve())
            except ValueError:
                return uri
            return f"sqlite:///{relative.as_posix()}"
        return uri
    parts = urlsplit(uri)
    if parts.netloc and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return uri


def artifact_root() -> Path | None:
    """Artifacts live next to the sqlite store, one folder per experiment.

    None for any other store (an ``http(s)://`` tracking server above all): a server keeps artifacts where its
    ``--artifacts-destination`` says and hands out ``mlflow-artifacts:/`` locations; a path on this machine would
    make clients write beside themselves instead and the server could not serve them.
    """
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts"
    return None


def git_commit() -> str:
    """HEAD's sha of the checkout this package runs from (``-dirty`` when tracked files have uncommitted changes),
    whatever the working directory; for a package installed from a wheel, which has no checkout,
    ``eegprivacy==<version>`` (what the code was)."""
    import eegprivacy

    root = Path(eegprivacy.__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return f"eegprivacy=={eegprivacy.__version__}"
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{sha}-dirty" if dirty else sha
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def param_text(value: Any) -> str:
    """The one text form of a param or tag value: a number as its shortest exact form, an integral one without a
    decimal point (``10.0`` → ``'10'``, ``0.5`` → ``'0.5'``, ``1e-05`` → ``'1e-05'``, ``inf`` → ``'inf'``), inside
    lists, tuples and dicts too (``[1.0, 10.0]`` → ``'[1, 10]'``, still a Python literal); anything else as
    ``str``. ``float()`` reads every number back."""
    if value is None or isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        x = float(value)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if x.is_integer() and abs(x) < 1e16:  # beyond, repr's exponent form is the short one
            return str(int(x))
        # a NumPy float32/float16 prints its own shortest form ("0.1"), which float() would lengthen
        return repr(x) if isinstance(value, float) else str(value)
    if isinstance(value, (list, tuple, Mapping)):
        return _literal_text(value)
    return str(value)


def _literal_text(value: Any) -> str:
    """``repr`` of a container with its numbers in :func:`param_text` form."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_literal_text(k)}: {_literal_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return param_text(value)
    return repr(value)


def _tag_text(key: str, value: Any) -> str:
    """A tag's value: :func:`param_text`, and an ε or δ given as text in the same canonical form."""
    if key in NUMERIC_TAGS and isinstance(value, str):
        try:
            return param_text(float(value))
        except ValueError:
            return value
    return param_text(value)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"a.b.c": value}``, the form MLflow params take."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def assert_no_identifiers(mapping: Mapping[str, Any], what: str = "params") -> None:
    """Refuse keys naming identifiers/keys, and values that look like 64-hex pseudonyms (HMAC-SHA256)."""
    for key, value in mapping.items():
        if _FORBIDDEN.search(str(key)):
            raise TrackingPolicyError(f"{what} key {key!r} names an identifier or linkage secret; it must not be "
                                      "logged")
        if isinstance(value, (bytes, bytearray)):
            raise TrackingPolicyError(f"{what} {key!r} holds raw bytes (a key?); it must not be logged")
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) and key != "dataset_version" \
                and not str(key).endswith(("version", "sha256", "config_hash")):
            raise TrackingPolicyError(f"{what} {key!r} looks like a pseudonym/hash of an identifier")


def _experiment_id(client, name: str) -> str:
    """The experiment's id, created (with the experiment kind, see EXPERIMENT_KIND) when missing; an existing
    experiment without a kind gets it."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        root = artifact_root()
        try:
            return client.create_experiment(name, artifact_location=(root / name).as_uri() if root else None,
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException as err:  # two workers on one fresh store both found it missing
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)
    _ensure_experiment_kind(client, experiment, name)
    return experiment.experiment_id


_KIND_CHECKED: set[tuple[str, str]] = set()  # (tracking URI, experiment name): looked at once per process


def _ensure_experiment_kind(client, experiment, name: str) -> None:
    """Tag an experiment created before the kind was set (or by someone else) with EXPERIMENT_KIND, once per
    process and experiment; a kind already set (a person's choice in the UI) is kept, and a store that refuses
    the tag only warns."""
    from mlflow.exceptions import MlflowException

    key = (str(getattr(client, "tracking_uri", None) or tracking_uri()), name)
    if key in _KIND_CHECKED:
        return
    _KIND_CHECKED.add(key)
    if (getattr(experiment, "tags", None) or {}).get(EXPERIMENT_KIND_TAG):
        return
    try:
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    except MlflowException as err:
        log.warning("could not set %s on experiment %s (%s)", EXPERIMENT_KIND_TAG, name, err)


def required_tags(*, study: str, stage: str, dataset: str, dataset_version: str, synthetic: bool, seed: int | None,
                  dvc_stage: str | None = None, **extra: Any) -> dict[str, str]:
    """The convention's tag set; ``extra`` may add OPTIONAL_TAGS (epsilon, mechanism, model, ...)."""
    unknown = set(extra) - set(OPTIONAL_TAGS)
    if unknown:
        raise TrackingPolicyError(f"unknown tag(s) {sorted(unknown)}; allowed extras: {OPTIONAL_TAGS}")
    tags = {
        "study": study,
        "stage": stage,
        "dataset": dataset,
        "dataset_version": dataset_version,
        "synthetic": str(bool(synthetic)).lower(),
        "seed": "none" if seed is None else str(seed),
        "git_commit": git_commit(),
        "dvc_stage": dvc_stage or os.environ.get("EEGPRIVACY_DVC_STAGE", "manual"),
    }
    tags.update({k: _tag_text(k, v) for k, v in extra.items() if v is not None})
    return tags


def _host_key() -> str:
    """This machine, as a short hash: enough to tell hosts apart without writing a machine name to the store."""
    return hashlib.sha256(f"eegprivacy/host/{socket.gethostname()}".encode()).hexdigest()[:16]


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), None if there is no such process or no /proc."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses


def _process_start(pid: int) -> str:
    """``<boot id>:<start time in clock ticks>``: with the pid it names one process, so a pid reused after a
    crash or a reboot is not mistaken for the run's owner. Empty where /proc cannot say (not Linux)."""
    fields = _stat(pid)
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    return f"{boot}:{fields[19]}" if fields else ""


def owner_tags() -> dict[str, str]:
    """The tags that say which process owns a run."""
    return {"owner_host": _host_key(), "owner_pid": str(os.getpid()), "owner_start": _process_start(os.getpid())}


def _owner_alive(pid: int, start: str) -> bool:
    """Whether the process that opened a run on this host still runs (a reused pid is not it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a process of another user holds that pid; the start time below still tells whether it is ours
    if not Path("/proc/self/stat").exists():
        return True  # no /proc: os.kill is all we know
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):  # exited since, or a zombie its parent has not reaped yet
        return False
    return not start or _process_start(pid) == start


def fail_orphaned_runs(study: str, client=None) -> list[str]:
    """Mark FAILED the runs of ``study``'s experiment that are RUNNING but whose owner process on this host has
    died (killed, crashed, machine rebooted), so a dead sweep never looks like one in progress. Runs owned by a
    live process, by another host, or with no owner tags are left alone. Returns the run ids marked."""
    import mlflow

    client = client or mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS[study])
    if experiment is None:
        return []
    query = f"attributes.status = 'RUNNING' and tags.owner_host = '{_host_key()}'"
    running, token = [], None
    while True:  # collect first: marking runs while paging would shift the pages under the query
        page = client.search_runs([experiment.experiment_id], filter_string=query, max_results=1000,
                                  page_token=token)
        running += page
        token = page.token
        if not token:
            break
    failed = []
    for run in running:
        tags = run.data.tags
        try:
            pid = int(tags.get("owner_pid", ""))
        except ValueError:
            continue
        if pid <= 0 or _owner_alive(pid, tags.get("owner_start", "")):
            continue
        client.set_tag(run.info.run_id, "failed_reason", "owner process exited without closing the run")
        client.set_terminated(run.info.run_id, status="FAILED")
        failed.append(run.info.run_id)
    if failed:
        log.warning("marked %d run(s) of %s FAILED: their process on this host is gone", len(failed),
                    EXPERIMENTS[study])
    return failed


def end_own_runs(study: str, status: str = "KILLED") -> list[str]:
    """End every run of ``study``'s experiment that this process still holds open, as ``status``: MLflow's active
    runs, and any run the store shows RUNNING under this process's owner tags (one created just as Ctrl-C or
    SIGTERM arrived, before MLflow handed it back, which no ``with`` block could close). Returns the run ids the
    store held open."""
    import mlflow

    while mlflow.active_run() is not None:
        mlflow.end_run(status)
    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS[study])
    if experiment is None:
        return []
    mine = owner_tags()
    query = " and ".join(["attributes.status = 'RUNNING'", *(f"tags.{k} = '{v}'" for k, v in mine.items())])
    ended = [run.info.run_id for run in client.search_runs([experiment.experiment_id], filter_string=query,
                                                            max_results=1000)]
    for run_id in ended:
        client.set_terminated(run_id, status=status)
    return ended


# MLflow stores a dataset digest in a 36-character column (mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE) and
# refuses longer ones; a dataset version is a 64-hex sha256, so the input keeps its first 36 characters (144 bits)
# and carries the full version as the input tag ``dataset_version`` (the run's tag of that name has it too).
DATASET_DIGEST_CHARS = 36


@functools.cache
def _project_source():
    """The dataset source class, built on first use so importing this module does not import MLflow."""
    from mlflow.data.dataset_source import DatasetSource

    class ProjectDatasetSource(DatasetSource):
        """Where a dataset comes from, named by the project's registry (``eegprivacy:<dataset>``) rather than by
        a path: a path on this machine can name a user or a hospital share, and means nothing elsewhere. The
        data are never loaded through MLflow, so ``load`` is not offered."""

        def __init__(self, uri: str, synthetic: bool):
            self.uri, self.synthetic = uri, synthetic

        @staticmethod
        def _get_source_type() -> str:
            return "eegprivacy"

        def load(self, **kwargs):
            raise NotImplementedError("load datasets with eegprivacy.data.get_dataset, not through MLflow")

        @staticmethod
        def _can_resolve(raw_source: Any) -> bool:
            return False

        @classmethod
        def _resolve(cls, raw_source: Any):
            raise NotImplementedError

        def to_dict(self) -> dict[str, Any]:
            return {"uri": self.uri, "synthetic": self.synthetic}

        @classmethod
        def from_dict(cls, source_dict: dict[Any, Any]):
            return cls(source_dict["uri"], bool(source_dict.get("synthetic")))

    return ProjectDatasetSource


def _log_dataset_input(client, run_id: str, tags: Mapping[str, str]) -> None:
    """Record the run's dataset as an MLflow input (name, digest, source), so the UI's dataset column and the
    dataset filters show what each run read. One store call; a failure only warns, never fails the run."""
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    name, version = tags.get("dataset"), tags.get("dataset_version")
    if not name or not version:
        return
    synthetic = tags.get("synthetic") == "true"
    try:
        source = _project_source()(f"eegprivacy:{name}", synthetic)
        dataset = MetaDataset(source, name=name, digest=version[:DATASET_DIGEST_CHARS])
        input_tags = [InputTag("dataset_version", version), InputTag("synthetic", str(synthetic).lower()),
                      InputTag(MLFLOW_DATASET_CONTEXT, tags.get("stage") or "training")]
        client.log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), input_tags)])
    except Exception as err:  # noqa: BLE001 - the dataset is already in the run's tags; this is a convenience
        log.warning("could not log dataset %s as an MLflow input (%s: %s)", name, type(err).__name__, err)


# Runs this process created (not resumed): a child started under one of them has nothing to resume, so
# start_run skips the store query; a parent leaves the set when one of its children fails.
_FRESH_PARENTS: set[str | None] = set()


def _count(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def search_literal(text: str) -> str | None:
    """``text`` as a string literal of MLflow's search syntax, None when it holds both kinds of quotes."""
    if "'" not in text:
        return f"'{text}'"
    return f'"{text}"' if '"' not in text else None


def _owner_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process that last held a run is this one or has exited (on this host); a run of another
    host, of a live process, or without owner tags is not ours to reopen."""
    if tags.get("owner_host") != _host_key():
        return False
    try:
        pid = int(tags.get("owner_pid", ""))
    except ValueError:
        return False
    start = tags.get("owner_start", "")
    if pid == os.getpid() and (not start or start == _process_start(pid)):
        return True
    return pid > 0 and not _owner_alive(pid, start)


def resumable_run(client, experiment_id: str, run_name: str | None, parent_run_id: str | None,
                  tags: Mapping[str, str], params: Mapping[str, str]):
    """The run that :func:`start_run` reopens instead of creating a new one, or None.

    The rule: the newest run of the experiment with the same run name, the same parent (none for a top-level
    run), status FAILED or KILLED, its owner process gone (this host; or this very process), the same value of
    every convention tag (RESUME_MATCH_TAGS: the required and optional tags but ``git_commit``; the owner tags
    are not compared) and no param that differs from or is missing in ``params`` (a run killed before it logged
    its params has a subset). Runs without a name are never resumed. A top-level run is looked up after
    :func:`fail_orphaned_runs`, so a run whose process was killed with SIGKILL is FAILED by then."""
    name = search_literal(run_name) if run_name else None
    if name is None:
        return None
    query = f"attributes.run_name = {name}"
    if parent_run_id:
        query += f" and tags.mlflow.parentRunId = '{parent_run_id}'"
    runs = client.search_runs([experiment_id], filter_string=query, max_results=1000,
                              order_by=["attributes.start_time DESC"])
    for run in runs:
        run_tags, run_params = run.data.tags, run.data.params
        if run.info.status not in ("FAILED", "KILLED") or run.info.run_name != run_name:
            continue
        if run_tags.get("mlflow.parentRunId") != (parent_run_id or None):
            continue
        if any(run_tags.get(t) != tags.get(t) for t in RESUME_MATCH_TAGS):
            continue
        if any(params.get(k) != v for k, v in run_params.items()):
            continue
        if _owner_gone(run_tags):
            return run
    return None


def keyed_run(client, experiment_id: str, key: str):
    """The newest run of the experiment tagged with idempotency key ``key`` (:data:`IDEMPOTENCY_TAG`), whatever its
    status, or None; a run still RUNNING in another live process is not reused (two processes must not share a
    run)."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.{IDEMPOTENCY_TAG} = '{key}'", max_results=20,
                              order_by=["attributes.start_time DESC"])
    for run in runs:
        if run.info.status != "RUNNING" or _owner_gone(run.data.tags):
            return run
    return None


@contextlib.contextmanager
def start_run(*, study: str, tags: Mapping[str, str], params: Mapping[str, Any] | None = None,
              run_name: str | None = None, parent_run_id: str | None = None,
              idempotency_key: str | None = None) -> Iterator[Any]:
    """Open a run in the study's experiment with validated tags and flattened params.

    ``study`` is a key of EXPERIMENTS. Nested (child) runs pass ``parent_run_id``; a run started while another is
    active is that run's child. A top-level run first marks the experiment's orphaned runs FAILED
    (:func:`fail_orphaned_runs`). With ``idempotency_key`` (a hash of everything the run's results depend on), the
    run of that key is reopened whatever its status (:func:`keyed_run`): rerunning the same inputs and parameters
    adds no run. Else a FAILED or KILLED run of the same name, parent, tags and params is reopened rather than
    duplicated (:func:`resumable_run`). Either way the tag ``resumed`` counts the reopenings. Param values and the
    ε/δ tags are written by :func:`param_text`. The tags' dataset is also logged as the run's MLflow dataset input
    (:func:`_log_dataset_input`). Ctrl-C (KeyboardInterrupt, which the audit's SIGTERM handler raises too) ends
    the run KILLED.
    """
    import mlflow

    missing = [t for t in REQUIRED_TAGS if not tags.get(t)]
    if missing:
        raise TrackingPolicyError(f"run is missing required tag(s): {missing}")
    assert_no_identifiers(tags, "tag")
    flat = flatten(params or {})
    assert_no_identifiers(flat, "param")

    uri = tracking_uri()
    if uri.startswith("sqlite:///"):  # a store named in a folder that does not exist yet (audit-cohort's OUTPUT_DIR)
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    experiment_id = _experiment_id(client, EXPERIMENTS[study])
    if mlflow.active_run() is None:
        fail_orphaned_runs(study, client)
    elif parent_run_id is None:  # started inside another run: its child, as MLflow nests it
        parent_run_id = mlflow.active_run().info.run_id
    tags = {k: _tag_text(k, v) for k, v in tags.items()}
    # MLflow caps a param value at 6000 characters.
    texts = {k: param_text(v)[:6000] for k, v in flat.items()}
    run_tags = {**tags, **owner_tags()}
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    previous = None
    if idempotency_key:
        run_tags[IDEMPOTENCY_TAG] = idempotency_key
    # a run created new by this process has no earlier children to reuse or resume
    if idempotency_key and parent_run_id not in _FRESH_PARENTS:
        previous = keyed_run(client, experiment_id, idempotency_key)
    if previous is None and parent_run_id not in _FRESH_PARENTS:
        previous = resumable_run(client, experiment_id, run_name, parent_run_id, tags, texts)
    if previous is not None:
        _FRESH_PARENTS.discard(previous.info.run_id)  # reopened: its earlier children are there to reuse
        run_tags[RESUMED_TAG] = str(_count(previous.data.tags.get(RESUMED_TAG)) + 1)
        if "failed_reason" in previous.data.tags:
            client.delete_tag(previous.info.run_id, "failed_reason")
        log.info("resuming %s run %s (%s)", previous.info.status, run_name, previous.info.run_id)
    with mlflow.start_run(run_id=previous.info.run_id if previous else None,
                          experiment_id=None if previous else experiment_id, run_name=run_name, tags=run_tags,
                          nested=mlflow.active_run() is not None) as run:
        if previous is None:
            _FRESH_PARENTS.add(run.info.run_id)
        _log_dataset_input(client, run.info.run_id, tags)
        # Params a resumed run already holds are not sent again (equal by resumable_run's rule).
        items = [(k, v) for k, v in texts.items() if previous is None or k not in previous.data.params]
        for start in range(0, len(items), 100):  # MLflow caps one batch at 100 params
            mlflow.log_params(dict(items[start:start + 100]))
        try:
            yield run
        except BaseException as err:
            # this run failed: a retry under the same parent may resume it, so look it up from now on
            _FRESH_PARENTS.discard(parent_run_id)
            if isinstance(err, KeyboardInterrupt):  # Ctrl-C: KILLED, as the UI should show it (MLflow says FAILED)
                try:
                    mlflow.end_run("KILLED")
                except Exception as store_err:  # noqa: BLE001 - e.g. sqlite locked by the interrupted write
                    # the interrupt, not this, is what the caller must see; end_own_runs or the next start ends it
                    log.info("could not mark run %s KILLED yet (%s)", run.info.run_id, store_err)
            raise


def share_view(study: str, key: str, search_filter: str, metric_columns: list[str]) -> None:
    """Store the runs table's view for ``viewStateShareKey=key`` on the study's experiment: the runs ``search_filter``
    selects, newest first, with ``metric_columns`` as the columns shown, each as wide as its name (the UI's
    default width cuts a name after about 12 characters), and MLflow's attribute columns (source, models, dataset)
    left out. A store that refuses the tag only warns."""
    import json

    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS[study])
    if experiment is None:
        return
    columns = [f"metrics.`{name}`" for name in metric_columns]
    # the UI applies a width only to a column its columnOrder lists
    state = {"searchFilter": search_filter, "orderByKey": "attributes.start_time", "orderByAsc": False,
             "selectedColumns": columns, "columnOrder": columns,
             "columnWidths": {c: 30 + 7 * len(name) for c, name in zip(columns, metric_columns)}}
    try:
        client.set_experiment_tag(experiment.experiment_id, SHARED_VIEW_TAG + key, json.dumps(state))
    except MlflowException as err:
        log.warning("could not store the runs view %s on experiment %s (%s)", key, EXPERIMENTS[study], err)


def log_metrics(metrics: Mapping[str, float], step: int | None = None) -> None:
    """Log numeric metrics on the active run, refusing identifier-like keys."""
    import mlflow

    assert_no_identifiers(metrics, "metric")
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


def log_to_named_run(study: str, run_name: str, metrics: Mapping[str, float] | None = None, artifacts=(),
                     tags: Mapping[str, str] | None = None) -> None:
    """Add metrics, tags and artifacts to the newest run of that name in the study's experiment: a stage writes its
    summary tables after its sweeps' parent runs have closed and attaches them here. Non-finite metrics are
    skipped, names are made MLflow-safe, and nothing happens when no such run exists."""
    import math

    import mlflow

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS[study])
    runs = client.search_runs([experiment.experiment_id], f"attributes.run_name = '{run_name}'",
                              order_by=["attributes.start_time DESC"], max_results=1) if experiment else []
    if not runs:
        return
    run_id = runs[0].info.run_id
    safe = {"".join(ch if ch.isalnum() or ch in "_-./ " else "_" for ch in str(k)): float(v)
            for k, v in (metrics or {}).items() if v is not None and math.isfinite(float(v))}
    assert_no_identifiers(safe, "metric")
    for key, value in safe.items():
        client.log_metric(run_id, key, value)
    safe_tags = {"".join(ch if ch.isalnum() or ch in "_-./ " else "_" for ch in str(k)): _tag_text(str(k), v)
                 for k, v in (tags or {}).items()}
    assert_no_identifiers(safe_tags, "tag")
    for key, value in safe_tags.items():
        client.set_tag(run_id, key, value)
    for path in artifacts:
        if Path(path).exists():
            client.log_artifact(run_id, str(path))


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)


def search_runs(uri: str, experiment: str, filter_string: str):
    """``mlflow.search_runs`` of one experiment in the store at ``uri`` (a DataFrame), leaving the process's
    tracking URI as it was."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        return mlflow.search_runs(experiment_names=[experiment], filter_string=filter_string)
    finally:
        mlflow.set_tracking_uri(previous)


def finished_stage_runs(uri: str, experiment: str, stage: str):
    """Every finished run of ``stage`` in one experiment (:func:`search_runs`)."""
    return search_runs(uri, experiment, f"tags.stage = '{stage}' and attributes.status = 'FINISHED'")


def dvc_stages_with_runs(uri: str | None = None) -> set[str]:
    """Every ``dvc_stage`` tag value among the store's finished runs (all experiments): which DVC stages have
    left runs there. An empty set when the store has none (or does not exist yet)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri or tracking_uri())
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    found: set[str] = set()
    if not experiment_ids:
        return found
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string="attributes.status = 'FINISHED'",
                                  max_results=5000, page_token=token)
        found.update(run.data.tags["dvc_stage"] for run in page if "dvc_stage" in run.data.tags)
        token = page.token
        if not token:
            return found


def has_finished_run(study: str, uri: str | None = None, **tags: str) -> bool:
    """Whether the study's experiment already holds a finished run with all these tag values (so a stage that
    reruns on every ``dvc repro``, such as the data-version check, logs each distinct result once)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri or tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENTS[study])
    if experiment is None:
        return False
    clauses = ["attributes.status = 'FINISHED'", *(f"tags.{k} = '{_tag_text(k, v)}'" for k, v in tags.items())]
    return bool(client.search_runs([experiment.experiment_id], filter_string=" and ".join(clauses), max_results=1))
