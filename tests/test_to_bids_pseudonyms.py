"""``to_bids`` pseudonyms carry nothing about the person, not even the source order (issue 49, point 1).

A source that lists every control before every patient (as the MSU folders do) must not come out as ``sub-01…``
controls and ``sub-NN…`` patients: subjects are numbered in the order of a keyed hash of their source id, under a
fresh random key unless one is given, and the key is written nowhere. The cohort is tiny and synthetic (2-s
recordings of white noise), so the tree is written in a few seconds.
"""

from __future__ import annotations

import hashlib
from functools import partial

import mne
import numpy as np
import pandas as pd
from scipy import stats

from eegprivacy.data.base import EEGDataset, Recording

N_PER_CLASS = 8


def _raw(seed: int):
    rng = np.random.default_rng(seed)
    info = mne.create_info(["Cz", "Pz"], 128.0, "eeg")
    return mne.io.RawArray(rng.standard_normal((2, 256)) * 1e-5, info, verbose="error")


class LabelSorted(EEGDataset):
    """Every label-0 subject listed before every label-1 subject, with ids that sort the same way."""

    name = "label_sorted"
    synthetic = True

    def _recordings(self) -> list[Recording]:
        return [Recording(self.name, f"s{i:03d}", "r1", partial(_raw, i),
                          {"label": int(i >= N_PER_CLASS), "condition": "rest", "sfreq": 128.0, "n_channels": 2,
                           "channels": "Cz,Pz", "duration_s": 2.0, "flags": ""})
                for i in range(2 * N_PER_CLASS)]

    def _version(self) -> str:
        return hashlib.sha256(b"label_sorted").hexdigest()


def _labels_by_number(root) -> list[int]:
    table = pd.read_csv(root / "participants.tsv", sep="\t", dtype=str)
    assert list(table["participant_id"]) == sorted(table["participant_id"])  # rows in number order, not source
    return [int(v) for v in table["label"]]


def test_a_label_sorted_source_gets_numbers_in_no_label_order(tmp_path):
    """Written without a key (a fresh random one each time): the labels read in subject-number order are not sorted
    (by chance 2 in 12,870 orders would be), two conversions number the subjects differently, and the files are
    written in number order (their modification times follow the numbers, not the source)."""
    from eegprivacy.data.bids import to_bids

    source = LabelSorted()
    first = to_bids(source, tmp_path / "a")
    second = to_bids(source, tmp_path / "b")
    labels = _labels_by_number(tmp_path / "a")
    assert sorted(labels) == [0] * N_PER_CLASS + [1] * N_PER_CLASS
    assert labels not in (sorted(labels), sorted(labels, reverse=True)), labels
    assert first.subjects != second.subjects  # the same order twice by chance: 1 in 16!
    written = sorted((tmp_path / "a").glob("sub-*/eeg/*_eeg.edf"), key=lambda p: p.stat().st_mtime_ns)
    assert [p.parts[-3] for p in written] == sorted(p.parts[-3] for p in written)


def test_the_key_orders_the_subjects_and_is_written_nowhere(tmp_path):
    """A given key gives the same numbers on every conversion (a steward can convert again), and neither the key
    nor anything derived from it (hex, the keyed hashes) appears in any file of the tree."""
    import hmac

    from eegprivacy.data.bids import pseudonym_order, to_bids

    key = b"steward's private key: never in the tree"
    conversion = to_bids(LabelSorted(), tmp_path / "bids", key=key)
    order = pseudonym_order([f"s{i:03d}" for i in range(2 * N_PER_CLASS)], key)
    assert [conversion.subjects[s] for s in order] == [f"sub-{i:02d}" for i in range(1, 2 * N_PER_CLASS + 1)]
    assert pseudonym_order(list(reversed(order)), key) == order  # the key, not the listing, decides
    secrets_ = [key, key.hex().encode(), *(hmac.new(key, s.encode(), "sha256").hexdigest().encode() for s in order)]
    for path in (tmp_path / "bids").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(secret in data for secret in secrets_), path


def test_subject_number_and_label_are_independent_over_keys():
    """Permutation-test style, over 400 fixed keys (a seeded generator): for a source listing 10 controls then 10
    patients, the patients' mean subject number is distributed as under a uniformly random numbering (the
    rank-sum test rejects at 5 % in about 5 % of keys, within 3 Monte-Carlo errors), and every subject number
    goes to a patient about half of the time. Numbering in source order rejects for every key."""
    from eegprivacy.data.bids import pseudonym_order

    n, keys = 10, 400
    subjects = [f"ctrl{i:02d}" for i in range(n)] + [f"pat{i:02d}" for i in range(n)]
    label = {s: int(s.startswith("pat")) for s in subjects}
    rng = np.random.default_rng(49)
    rejected, at_position = 0, np.zeros(2 * n)
    for _ in range(keys):
        order = pseudonym_order(subjects, rng.bytes(32))
        assert sorted(order) == sorted(subjects)
        labels = np.array([label[s] for s in order])
        numbers = np.arange(1, 2 * n + 1)
        p = stats.mannwhitneyu(numbers[labels == 1], numbers[labels == 0]).pvalue
        rejected += p < 0.05
        at_position += labels
    rate, error = rejected / keys, np.sqrt(0.05 * 0.95 / keys)
    assert abs(rate - 0.05) < 3 * error, rate
    share = at_position / keys
    assert np.all(np.abs(share - 0.5) < 4 * np.sqrt(0.25 / keys)), share
    source = np.array([label[s] for s in subjects])
    assert stats.mannwhitneyu(np.arange(1, 2 * n + 1)[source == 1],
                              np.arange(1, 2 * n + 1)[source == 0]).pvalue < 1e-3  # the check has teeth
