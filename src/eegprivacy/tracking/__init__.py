"""Tracking layer: MLflow runs per the project's conventions (tags, params, no identifiers)."""

from eegprivacy.tracking.runs import (
    EXPERIMENTS,
    OPTIONAL_TAGS,
    OWNER_TAGS,
    REQUIRED_TAGS,
    TrackingPolicyError,
    assert_no_identifiers,
    fail_orphaned_runs,
    flatten,
    git_commit,
    log_artifact,
    log_metrics,
    required_tags,
    start_run,
    tracking_uri,
)

__all__ = [
    "EXPERIMENTS",
    "OPTIONAL_TAGS",
    "OWNER_TAGS",
    "REQUIRED_TAGS",
    "TrackingPolicyError",
    "assert_no_identifiers",
    "fail_orphaned_runs",
    "flatten",
    "git_commit",
    "log_artifact",
    "log_metrics",
    "required_tags",
    "start_run",
    "tracking_uri",
]
