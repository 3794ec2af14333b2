"""Stage ``dataset_version``: verify a dataset against its manifest and write its version (sha256 over path, size,
sha256 of every file the pipeline reads, e.g. eegmmidb's imagery runs 4, 8, 12) to JSON, so DVC reruns everything
downstream when its bytes change; one MLflow run records each version of each dataset the pipeline saw.

A dataset that reads whatever part of its public file list a copy holds (eegmat, eegmmidb: it has ``absent()``)
also gets ``n_recordings_listed``, ``n_recordings_present`` and ``absent`` (the public file names it lacks) in the
JSON, and the two counts as MLflow params and metrics, so a cut-down copy is on record, never silent."""

from __future__ import annotations

import json

from eegprivacy.atomic import write_text_atomic
from eegprivacy.data import get_dataset
from eegprivacy.data._local import presence
from eegprivacy.signal.table import FeaturesParams
from eegprivacy.studies.federated.config import FederatedMIAConfig
from eegprivacy.tracking import log_metrics, required_tags, start_run
from eegprivacy.tracking.runs import has_finished_run


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="registry name, e.g. eegmat (see `eegprivacy datasets`)")
    parser.add_argument("--params", default="params/features.yaml",
                        help="params file whose features.datasets.<name> holds the dataset's constructor arguments")
    parser.add_argument("--federated-params", default="params/federated_mia.yaml",
                        help="params file whose federated_mia.datasets.<name>.dataset holds a study-B-only dataset's "
                             "constructor arguments (eegmmidb)")
    parser.add_argument("--out", required=True, help="JSON file to write, e.g. data/versions/eegmat.json")


def dataset_kwargs(name: str, features_params: str, federated_params: str) -> dict:
    """The constructor arguments the pipeline builds dataset ``name`` with: ``features.datasets.<name>``, or, for a
    study-B-only cohort (eegmmidb), ``federated_mia.datasets.<name>.dataset``; {} when neither names it."""
    features = FeaturesParams.load(features_params, "features")
    if name in features.datasets:
        return features.dataset_kwargs(name)
    grid = FederatedMIAConfig.load(federated_params, "federated_mia")
    return dict(grid.datasets[name].dataset or {}) if name in grid.datasets else {}


def run(args) -> int:
    kwargs = dataset_kwargs(args.dataset, args.params, args.federated_params)
    dataset = get_dataset(args.dataset, **kwargs)
    info = {"dataset": dataset.name, "version": dataset.version(), "synthetic": dataset.synthetic,
            "subjects": len(dataset.subjects()), "recordings": len(dataset.recordings())}
    info.update(presence(dataset))  # a partial copy says how much of the public list it holds and what it lacks
    counts = {key: info[key] for key in ("n_recordings_listed", "n_recordings_present") if key in info}
    write_text_atomic(args.out, json.dumps(info, indent=2) + "\n")
    tags = required_tags(study="shared", stage="dataset_version", dataset=dataset.name,
                         dataset_version=info["version"], synthetic=dataset.synthetic,
                         seed=kwargs.get("seed") if dataset.synthetic else None,
                         dvc_stage=f"dataset_version@{dataset.name}")
    # DVC reruns this stage every time (always_changed); one run per (dataset, version) is enough.
    if not has_finished_run("shared", dvc_stage=tags["dvc_stage"], dataset_version=info["version"]):
        with start_run(study="shared", tags=tags, run_name=f"dataset-version-{dataset.name}",
                       params={"dataset": {"name": dataset.name, **kwargs, **counts}}):
            log_metrics({"subjects": info["subjects"], "recordings": info["recordings"], **counts})
    listed = f" of {info['n_recordings_listed']} listed" if "n_recordings_listed" in info else ""
    print(f"{dataset.name}: version {info['version'][:16]}…, {info['subjects']} subjects, "
          f"{info['recordings']} recordings{listed}")
    if info.get("absent"):
        print(f"{dataset.name}: absent from this copy: {', '.join(info['absent'])}")
    return 0
