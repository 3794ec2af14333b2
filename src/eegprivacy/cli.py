"""``eegprivacy``: one subcommand per pipeline stage (DVC calls these) plus ``datasets``.

Stage subcommands are the modules in ``experiments/``; each declares NAME, HELP, add_arguments and run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import eegprivacy
from eegprivacy.paths import DATA_ENV, data_root, repo_root

EPILOG = f"""
data: real public EEG is read from ${DATA_ENV} (else <repo>/data/raw); files are checked against shipped sha256
manifests and nothing is downloaded unless a loader is asked to. Tracking: MLflow in sqlite:///mlflow.db
(override with MLFLOW_TRACKING_URI); `make ui` opens it. Pipeline: `make reproduce` runs `dvc repro`.
"""


def _experiments_dir() -> Path | None:
    for candidate in (Path(eegprivacy.__file__).resolve().parents[2] / "experiments", repo_root() / "experiments"):
        if (candidate / "__init__.py").exists():
            return candidate
    return None


def stage_modules() -> list:
    """Import every stage module under experiments/ (sorted by file name)."""
    folder = _experiments_dir()
    if folder is None:
        return []
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    modules = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = importlib.import_module(f"experiments.{path.stem}")
        if all(hasattr(module, attr) for attr in ("NAME", "HELP", "add_arguments", "run")):
            modules.append(module)
    return modules


def cmd_datasets(args) -> int:
    """Print every registered dataset: local presence, version and counts."""
    from eegprivacy.data import REGISTRY, get_dataset

    rows = []
    for name in REGISTRY:
        if name == "clinical_folder":
            rows.append({"dataset": name, "present": None, "note": "your own data: needs --folder (see docs)"})
            continue
        try:
            dataset = get_dataset(name)
            row = dataset.summary()
            if not row["present"]:
                try:  # the loader's own message says which file is missing and where to get it
                    dataset.version()
                except Exception as err:  # noqa: BLE001
                    row["note"] = str(err).split(";")[0]
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
        print(f"{row['dataset']:<20} {str(row.get('synthetic', '-')).lower():<9} {present:<8} "
              f"{row.get('subjects') or '-':>8} {row.get('recordings') or '-':>10}  {note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eegprivacy",
        description="Measure how much private information leaks from EEG data and models, and how well "
                    "differential privacy stops it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"eegprivacy {eegprivacy.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    datasets = sub.add_parser("datasets", help="list datasets, whether each is present locally, version, subjects",
                              description=cmd_datasets.__doc__)
    datasets.add_argument("--json", action="store_true", help="machine-readable output")
    datasets.set_defaults(func=cmd_datasets)
    for module in stage_modules():
        stage = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(stage)
        stage.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
