"""MLflow runs that follow the project's conventions (see ``shared/spec/conventions.md``).

Every run carries the required tags, the full resolved config as params, and never anything that identifies a
person: :func:`assert_no_identifiers` refuses keys and values that look like pseudonyms or linkage keys.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from eegprivacy.paths import repo_root

EXPERIMENTS = {
    "a": "study-a-dp-release",
    "b": "study-b-federated-mia",
    "c": "study-c-embedding-audit",
    "shared": "shared-features",
}

REQUIRED_TAGS = ("study", "stage", "dataset", "dataset_version", "synthetic", "seed", "git_commit", "dvc_stage")
OPTIONAL_TAGS = ("epsilon", "delta", "mechanism", "model", "attack", "attacker", "split", "encoder", "defense")

# Names that must never reach MLflow (params, tags, metric keys): identifiers, pseudonyms, linkage secrets.
_FORBIDDEN = re.compile(r"(patient_?id|pseudonym|global_?id|linkage_?key|hmac_?key|secret|subject_?name)", re.I)


class TrackingPolicyError(ValueError):
    """A run was about to log something the conventions forbid (missing tag, identifier, key)."""


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the repo's ``sqlite:///mlflow.db``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def artifact_root() -> Path:
    """Artifacts live next to the sqlite store, one folder per experiment."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts"
    return repo_root() / "mlartifacts"


def git_commit() -> str:
    """HEAD's sha, with ``-dirty`` when the work tree has uncommitted changes to tracked files."""
    try:
        root = repo_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{sha}-dirty" if dirty else sha
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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
            raise TrackingPolicyError(f"{what} key {key!r} names an identifier or linkage secret; it must not be logged")
        if isinstance(value, (bytes, bytearray)):
            raise TrackingPolicyError(f"{what} {key!r} holds raw bytes (a key?); it must not be logged")
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) and key != "dataset_version" \
                and not str(key).endswith(("version", "sha256", "config_hash")):
            raise TrackingPolicyError(f"{what} {key!r} looks like a pseudonym/hash of an identifier")


def _experiment_id(client, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = (artifact_root() / name).as_uri()
    return client.create_experiment(name, artifact_location=location)


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
    tags.update({k: str(v) for k, v in extra.items() if v is not None})
    return tags


@contextlib.contextmanager
def start_run(*, study: str, tags: Mapping[str, str], params: Mapping[str, Any] | None = None,
              run_name: str | None = None, parent_run_id: str | None = None) -> Iterator[Any]:
    """Open a run in the study's experiment with validated tags and flattened params.

    ``study`` is a key of EXPERIMENTS. Nested (child) runs pass ``parent_run_id``.
    """
    import mlflow

    missing = [t for t in REQUIRED_TAGS if not tags.get(t)]
    if missing:
        raise TrackingPolicyError(f"run is missing required tag(s): {missing}")
    assert_no_identifiers(tags, "tag")
    flat = flatten(params or {})
    assert_no_identifiers(flat, "param")

    mlflow.set_tracking_uri(tracking_uri())
    client = mlflow.MlflowClient()
    experiment_id = _experiment_id(client, EXPERIMENTS[study])
    run_tags = dict(tags)
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=run_tags,
                          nested=mlflow.active_run() is not None) as run:
        if flat:
            # MLflow caps one batch at 100 params and a value at 6000 characters.
            items = [(k, str(v)[:6000]) for k, v in flat.items()]
            for start in range(0, len(items), 100):
                mlflow.log_params(dict(items[start:start + 100]))
        yield run


def log_metrics(metrics: Mapping[str, float], step: int | None = None) -> None:
    """Log numeric metrics on the active run, refusing identifier-like keys."""
    import mlflow

    assert_no_identifiers(metrics, "metric")
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)
