"""The clinical-folder loader: round trip from the SYNTHETIC clinical cohort, formats, and clear errors."""

from __future__ import annotations

import h5py
import mne
import numpy as np
import pandas as pd
import pytest
from scipy.io import savemat

from eegprivacy.data import DataMissingError, get_dataset
from eegprivacy.data.clinical_folder import (
    ClinicalFolder,
    normalise_channel_name,
    write_clinical_folder,
    write_recording,
)
from eegprivacy.data.synthetic import SyntheticClinical, SyntheticMotorImagery

FS = 250.0
NAMES = ["Fp1", "Cz", "O2"]


def _small_subset(ds):
    """A positive patient plus negatives at both sampling rates, fewest recordings first (keeps tests fast)."""
    md = ds.metadata()
    size = md.groupby("subject").size()
    rate = md.groupby("subject")["sfreq"].agg(lambda s: tuple(sorted(set(s))))
    label = md.groupby("subject")["label"].first()
    pick = [size[label == 1].idxmin()]
    for sfreq in (250.0, 500.0):
        pool = size[(label == 0) & rate.map(lambda r, s=sfreq: r == (s,))]
        pick.append(pool.idxmin())
    return pick


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory):
    ds = SyntheticClinical()
    subjects = _small_subset(ds)
    folder = tmp_path_factory.mktemp("clinical")
    csv = write_clinical_folder(ds, folder, subjects=subjects)
    return ds, subjects, folder, csv


def _signal(n_ch=3, n=2500, seed=0):
    return np.random.default_rng(seed).standard_normal((n_ch, n)) * 20e-6


def _minimal_folder(folder, files, reports=None):
    rows = [{"patient_id": f"p{i}", "hospital": "h", "file": f, "report": (reports or {}).get(f, "Normal.")}
            for i, f in enumerate(files)]
    pd.DataFrame(rows).to_csv(folder / "metadata.csv", index=False)


# ---------------------------------------------------------------------------------------------------------
# Round trip
# ---------------------------------------------------------------------------------------------------------
def test_roundtrip_reads_back_the_cohort(roundtrip):
    ds, subjects, folder, csv = roundtrip
    cf = ClinicalFolder(folder)
    assert set(cf.subjects()) == set(subjects)
    original = ds.metadata().set_index(["subject", "recording"]).loc[subjects]
    back = cf.metadata().set_index(["subject", "recording"])
    assert sorted(back.index) == sorted(original.index)
    back = back.loc[original.index]
    for col in ("label", "condition", "sfreq", "n_channels", "channels", "hospital", "report_positive", "sex"):
        assert list(back[col]) == list(original[col]), col
    np.testing.assert_allclose(back["duration_s"], original["duration_s"])
    assert set(back["label"]) == {0, 1} and set(back["sfreq"]) == {250.0, 500.0}
    assert set(back["format"]) == {"edf", "fif", "mat", "h5"}
    assert "report" not in back.columns


def test_roundtrip_signals_match_within_edf_quantisation(roundtrip):
    ds, subjects, folder, _ = roundtrip
    cf = ClinicalFolder(folder)
    originals = {(r.subject, r.recording): r for r in ds.recordings(subjects)}
    seen = set()
    for rec in cf.recordings():
        if rec.meta["format"] in seen:
            continue
        seen.add(rec.meta["format"])
        a, b = originals[(rec.subject, rec.recording)].load(), rec.load()
        assert isinstance(b, mne.io.RawArray)
        assert b.ch_names == a.ch_names and b.info["sfreq"] == a.info["sfreq"]
        assert set(b.get_channel_types()) == {"eeg"}
        assert b.info["subject_info"] is None and b.info["meas_date"] is None
        # 16-bit EDF over each channel's range: well under 0.05 µV for this data
        np.testing.assert_allclose(b.get_data(), a.get_data(), rtol=0, atol=5e-8)
    assert seen == {"edf", "fif", "mat", "h5"}


