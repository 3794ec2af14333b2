"""The bad-input corpus (tests/bad_inputs/): every broken input gets either a clear error that names the file or
param and says what to do, or a documented, flagged and warned recovery; a failing stage leaves no output behind.

The table of what happens to each input is in README.md ("Bad inputs").
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from _fixtures_data import fresh_warnings, no_network  # noqa: F401
from bad_inputs import corpus

from eegprivacy.atomic import atomic_paths, write_text_atomic
from eegprivacy.cli import main
from eegprivacy.data import ChecksumMismatchError, DataQualityWarning
from eegprivacy.data.clinical_folder import ClinicalFolder, RecordingReadError
from eegprivacy.data.eegmmidb import EEGMMIDB
from eegprivacy.params import ParamsError
from eegprivacy.signal.table import (
    INDEX_COLUMNS,
    FeaturePipelineConfig,
    NonFiniteSamplesError,
    dataset_window_features,
)

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.realdata


def _features_args(tmp_path: Path, folder: Path, out: Path) -> list[str]:
    """The features stage's command line pointed at a clinical folder, every output under ``out``."""
    params = yaml.safe_load((REPO / "params/features.yaml").read_text())
    params["features"]["datasets"] = {"clinical_folder": {"folder": str(folder)}}
    params["features"]["per_dataset"] = {}  # the project's datasets' overrides name datasets no longer listed
    path = tmp_path / "features.yaml"
    path.write_text(yaml.safe_dump(params))
    return ["features", "--dataset", "clinical_folder", "--params", str(path), "--out", str(out / "table.parquet"),
            "--metrics", str(out / "features.json"), "--figure", str(out / "features.png"), "--no-progress"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _table(folder: Path) -> pd.DataFrame:
    return dataset_window_features(ClinicalFolder(folder), FeaturePipelineConfig(), progress=False)


def _channels(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(c.split(":")[0] for c in table.columns if c not in INDEX_COLUMNS))


def _flags(table: pd.DataFrame, subject: str) -> set[str]:
    return {f for cell in table.loc[table.subject == subject, "flags"] for f in cell.split(";") if f}


# ---------------------------------------------------------------------------------------------------------
# Clear errors: the features stage stops, names the file and what to do, and leaves the outputs as they were
# ---------------------------------------------------------------------------------------------------------
ERRORS = {
    "zero_byte_edf": (RecordingReadError, r"P04/r01\.edf is empty \(0 bytes\); export the recording again .*"
                                          r"remove its row from metadata\.csv"),
    "corrupt_edf_header": (RecordingReadError, r"P04/r01\.edf: EDF header field 'number of signals' is 'x9', not "
                                               r"a number; the header is corrupted — copy or export the recording "
                                               r"again, or remove its row from metadata\.csv"),
    "nan_samples": (NonFiniteSamplesError, r"P02/r01\.mat\): 50 NaN/infinite sample\(s\) in channel\(s\) Cz; "
                                           r"filters cannot run over gaps\. Interpolate or cut those samples"),
    "inf_samples": (NonFiniteSamplesError, r"P02/r01\.h5\): 2 NaN/infinite sample\(s\) in channel\(s\) Fp1, F4; .*"
                                           r"remove the recording \(in a clinical folder: its row in metadata\.csv\)"),
    "duplicate_patient_ids": (ValueError, r"metadata\.csv: 1 patient id\(s\) are spelled in more than one way .*"
                                          r"\(data rows 1, 2\); the linkage GlobalID would merge them\. Use one "
                                          r"spelling if they are the same patient"),
    "only_unknown_channel_names": (ValueError, r"no EEG channel is present and non-flat in every recording of "
                                               r"clinical_folder: .*P02/r01_raw\.fif\) share\(s\) none of them\. "
                                               r"Rename channels to their 10-05 labels"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_clinical_input_is_a_clear_error_and_leaves_outputs_untouched(case, data_root, tmp_path, monkeypatch):
    folder = corpus.CLINICAL[case](tmp_path / "folder", data_root)
    out = tmp_path / "out"
    out.mkdir()
    args = _features_args(tmp_path, folder, out)
    for name in ("table.parquet", "features.json", "features.png"):  # a previous run's outputs
        (out / name).write_bytes(b"previous " + name.encode())
    before = _files(out)
    monkeypatch.chdir(tmp_path)
    error, pattern = ERRORS[case]
    with pytest.raises(error, match=pattern):
        main(args)
    assert _files(out) == before  # nothing replaced, no half-written file, no temporary left over
    assert not (tmp_path / "mlflow.db").exists()  # it stopped before any MLflow run


@pytest.mark.parametrize("case,damage", [("zero_byte_edf", r"the file is empty \(0 bytes\)"),
                                         ("corrupt_edf_header", r"sha256 [0-9a-f]{64}, published [0-9a-f]{64}")])
def test_damaged_eegmmidb_run_is_a_checksum_error_naming_file_and_source(case, damage, data_root, tmp_path,
                                                                         no_network):  # noqa: F811
    root = corpus.eegmmidb_root(tmp_path / "root", data_root, corpus.EEGMMIDB_DAMAGE[case])
    ds = EEGMMIDB(root=root, runs=(3,))
    with pytest.raises(ChecksumMismatchError, match=r"S001R03\.edf differs from the published file \(" + damage
                       + r"\)\. Replace it with a fresh copy from https://physionet\.org/content/eegmmidb/1\.0\.0/"):
        ds.recordings()


# ---------------------------------------------------------------------------------------------------------
# Documented recoveries: flagged on the rows concerned, reported by one DataQualityWarning
# ---------------------------------------------------------------------------------------------------------
def test_truncated_edf_loads_the_complete_records_flagged(data_root, tmp_path):
    folder = corpus.truncated_edf(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning, match=r"1 EDF/BDF file\(s\) hold fewer records than their header declares "
                                                r"\(metadata\.csv data rows 1\); reading the complete records"):
        recs = ClinicalFolder(folder).recordings()
    meta = {r.subject: r.meta for r in recs}
    assert meta["P01"]["flags"] == "truncated" and meta["P02"]["flags"] == ""
    assert meta["P01"]["duration_s"] == 60.0 and meta["P02"]["duration_s"] == 125.0
    assert meta["P01"]["channels"].split(",")[:3] == ["FC5", "FC3", "FC1"]  # BCI2000 "Fc5." labels normalised
    with pytest.warns(DataQualityWarning, match="fewer records"):
        table = _table(folder)
    assert _flags(table, "P01") == {"truncated"} and _flags(table, "P02") == set()
    assert len(_channels(table)) == 64 and np.isfinite(table[[c for c in table if ":" in c]].to_numpy()).all()


def test_truncated_eegmmidb_run_loads_flagged_with_one_warning(data_root, fresh_warnings):  # noqa: F811
    ds = EEGMMIDB(root=data_root, runs=(1,))
    assert list(ds.metadata()["flags"]) == ["truncated"]
    with pytest.warns(DataQualityWarning, match=r"S001R01\.edf is truncated \(header declares 61 records, 60 complete"):
        raw = ds.recordings()[0].load()
    assert raw.n_times == 60 * 160


def test_flat_channel_is_dropped_from_every_recording_and_flagged(data_root, tmp_path):
    folder = corpus.flat_channel(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning, match=r"channel\(s\) Cz flat \(peak-to-peak under 0\.1 µV\) in 1 "
                                                r"recording\(s\) \(clinical_folder recording at metadata\.csv data "
                                                r"row\(s\) 2\); left out of every recording .*\(18 channels kept\)"):
        table = _table(folder)
    assert "Cz" not in _channels(table) and len(_channels(table)) == 18
    assert "flat_channel:Cz" in _flags(table, "P02")
    assert not any("flat_channel" in f for f in _flags(table, "P01") | _flags(table, "P03"))
    assert np.isfinite(table[[c for c in table if ":" in c]].to_numpy()).all()


def test_channel_missing_in_one_patient_is_dropped_everywhere_and_flagged(data_root, tmp_path):
    folder = corpus.missing_channel(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning, match=r"channel\(s\) Pz missing in 1 recording\(s\) .*data row\(s\) 2\)"):
        table = _table(folder)
    first = ClinicalFolder(folder).recordings()[0].meta["channels"].split(",")
    assert _channels(table) == [c for c in first if c != "Pz"] and len(first) == 19
    assert _flags(table, "P02") == {"missing_channel:Pz"} and _flags(table, "P01") == set()


def test_missing_channel_plan_does_not_depend_on_recording_order(data_root, tmp_path):
    """The missing channel leaves the table whether the patient lacking it comes first or last."""
    folder = corpus.missing_channel(tmp_path / "folder", data_root)
    meta = pd.read_csv(folder / "metadata.csv")
    meta.iloc[[1, 0, 2]].to_csv(folder / "metadata.csv", index=False)  # P02 (no Pz) first
    with pytest.warns(DataQualityWarning, match="Pz missing"):
        table = _table(folder)
    assert "Pz" not in _channels(table) and len(_channels(table)) == 18
    assert _flags(table, "P02") == {"missing_channel:Pz"}


def test_mixed_sampling_rates_are_analysed_each_at_its_own_rate(data_root, tmp_path, caplog):
    folder = corpus.mixed_sampling_rates(tmp_path / "folder", data_root)
    with caplog.at_level(logging.INFO, logger="eegprivacy.signal.table"):
        table = _table(folder)
    assert table.groupby("subject")["sfreq"].first().to_dict() == {"P01": 500.0, "P02": 250.0, "P03": 500.0}
    assert len(_channels(table)) == 19 and np.isfinite(table[[c for c in table if ":" in c]].to_numpy()).all()
    assert table.groupby("subject").size().nunique() == 1  # 2-s windows at either rate: same count per 20 s
    assert re.search(r"2 sampling rates \(250, 500 Hz\); each is filtered, windowed and analysed at its own rate",
                     caplog.text)


def test_recording_shorter_than_one_window_is_skipped_with_a_warning(data_root, tmp_path):
    folder = corpus.shorter_than_window(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning) as record:
        table = _table(folder)
    messages = [str(w.message) for w in record if issubclass(w.category, DataQualityWarning)]
    assert any(re.search(r"1 recording\(s\) are shorter than the band-pass filter plus one window need "
                         r"\(clinical_folder recording at metadata\.csv data row\(s\) 4\); they contribute no "
                         r"windows\. Lower features\.preprocess\.l_freq", m) for m in messages), messages
    assert any("1 subject(s) have no recording long enough and are not in the table" in m for m in messages)
    assert sorted(table.subject.unique()) == ["P01", "P02", "P03"]


def test_every_recording_too_short_is_an_error(data_root, tmp_path):
    entries = [corpus.Entry("P01", "P01/r01_raw.fif",
                            corpus.raw_file(corpus.segments(data_root)[0].crop(0, 1.0, include_tmax=False)))]
    folder = corpus.write_folder(tmp_path / "folder", entries)
    with pytest.raises(ValueError, match=r"every recording of clinical_folder is too short .*\(the longest is "
                                         r"1\.00 s at 500 Hz\); lower features\.preprocess\.l_freq"):
        _table(folder)


def test_patient_without_label_reads_negative_flagged_no_report(data_root, tmp_path):
    folder = corpus.patient_without_label(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning, match=r"1 recording\(s\) belong to patients with no report text "
                                                r"\(metadata\.csv data rows 2\); the keyword rule reads them as "
                                                r"label 0 \(negative\) and they are flagged 'no_report'"):
        meta = ClinicalFolder(folder).metadata().set_index("subject")
    assert meta.loc["P02", "label"] == 0 and meta.loc["P02", "flags"] == "no_report"
    assert meta.loc["P01", "flags"] == ""


def test_unknown_channel_names_are_left_out_flagged_and_warned(data_root, tmp_path):
    folder = corpus.unknown_channel_names(tmp_path / "folder", data_root)
    with pytest.warns(DataQualityWarning, match=r"channels that are not 10-05 EEG positions were left out "
                                                r"\(Photic, X1; in 1 recording\(s\)\)"):
        table = _table(folder)
    assert len(_channels(table)) == 19 and not {"Photic", "X1"} & set(_channels(table))
    assert _flags(table, "P02") == {"dropped_nonstandard_channels"}


def test_warnings_name_rows_not_patient_ids(data_root, tmp_path):
    """Recoveries are logged, and logs must not carry identifiers: warnings point at metadata.csv rows."""
    folder = corpus.flat_channel(tmp_path / "folder", data_root)
    meta = pd.read_csv(folder / "metadata.csv")
    meta["patient_id"] = ["Anna Berg", "Carl Dahl", "Eva Frost"]
    meta.to_csv(folder / "metadata.csv", index=False)
    with pytest.warns(DataQualityWarning) as record:
        _table(folder)
    text = " ".join(str(w.message) for w in record)
    assert "data row(s) 2" in text and not any(name in text for name in ("Anna", "Carl", "Eva", "P02"))


def test_recovery_through_the_features_stage_writes_complete_outputs(data_root, tmp_path, monkeypatch):
    folder = corpus.flat_channel(tmp_path / "folder", data_root)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    with pytest.warns(DataQualityWarning, match="Cz flat"):
        assert main(_features_args(tmp_path, folder, out)) == 0
    assert sorted(_files(out)) == ["features.json", "features.png", "table.parquet"]  # and no temporary files
    summary = json.loads((out / "features.json").read_text())
    assert summary["n_channels"] == 18 and summary["n_recordings_skipped"] == 0 and summary["all_finite"]
    assert "flat_channel:Cz" in summary["flags"] and summary["sfreqs"] == [500.0]
    assert "extraction_seconds" not in summary  # run facts go to MLflow only: the JSON is reproducible


def test_stage_failing_while_writing_leaves_the_previous_outputs(data_root, tmp_path, monkeypatch):
    """All outputs or none: the figure fails after the table and JSON were written to temporaries."""
    from matplotlib.figure import Figure

    folder = corpus.write_folder(tmp_path / "folder", corpus.clean_entries(data_root))
    out = tmp_path / "out"
    out.mkdir()
    for name in ("table.parquet", "features.json", "features.png"):
        (out / name).write_bytes(b"previous " + name.encode())
    before = _files(out)

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError, match="No space left"):
        main(_features_args(tmp_path, folder, out))
    assert _files(out) == before


# ---------------------------------------------------------------------------------------------------------
# Params out of range: an error naming the file and param before any work, no output
# ---------------------------------------------------------------------------------------------------------
RELEASE = [("dp_release.yaml", "dp_release", "delta", 0), ("dp_release.yaml", "dp_release", "delta", 1.0),
           ("dp_release.yaml", "dp_release", "delta", "1e-5"), ("dp_release.yaml", "dp_release", "clip_norm", 0),
           ("dp_release.yaml", "dp_release", "clip_norm", -2.0)]


def _grid(file: str, section: str, epsilons: str = "epsilons", seeds: str = "noise_seeds") -> list[tuple]:
    return [(file, section, epsilons, [0]), (file, section, epsilons, [1, -0.5]), (file, section, epsilons, []),
            (file, section, "mechanisms", []), (file, section, "mechanisms", ["gaussian"]),
            (file, section, seeds, 0)]


STAGE_FILES = {"dp_release": {"params": "dp_release.yaml"}, "dp_utility": {"params": "dp_release.yaml"},
               "table_attacks": {"params": "table_attacks.yaml", "release_params": "dp_release.yaml"},
               "dp_scenarios": {"params": "deployment.yaml", "release_params": "dp_release.yaml"},
               "dp_scaling": {"params": "dp_scaling.yaml", "release_params": "dp_release.yaml"},
               "dp_audit": {"params": "dp_audit.yaml"}, "linkage": {"params": "linkage.yaml"},
               "federated_accounting": {"params": "federated_accounting.yaml", "grid": "federated_mia.yaml"},
               "federated_lira": {"params": "federated_lira.yaml", "training_params": "federated_mia.yaml"}}
BAD_PARAMS = {
    "dp_release": _grid("dp_release.yaml", "dp_release") + RELEASE,
    "dp_utility": _grid("dp_release.yaml", "dp_release") + RELEASE
    + [("dp_release.yaml", "dp_utility", "baseline_mlp_seeds", 0),
       ("dp_release.yaml", "dp_utility", "nested_seeds", -1),
       ("dp_release.yaml", "dp_utility", "permutations", 0)],
    "table_attacks": _grid("table_attacks.yaml", "table_attacks") + RELEASE
    + [("table_attacks.yaml", "table_attacks", "membership.trials", 0)],
    "dp_scenarios": _grid("deployment.yaml", "deployment") + RELEASE,
    "dp_scaling": _grid("dp_scaling.yaml", "dp_scaling", epsilons="total_epsilons") + RELEASE
    + [("dp_scaling.yaml", "dp_scaling", "scaling_fraction", 1.0)],
    "dp_audit": _grid("dp_audit.yaml", "dp_audit", seeds="seeds")
    + [("dp_audit.yaml", "dp_audit", "delta", 0), ("dp_audit.yaml", "dp_audit", "delta", 2),
       ("dp_audit.yaml", "dp_audit", "clip_norm", 0), ("dp_audit.yaml", "dp_audit", "dims", [])],
    "linkage": [("linkage.yaml", "linkage", "seeds", []), ("linkage.yaml", "linkage", "typo_rates", []),
                ("linkage.yaml", "linkage", "thresholds", []), ("linkage.yaml", "linkage", "typo_rates", [0.1, 1.5])],
    "federated_accounting": [("federated_accounting.yaml", "federated_accounting", "delta", 0),
                             ("federated_accounting.yaml", "federated_accounting", "accountants", ["moments"]),
                             ("federated_accounting.yaml", "federated_accounting", "paper_protocol.epsilons", [0]),
                             ("federated_mia.yaml", "federated_mia", "batch_size", 0)],
    "federated_lira": [("federated_lira.yaml", "federated_lira", "n_shadows", 5),
                       ("federated_lira.yaml", "federated_lira", "shadow_in_fraction", 1.0),
                       ("federated_mia.yaml", "federated_mia", "clip_norm", 0)],
}
PARAM_CASES = [pytest.param(stage, *case, id=f"{stage}-{case[2]}={case[3]!r}") for stage, cases in BAD_PARAMS.items()
               for case in cases]


def _set(params: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        params = params[part]
    params[last] = value


@pytest.mark.parametrize("stage,file,section,key,value", PARAM_CASES)
def test_param_out_of_range_stops_the_stage_before_any_work(stage, file, section, key, value, tmp_path, monkeypatch):
    from eegprivacy.cli import build_parser
    from eegprivacy.pipeline.stages import get_stage, run_stage

    out = tmp_path / "out"
    params_dir = tmp_path / "params"
    params_dir.mkdir()
    argv = [get_stage(stage).command]
    subparser = next(a for a in build_parser()._actions if a.dest == "command").choices[argv[0]]
    flags = {a.dest: a.option_strings[0] for a in subparser._actions if a.option_strings}
    if "dataset" in flags:
        argv += ["--dataset", "synthetic_clinical"]
    for dest, name in STAGE_FILES[stage].items():
        params = yaml.safe_load((REPO / "params" / name).read_text())
        if name == file:
            _set(params[section], key, value)
        (params_dir / name).write_text(yaml.safe_dump(params))
        argv += [flags[dest], str(params_dir / name)]
    for dest in ("out", "metrics", "summary", "figure", "cells", "features_dir"):
        if dest in flags:
            argv += [flags[dest], str(out / dest)]
    args = subparser.parse_args(argv[1:])
    work = tmp_path / "cwd"  # relative defaults (params/features.yaml, data/...) resolve here, never in the repo
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(ParamsError, match=re.escape(f"{params_dir / file}: {section}.{key} = {value!r} is invalid; "
                                                    "it must be ") + r".*Fix it in .*nothing was computed"):
        run_stage(get_stage(stage), args)
    assert not out.exists() and not any(work.iterdir()) and not (tmp_path / "mlflow.db").exists()


def test_repository_params_are_valid():
    """Every stage's section of the repository's params/ reads into its typed config."""
    from eegprivacy.pipeline.stages import STAGES

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        configs = [stage.load_config() for stage in STAGES if stage.config]
    assert len(configs) == sum(1 for stage in STAGES if stage.config)


@pytest.mark.parametrize("mutation, message", [
    ({"epsilon": [1.0]}, "unknown key dp_release.epsilon; dp_release takes "),
    ({"clip_norm": None}, "dp_release.clip_norm = None is invalid"),
])
def test_unknown_and_invalid_keys_name_the_file_and_key(mutation, message, tmp_path):
    from eegprivacy.studies.release.config import DPReleaseConfig

    params = yaml.safe_load((REPO / "params" / "dp_release.yaml").read_text())
    params["dp_release"].update(mutation)
    path = tmp_path / "dp_release.yaml"
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ParamsError, match=re.escape(f"{path}: {message}")):
        DPReleaseConfig.load(path, "dp_release")


def test_a_missing_key_names_the_file_and_key(tmp_path):
    from eegprivacy.studies.release.config import DPReleaseConfig

    params = yaml.safe_load((REPO / "params" / "dp_release.yaml").read_text())
    del params["dp_release"]["delta"]
    path = tmp_path / "dp_release.yaml"
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ParamsError, match=re.escape(f"{path}: missing key dp_release.delta")):
        DPReleaseConfig.load(path, "dp_release")


# ---------------------------------------------------------------------------------------------------------
# The atomic writer itself
# ---------------------------------------------------------------------------------------------------------
def test_atomic_paths_replace_all_or_none(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "sub" / "b.png"
    a.write_text("old a")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_paths(a, b) as (ta, tb):
            ta.write_text("new a")
            raise RuntimeError("boom")
    assert a.read_text() == "old a" and not b.exists() and sorted(p.name for p in tmp_path.rglob("*")) == ["a.json",
                                                                                                          "sub"]
    with pytest.raises(RuntimeError, match=r"nothing was written for \[.*b\.png'\]; no output was replaced"):
        with atomic_paths(a, b) as (ta, tb):
            ta.write_text("new a")
    assert a.read_text() == "old a"
    with atomic_paths(a, b) as (ta, tb):
        ta.write_text("new a")
        tb.write_bytes(b"png")
    assert a.read_text() == "new a" and b.read_bytes() == b"png"
    assert write_text_atomic(a, "x").read_text() == "x"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.png", "sub"]
