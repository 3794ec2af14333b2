"""BIDS datasets (eegprivacy.data.bids): round trip of real eegmat recordings through ``to_bids`` and
``BIDSDataset``, every bad input a clear error naming the file or column, and a failing conversion leaves nothing."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path

import mne
import numpy as np
import pandas as pd
import pytest

from eegprivacy.data import DataMissingError, EEGDataset, Recording, get_dataset
from eegprivacy.data.bids import BIDSDataset, BIDSLabelError, to_bids
from eegprivacy.data.clinical_folder import RecordingReadError

pytestmark = pytest.mark.realdata
SUBJECTS = ["Subject00", "Subject01", "Subject02"]  # eegmat count quality 0, 1, 1
LABEL = "count_quality"


@pytest.fixture(scope="module")
def eegmat(data_root):
    return get_dataset("eegmat", root=data_root)


@pytest.fixture(scope="module")
def converted(eegmat, tmp_path_factory):
    """3 subjects x 2 recordings of eegmat as BIDS: tasks rest/arithmetic from the conditions, label = count quality."""
    root = tmp_path_factory.mktemp("bids") / "eegmat_bids"
    start = time.perf_counter()
    conversion = to_bids(eegmat, root, label_column=LABEL, task=None, subjects=SUBJECTS)
    seconds = time.perf_counter() - start
    print(f"to_bids: {len(conversion.recordings)} recordings in {seconds:.1f} s")
    return conversion


@pytest.fixture
def tree(converted, tmp_path):
    """A private copy of the converted tree to damage."""
    return Path(shutil.copytree(converted.root, tmp_path / "bids"))


def _participants(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / "participants.tsv", sep="\t", dtype=str, keep_default_na=False)


def _set_column(root: Path, column: str, values: list[str]) -> None:
    table = _participants(root)
    table[column] = values
    table.to_csv(root / "participants.tsv", sep="\t", index=False)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------------------
# Round trip
# ---------------------------------------------------------------------------------------------------------
def test_roundtrip_keeps_labels_channels_rate_and_signal(eegmat, converted):
    start = time.perf_counter()
    bids = get_dataset("bids", root=converted.root, label=LABEL)
    back = bids.metadata().set_index("recording")
    original = eegmat.metadata().set_index("recording")
    assert sorted(converted.subjects) == SUBJECTS and bids.subjects() == ["sub-01", "sub-02", "sub-03"]
    assert len(back) == 6 and set(back["task"]) == {"rest", "arithmetic"} and back["run"].isna().all()
    recs = {r.recording: r for r in bids.recordings()}
    for rec in eegmat.recordings(SUBJECTS):
        bids_id = converted.recordings[(rec.subject, rec.recording)]
        mine, theirs = back.loc[bids_id], original.loc[rec.recording]
        assert mine["subject"] == converted.subjects[rec.subject]
        assert mine["label"] == theirs[LABEL] and mine["condition"] == str(theirs[LABEL])
        assert mine["task"] == theirs["condition"]
        for col in ("sfreq", "n_channels", "channels"):
            assert mine[col] == theirs[col], col
        assert mine["duration_s"] == pytest.approx(theirs["duration_s"])
        raw = recs[bids_id].load()
        assert isinstance(raw, mne.io.BaseRaw) and set(raw.get_channel_types()) == {"eeg"}
        src = rec.load().get_data()
        got = raw.get_data()
        assert got.shape == src.shape
        # EDF stores 16-bit integers over each channel's range: a value may move by one quantisation step
        step = (src.max(axis=1) - src.min(axis=1)) / 65535
        assert np.all(np.abs(got - src) <= step[:, None] * 1.01 + 1e-12)
    print(f"BIDSDataset read back 6 recordings in {time.perf_counter() - start:.1f} s")
    # the tree's name is its dataset_description.json Name (to_bids writes the source dataset's)
    assert bids.name == "eegmat" and bids.synthetic is False and len(bids.version()) == 64


def test_tree_holds_no_source_subject_ids(converted):
    text = "\n".join(p.read_text(errors="ignore") for p in converted.root.rglob("*") if p.suffix in (".tsv", ".json"))
    assert not any(s in text for s in SUBJECTS) and not any(s in str(p) for p in converted.root.rglob("*")
                                                           for s in SUBJECTS)
    assert sorted(_participants(converted.root)[LABEL]) == ["0", "1", "1"]  # numbered in a random order
    for edf in converted.root.rglob("*.edf"):
        assert b"Subject0" not in edf.read_bytes()[:256 * 21]  # no source id in the EDF header


def test_several_recordings_of_one_task_become_runs(eegmat, tmp_path):
    conv = to_bids(eegmat, tmp_path / "runs", label_column=LABEL, task="mentalstate", subjects=["Subject01"],
                   keep_subject_ids=True)
    assert conv.subjects == {"Subject01": "sub-Subject01"}
    bids = BIDSDataset(conv.root, label=LABEL, task="mentalstate")
    md = bids.metadata()
    assert list(md["recording"]) == ["sub-Subject01_task-mentalstate_run-1", "sub-Subject01_task-mentalstate_run-2"]
    assert list(md["run"]) == ["1", "2"] and list(md["label"]) == [1, 1]


def test_brainvision_bdf_and_fif_recordings_are_read(eegmat, tmp_path):
    from mne_bids import BIDSPath, write_raw_bids

    root = tmp_path / "formats"
    rec = eegmat.recordings(["Subject00"])[1]
    raw = rec.load().load_data().crop(0, 10)
    raw = mne.io.RawArray(raw.get_data(), mne.create_info(raw.ch_names, raw.info["sfreq"], "eeg"), verbose="error")
    for sub, fmt in (("01", "BrainVision"), ("02", "BrainVision"), ("03", "BDF")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no events, BrainVision/BDF notes
            write_raw_bids(raw, BIDSPath(subject=sub, task="rest", datatype="eeg", root=root), format=fmt,
                           allow_preload=True, verbose=False)
    # mne-bids writes EEG as BrainVision/EDF/BDF/EEGLAB only; a FIF recording (as some trees hold) is put in by hand
    eeg = root / "sub-02" / "eeg"
    for f in eeg.glob("sub-02_task-rest_eeg.*"):
        f.unlink()
    raw.save(eeg / "sub-02_task-rest_eeg.fif", verbose="error")
    _set_column(root, "group", ["HC", "SZ", "HC"])
    md = BIDSDataset(root, label="group", label_map={"HC": 0, "SZ": 1}).metadata()
    assert list(md["format"]) == ["vhdr", "fif", "bdf"] and list(md["label"]) == [0, 1, 0]
    assert set(md["n_channels"]) == {19} and set(md["sfreq"]) == {500.0}
    for r in BIDSDataset(root, label="group", label_map={"HC": 0, "SZ": 1}).recordings():
        np.testing.assert_allclose(r.load().get_data()[:, :5000], raw.get_data()[:, :5000], atol=1e-6)


def test_label_map_reads_string_values(tree):
    _set_column(tree, LABEL, ["HC", "SZ", "SZ"])
    with pytest.raises(BIDSLabelError, match=r"column 'count_quality' has value\(s\) 'HC', 'SZ' outside 0/1.*"
                                             r"label_map=\{'HC': 0, 'SZ': 1\}"):
        BIDSDataset(tree, label=LABEL).metadata()
    md = BIDSDataset(tree, label=LABEL, label_map={"HC": 0, "SZ": 1}).metadata()
    assert list(md.groupby("subject")["label"].first()) == [0, 1, 1]
    assert list(md.groupby("subject")["condition"].first()) == ["HC", "SZ", "SZ"]


def test_task_filter(converted):
    md = BIDSDataset(converted.root, label=LABEL, task="rest").metadata()
    assert list(md["recording"]) == ["sub-01_task-rest", "sub-02_task-rest", "sub-03_task-rest"]


# ---------------------------------------------------------------------------------------------------------
# Version
# ---------------------------------------------------------------------------------------------------------
def test_version_follows_bytes_not_location(tree, tmp_path):
    before = BIDSDataset(tree, label=LABEL).version()
    moved = Path(shutil.move(str(tree), str(tmp_path / "elsewhere" / "moved")))
    assert BIDSDataset(moved, label=LABEL).version() == before
    edf = moved / "sub-02" / "eeg" / "sub-02_task-rest_eeg.edf"
    data = bytearray(edf.read_bytes())
    data[-3] ^= 0x01
    edf.write_bytes(bytes(data))
    assert BIDSDataset(moved, label=LABEL).version() != before


# ---------------------------------------------------------------------------------------------------------
# Bad input: a clear error naming the file or column
# ---------------------------------------------------------------------------------------------------------
def test_missing_participants_tsv(tree):
    (tree / "participants.tsv").unlink()
    ds = BIDSDataset(tree, label=LABEL)
    assert not ds.is_available()
    with pytest.raises(DataMissingError, match=rf"{tree}/participants\.tsv not found: a BIDS dataset needs a "
                                               r"participants\.tsv .* label column 'count_quality'"):
        ds.recordings()


def test_label_column_missing(tree):
    with pytest.raises(BIDSLabelError, match=r"participants\.tsv has no label column 'diagnosis'; columns present: "
                                             r"\['participant_id', .*'count_quality'\]"):
        BIDSDataset(tree, label="diagnosis").metadata()


def test_third_label_value(tree):
    _set_column(tree, LABEL, ["0", "1", "2"])
    with pytest.raises(BIDSLabelError, match=r"participants\.tsv: column 'count_quality' has value\(s\) '2' outside "
                                             r"0/1, for participant\(s\) sub-03; the label must be binary"):
        BIDSDataset(tree, label=LABEL).metadata()
    _set_column(tree, LABEL, ["HC", "SZ", "MCI"])
    with pytest.raises(BIDSLabelError, match=r"column 'count_quality' has value\(s\) 'MCI' outside label_map .*"
                                             r"participant\(s\) sub-03"):
        BIDSDataset(tree, label=LABEL, label_map={"HC": 0, "SZ": 1}).metadata()


def test_missing_label_is_an_error_not_an_exclusion(tree):
    _set_column(tree, LABEL, ["0", "n/a", "1"])
    with pytest.raises(BIDSLabelError, match=r"column 'count_quality' has no value \(n/a or empty\) for "
                                             r"participant\(s\) sub-02"):
        BIDSDataset(tree, label=LABEL).metadata()


def test_subject_without_recordings(tree):
    for f in (tree / "sub-02" / "eeg").glob("*_eeg.edf"):
        f.unlink()
    with pytest.raises(DataMissingError, match=r"subject folder .*/sub-02 holds no eeg recording of any task"):
        BIDSDataset(tree, label=LABEL).metadata()
    with pytest.raises(DataMissingError, match=r"sub-01 holds no eeg recording of task 'sleep'"):
        BIDSDataset(tree, label=LABEL, task="sleep").metadata()


def test_participant_without_folder_and_folder_without_participant(tree):
    shutil.rmtree(tree / "sub-03")
    with pytest.raises(DataMissingError, match=r"participant\(s\) sub-03 in .*participants\.tsv have no folder"):
        BIDSDataset(tree, label=LABEL).metadata()
    shutil.copytree(tree / "sub-02", tree / "sub-04")
    table = _participants(tree)
    table[table.participant_id != "sub-03"].to_csv(tree / "participants.tsv", sep="\t", index=False)
    with pytest.raises(BIDSLabelError, match=r"subject folder\(s\) sub-04 under .* are not listed in "
                                             r".*participants\.tsv"):
        BIDSDataset(tree, label=LABEL).metadata()


@pytest.mark.parametrize("damage,pattern", [
    ("header", r"sub-01_task-rest_eeg\.edf: EDF header field 'number of signals' is 'x9', not a number; the header "
               r"is corrupted — copy or export the recording again, or remove it from the BIDS tree"),
    ("empty", r"sub-01_task-rest_eeg\.edf is empty \(0 bytes\)"),
    ("cut", r"sub-01_task-rest_eeg\.edf: 100 bytes, shorter than the 256-byte EDF header"),
])
def test_unreadable_recording_names_the_file(tree, damage, pattern):
    edf = tree / "sub-01" / "eeg" / "sub-01_task-rest_eeg.edf"
    data = bytearray(edf.read_bytes())
    if damage == "header":
        data[252:256] = b"x9  "
    edf.write_bytes(bytes(data) if damage == "header" else b"" if damage == "empty" else bytes(data[:100]))
    with pytest.raises(RecordingReadError, match=pattern):
        BIDSDataset(tree, label=LABEL).recordings()


def test_unreadable_brainvision_names_the_file(tree):
    eeg = tree / "sub-01" / "eeg"
    (eeg / "sub-01_task-rest_eeg.edf").unlink()
    (eeg / "sub-01_task-rest_eeg.vhdr").write_text("not a BrainVision header\n")
    with pytest.raises(RecordingReadError, match=r"cannot read .*sub-01_task-rest_eeg\.vhdr with mne-bids"):
        BIDSDataset(tree, label=LABEL).recordings()


# ---------------------------------------------------------------------------------------------------------
# The converter: all or nothing
# ---------------------------------------------------------------------------------------------------------
class _Failing(EEGDataset):
    """Two good eegmat recordings (rest, label 0), then one whose file cannot be read."""

    name = "failing"

    def __init__(self, eegmat):
        self.eegmat = eegmat

    def _recordings(self):
        good = [r for r in self.eegmat.recordings(["Subject00", "Subject01"]) if r.meta["label"] == 0]

        def broken():
            raise OSError("disk gone")

        return good + [Recording("failing", "Subject09", "r1", broken, {"label": 1, "condition": "x"})]

    def _version(self):
        return "0"


def test_failed_conversion_leaves_nothing(eegmat, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(RecordingReadError, match=r"converting failing recording Subject09/r1 to BIDS: OSError: disk "
                                                 r"gone; nothing was written to .*/work/out"):
        to_bids(_Failing(eegmat), work / "out", task="rest")
    assert _listing(work) == []  # no tree, no hidden temporary


def test_existing_target_is_kept_unless_overwrite(eegmat, converted, tmp_path):
    work = tmp_path / "work"
    target = Path(shutil.copytree(converted.root, work / "out"))
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    listing = _listing(work)
    with pytest.raises(FileExistsError, match=r"out already exists; pass overwrite=True"):
        to_bids(eegmat, target, label_column=LABEL, subjects=["Subject02"])
    with pytest.raises(RecordingReadError):
        to_bids(_Failing(eegmat), target, task="rest", overwrite=True)
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before and _listing(work) == listing
    to_bids(eegmat, target, label_column=LABEL, task=None, subjects=["Subject02"], overwrite=True)
    assert BIDSDataset(target, label=LABEL).subjects() == ["sub-01"]
    assert [p.name for p in work.iterdir()] == ["out"]  # the old tree and the temporary are gone


def test_label_must_be_one_value_per_subject(eegmat, tmp_path):
    with pytest.raises(ValueError, match=r"carry 'label' values \['0', '1'\]; participants\.tsv holds one label per "
                                         r"participant"):
        to_bids(eegmat, tmp_path / "work" / "out", subjects=["Subject00"])
    assert not (tmp_path / "work").exists()


def test_clinical_folder_converts_to_bids(eegmat, tmp_path):
    """The documented path for a user's non-BIDS folder: clinical_folder -> to_bids -> bids."""
    from eegprivacy.data.clinical_folder import write_clinical_folder

    rest = [r for r in eegmat.recordings(["Subject00", "Subject01"]) if r.meta["label"] == 0]

    class Rest(EEGDataset):
        name = "eegmat_rest"

        def _recordings(self):
            return rest

        def _version(self):
            return "0"

    reports = {"Subject00": "Epileptic seizure recorded.", "Subject01": "Normal EEG."}
    write_clinical_folder(Rest(), tmp_path / "clinic", fmt_cycle=("edf", "fif"), report=lambda r: reports[r.subject])
    cohort = get_dataset("clinical_folder", folder=tmp_path / "clinic")
    conv = to_bids(cohort, tmp_path / "clinic_bids", label_column="label", task="rest")
    bids = get_dataset("bids", root=conv.root, label="label")
    md = bids.metadata()
    assert list(md["recording"]) == ["sub-01_task-rest", "sub-02_task-rest"]
    seizure = {conv.subjects["Subject00"]: 1, conv.subjects["Subject01"]: 0}  # numbered in a random order
    assert list(md["label"]) == [seizure[s] for s in md["subject"]]
    assert list(md["channels"]) == list(cohort.metadata()["channels"])
    assert not any("Subject0" in p.read_text(errors="ignore") for p in conv.root.rglob("*.tsv"))


