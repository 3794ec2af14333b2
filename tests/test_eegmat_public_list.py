"""eegmat against the public v1.0.0 file list: the manifest names all 72 recordings, a copy is read for what it
holds, and what it lacks is named by ``absent()`` and reported by ``eegprivacy datasets`` and the dataset-version
stage, never dropped silently.

Temporary roots are built from symlinks into the mirror (EEGPRIVACY_DATA), with real copies only where a test
changes bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _fixtures_data import flip_byte, mirror_dataset, no_network  # noqa: F401

from eegprivacy.data import ChecksumMismatchError, DataMissingError
from eegprivacy.data import manifest as manifest_module
from eegprivacy.data.eegmat import EEGMAT, SUBJECT_INFO
from eegprivacy.data.manifest import file_sha256, load_manifest, manifest_version

REPO = Path(__file__).resolve().parents[1]
PUBLIC_EDFS = [f"Subject{s:02d}_{part}.edf" for s in range(36) for part in (1, 2)]
# /work/shared/data/README.md section 2: the resting recordings the mirror lacks
MIRROR_ABSENT = [f"Subject{s:02d}_1.edf" for s in [*range(22, 31), *range(32, 36)]]


def _published() -> dict[str, tuple[int | None, str | None]]:
    return {e.path: (e.size, e.sha256) for e in load_manifest("eegmat")}


def _manifest_lines(rels) -> list[tuple[str, int, str]]:
    """What the version hashes for files whose size and sha256 the manifest knows, read off the manifest alone."""
    published = _published()
    return [(rel, *published[rel]) for rel in rels]


def _subset_root(data_root, tmp_path, keep: set[str]) -> Path:
    """A root holding ``subject-info.csv`` and only the EDFs in ``keep`` (symlinks into the mirror)."""
    skip = {p.name for p in (data_root / "eegmat").glob("*.edf")} - keep
    return mirror_dataset(data_root, tmp_path, "eegmat", skip=skip)


# -- the manifest -------------------------------------------------------------------------------------------


def test_manifest_lists_the_public_72_recordings_and_marks_unknown_checksums():
    published = _published()
    edfs = [rel for rel in published if rel.endswith(".edf")]
    assert sorted(edfs) == sorted(PUBLIC_EDFS) and len(edfs) == 72  # 36 subjects x (rest, arithmetic)
    assert SUBJECT_INFO in published and set(published) == {*PUBLIC_EDFS, SUBJECT_INFO}
    unknown = sorted(rel for rel, (size, sha) in published.items() if sha is None)
    assert unknown == MIRROR_ABSENT
    assert all(published[rel] == (None, None) for rel in unknown)  # size and sha256 are unknown together
    known = {rel: v for rel, v in published.items() if rel not in unknown}
    assert all(isinstance(size, int) and size > 0 and len(sha) == 64 for size, sha in known.values())


def test_manifest_unknown_and_malformed_cells(tmp_path, monkeypatch):
    """``-`` and an empty cell read as unknown; anything else that is not a number / sha256 is an error that names
    the manifest, the line and the cell, not a bare ``int()`` failure."""

    class Files:
        @staticmethod
        def files(package):
            return tmp_path

    monkeypatch.setattr(manifest_module, "resources", Files)
    sha = "ab" * 32
    (tmp_path / "toy.tsv").write_text(f"path\tbytes\tsha256\na.edf\t10\t{sha}\nb.edf\t-\t-\nc.edf\t\t\n")
    assert [(e.path, e.size, e.sha256) for e in load_manifest("toy")] == [
        ("a.edf", 10, sha), ("b.edf", None, None), ("c.edf", None, None)]
    (tmp_path / "bad.tsv").write_text(f"path\tbytes\tsha256\na.edf\t10\t{sha}\nb.edf\tten\t{sha}\n")
    with pytest.raises(ValueError, match=r"bad\.tsv line 3: bytes is 'ten'"):
        load_manifest("bad")
    (tmp_path / "badsha.tsv").write_text("path\tbytes\tsha256\na.edf\t10\tnot-a-hash\n")
    with pytest.raises(ValueError, match=r"badsha\.tsv line 2: sha256"):
        load_manifest("badsha")


# -- the project's mirror ------------------------------------------------------------------------------------


def test_mirror_lists_its_59_recordings_and_names_the_13_absent(data_root, no_network):
    ds = EEGMAT(root=data_root)
    recordings = sorted(f"{r.recording}.edf" for r in ds.recordings())
    assert recordings == sorted(set(PUBLIC_EDFS) - set(MIRROR_ABSENT)) and len(recordings) == 59
    assert ds.absent() == MIRROR_ABSENT
    assert ds.is_available() and ds.summary()["recordings"] == 59


def test_mirror_version_is_the_hash_of_the_present_files_and_stable(data_root):
    first = EEGMAT(root=data_root).version()
    assert EEGMAT(root=data_root).version() == first  # a fresh instance (and the hash cache) agrees
    present = sorted(set(PUBLIC_EDFS) - set(MIRROR_ABSENT)) + [SUBJECT_INFO]
    assert first == manifest_version(_manifest_lines(present))  # the bytes on disk are the published ones


# -- other copies -------------------------------------------------------------------------------------------


def test_a_partial_copy_lists_what_it_holds_and_names_the_rest(data_root, tmp_path, no_network):
    keep = {"Subject00_1.edf", "Subject00_2.edf", "Subject05_2.edf", "Subject31_1.edf"}
    root = _subset_root(data_root, tmp_path, keep)
    ds = EEGMAT(root=root)
    assert sorted(f"{r.recording}.edf" for r in ds.recordings()) == sorted(keep)
    assert ds.subjects() == ["Subject00", "Subject05", "Subject31"]
    assert ds.absent() == [rel for rel in PUBLIC_EDFS if rel not in keep] and len(ds.absent()) == 68
    assert ds.is_available()
    version = ds.version()
    assert version == manifest_version(_manifest_lines([*keep, SUBJECT_INFO]))
    assert version != EEGMAT(root=data_root).version()  # a different subset is a different dataset version
    assert ds.recordings()[0].load().n_times > 0


def test_a_copy_without_any_recording_is_a_clear_error(data_root, tmp_path, no_network):
    """A partial copy is normal, an empty one is a setup error: it names the first missing file."""
    ds = EEGMAT(root=_subset_root(data_root, tmp_path, keep=set()))
    assert not ds.is_available()
    with pytest.raises(DataMissingError, match="Subject00_1.edf"):
        ds.recordings()


def test_wrong_byte_in_a_file_with_a_known_checksum_raises(data_root, tmp_path):
    root = mirror_dataset(data_root, tmp_path, "eegmat", copy={"Subject12_1.edf"})
    flip_byte(root / "eegmat" / "Subject12_1.edf")
    ds = EEGMAT(root=root)
    recs = {r.recording: r for r in ds.recordings()}  # the header is intact: the listing still works
    with pytest.raises(ChecksumMismatchError, match="Subject12_1.edf"):
        recs["Subject12_1"].load()
    assert ds.version() != EEGMAT(root=data_root).version()  # and the changed byte changes the version


def test_a_present_file_with_unknown_checksum_is_read_unverified_and_hashed(data_root, tmp_path):
    """Stand-in for a resting recording the mirror lacks: another EDF's bytes under that public name."""
    root = mirror_dataset(data_root, tmp_path, "eegmat")
    stand_in = root / "eegmat" / "Subject22_1.edf"
    shutil.copyfile(data_root / "eegmat" / "Subject22_2.edf", stand_in)
    ds = EEGMAT(root=root)
    meta = ds.metadata().set_index("recording")
    assert len(meta) == 60 and ds.absent() == MIRROR_ABSENT[1:]
    assert meta.loc["Subject22_1", "flags"] == "unverified" and meta.loc["Subject22_1", "condition"] == "rest"
    assert (meta.drop(index="Subject22_1")["flags"] == "").all()
    assert {r.recording: r for r in ds.recordings()}["Subject22_1"].load().n_times > 0
    present = sorted(set(PUBLIC_EDFS) - set(MIRROR_ABSENT)) + [SUBJECT_INFO]
    lines = _manifest_lines(present) + [("Subject22_1.edf", stand_in.stat().st_size, file_sha256(stand_in))]
    assert ds.version() == manifest_version(lines)


