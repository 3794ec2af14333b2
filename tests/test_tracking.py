"""MLflow runs carry every required tag and refuse identifiers (temporary store per test)."""

from __future__ import annotations

import json

import mlflow
import pytest

from eegprivacy.tracking import (
    EXPERIMENTS,
    REQUIRED_TAGS,
    TrackingPolicyError,
    flatten,
    log_metrics,
    required_tags,
    start_run,
    tracking_uri,
)
from eegprivacy.tracking.runs import DATASET_DIGEST_CHARS


def _tags(**extra):
    return required_tags(study="a", stage="release", dataset="synthetic_clinical", dataset_version="ab" * 32,
                         synthetic=True, seed=3, dvc_stage="release@test", **extra)


def test_run_has_every_required_tag_and_params(tmp_path):
    assert tracking_uri().startswith(f"sqlite:///{tmp_path}")
    with start_run(study="a", tags=_tags(epsilon=1.0, mechanism="laplace"),
                   params={"privacy": {"epsilon": 1.0, "clip": 2.0}, "seed": 3}) as run:
        log_metrics({"rmse": 0.5})
    client = mlflow.MlflowClient(tracking_uri())
    stored = client.get_run(run.info.run_id)
    for tag in REQUIRED_TAGS:
        assert stored.data.tags.get(tag), tag
    assert stored.data.tags["synthetic"] == "true"
    assert stored.data.tags["epsilon"] == "1"  # one text form for numbers (tracking.runs.param_text)
    assert stored.data.params["privacy.epsilon"] == "1" and stored.data.params["privacy.clip"] == "2"
    assert stored.data.metrics["rmse"] == 0.5
    experiment = client.get_experiment(stored.info.experiment_id)
    assert experiment.name == EXPERIMENTS["a"]
    assert str(tmp_path) in experiment.artifact_location


def test_parent_and_child_runs(tmp_path):
    with start_run(study="b", tags=_tags(), run_name="sweep") as parent:
        with start_run(study="b", tags=_tags(), run_name="cell", parent_run_id=parent.info.run_id) as child:
            pass
    stored = mlflow.MlflowClient(tracking_uri()).get_run(child.info.run_id)
    assert stored.data.tags["mlflow.parentRunId"] == parent.info.run_id


def test_dataset_is_logged_as_run_input(tmp_path):
    """name = dataset, digest = the version's first 36 characters (MLflow's cap), source without a path."""
    tags = _tags()
    with start_run(study="a", tags=tags) as run:
        pass
    inputs = mlflow.MlflowClient(tracking_uri()).get_run(run.info.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    dataset, input_tags = inputs[0].dataset, {t.key: t.value for t in inputs[0].tags}
    assert dataset.name == "synthetic_clinical"
    assert dataset.digest == tags["dataset_version"][:DATASET_DIGEST_CHARS] == "ab" * 18
    assert dataset.source_type == "eegprivacy"
    assert json.loads(dataset.source) == {"uri": "eegprivacy:synthetic_clinical", "synthetic": True}
    assert str(tmp_path) not in dataset.source and "/" not in dataset.source
    assert input_tags == {"dataset_version": tags["dataset_version"], "synthetic": "true",
                          "mlflow.data.context": "release"}


def test_dataset_input_failure_never_fails_the_run(monkeypatch, caplog):
    import mlflow.tracking.client

    def refuse(*args, **kwargs):
        raise RuntimeError("store down")

    monkeypatch.setattr(mlflow.tracking.client.MlflowClient, "log_inputs", refuse)
    with start_run(study="a", tags=_tags()) as run:
        pass
    assert mlflow.MlflowClient(tracking_uri()).get_run(run.info.run_id).info.status == "FINISHED"
    assert "could not log dataset" in caplog.text


def test_missing_tag_is_refused():
    tags = _tags()
    del tags["dataset_version"]
    with pytest.raises(TrackingPolicyError, match="dataset_version"):
        with start_run(study="a", tags=tags):
            pass


@pytest.mark.parametrize("params", [
    {"patient_id": "P01"},
    {"linkage": {"hmac_key": "x"}},
    {"record": "3f" * 32},
    {"key": b"\x00\x01"},
])
def test_identifiers_and_keys_never_reach_mlflow(params):
    with pytest.raises(TrackingPolicyError):
        with start_run(study="a", tags=_tags(), params=params):
            pass
    # and nothing was created in the store
    client = mlflow.MlflowClient(tracking_uri())
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert client.search_runs(experiments) == []


def test_unknown_extra_tag_is_refused():
    with pytest.raises(TrackingPolicyError):
        _tags(colour="blue")


def test_flatten_nested_config():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_experiment_created_by_another_worker_meanwhile_is_reused(tmp_path):
    """Two workers on a fresh store both find the experiment missing; the second one's create must not fail."""
    from eegprivacy.tracking.runs import _experiment_id

    client = mlflow.MlflowClient(tracking_uri())
    created = client.create_experiment("race")  # what the other worker did between our lookup and our create

    class LateClient:
        """Looks the experiment up once before the other worker created it, then sees the store as it is."""

        def __init__(self):
            self.lookups = 0

        def get_experiment_by_name(self, name):
            self.lookups += 1
            return None if self.lookups == 1 else client.get_experiment_by_name(name)

        def create_experiment(self, name, artifact_location=None, tags=None):
            return client.create_experiment(name, artifact_location=artifact_location, tags=tags)

        def set_experiment_tag(self, experiment_id, key, value):
            client.set_experiment_tag(experiment_id, key, value)

    assert _experiment_id(LateClient(), "race") == created
    assert client.get_experiment(created).tags["mlflow.experimentKind"] == "custom_model_development"
