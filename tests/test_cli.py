"""The console script explains itself and lists datasets."""

from __future__ import annotations

import json
import subprocess
import sys

from eegprivacy.cli import build_parser, main


def test_help_lists_every_stage_and_datasets(capsys):
    help_text = build_parser().format_help()
    for command in ("datasets", "features", "dataset-version"):
        assert command in help_text
    assert "EEGPRIVACY_DATA" in help_text


def test_features_help_explains_the_stage():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = sub.choices["features"].format_help()
    assert "--dataset" in text and "notch" in text


def test_datasets_json_lists_every_registered_dataset(capsys):
    from eegprivacy.data import REGISTRY

    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["dataset"] for r in rows] == list(REGISTRY)
    synthetic = {r["dataset"]: r for r in rows}["synthetic_clinical"]
    assert synthetic["present"] is True and synthetic["synthetic"] is True and synthetic["subjects"] == 17


def test_datasets_on_the_real_mirror(data_root, capsys):
    assert main(["datasets", "--json"]) == 0
    rows = {r["dataset"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["eegmat"]["present"] is True and rows["eegmat"]["subjects"] == 36
    assert len(rows["eegmat"]["version"]) == 64
    assert rows["bnci2014_001"]["present"] is False  # no copy on this machine, and it says so


def test_console_script_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "eegprivacy.cli", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "datasets" in result.stdout