def test_roundtrip_keeps_synthetic_label_and_versions(roundtrip):
    _, _, folder, csv = roundtrip
    cf = get_dataset("clinical_folder", folder=folder)
    assert cf.synthetic is True and "SYNTHETIC" in cf.description
    md = cf.metadata()
    assert md["synthetic"].all() and all("synthetic" in f.split(";") for f in md["flags"])
    assert cf.is_available()
    version = cf.version()
    assert len(version) == 64 and ClinicalFolder(folder).version() == version
    # any changed byte (here: one report) changes the version
    table = pd.read_csv(csv, dtype=str, keep_default_na=False)
    table.loc[0, "report"] += " "
    table.to_csv(csv, index=False)
    try:
        assert ClinicalFolder(folder).version() != version
    finally:
        table.loc[0, "report"] = table.loc[0, "report"][:-1]
        table.to_csv(csv, index=False)


def test_relative_folder_against_root_and_custom_keywords(roundtrip):
    _, subjects, folder, _ = roundtrip
    cf = ClinicalFolder(folder.name, root=folder.parent, positive_keywords=["normal"], negative_keywords=[])
    labels = cf.metadata().groupby("subject")["label"].first()
    assert set(labels.index) == set(subjects)
    default = ClinicalFolder(folder).metadata().groupby("subject")["label"].first()
    assert not labels.equals(default)  # the keywords, not stored labels, decide


def test_motor_imagery_annotations_survive_edf_and_fif(tmp_path):
    ds = SyntheticMotorImagery(n_subjects=1, n_sessions=2, n_trials_per_class=3)
    write_clinical_folder(ds, tmp_path, fmt_cycle=("edf", "fif"))
    recs = ClinicalFolder(tmp_path).recordings()
    assert [r.meta["format"] for r in recs] == ["edf", "fif"]
    for rec, orig in zip(recs, ds.recordings()):
        raw, want = rec.load(), orig.load()
        assert rec.meta["label"] == 0 and rec.meta["synthetic"]  # no reports: every patient reads as 0
        assert list(raw.annotations.description) == list(want.annotations.description)
        np.testing.assert_allclose(raw.annotations.onset, want.annotations.onset, atol=1e-3)


# ---------------------------------------------------------------------------------------------------------
# Formats and channel names
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw_name", "expected"),
    [("EEG FP1-REF", "Fp1"), ("eeg cz-le", "Cz"), ("T3", "T7"), ("EEG T6-REF", "P8"), ("O2", "O2"),
     ("FCz", "FCz"), ("ECG", None), ("Photic", None), ("EEG 001", None)],
)
def test_channel_name_normalisation(raw_name, expected):
    assert normalise_channel_name(raw_name) == expected


def test_edf_hospital_labels_are_normalised_and_non_eeg_dropped(tmp_path):
    info = mne.create_info(["EEG FP1-REF", "EEG T3-REF", "EEG O2-REF", "ECG EKG"], FS, "eeg")
    raw = mne.io.RawArray(_signal(4), info, verbose="error")
    write_recording(raw, tmp_path / "a.edf", "edf")
    _minimal_folder(tmp_path, ["a.edf"])
    rec = ClinicalFolder(tmp_path).recordings()[0]
    assert rec.meta["channels"] == "Fp1,T7,O2"
    assert "dropped_nonstandard_channels" in rec.meta["flags"]
    loaded = rec.load()
    assert loaded.ch_names == ["Fp1", "T7", "O2"]
    np.testing.assert_allclose(loaded.get_data(), raw.get_data()[:3], atol=5e-8)


def test_mat_alternative_keys_orientation_and_microvolts(tmp_path):
    data = _signal()
    savemat(tmp_path / "a.mat", {"eeg": data.T * 1e6, "srate": FS, "ch_names": np.array(NAMES, dtype=object),
                                 "unit": "uV"})
    _minimal_folder(tmp_path, ["a.mat"])
    rec = ClinicalFolder(tmp_path).recordings()[0]
    assert rec.meta["sfreq"] == FS and rec.meta["channels"] == ",".join(NAMES)
    assert rec.meta["duration_s"] == pytest.approx(10.0)
    np.testing.assert_allclose(rec.load().get_data(), data)


def test_h5_attributes_and_unit_guess(tmp_path):
    data = _signal()
    with h5py.File(tmp_path / "a.hdf5", "w") as f:
        d = f.create_dataset("Data", data=data * 1e6)  # microvolts, no unit stored
        d.attrs["sfreq"] = FS
        f.attrs["channels"] = np.array(NAMES, dtype=h5py.string_dtype())
    _minimal_folder(tmp_path, ["a.hdf5"])
    rec = ClinicalFolder(tmp_path).recordings()[0]
    assert rec.meta["channels"] == ",".join(NAMES)
    with pytest.warns(UserWarning, match="microvolts"):
        loaded = rec.load()
    np.testing.assert_allclose(loaded.get_data(), data)