def test_download_completes_the_public_list_and_a_complete_copy_lists_72(data_root, tmp_path, monkeypatch):
    """allow_download=True without subjects asks for every public recording: the one the copy lost is fetched
    against its published sha256, the 13 never checked here without one (pooch then records none). Afterwards
    the copy is complete and is read in full."""
    import pooch

    calls = {}

    def fake_retrieve(url, known_hash, fname, path, **kwargs):
        calls[fname] = (url, known_hash)
        source = data_root / "eegmat" / fname
        shutil.copyfile(source if source.exists() else data_root / "eegmat" / "Subject22_2.edf", f"{path}/{fname}")
        return f"{path}/{fname}"

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    root = mirror_dataset(data_root, tmp_path, "eegmat", skip={"Subject07_2.edf"})
    assert len(EEGMAT(root=root, allow_download=True).recordings()) == 72
    sha = _published()["Subject07_2.edf"][1]
    assert calls == {"Subject07_2.edf": ("https://physionet.org/files/eegmat/1.0.0/Subject07_2.edf", f"sha256:{sha}"),
                     **{rel: (f"https://physionet.org/files/eegmat/1.0.0/{rel}", None) for rel in MIRROR_ABSENT}}
    complete = EEGMAT(root=root)
    assert len(complete.recordings()) == 72 and complete.absent() == [] and complete.is_available()
    assert (complete.metadata()["flags"] == "unverified").sum() == 13


