"""Deployment scenarios: the hospital split, client-/server-side releases, the key requirement, and a stage run
that proves no pseudonym, key or identifier reaches any output, MLflow record or log."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.privacy import patient_vectors, release_table
from eegprivacy.privacy.deployment import (
    client_side_release,
    hospital_tables,
    identifier_as_recorded,
    server_side_release,
    split_across_hospitals,
)
from eegprivacy.privacy.linkage import LinkageKey, MissingLinkageKeyError, canonical_identifier, global_id
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]


def _windows(n_patients=12, recordings=2, windows=5, d=6, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_patients):
        n_rec = recordings if p % 3 else 1  # every third patient has a single recording
        for r in range(n_rec):
            for w in range(windows):
                rows.append({"subject": f"Subject{p:02d}", "recording": f"Subject{p:02d}_{r + 1}", "label": p % 2,
                             **{f"f{i}": rng.normal(p, 1.0) for i in range(d)}})
    return pd.DataFrame(rows)


FEATURES = [f"f{i}" for i in range(6)]


def test_split_is_seeded_balanced_and_shares_whole_recordings():
    frame = _windows()
    a = split_across_hospitals(frame, n_hospitals=3, shared_fraction=0.25, seed=4)
    assert np.array_equal(a, split_across_hospitals(frame, 3, 0.25, seed=4))
    assert not np.array_equal(a, split_across_hospitals(frame, 3, 0.25, seed=5))
    sites = frame.assign(h=a).groupby("subject")["h"].nunique()
    assert (sites == 2).sum() == 3 and sites.max() == 2  # round(0.25 * 12) patients at two hospitals
    assert (frame.assign(h=a).groupby("recording")["h"].nunique() == 1).all()  # a recording is never split
    homes = frame.assign(h=a).groupby("subject")["h"].min()
    assert set(np.bincount(homes, minlength=3)) <= {3, 4, 5}
    assert (split_across_hospitals(frame, 3, 0.0, seed=0) >= 0).all()
    with pytest.raises(ValueError):
        split_across_hospitals(frame, 0, 0.2, seed=0)


def test_hospitals_format_identifiers_differently_but_canonicalisation_agrees():
    variants = {identifier_as_recorded("Subject07", h) for h in range(4)}
    assert len(variants) == 4
    assert {canonical_identifier(v) for v in variants} == {"subject07"}


def test_server_side_merges_duplicates_into_the_central_pooled_release():
    frame = _windows()
    tables = hospital_tables(frame, split_across_hospitals(frame, 3, 0.25, seed=1), FEATURES, 3)
    key = LinkageKey(os.urandom(32))
    released = server_side_release(tables, key, "none", np.inf, 1e-5, clip_norm=2.0, seed=0)
    assert released.info["n_duplicates_merged"] == 3 and len(released.X) == 12
    central_X, central_y, _ = patient_vectors(frame, FEATURES)
    central, _ = release_table(central_X.to_numpy(), "none", np.inf, 1e-5, 2.0)
    order = np.argsort(released.truth_group)  # truth_group = the patient's position in sorted id order
    np.testing.assert_allclose(released.X[order], central, atol=1e-12)
    assert np.array_equal(released.y[order], central_y)
    assert released.patient_epsilon == np.inf

    noisy = server_side_release(tables, key, "gaussian_analytic", 2.0, 1e-5, 2.0, seed=3)
    assert noisy.patient_epsilon == 2.0
    np.testing.assert_array_equal(noisy.X, server_side_release(tables, key, "gaussian_analytic", 2.0, 1e-5, 2.0,
                                                               seed=3).X)


def test_server_side_refuses_without_a_secret_key():
    frame = _windows()
    tables = hospital_tables(frame, split_across_hospitals(frame, 3, 0.25, seed=1), FEATURES, 3)
    with pytest.raises(MissingLinkageKeyError, match="linkage key"):
        server_side_release(tables, None, "gaussian_analytic", 1.0, 1e-5, 2.0, seed=0)
    with pytest.raises(ValueError, match="public"):
        server_side_release(tables, LinkageKey.for_synthetic_evaluation(0), "gaussian_analytic", 1.0, 1e-5, 2.0, 0)


def test_client_side_composes_epsilon_for_patients_seen_twice():
    frame = _windows()
    shared = hospital_tables(frame, split_across_hospitals(frame, 3, 0.25, seed=1), FEATURES, 3)
    release = client_side_release(shared, "laplace_formal", 1.5, 0.0, 2.0, seed=0)
    assert len(release.X) == 15 and release.patient_epsilon == 3.0
    assert set(release.hospital) == {0, 1, 2}
    assert np.bincount(release.truth_group).max() == 2
    alone = hospital_tables(frame, split_across_hospitals(frame, 3, 0.0, seed=1), FEATURES, 3)
    assert client_side_release(alone, "laplace_formal", 1.5, 0.0, 2.0, seed=0).patient_epsilon == 1.5


@pytest.fixture(scope="module")
def clinical_features(synthetic_features_dir):
    folder = synthetic_features_dir("synthetic_clinical")
    return folder, sorted(pd.read_parquet(folder / "synthetic_clinical.parquet")["subject"].unique())


def _stage_args(tmp_path, features_dir, scenarios, jobs=1) -> list[str]:
    """The dp-scenarios command line, every output under ``tmp_path``."""
    params = {"deployment": {"scenarios": scenarios, "n_hospitals": 3, "shared_fraction": 0.25,
                             "mechanisms": ["gaussian_analytic"], "epsilons": [10], "noise_seeds": 1,
                             "federated": {"backend": "inprocess", "hidden_layer_sizes": [8], "num_rounds": 2,
                                           "local_epochs": 1, "learning_rate_init": 0.01}}}
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(params))
    return ["dp-scenarios", "--dataset", "synthetic_clinical", "--params", str(path), "--release-params",
            "params/dp_release.yaml", "--out", str(tmp_path / "rows.csv"), "--metrics", str(tmp_path / "sc.json"),
            "--figure", str(tmp_path / "sc.png"), "--cells", str(tmp_path / "cells"), "--features-dir",
            str(features_dir), "--jobs", str(jobs), "--no-progress"]


def test_stage_refuses_server_side_without_a_key_before_any_work(tmp_path, clinical_features, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("EEGPRIVACY_LINKAGE_KEY", raising=False)
    monkeypatch.delenv("EEGPRIVACY_LINKAGE_KEY_FILE", raising=False)
    with pytest.raises(MissingLinkageKeyError, match="no default key"):
        main(_stage_args(tmp_path, clinical_features[0], ["server_side"]))
    assert not (tmp_path / "cells").exists() and not (tmp_path / "rows.csv").exists()


@pytest.mark.slow
def test_no_pseudonym_key_or_identifier_reaches_outputs_mlflow_or_logs(tmp_path, clinical_features, monkeypatch,
                                                                       capfd, caplog):
    features_dir, subjects = clinical_features
    monkeypatch.chdir(REPO)
    key_hex = os.urandom(32).hex()
    key_file = tmp_path / "secret" / "linkage.key"
    key_file.parent.mkdir()
    key_file.write_text(key_hex + "\n")
    key_file.chmod(0o600)  # from_env refuses a key file others can read
    monkeypatch.delenv("EEGPRIVACY_LINKAGE_KEY", raising=False)
    monkeypatch.setenv("EEGPRIVACY_LINKAGE_KEY_FILE", str(key_file))
    with caplog.at_level(logging.DEBUG):
        assert main(_stage_args(tmp_path, features_dir, ["client_side", "server_side", "decentralised"])) == 0
    rows = pd.read_csv(tmp_path / "rows.csv")
    assert set(rows["scenario"]) == {"client_side", "server_side", "decentralised"}
    assert rows.loc[(rows.metric == "n_duplicates_merged") & (rows.scenario == "server_side"), "value"].gt(0).all()

    key = LinkageKey.from_hex(key_hex)
    secrets = {key_hex, key_hex.upper(), *(global_id(identifier_as_recorded(s, h), key)
                                           for s in subjects for h in range(3))}
    identifiers = set(subjects) | {identifier_as_recorded(s, h).strip() for s in subjects for h in range(3)}
    # identifiers must not appear either: the released and logged tables carry positions only
    forbidden = secrets | {i for i in identifiers if len(i) >= 3}

    def check(text: str, where: str):
        hits = [f for f in forbidden if f in text]
        assert not hits, f"{where} contains {hits[:3]}"

    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix in {".csv", ".json", ".yaml", ".txt", ".log"} and "secret" not in path.parts:
            check(path.read_text(errors="ignore"), str(path))
    out, err = capfd.readouterr()
    check(out + err, "stdout/stderr")
    check("\n".join(r.getMessage() for r in caplog.records), "log records")

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    assert runs
    for run in runs:
        check(json.dumps([run.data.params, run.data.tags, list(run.data.metrics)]), f"run {run.info.run_id}")
        for artifact in client.list_artifacts(run.info.run_id):
            local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path=artifact.path,
                                                        tracking_uri=tracking_uri(), dst_path=str(tmp_path / "dl"))
            for file in Path(local).rglob("*") if Path(local).is_dir() else [Path(local)]:
                check(file.read_text(errors="ignore"), f"artifact {file}")


@pytest.mark.slow
def test_stage_rows_do_not_depend_on_the_number_of_processes(tmp_path, clinical_features, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("EEGPRIVACY_LINKAGE_KEY", os.urandom(32).hex())  # the workers read it as the stage does
    tables = {}
    for jobs in (1, 2):
        (tmp_path / f"jobs{jobs}").mkdir()
        folder = tmp_path / f"jobs{jobs}"
        assert main(_stage_args(folder, clinical_features[0], ["server_side", "decentralised"], jobs=jobs)) == 0
        tables[jobs] = pd.read_csv(folder / "rows.csv")
    assert set(tables[1]["scenario"]) == {"server_side", "decentralised"}
    pd.testing.assert_frame_equal(tables[1], tables[2])


# ---- Visits of a cohort with one recording per patient (MSU), the patient table's condition, the grid ---------
def _one_recording_windows(n_patients=12, n_windows=59, d=6, seed=0):
    """One 60-s recording per patient, 2-s windows at 1-s steps, two conditions by label (as MSU's class folders)."""
    rng = np.random.default_rng(seed)
    rows = [{"subject": f"Subject{p:02d}", "recording": f"Subject{p:02d}_1", "label": p % 2,
             "condition": "patient" if p % 2 else "control", "t_start": float(w),
             **{f"f{i}": rng.normal(p, 1.0) for i in range(d)}} for p in range(n_patients) for w in range(n_windows)]
    return pd.DataFrame(rows)


def _deployment(shared_fraction=0.25, **datasets):
    from eegprivacy.studies.release.config import DeploymentConfig

    return DeploymentConfig.from_mapping({
        "scenarios": ["client_side", "server_side"], "n_hospitals": 3, "shared_fraction": shared_fraction,
        "mechanisms": ["gaussian_analytic"], "epsilons": [1], "noise_seeds": 1, "datasets": datasets,
        "federated": {"backend": "inprocess", "hidden_layer_sizes": [8], "num_rounds": 1, "local_epochs": 1,
                      "learning_rate_init": 0.01}})


def test_half_visits_put_a_shared_patients_two_halves_at_two_hospitals():
    from eegprivacy.studies.release.scenarios import check_shared_fraction, half_visits

    frame = _one_recording_windows()
    with pytest.raises(ValueError, match="only 0 have two visits; set deployment.datasets.toy.visits: halves"):
        check_shared_fraction(frame, "toy", _deployment())  # one recording each: nobody could be shared
    check_shared_fraction(frame, "toy", _deployment(shared_fraction=0.0))  # sharing nobody needs no second visit

    visits = half_visits(frame, window_s=2.0)
    assert visits.groupby("subject")["recording"].nunique().eq(2).all()
    assert len(visits) == 12 * 58  # the window at 29-31 s straddles the middle: in neither visit
    assert visits.index.is_monotonic_increasing  # the table's row order is kept
    check_shared_fraction(visits, "toy", _deployment(toy={"visits": "halves"}))
    sites = split_across_hospitals(visits, 3, 0.25, seed=2)
    per_patient = visits.assign(h=sites).groupby("subject")["h"].nunique()
    assert (per_patient == 2).sum() == 3  # round(0.25 × 12) patients, each half at another hospital
    assert (visits.assign(h=sites).groupby("recording")["h"].nunique() == 1).all()  # a half is never split

    tables = hospital_tables(visits, sites, FEATURES, 3)
    merged = server_side_release(tables, LinkageKey(os.urandom(32)), "none", np.inf, 1e-5, clip_norm=2.0, seed=0)
    assert merged.info["n_duplicates_merged"] == 3 and len(merged.X) == 12
    central, _ = release_table(patient_vectors(visits, FEATURES)[0].to_numpy(), "none", np.inf, 1e-5, 2.0)
    np.testing.assert_allclose(merged.X[np.argsort(merged.truth_group)], central, atol=1e-12)
    client = client_side_release(tables, "gaussian_analytic", 1.0, 1e-5, 2.0, seed=0)
    assert len(client.X) == 15 and client.patient_epsilon == 2.0


def test_the_patient_table_is_the_release_condition():
    from eegprivacy.studies.release.scenarios import condition_windows

    frame = _one_recording_windows()
    assert condition_windows(frame, "toy", None) is frame  # one condition per patient: the whole table
    assert set(condition_windows(frame, "toy", "patient")["label"]) == {1}
    with pytest.raises(ValueError, match="no window of condition 'rest'"):
        condition_windows(frame, "toy", "rest")
    mixed = frame.assign(condition=np.where(frame["t_start"] < 30, "rest", "task"))
    with pytest.raises(ValueError, match="set dp_release.datasets.toy.condition"):
        condition_windows(mixed, "toy", None)


def test_every_scenario_row_uses_the_one_threshold_grid(monkeypatch):
    """The noiseless rows used the paper's narrower grid while the DP rows used the wide one; one grid now."""
    from eegprivacy.studies.release import scenarios
    from eegprivacy.studies.release.utility import THRESHOLD_GRID

    grids = []

    class Recorder:
        def __init__(self, **kwargs):
            grids.append(kwargs["threshold_grid"])
            raise StopIteration

    monkeypatch.setattr(scenarios, "LOSOEvaluation", Recorder)
    frame = _windows()
    for mechanism, epsilon in (("none", np.inf), ("gaussian_analytic", 1.0)):
        with pytest.raises(StopIteration):
            scenarios.scenario_rows("client_side", mechanism, epsilon, 0, frame, FEATURES, _deployment(), 2.0, 1e-5,
                                    None)
    assert len(grids) == 2 and all(np.array_equal(g, THRESHOLD_GRID) for g in grids)


def _labelled_windows(n_patients=16, windows=4, d=6, effect=3.0, seed=0):
    """Two recordings per patient whose features carry the label (shifted by ``effect`` for label 1)."""
    rng = np.random.default_rng(seed)
    rows = [{"subject": f"Subject{p:02d}", "recording": f"Subject{p:02d}_{r}", "label": p % 2,
             **{f"f{i}": rng.normal(effect * (p % 2), 1.0) for i in range(d)}}
            for p in range(n_patients) for r in (1, 2) for _ in range(windows)]
    return pd.DataFrame(rows)


def test_the_matched_null_scores_the_same_release_with_the_signal_removed():
    from eegprivacy.studies.release import scenarios

    frame = _labelled_windows()
    config = _deployment(shared_fraction=0.25)

    def auroc_of(arm, seed):
        rows = scenarios.scenario_rows("client_side", "gaussian_analytic", 1e4, seed, frame, FEATURES, config, 2.0,
                                       1e-5, None, arm)
        return next(r["value"] for r in rows if r["metric"] == "auroc"), rows

    release, rows = auroc_of("release", 0)
    null, null_rows = auroc_of("matched_null", 0)
    assert release > 0.9  # a strong label effect, almost no noise at ε = 10⁴
    assert null < 0.7  # the same protocol on noise alone finds nothing
    release_info = {r["metric"]: r["value"] for r in rows if r["protocol"] == "release"}
    assert release_info == {r["metric"]: r["value"] for r in null_rows if r["protocol"] == "release"}  # same split
    with pytest.raises(ValueError, match="unknown arm"):
        scenarios.scenario_rows("client_side", "none", np.inf, 0, frame, FEATURES, config, 2.0, 1e-5, None, "null")


def test_release_minus_null_is_paired_by_seed():
    from eegprivacy.studies.release.scenarios import release_minus_null, summarise

    def row(arm, seed, value, metric="auroc", mechanism="gaussian_analytic", epsilon=1.0):
        return {"dataset": "toy", "scenario": "client_side", "mechanism": mechanism, "epsilon": epsilon,
                "protocol": "threshold_free", "metric": metric, "seed": seed, "arm": arm, "value": value,
                "chance": 0.5}

    tidy = pd.DataFrame([row("release", 0, 0.9), row("matched_null", 0, 0.4), row("release", 1, 0.7),
                         row("matched_null", 1, 0.6), row("release", 0, 0.95, mechanism="none", epsilon=np.inf),
                         row("release", 0, 30.0, metric="n_rows"), row("matched_null", 0, 30.0, metric="n_rows")])
    diff = release_minus_null(tidy).sort_values("seed")
    np.testing.assert_allclose(diff["value"], [0.5, 0.1])
    assert (diff["arm"] == "release_minus_null").all() and (diff["chance"] == 0.0).all()
    summary = summarise(tidy)
    entry = summary[summary["arm"] == "release_minus_null"].iloc[0]
    assert entry["value"] == pytest.approx(0.3) and entry["n_seeds"] == 2 and entry["ci_over"] == "seeds"
    assert entry["eps_unit"] == "release"
    assert set(summary["arm"]) == {"release", "matched_null", "release_minus_null"}


def test_release_noise_is_independent_per_mechanism_and_epsilon():
    """The deployment layer seeds its noise from the seed it is given; the stage hands it one drawn per
    (mechanism, ε, seed), so two ε on one split are not the same draw rescaled (common random numbers only as
    dp_release's named option)."""
    from eegprivacy.studies.release.scenarios import release_noise_seed

    seeds = {(m, e, s): release_noise_seed(m, e, s) for m in ("gaussian_analytic", "laplace_formal")
             for e in (1.0, 10.0) for s in (0, 1)}
    assert len(set(seeds.values())) == len(seeds)
    assert release_noise_seed("gaussian_analytic", 1.0, 0) == seeds[("gaussian_analytic", 1.0, 0)]
    shared = {release_noise_seed(m, e, 0, common_random_numbers=True) for m, e, _ in seeds}
    assert len(shared) == 1
    frame = _labelled_windows().assign(**dict.fromkeys(FEATURES, 0.0))  # no signal: the release is its noise
    tables = hospital_tables(frame, split_across_hospitals(frame, 3, 0.25, seed=0), FEATURES, 3)
    noise = {e: client_side_release(tables, "gaussian_analytic", e, 1e-5, 2.0, noise_seed).X.ravel()
             for e, noise_seed in ((1.0, release_noise_seed("gaussian_analytic", 1.0, 0)),
                                   (10.0, release_noise_seed("gaussian_analytic", 10.0, 0)),
                                   (20.0, release_noise_seed("gaussian_analytic", 1.0, 0)))}
    assert abs(np.corrcoef(noise[1.0], noise[10.0])[0, 1]) < 0.2  # ε = 1 and ε = 10: independent draws
    assert np.corrcoef(noise[1.0], noise[20.0])[0, 1] > 0.999  # one seed: one draw, rescaled
