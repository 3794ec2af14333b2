"""The BIDS tree ``eegprivacy to-bids`` writes, as a user runs it (a subprocess): four real MSU subjects and a small
clinical folder built from real eegmat recordings.

What a reader of the tree must learn from it (issue 36, point 7): ``participants.tsv`` holds no column that is
``n/a`` for everyone; ``participants.json`` describes exactly its columns and says what each label value means
(``Levels``, in the dataset's words where it states them); every ``*_eeg.json`` names the site's mains frequency
(``PowerLineFrequency``), or ``n/a`` where it is unknown. The tree is checked by mne-bids (file names, entities,
``read_raw_bids``) and, where it is installed, by the BIDS validator (bids-validator 1.15.0 from npm; ``.ci/run``
installs it and exports ``EEGPRIVACY_BIDS_VALIDATOR``): no errors, warnings printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.realdata

VALIDATOR_ENV = "EEGPRIVACY_BIDS_VALIDATOR"
VALIDATOR_VERSION = "1.15.0"
# where .ci/run installs it when EEGPRIVACY_BIDS_VALIDATOR is not set by hand
DEFAULT_VALIDATOR = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eegprivacy"
                     / f"bids-validator-{VALIDATOR_VERSION}" / "node_modules" / ".bin" / "bids-validator")
PER_CLASS = 2  # MSU subjects per label value: 4 recordings of 60 s convert in a few seconds


def _cli(args: list[str], data_root: Path, tmp: Path) -> subprocess.CompletedProcess:
    """``eegprivacy ARGS`` in a fresh process, with the mirror and a throw-away MLflow store."""
    env = {**os.environ, "EEGPRIVACY_DATA": str(data_root), "MPLBACKEND": "Agg",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
    exe = str(Path(sys.executable).with_name("eegprivacy"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)


def _validator() -> str | None:
    """The bids-validator executable: $EEGPRIVACY_BIDS_VALIDATOR, else .ci/run's install, else one on PATH."""
    for candidate in (os.environ.get(VALIDATOR_ENV), DEFAULT_VALIDATOR, shutil.which("bids-validator")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _validate(root: Path) -> tuple[list[dict], list[dict]]:
    """(errors, warnings) of the BIDS validator on ``root``; skips the calling test without a validator."""
    exe = _validator()
    if exe is None:
        pytest.skip(f"bids-validator {VALIDATOR_VERSION} is not installed (.ci/run installs it with npm and sets "
                    f"{VALIDATOR_ENV}; or `npm install bids-validator@{VALIDATOR_VERSION}` and point "
                    f"{VALIDATOR_ENV} at node_modules/.bin/bids-validator); only the mne-bids checks ran")
    done = subprocess.run([exe, str(root), "--json"], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    errors, warnings = report["issues"]["errors"], report["issues"]["warnings"]
    for kind, issues in (("error", errors), ("warning", warnings)):
        for issue in issues:
            where = sorted({f"{f['file']['relativePath']} ({f.get('evidence') or ''})"
                            for f in issue.get("files", []) if f.get("file")})
            print(f"bids-validator {kind}: {issue['key']}: {issue.get('reason', '')} {where[:5]}")
    assert done.returncode == (1 if errors else 0), done.stderr  # the exit status agrees with the report
    return errors, warnings


def _participants(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / "participants.tsv", sep="\t", dtype=str, keep_default_na=False)


def _eeg_sidecars(root: Path) -> list[Path]:
    return sorted(root.glob("sub-*/eeg/*_eeg.json"))


@pytest.fixture(scope="module")
def msu(data_root):
    from eegprivacy.data import get_dataset

    return get_dataset("msu_schizophrenia", root=data_root)


@pytest.fixture(scope="module")
def msu_tree(msu, data_root, tmp_path_factory):
    """The first PER_CLASS subjects of each MSU class, written by ``eegprivacy to-bids --subjects ...``; with the
    labels they must carry (the tree numbers them in a random order, tests/test_to_bids_pseudonyms.py). The success
    line says which column holds the label and how many participants carry each value (issue 49)."""
    tmp = tmp_path_factory.mktemp("msu_to_bids")
    by_label: dict[int, list[str]] = {}
    for rec in msu.recordings():
        by_label.setdefault(int(rec.meta["label"]), []).append(rec.subject)
    chosen = [s for subjects in by_label.values() for s in subjects[:PER_CLASS]]
    chosen = [s for s in msu.subjects() if s in chosen]  # the tree numbers subjects in dataset order
    labels = {rec.subject: str(rec.meta["label"]) for rec in msu.recordings(chosen)}
    done = _cli(["to-bids", "--dataset", "msu_schizophrenia", "--subjects", *chosen, "--out", str(tmp / "bids")],
                data_root, tmp)
    assert done.returncode == 0, done.stderr
    assert f"wrote {len(chosen)} subjects, {len(chosen)} recordings" in done.stdout
    assert (f"the label is participants.tsv column 'label' (participants per value: 0: {PER_CLASS}, 1: {PER_CLASS}), "
            "so audit it with --label label") in done.stdout
    return tmp / "bids", [labels[s] for s in chosen]


def test_participants_tsv_has_the_label_and_no_empty_column(msu_tree):
    root, expected = msu_tree
    table = _participants(root)
    empty = [c for c in table if table[c].str.strip().str.lower().isin({"", "n/a"}).all()]
    assert empty == [], f"columns n/a for every participant: {empty}"
    assert list(table.columns) == ["participant_id", "label"]  # MSU publishes no age, sex, ...
    assert list(table["participant_id"]) == [f"sub-{i:02d}" for i in range(1, len(expected) + 1)]
    assert sorted(table["label"]) == sorted(expected) and sorted(set(expected)) == ["0", "1"]


def test_participants_json_describes_exactly_those_columns_and_the_label_levels(msu_tree):
    from eegprivacy.data.msu_schizophrenia import MSUSchizophrenia

    root, _ = msu_tree
    described = json.loads((root / "participants.json").read_text())
    assert set(described) == set(_participants(root).columns)
    label = described["label"]
    assert "msu_schizophrenia" in label["Description"]
    assert label["Levels"] == {"0": "healthy control", "1": "schizophrenia"}
    assert label["Levels"] == dict(MSUSchizophrenia.label_levels["label"])  # the loader's statement, verbatim


def test_every_eeg_sidecar_names_the_mains_frequency(msu_tree):
    root, expected = msu_tree
    sidecars = _eeg_sidecars(root)
    assert len(sidecars) == len(expected)
    assert {p.name: json.loads(p.read_text())["PowerLineFrequency"] for p in sidecars} == {
        p.name: 50 for p in sidecars}  # Moscow


def test_mne_bids_reads_the_tree_back(msu_tree):
    """File names parse to entities that rebuild the same path, and ``read_raw_bids`` reads each recording with
    the sidecar's line frequency, the 16 MSU channels and all 7680 samples."""
    from mne_bids import BIDSPath, find_matching_paths, get_entities_from_fname, read_raw_bids

    from eegprivacy.data.msu_schizophrenia import CHANNELS, N_SAMPLES, SFREQ

    root, expected = msu_tree
    ids = set(_participants(root)["participant_id"])
    paths = find_matching_paths(root, datatypes="eeg", suffixes="eeg", extensions=".edf")
    assert len(paths) == len(expected)
    for bp in paths:
        entities = get_entities_from_fname(bp.fpath, on_error="raise")
        assert f"sub-{entities['subject']}" in ids and entities["task"] == "rest"
        rebuilt = BIDSPath(**{k: v for k, v in entities.items() if v is not None}, datatype="eeg", suffix="eeg",
                           extension=".edf", root=root)
        assert rebuilt.fpath == bp.fpath
        raw = read_raw_bids(rebuilt, verbose="error")
        assert raw.info["line_freq"] == 50 and raw.info["sfreq"] == SFREQ
        assert raw.ch_names == CHANNELS and raw.n_times == N_SAMPLES


def test_bids_validator_finds_no_error(msu_tree):
    errors, _ = _validate(msu_tree[0])
    assert errors == []


def test_bids_validator_flags_a_broken_sidecar(msu_tree, tmp_path):
    """The check above has teeth: the same tree with one non-numeric PowerLineFrequency is an error."""
    tree = Path(shutil.copytree(msu_tree[0], tmp_path / "broken"))
    sidecar = _eeg_sidecars(tree)[0]
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "PowerLineFrequency": "fifty"}))
    errors, _ = _validate(tree)
    assert any("PowerLineFrequency" in str(issue) for issue in errors), errors


