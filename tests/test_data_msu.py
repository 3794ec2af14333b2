"""MSU adolescent schizophrenia loader against the local mirror (EEGPRIVACY_DATA).

The listing is checked in full against the class folders; signals are read for a few recordings only. Error paths
run on temporary roots of symlinks into the mirror with one file corrupted, cut or removed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _fixtures_data import flip_byte, mirror_dataset, no_network  # noqa: F401

from eegprivacy.data import METADATA_COLUMNS, ChecksumMismatchError, DataMissingError, get_dataset
from eegprivacy.data._local import Expected
from eegprivacy.data.manifest import load_manifest
from eegprivacy.data.msu_schizophrenia import CHANNELS, EEAFormatError, MSUSchizophrenia, read_eea

pytestmark = pytest.mark.realdata

FOLDER = "msu-adolescent-schizophrenia"
ORDER = "F7,F3,F4,F8,T3,C3,Cz,C4,T4,T5,P3,Pz,P4,T6,O1,O2".split(",")
REPEAT = {"387-02w1", "387-03w1"}


def _files(root) -> dict[str, list[str]]:
    """Stems of the ``.eea`` files in each class folder of the mirror, read off the folders."""
    return {cls: sorted(p.stem for p in (root / FOLDER / cls).glob("*.eea")) for cls in ("norm", "sch")}


def _by_recording(ds):
    return {r.recording: r for r in ds.recordings()}


def test_listing_follows_the_class_folders(data_root, no_network):
    meta = MSUSchizophrenia(root=data_root).metadata()
    assert list(meta.columns[: len(METADATA_COLUMNS)]) == METADATA_COLUMNS
    files = _files(data_root)
    assert sorted(meta.recording) == sorted(files["norm"] + files["sch"])
    assert (meta.subject == meta.recording).all() and meta.subject.is_unique
    assert meta.subject.str.lower().is_unique  # mixed-case stems never collide
    for cls, condition, label in (("norm", "healthy", 0), ("sch", "schizophrenia", 1)):
        rows = meta[meta.recording.isin(files[cls])]
        assert len(rows) == len(files[cls])
        assert set(rows.class_folder) == {cls} and set(rows.condition) == {condition} and set(rows.label) == {label}
    # the published cohort, as shipped in the manifest: 39 healthy, 45 schizophrenia
    shipped = [e.path.split("/")[0] for e in load_manifest("msu_schizophrenia")]
    assert (shipped.count("norm"), shipped.count("sch")) == (39, 45)
    assert len(meta) == 84 and meta.label.sum() == 45


def test_channels_rate_duration_task_and_flags(data_root):
    meta = MSUSchizophrenia(root=data_root).metadata().set_index("recording")
    assert set(meta.channels) == {",".join(ORDER)} and set(meta.n_channels) == {16}
    assert set(meta.sfreq) == {128.0} and set(meta.duration_s) == {60.0} and set(meta.task) == {"rest"}
    assert not meta.synthetic.any()
    flags = meta["flags"].str.split(";")
    assert flags.map(lambda f: "amplitude_unit_doubtful" in f).all()
    repeat = {rec for rec, f in flags.items() if "possible_repeat_patient" in f}
    assert repeat == REPEAT and set(meta.loc[sorted(REPEAT), "class_folder"]) == {"sch"}


def test_load_one_recording_channel_major_without_rescaling(data_root):
    ds = MSUSchizophrenia(root=data_root)
    rec = _by_recording(ds)["S10W1"]
    raw = rec.load()
    assert raw.ch_names == ORDER and set(raw.get_channel_types()) == {"eeg"}
    assert raw.info["sfreq"] == 128.0 and raw.n_times == 7680
    data = raw.get_data()
    assert data.shape == (16, 7680) and np.isfinite(data).all()

    values = np.array((data_root / FOLDER / "norm" / "S10W1.eea").read_text().split(), dtype=float)
    assert values.size == 122880
    # channel-major: values 0..7679 are F7, 7680..15359 are F3, ..., the last 7680 are O2; read as µV, stored in V
    np.testing.assert_allclose(data * 1e6, values.reshape(16, 7680), rtol=0, atol=1e-9)
    np.testing.assert_allclose(raw.get_data(picks="O2")[0] * 1e6, values[-7680:], rtol=0, atol=1e-9)
    assert 1e-5 < np.median(data.std(axis=1)) < 1e-3  # hundreds of "µV": the documented ~10x amplitude caveat


def test_version_is_stable_and_a_flipped_byte_changes_it(data_root, tmp_path):
    reference = MSUSchizophrenia(root=data_root).version()
    assert len(reference) == 64 and reference == MSUSchizophrenia(root=data_root).version()
    same = mirror_dataset(data_root, tmp_path / "same", FOLDER)
    assert MSUSchizophrenia(root=same).version() == reference

    rel = "sch/088w1.eea"
    changed = mirror_dataset(data_root, tmp_path / "changed", FOLDER, copy={rel})
    flip_byte(changed / FOLDER / rel)
    ds = MSUSchizophrenia(root=changed)
    assert ds.version() != reference
    recs = _by_recording(ds)  # listing reads no signal: still fine
    with pytest.raises(ChecksumMismatchError, match="088w1.eea") as err:
        recs["088w1"].load()
    assert "brain.bio.msu.ru" in str(err.value)
    assert recs["022w1"].load().n_times == 7680  # the others are unaffected


def test_missing_file_is_a_clear_error(data_root, tmp_path, no_network):
    rel = "norm/s12w1.eea"
    root = mirror_dataset(data_root, tmp_path, FOLDER, skip={rel})
    ds = MSUSchizophrenia(root=root)
    assert not ds.is_available()
    with pytest.raises(DataMissingError) as err:
        ds.recordings()
    message = str(err.value)
    for needle in (rel, str(root / FOLDER / rel), "EEGPRIVACY_DATA", "http://brain.bio.msu.ru/eeg_schizophrenia.htm"):
        assert needle in message
    assert ds.summary()["present"] is False


def test_cut_or_garbled_file_is_a_clear_error(data_root, tmp_path, monkeypatch):
    rel = "sch/387-03w1.eea"
    root = mirror_dataset(data_root, tmp_path, FOLDER, copy={rel})
    path = root / FOLDER / rel
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-500]))  # 500 values short: a cut copy

    ds = MSUSchizophrenia(root=root)
    with pytest.raises(ChecksumMismatchError, match="387-03w1.eea"):  # checked before it is read
        _by_recording(ds)["387-03w1"].load()

    # past the checksum (a file the manifest does not pin), the parser names the file and the count
    unpinned = {**ds.expected, rel: Expected(None, None)}
    monkeypatch.setattr(MSUSchizophrenia, "expected", property(lambda self: unpinned))
    with pytest.raises(EEAFormatError, match=r"387-03w1\.eea: 122380 values, expected 122880"):
        _by_recording(MSUSchizophrenia(root=root))["387-03w1"].load()

    garbled = tmp_path / "garbled.eea"
    garbled.write_text("".join(lines[:100]) + "12.3x  \n" + "".join(lines[101:]))
    with pytest.raises(EEAFormatError, match="garbled.eea: not a text file of numbers"):
        read_eea(garbled)
    nan = tmp_path / "nan.eea"
    nan.write_text("".join(lines[:100]) + "nan  \n" + "".join(lines[101:]))
    with pytest.raises(EEAFormatError, match=r"nan.eea: 1 NaN/infinite"):
        read_eea(nan)


def test_features_at_128_hz_fit_below_nyquist_and_the_shared_bands_would_not(data_root):
    """The project's MSU feature settings (0.5-60 Hz band-pass, high gamma as ``high_gamma_45_60``) run at 128 Hz
    as written: no low-pass fallback, no band dropped, every feature finite. The shared settings (70-Hz low-pass,
    high gamma 45-70 Hz) would not fit under the 64-Hz Nyquist: the low-pass is moved and high gamma dropped (NaN),
    both flagged, never a 45-64 Hz power kept under the 45-70 Hz name."""
    from eegprivacy.signal.table import FeaturesParams, recording_features

    params = FeaturesParams.load(Path(__file__).parents[1] / "params" / "features.yaml", "features")
    config = params.pipeline("msu_schizophrenia")
    names = config.features.feature_names
    assert names[4:] == ("delta", "theta", "alpha", "beta", "gamma", "high_gamma_45_60", "sef95")
    recs = _by_recording(MSUSchizophrenia(root=data_root))
    for name in ("S10W1", "088w1", "387-02w1"):
        feats, starts, channels, flags = recording_features(recs[name].load(), config)
        assert channels == CHANNELS and flags == []
        assert feats.shape == (59, 16 * 11) and np.isfinite(feats).all()  # 2-s windows, 50% overlap over 60 s
        cube = feats.reshape(len(feats), 16, 11)
        assert (cube[..., names.index("high_gamma_45_60")] > 0).all()
        assert (cube[..., names.index("sef95")] <= 60.0).all()

    shared = params.pipeline()
    feats, _, _, flags = recording_features(recs["S10W1"].load(), shared)
    assert flags == ["band_dropped:high_gamma", "lowpass_clipped:60.8"]
    cube = feats.reshape(len(feats), 16, 11)
    hg = shared.features.feature_names.index("high_gamma")
    assert np.isnan(cube[..., hg]).all() and np.isfinite(np.delete(cube, hg, axis=-1)).all()
    assert (cube[..., shared.features.feature_names.index("sef95")] <= 45.0).all()  # gamma: the top band kept


def test_registered_by_name(data_root):
    ds = get_dataset("msu_schizophrenia", root=data_root)
    assert isinstance(ds, MSUSchizophrenia)
    summary = ds.summary()
    assert summary["present"] is True and summary["recordings"] == summary["subjects"] == 84