def test_explicit_subjects_require_both_recordings(data_root, no_network):
    ds = EEGMAT(root=data_root, subjects=["Subject22"])
    assert ds.absent() == ["Subject22_1.edf"] and not ds.is_available()
    with pytest.raises(DataMissingError, match="Subject22_1.edf"):
        ds.recordings()
    assert [r.recording for r in EEGMAT(root=data_root, subjects=["Subject00"]).recordings()] == [
        "Subject00_1", "Subject00_2"]
    with pytest.raises(ValueError, match=r"Subject00\.\.Subject35, not \['Subject36'\]"):
        EEGMAT(root=data_root, subjects=["Subject36"])


# -- reporting ----------------------------------------------------------------------------------------------


def test_datasets_listing_shows_present_of_listed(data_root, capsys):
    from eegprivacy.cli import main

    assert main(["datasets", "--json"]) == 0
    rows = {r["dataset"]: r for r in json.loads(capsys.readouterr().out)}
    eegmat = rows["eegmat"]
    assert (eegmat["recordings"], eegmat["n_recordings_present"], eegmat["n_recordings_listed"]) == (59, 59, 72)
    assert eegmat["absent"] == MIRROR_ABSENT
    assert "n_recordings_listed" not in rows["bonn"]  # a dataset without absent() keeps its row as it was
    assert main(["datasets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("eegmat "))
    assert " 59/72 " in line


def test_dataset_version_stage_records_present_and_absent(data_root, tmp_path, capsys):
    import mlflow

    from eegprivacy.cli import main

    out = tmp_path / "eegmat.json"
    assert main(["dataset-version", "--dataset", "eegmat", "--params", str(REPO / "params/features.yaml"),
                 "--out", str(out)]) == 0
    info = json.loads(out.read_text())
    assert {"dataset", "version", "synthetic", "subjects", "recordings"} <= set(info)  # the keys it always had
    assert (info["recordings"], info["n_recordings_present"], info["n_recordings_listed"]) == (59, 59, 72)
    assert info["absent"] == MIRROR_ABSENT and info["version"] == EEGMAT(root=data_root).version()
    assert "59 recordings of 72 listed" in capsys.readouterr().out
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1
    assert runs[0].data.metrics["n_recordings_present"] == 59 and runs[0].data.metrics["n_recordings_listed"] == 72
    assert runs[0].data.params["dataset.n_recordings_listed"] == "72"
