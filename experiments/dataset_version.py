"""Stage ``dataset_version``: write a dataset's version so DVC reruns downstream stages when its bytes change."""

from __future__ import annotations

import json

from eegprivacy.atomic import write_text_atomic
from eegprivacy.data import get_dataset
from eegprivacy.params import load_params

NAME = "version"
HELP = "Verify a dataset against its manifest and write its version (sha256 over path, size, sha256) to JSON."


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="registry name, e.g. eegmat (see `eegprivacy datasets`)")
    parser.add_argument("--params", default="params/features.yaml",
                        help="params file whose features.datasets.<name> holds the dataset's constructor arguments")
    parser.add_argument("--out", required=True, help="JSON file to write, e.g. data/versions/eegmat.json")


def run(args) -> int:
    kwargs = (load_params(args.params, "features").get("datasets") or {}).get(args.dataset) or {}
    dataset = get_dataset(args.dataset, **kwargs)
    info = {"dataset": dataset.name, "version": dataset.version(), "synthetic": dataset.synthetic,
            "subjects": len(dataset.subjects()), "recordings": len(dataset.recordings())}
    write_text_atomic(args.out, json.dumps(info, indent=2) + "\n")
    print(f"{dataset.name}: version {info['version'][:16]}…, {info['subjects']} subjects, "
          f"{info['recordings']} recordings")
    return 0