def test_truncated_edf_is_read_flagged_and_warned(tree):
    from eegprivacy.data import DataQualityWarning

    edf = tree / "sub-01" / "eeg" / "sub-01_task-arithmetic_eeg.edf"
    edf.write_bytes(edf.read_bytes()[:-5000])
    with pytest.warns(DataQualityWarning, match=r"sub-01_task-arithmetic_eeg\.edf: truncated \(the file holds fewer "
                                                r"data records than its header declares\)"):
        md = BIDSDataset(tree, label=LABEL).metadata().set_index("recording")
    assert md.loc["sub-01_task-arithmetic", "flags"] == "truncated" and md.loc["sub-01_task-rest", "flags"] == ""


def test_a_synthetic_datasets_tree_reads_back_synthetic_under_its_name(tmp_path):
    """A tree written from a SYNTHETIC dataset keeps the label when read back: its name (dataset_description.json
    Name, "SYNTHETIC <dataset>") and ``synthetic``, which every report title and MLflow tag follows."""
    from eegprivacy.data import get_dataset

    cohort = get_dataset("synthetic_clinical")
    to_bids(cohort, tmp_path / "bids", subjects=cohort.subjects()[:3])
    tree = BIDSDataset(tmp_path / "bids", label="label")
    assert tree.name == "SYNTHETIC synthetic_clinical" and tree.synthetic is True
    description = json.loads((tmp_path / "bids" / "dataset_description.json").read_text())
    (tmp_path / "bids" / "dataset_description.json").write_text(json.dumps({**description, "Name": "Ward 3"}))
    real = BIDSDataset(tmp_path / "bids", label="label")
    assert real.name == "Ward 3" and real.synthetic is False