def test_matlab_v73_file_is_read_through_hdf5(tmp_path):
    path = tmp_path / "a.mat"
    data = _signal()
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("data", data=data.T)  # MATLAB stores column-major: samples x channels on disk
        f.create_dataset("fs", data=np.array([[FS]]))
        chars = np.zeros((3, len(NAMES)), dtype=np.uint16)
        for j, name in enumerate(NAMES):
            chars[: len(name), j] = [ord(c) for c in name]
        ch = f.create_dataset("channels", data=chars)
        ch.attrs["MATLAB_class"] = np.bytes_("char")
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    with open(path, "r+b") as fh:
        fh.write(header.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")
    _minimal_folder(tmp_path, ["a.mat"])
    rec = ClinicalFolder(tmp_path).recordings()[0]
    assert rec.meta["channels"] == ",".join(NAMES) and rec.meta["sfreq"] == FS
    np.testing.assert_allclose(rec.load().get_data(), data)


def test_array_without_channel_names_is_flagged(tmp_path):
    savemat(tmp_path / "a.mat", {"data": _signal(), "fs": FS, "unit": "V"})
    _minimal_folder(tmp_path, ["a.mat"])
    rec = ClinicalFolder(tmp_path).recordings()[0]
    assert "nonstandard_channel_names" in rec.meta["flags"]
    assert rec.load().ch_names == ["EEG001", "EEG002", "EEG003"]


# ---------------------------------------------------------------------------------------------------------
# Clear errors
# ---------------------------------------------------------------------------------------------------------
def test_missing_metadata_columns(tmp_path):
    pd.DataFrame({"patient_id": ["p"], "file": ["a.edf"]}).to_csv(tmp_path / "metadata.csv", index=False)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['hospital', 'report'\]"):
        ClinicalFolder(tmp_path)


def test_listed_file_that_does_not_exist(tmp_path):
    savemat(tmp_path / "a.mat", {"data": _signal(), "fs": FS})
    _minimal_folder(tmp_path, ["a.mat", "sub/missing_recording.edf"])
    cf = ClinicalFolder(tmp_path)
    assert not cf.is_available()
    with pytest.raises(DataMissingError, match="missing_recording.edf"):
        cf.recordings()
    with pytest.raises(DataMissingError, match="missing_recording.edf"):
        cf.version()


def test_missing_metadata_csv(tmp_path):
    cf = ClinicalFolder(tmp_path)
    assert not cf.is_available()
    with pytest.raises(DataMissingError, match="metadata.csv"):
        cf.recordings()


def test_unsupported_extension(tmp_path):
    (tmp_path / "a.txt").write_text("1 2 3")
    _minimal_folder(tmp_path, ["a.txt"])
    with pytest.raises(ValueError, match=r"unsupported recording format '\.txt'.*a\.txt"):
        ClinicalFolder(tmp_path).recordings()


def test_array_file_without_sampling_rate_or_data(tmp_path):
    savemat(tmp_path / "a.mat", {"data": _signal()})
    savemat(tmp_path / "b.mat", {"signal_matrix": _signal(), "fs": FS})
    _minimal_folder(tmp_path, ["a.mat"])
    with pytest.raises(ValueError, match="no sampling rate found.*fs, sfreq, srate"):
        ClinicalFolder(tmp_path).recordings()
    _minimal_folder(tmp_path, ["b.mat"])
    with pytest.raises(ValueError, match="no data array found.*signal_matrix"):
        ClinicalFolder(tmp_path).recordings()
    savemat(tmp_path / "c.mat", {"EEG": {"data": _signal(), "srate": FS}, "fs": FS})  # an EEGLAB-like struct
    _minimal_folder(tmp_path, ["c.mat"])
    with pytest.raises(ValueError, match="MATLAB struct, not a numeric"):
        ClinicalFolder(tmp_path).recordings()


def test_writer_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        write_clinical_folder(SyntheticClinical(), tmp_path, fmt_cycle=("edf", "csv"))
    assert not any(tmp_path.iterdir())  # rejected before anything is written