def test_clinical_folder_line_freq_is_written_only_when_given(data_root, tmp_path, capsys):
    """A user's folder has no known site: ``n/a`` (valid BIDS) unless ``--dataset-arg line_freq=60`` says so; its
    label Levels state the keyword rule."""
    from bad_inputs import corpus

    from eegprivacy.data.clinical_folder import ClinicalFolder

    entries = corpus.clean_entries(data_root)[:2]
    entries[0].report = "Epileptic seizure recorded."
    folder = corpus.write_folder(tmp_path / "folder", entries)
    trees = {}
    for name, extra in (("unknown", []), ("given", ["line_freq=60"])):
        trees[name] = tmp_path / name
        done = _cli(["to-bids", "--dataset-arg", f"folder={folder}", *extra, "--out", str(trees[name])],
                    data_root, tmp_path)
        assert done.returncode == 0, done.stderr
    for name, hz in (("unknown", "n/a"), ("given", 60)):
        assert [json.loads(p.read_text())["PowerLineFrequency"] for p in _eeg_sidecars(trees[name])] == [hz, hz]
    table = _participants(trees["unknown"])
    assert list(table.columns) == ["participant_id", "label"] and sorted(table["label"]) == ["0", "1"]
    levels = json.loads((trees["unknown"] / "participants.json").read_text())["label"]["Levels"]
    assert levels == dict(ClinicalFolder.label_levels["label"]) and "seizure" in levels["1"]
    if _validator() is not None:
        assert _validate(trees["unknown"])[0] == []  # n/a is valid BIDS
    # a column whose meaning the dataset does not state gets the generic text, for each value present; a --key-file
    # orders the subject numbers and is written nowhere (not in the tree, not on the console)
    key = tmp_path / "numbering.key"
    key.write_bytes(b"a private key of the steward, 32b")
    done = _cli(["to-bids", "--dataset-arg", f"folder={folder}", "--label-column", "n_reports", "--out",
                 str(tmp_path / "generic"), "--key-file", str(key)], data_root, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "column 'n_reports'" in done.stdout and "--label n_reports" in done.stdout
    assert all(key.read_bytes() not in p.read_bytes() for p in (tmp_path / "generic").rglob("*") if p.is_file())
    assert "private key" not in done.stdout + done.stderr
    key.write_bytes(b"short")
    from eegprivacy.cli import main

    assert main(["to-bids", "--dataset-arg", f"folder={folder}", "--out", str(tmp_path / "never"), "--key-file",
                 str(key)]) == 2
    assert "--key-file" in capsys.readouterr().err and not (tmp_path / "never").exists()
    described = json.loads((tmp_path / "generic" / "participants.json").read_text())
    assert described["n_reports"]["Levels"] == {"1": "label value 1"} and "label" not in described


def test_unknown_subject_is_refused_and_nothing_written(data_root, tmp_path):
    done = _cli(["to-bids", "--dataset", "msu_schizophrenia", "--subjects", "S10W1", "nosuch", "--out",
                 str(tmp_path / "bids")], data_root, tmp_path)
    assert done.returncode == 2
    assert "msu_schizophrenia has no subject(s) nosuch" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "bids").exists()


def test_a_bad_line_freq_is_refused(data_root, tmp_path):
    from bad_inputs import corpus

    folder = corpus.write_folder(tmp_path / "folder", corpus.clean_entries(data_root)[:1])
    done = _cli(["to-bids", "--dataset-arg", f"folder={folder}", "line_freq=fifty", "--out", str(tmp_path / "b")],
                data_root, tmp_path)
    assert done.returncode == 2 and "line_freq must be the mains frequency in Hz" in done.stderr
    assert not (tmp_path / "b").exists()
