"""Real-data loaders against the local mirror of the public EEG data (EEGPRIVACY_DATA).

Listings are checked in full; signals are read for a handful of recordings only, to keep the suite fast.
Error paths run on temporary roots built from symlinks into the mirror, with one file corrupted or removed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _fixtures_data import flip_byte, fresh_warnings, mirror_dataset, no_network  # noqa: F401

from eegprivacy.data import METADATA_COLUMNS, ChecksumMismatchError, DataMissingError, get_dataset
from eegprivacy.data.bonn import Bonn
from eegprivacy.data.eegmat import EEGMAT
from eegprivacy.data.eegmmidb import EEGBCI_FOLDER, EEGMMIDB
from eegprivacy.data.manifest import load_manifest
from eegprivacy.data.new_delhi import NewDelhi

pytestmark = pytest.mark.realdata

EEGMAT_CHANNELS = "Fp1,Fp2,F3,F4,F7,F8,T3,T4,C3,C4,T5,T6,P3,P4,O1,O2,Fz,Cz,Pz".split(",")
REST_SUBJECTS = {f"Subject{i:02d}" for i in [*range(22), 31]}


def _by_recording(ds):
    return {r.recording: r for r in ds.recordings()}


# -- eegmat ---------------------------------------------------------------------------------------------------


def test_eegmat_lists_all_subjects_with_labels_and_subject_info(data_root):
    meta = EEGMAT(root=data_root).metadata()
    assert list(meta.columns[: len(METADATA_COLUMNS)]) == METADATA_COLUMNS
    assert len(meta) == 59
    assert sorted(meta.subject.unique()) == [f"Subject{i:02d}" for i in range(36)]

    task = meta[meta.recording.str.endswith("_2")]
    rest = meta[meta.recording.str.endswith("_1")]
    assert len(task) == 36 and set(task.condition) == {"arithmetic"} and set(task.label) == {1}
    assert len(rest) == 23 and set(rest.condition) == {"rest"} and set(rest.label) == {0}
    assert set(rest.subject) == REST_SUBJECTS

    assert set(meta.n_channels) == {19} and set(meta.sfreq) == {500.0}
    assert set(meta.channels) == {",".join(EEGMAT_CHANNELS)}
    assert (task.duration_s == 62.0).all() and (rest.duration_s >= 60).all()
    assert (meta["flags"] == "").all() and not meta.synthetic.any()

    subjects = meta.drop_duplicates("subject")
    assert subjects[["age", "sex", "count_quality"]].notna().all().all()
    assert set(subjects.sex) == {"F", "M"} and subjects.age.between(10, 40).all()
    assert (subjects.count_quality == 1).sum() == 26 and (subjects.count_quality == 0).sum() == 10
    s00 = subjects.set_index("subject").loc["Subject00"]
    assert (s00.age, s00.sex, s00.count_quality) == (21, "F", 0)


def test_eegmat_listing_reads_headers_only(data_root, monkeypatch):
    import mne

    def refuse(*args, **kwargs):
        raise AssertionError("signal read while listing")

    monkeypatch.setattr(mne.io, "read_raw_edf", refuse)
    assert len(EEGMAT(root=data_root).metadata()) == 59


def test_eegmat_load_one_recording(data_root):
    raw = _by_recording(EEGMAT(root=data_root))["Subject05_2"].load()
    assert raw.ch_names == EEGMAT_CHANNELS
    assert set(raw.get_channel_types()) == {"eeg"}
    assert raw.info["sfreq"] == 500.0 and raw.n_times == 62 * 500
    data = raw.get_data()
    assert np.isfinite(data).all()
    assert 1e-7 < np.median(np.abs(data)) < 1e-3  # volts: tens of microvolts, not microvolt numbers


def test_eegmat_corrupted_file_raises_checksum_mismatch(data_root, tmp_path):
    root = mirror_dataset(data_root, tmp_path, "eegmat", copy={"Subject03_2.edf"})
    flip_byte(root / "eegmat" / "Subject03_2.edf")
    recs = _by_recording(EEGMAT(root=root))  # headers intact: listing still works
    with pytest.raises(ChecksumMismatchError, match="Subject03_2.edf"):
        recs["Subject03_2"].load()
    assert recs["Subject04_2"].load().n_times == 62 * 500  # the others are unaffected


def test_eegmat_missing_file_is_a_clear_error_without_download(data_root, tmp_path, monkeypatch, no_network):
    import pooch

    def refuse(*args, **kwargs):
        raise AssertionError("pooch.retrieve called although allow_download=False")

    monkeypatch.setattr(pooch, "retrieve", refuse)
    root = mirror_dataset(data_root, tmp_path, "eegmat", skip={"Subject07_2.edf"})
    assert "Subject07_2.edf" in EEGMAT(root=root).absent()  # a partial copy is read for what it holds...
    ds = EEGMAT(root=root, subjects=["Subject07"])  # ...until a stage asks for the subject
    assert not ds.is_available()
    with pytest.raises(DataMissingError) as err:
        ds.recordings()
    message = str(err.value)
    for needle in ("Subject07_2.edf", str(root / "eegmat" / "Subject07_2.edf"), "EEGPRIVACY_DATA",
                   "https://physionet.org/content/eegmat/1.0.0/", "allow_download=True"):
        assert needle in message
    assert ds.summary()["present"] is False


def test_eegmat_download_goes_through_pooch_with_published_hash(data_root, tmp_path, monkeypatch):
    import shutil

    import pooch

    calls = []

    def fake_retrieve(url, known_hash, fname, path, **kwargs):
        calls.append((url, known_hash))
        shutil.copyfile(data_root / "eegmat" / fname, f"{path}/{fname}")
        return f"{path}/{fname}"

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    root = mirror_dataset(data_root, tmp_path, "eegmat", skip={"Subject07_2.edf"})
    recs = EEGMAT(root=root, allow_download=True, subjects=["Subject07"]).recordings()
    sha = {e.path: e.sha256 for e in load_manifest("eegmat")}["Subject07_2.edf"]
    assert calls == [("https://physionet.org/files/eegmat/1.0.0/Subject07_2.edf", f"sha256:{sha}")]
    assert [r.recording for r in recs] == ["Subject07_1", "Subject07_2"]


# -- eegmmidb -------------------------------------------------------------------------------------------------


def _eegmmidb_files(root, runs) -> list[str]:
    """The requested runs the mirror holds, read off the folder (the mirror grows; never a fixed count)."""
    base = root / EEGBCI_FOLDER
    return sorted(p.stem for s in base.glob("S[0-9][0-9][0-9]") for r in runs
                  for p in [s / f"{s.name}R{r:02d}.edf"] if p.is_file())


def test_eegmmidb_lists_the_runs_each_subject_folder_holds(data_root, no_network):
    """A copy with some runs of some subjects (here: all 14 of S001, imagery only of the others) lists what is
    there; the requested runs a subject folder lacks are named by ``absent`` and are no error."""
    ds = EEGMMIDB(root=data_root)
    meta = ds.metadata()
    assert sorted(meta.recording) == _eegmmidb_files(data_root, ds.runs)
    assert list(meta.subject) == sorted(meta.subject)  # subject order, then run order
    listed = set(meta.recording)
    assert sorted(rel.split("/")[1].removesuffix(".edf") for rel in ds.absent()) == sorted(
        f"{s}R{r:02d}" for s in meta.subject.unique() for r in ds.runs if f"{s}R{r:02d}" not in listed)
    imagery = meta[meta.run.isin([4, 8, 12])]
    assert set(imagery.task) == {"motor_imagery"} and set(imagery.n_channels) == {64}
    assert (imagery["flags"] == "").all() and imagery.duration_s.isin([123.0, 125.0]).all()


def test_eegmmidb_explicit_subject_without_a_requested_run_is_a_clear_error(data_root, no_network):
    present = sorted(p.name for p in (data_root / EEGBCI_FOLDER).glob("S[0-9][0-9][0-9]")
                     if not (p / f"{p.name}R01.edf").exists())
    if not present:
        pytest.skip("every subject folder in the mirror holds R01")
    subject = present[0]
    assert f"{subject}/{subject}R01.edf" in EEGMMIDB(root=data_root, runs=(1,)).absent()  # no error, but named...
    ds = EEGMMIDB(root=data_root, runs=(1, 4), subjects=[int(subject[1:])])
    with pytest.raises(DataMissingError, match=rf"{subject}/{subject}R01\.edf"):  # ...until a stage asks for it
        ds.recordings()


def test_eegmmidb_s001_listing_flags_truncated_runs(data_root, no_network):
    meta = EEGMMIDB(root=data_root, subjects=[1]).metadata().set_index("recording")
    assert list(meta.index) == ["S001R01", "S001R02", "S001R04", "S001R08", "S001R12"]
    assert list(meta.run) == [1, 2, 4, 8, 12]
    assert list(meta["flags"]) == ["truncated", "truncated", "", "", ""]
    assert list(meta.duration_s) == [60.0, 60.0, 125.0, 125.0, 125.0]
    assert list(meta.task) == ["baseline", "baseline", "motor_imagery", "motor_imagery", "motor_imagery"]
    assert meta.loc["S001R04", "condition"] == "imagery_left_right_fist"
    assert set(meta.n_channels) == {64} and set(meta.sfreq) == {160.0}
    channels = meta.loc["S001R01", "channels"].split(",")
    assert {"FC5", "Fp1", "Fz", "AFz", "Iz"} <= set(channels) and not any("." in c for c in channels)


def test_eegmmidb_truncated_runs_load_with_one_warning(data_root, fresh_warnings):
    recs = _by_recording(EEGMMIDB(root=data_root, runs=[1, 2]))
    with pytest.warns(UserWarning, match="S001R01.edf is truncated") as record:
        raw = recs["S001R01"].load()
    assert len([w for w in record if "truncated" in str(w.message)]) == 1
    assert raw.n_times / raw.info["sfreq"] == 60.0
    assert len(raw.ch_names) == 64 and set(raw.get_channel_types()) == {"eeg"}
    assert np.isfinite(raw.get_data(start=raw.n_times - 160)).all()  # the last complete record reads
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second load of the same file stays quiet
        recs["S001R01"].load()
    with pytest.warns(UserWarning, match="S001R02.edf is truncated"):
        assert recs["S001R02"].load().n_times == 60 * 160


def test_eegmmidb_imagery_run_keeps_t1_t2_annotations(data_root, no_network):
    raw = _by_recording(EEGMMIDB(root=data_root, runs=[4]))["S001R04"].load()
    desc = list(raw.annotations.description)
    assert desc.count("T0") == 15 and desc.count("T1") + desc.count("T2") == 15
    assert desc.count("T1") > 0 and desc.count("T2") > 0
    assert raw.ch_names[:3] == ["FC5", "FC3", "FC1"]


def test_eegmmidb_corruption_that_is_not_truncation_raises(data_root, tmp_path):
    rel = "S001/S001R04.edf"
    root = mirror_dataset(data_root, tmp_path, EEGBCI_FOLDER, copy={rel})
    flip_byte(root / EEGBCI_FOLDER / rel)
    ds = EEGMMIDB(root=root, runs=[4], subjects=[1])
    assert ds.metadata()["flags"].tolist() == [""]
    with pytest.raises(ChecksumMismatchError, match="S001R04.edf"):
        ds.recordings()[0].load()
    assert ds.version() != EEGMMIDB(root=data_root, runs=[4], subjects=[1]).version()


def test_eegmmidb_missing_subject_is_a_clear_error(tmp_path, no_network):
    ds = EEGMMIDB(root=tmp_path)
    assert not ds.is_available()
    with pytest.raises(DataMissingError) as err:
        ds.recordings()
    message = str(err.value)
    for needle in ("S001R01.edf", str(tmp_path / EEGBCI_FOLDER), "EEGPRIVACY_DATA", "physionet.org"):
        assert needle in message


# -- Bonn and New Delhi ---------------------------------------------------------------------------------------


def test_bonn_counts_labels_and_one_load(data_root):
    ds = Bonn(root=data_root)
    meta = ds.metadata()
    assert len(meta) == 500 and meta.subject.nunique() == 500
    assert meta.groupby("set").size().to_dict() == dict.fromkeys("ABCDE", 100)
    assert meta.groupby("condition").size().to_dict()["healthy_eyes_open"] == 100
    assert meta.label.sum() == 100 and set(meta[meta.label == 1]["set"]) == {"E"}
    assert meta.epilepsy_patient.sum() == 300 and set(meta[~meta.epilepsy_patient]["set"]) == {"A", "B"}
    assert (meta["flags"] == "no_patient_ids").all()
    assert set(meta.sfreq) == {173.61} and set(meta.channels) == {"EEG"}

    raw = _by_recording(ds)["N001"].load()  # set C: upper-case .TXT
    assert raw.ch_names == ["EEG"] and raw.get_channel_types() == ["eeg"]
    assert raw.n_times == 4097 and raw.info["sfreq"] == 173.61
    data = raw.get_data()
    assert np.isfinite(data).all() and 1e-7 < np.abs(data).max() < 1e-2


def test_new_delhi_counts_and_one_load(data_root):
    ds = NewDelhi(root=data_root)
    meta = ds.metadata()
    assert meta.groupby("class").size().to_dict() == {"ictal": 48, "interictal": 50, "preictal": 48}
    assert meta.label.sum() == 48 and (meta["flags"] == "no_patient_ids").all()
    assert "ictal36" not in set(meta.subject)  # duplicates were removed from the mirror
    raw = _by_recording(ds)["preictal7"].load()
    assert raw.n_times == 1024 and raw.info["sfreq"] == 200.0 and raw.ch_names == ["EEG"]
    assert np.isfinite(raw.get_data()).all()


# -- versions and the registry --------------------------------------------------------------------------------


def test_version_is_deterministic_and_changes_with_a_byte(data_root, tmp_path):
    reference = NewDelhi(root=data_root).version()
    assert reference == NewDelhi(root=data_root).version()
    same = mirror_dataset(data_root, tmp_path / "same", "new-delhi-epilepsy")
    assert NewDelhi(root=same).version() == reference  # paths are relative: location does not matter

    rel = "ictal/ictal5.mat"
    changed = mirror_dataset(data_root, tmp_path / "changed", "new-delhi-epilepsy", copy={rel})
    flip_byte(changed / "new-delhi-epilepsy" / rel)
    ds = NewDelhi(root=changed)
    assert ds.version() != reference
    with pytest.raises(ChecksumMismatchError, match="ictal5.mat"):
        _by_recording(ds)["ictal5"].load()


@pytest.mark.parametrize("name", ["eegmmidb", "bonn", "new_delhi", "msu_schizophrenia"])
def test_registry_summary(data_root, name):
    summary = get_dataset(name, root=data_root).summary()
    assert summary["present"] is True and summary["synthetic"] is False
    assert len(summary["version"]) == 64 and summary["recordings"] > 0


def test_default_root_comes_from_the_environment(data_root, monkeypatch):
    monkeypatch.setenv("EEGPRIVACY_DATA", str(data_root))
    assert EEGMAT().root == data_root.resolve()
    assert get_dataset("eegmat").is_available()
