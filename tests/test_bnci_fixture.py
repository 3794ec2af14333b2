"""BNCI 2014-001 (BCI IV 2a) through MOABB, on a tiny synthetic file in the exact BNCI layout, offline.

No real copy exists on the test machines, so the fixture mimics the published ``A01T.mat``: a cell array of
runs, each a struct with X (samples x 25 channels, microvolts), trial (1-based sample of each trial start),
y (class 1-4), fs, classes, artifacts, gender and age -- the fields MOABB's parser reads. The first run has
no trials, like the EOG calibration runs of the real files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _fixtures_data import flip_byte, no_network  # noqa: F401

from eegprivacy.data import DataMissingError, get_dataset
from eegprivacy.data.bnci import EEG_CHANNELS, BNCI2014001

SFREQ = 250
TRIAL_S = 7
CLASSES = ["left hand", "right hand", "feet", "tongue"]
RUN_LABELS = ([], [1, 2, 3, 4], [2, 1, 1, 4])  # first run: no trials


def _run(rng, labels):
    n = len(labels)
    n_samples = (n + 1) * TRIAL_S * SFREQ if n else 2 * SFREQ
    return {
        "X": rng.normal(0.0, 10.0, (n_samples, 25)).astype(np.float32),  # microvolts
        "trial": (1 + np.arange(n) * TRIAL_S * SFREQ).astype(np.int32).reshape(-1, 1),
        "y": np.asarray(labels, dtype=np.uint8).reshape(-1, 1),
        "fs": float(SFREQ),
        "classes": np.array(CLASSES, dtype=object),
        "artifacts": np.zeros((n, 1), dtype=np.uint8),
        "gender": "F",
        "age": 25.0,
    }


def write_bnci_fixture(root: Path, subject: int = 1, layout: str = "database/data-sets/001-2014") -> Path:
    """Write ``A0<subject>T.mat`` and ``A0<subject>E.mat`` under ``root/MNE-bnci-data/<layout>/``."""
    from scipy.io import savemat

    folder = root / "MNE-bnci-data" / layout
    folder.mkdir(parents=True, exist_ok=True)
    for seed, session in enumerate("TE"):
        rng = np.random.default_rng(seed)
        runs = np.empty((1, len(RUN_LABELS)), dtype=object)
        for i, labels in enumerate(RUN_LABELS):
            runs[0, i] = _run(rng, labels)
        savemat(folder / f"A{subject:02d}{session}.mat", {"data": runs})
    return folder


@pytest.fixture
def offline_moabb(monkeypatch, no_network):
    """Besides no network: MOABB must not write the user's MNE config either."""
    import moabb.datasets.download as download

    def refuse(*args, **kwargs):
        raise AssertionError("MOABB tried to change the MNE configuration")

    monkeypatch.setattr(download, "set_config", refuse)
    monkeypatch.delenv("MNE_DATA", raising=False)
    monkeypatch.delenv("MNE_DATASETS_BNCI_PATH", raising=False)


@pytest.mark.parametrize("layout", ["database/data-sets/001-2014", "~bci/database/001-2014"])
def test_fixture_loads_as_22_channel_left_right_raw(tmp_path, offline_moabb, layout):
    write_bnci_fixture(tmp_path, layout=layout)
    ds = BNCI2014001(root=tmp_path, subjects=[1])
    assert ds.is_available()

    meta = ds.metadata()
    assert list(meta.recording) == ["A01T", "A01E"] and list(meta.session) == ["training", "evaluation"]
    assert set(meta.n_channels) == {22} and set(meta.sfreq) == {250.0}
    assert set(meta["flags"]) == {"unverified"}  # the source publishes no checksums

    raw = ds.recordings()[0].load()
    assert raw.ch_names == list(EEG_CHANNELS)
    assert set(raw.get_channel_types()) == {"eeg"} and raw.info["sfreq"] == 250.0
    assert 1e-6 < raw.get_data().std() < 1e-4  # microvolts in the file, volts in the Raw

    ann = raw.annotations
    trials = [(o, d, desc) for o, d, desc in zip(ann.onset, ann.duration, ann.description)
              if desc in ("left_hand", "right_hand", "feet", "tongue")]
    kept = [CLASSES[y - 1].replace(" ", "_") for labels in RUN_LABELS for y in labels if y in (1, 2)]
    assert [desc for _, _, desc in trials] == kept  # feet/tongue dropped, the first-sample trial kept
    assert trials[0][0] == pytest.approx(2.0) and {d for _, d, _ in trials} == {4.0}  # imagery 2-6 s


def test_missing_copy_is_a_clear_error(tmp_path, offline_moabb):
    ds = BNCI2014001(root=tmp_path)
    assert not ds.is_available()
    assert ds.summary()["present"] is False
    with pytest.raises(DataMissingError) as err:
        ds.recordings()
    message = str(err.value)
    for needle in ("A01T.mat", str(tmp_path / "MNE-bnci-data" / "database" / "data-sets" / "001-2014"),
                   "bnci-horizon-2020.eu", "EEGPRIVACY_DATA"):
        assert needle in message


def test_mirror_has_no_real_copy(data_root, offline_moabb):
    ds = get_dataset("bnci2014_001", root=data_root)
    if ds.is_available():
        pytest.skip("a real BCI IV 2a copy is present")
    with pytest.raises(DataMissingError, match="A01T.mat"):
        ds.recordings()


def test_version_tracks_the_bytes(tmp_path):
    folder = write_bnci_fixture(tmp_path)
    version = BNCI2014001(root=tmp_path, subjects=[1]).version()
    assert version == BNCI2014001(root=tmp_path, subjects=[1]).version()
    flip_byte(folder / "A01E.mat")
    assert BNCI2014001(root=tmp_path, subjects=[1]).version() != version
