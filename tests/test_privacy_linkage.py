"""Record linkage (study A): canonical GlobalIDs under a required key, keyed Bloom filters, linkage quality on
SYNTHETIC identities, and the stage's promise that no identity, pseudonym or key leaves it."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import pickle
import re
import sys
import time
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.privacy import linkage as lk
from eegprivacy.privacy.linkage import (
    BloomEncoder,
    BloomLinker,
    LinkageKey,
    MissingLinkageKeyError,
    canonical_identifier,
    corrupt_identities,
    dice_similarity,
    exact_link,
    global_id,
    greedy_one_to_one,
    linkage_quality,
    linkage_scenario,
    synthetic_identity_table,
)
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]

KEY_HEX = bytes(range(32)).hex()
FIELDS = [("given_name", "family_name"), "date_of_birth", "sex", "postcode"]


@pytest.fixture
def key() -> LinkageKey:
    return LinkageKey.from_hex(KEY_HEX)


def _record(**changes) -> dict:
    base = {"given_name": "Margarida", "family_name": "Kowalczyk", "date_of_birth": "1980-03-07", "sex": "F",
            "postcode": "KT12 4RW"}
    return {**base, **changes}


# ------------------------------------------------------------------------------------------- canonicalisation
@pytest.mark.parametrize("variant", ["9434765919", "943 476 5919", "943-476-5919", "943.476.5919", "943/476/5919",
                                     "943_476_5919", " 943\t476\n5919 ", "943\u00a0476\u00a05919",
                                     "\uff19\uff14\uff13\uff14\uff17\uff16\uff15\uff19\uff11\uff19",  # full width
                                     "943\u2013476\u20145919"])  # en and em dashes
def test_canonical_identifier_removes_formatting(variant):
    assert canonical_identifier(variant) == "9434765919"


def test_canonical_identifier_casefolds_and_keeps_content():
    assert canonical_identifier("MRN-00123") == canonical_identifier("mrn 00123") == "mrn00123"
    assert canonical_identifier("Straße") == "strasse"
    assert canonical_identifier("a+b#1") == "a+b#1"  # only whitespace and the listed separators go
    assert canonical_identifier("9434765918") != canonical_identifier("9434765919")


@pytest.mark.parametrize("empty", ["", "   ", " - . / _ ", "\u2013"])
def test_canonical_identifier_rejects_empty(empty):
    with pytest.raises(ValueError, match="empty"):
        canonical_identifier(empty)


def test_canonical_identifier_rejects_non_strings():
    with pytest.raises(TypeError):
        canonical_identifier(9434765919)


# ---------------------------------------------------------------------------------------------- GlobalID, keys
def test_global_id_is_hmac_sha256_of_the_canonical_identifier(key):
    reference = hmac.new(bytes(range(32)), b"9434765919", hashlib.sha256).hexdigest()
    assert global_id("943-476-5919", key) == reference
    # fixed vectors, computed independently with `openssl dgst -sha256 -mac HMAC -macopt hexkey:0001..1f`
    assert global_id("943 476 5919", key) == "dd5c602eeb31d60c7c0d662c897231dda00e13cdf945b14cad185a4a7125826c"
    assert global_id("MRN-00123", key) == "832a5b445777bb566234c6940af5aa5881e1f89ccb4028d6a06f49d36a6db5dc"


def test_global_ids_depend_on_the_key(key):
    other = LinkageKey(bytes(range(1, 33)))
    assert global_id("9434765919", key) != global_id("9434765919", other)
    assert global_id("9434765919", key) == global_id("9434765919", LinkageKey.from_hex(KEY_HEX))
    with pytest.raises(TypeError, match="no default key"):
        global_id("9434765919", None)


def test_missing_key_is_an_error_that_says_how_to_create_one(monkeypatch):
    monkeypatch.delenv(lk.KEY_ENV, raising=False)
    monkeypatch.delenv(lk.KEY_FILE_ENV, raising=False)
    with pytest.raises(MissingLinkageKeyError) as err:
        LinkageKey.from_env()
    message = str(err.value)
    assert "secrets.token_hex(32)" in message and lk.KEY_ENV in message and lk.KEY_FILE_ENV in message
    assert isinstance(err.value, RuntimeError)


def test_key_from_env_var_and_from_file(monkeypatch, tmp_path):
    monkeypatch.delenv(lk.KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(lk.KEY_ENV, KEY_HEX)
    assert LinkageKey.from_env() == LinkageKey.from_hex(KEY_HEX)

    other_hex = bytes(range(100, 140)).hex()
    key_file = tmp_path / "linkage.key"
    key_file.write_text(other_hex + "\n")
    key_file.chmod(0o600)
    monkeypatch.delenv(lk.KEY_ENV)
    monkeypatch.setenv(lk.KEY_FILE_ENV, str(key_file))
    from_file = LinkageKey.from_env()
    assert from_file == LinkageKey.from_hex(other_hex) and from_file != LinkageKey.from_hex(KEY_HEX)

    monkeypatch.setenv(lk.KEY_FILE_ENV, str(tmp_path / "absent.key"))
    with pytest.raises(MissingLinkageKeyError, match="absent.key"):
        LinkageKey.from_env()
    key_file.write_text("  \n")
    monkeypatch.setenv(lk.KEY_FILE_ENV, str(key_file))
    with pytest.raises(MissingLinkageKeyError, match="empty"):
        LinkageKey.from_env()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o700 | 0o070, 0o777])
def test_key_file_open_to_group_or_others_is_refused_with_chmod_advice(monkeypatch, tmp_path, mode):
    key_hex = bytes(range(100, 140)).hex()
    key_file = tmp_path / "linkage.key"
    key_file.write_text(key_hex + "\n")
    key_file.chmod(mode)
    monkeypatch.delenv(lk.KEY_ENV, raising=False)
    monkeypatch.setenv(lk.KEY_FILE_ENV, str(key_file))
    with pytest.raises(lk.InsecureLinkageKeyFileError) as err:
        LinkageKey.from_env()
    message = str(err.value)
    assert f"chmod 600 {key_file}" in message and f"{mode:03o}" in message
    assert key_hex not in message
    assert isinstance(err.value, MissingLinkageKeyError)  # callers that need a usable key catch one class
    key_file.chmod(0o600)
    assert LinkageKey.from_env() == LinkageKey.from_hex(key_hex)
    key_file.chmod(0o400)  # read-only for the owner is fine too
    assert LinkageKey.from_env() == LinkageKey.from_hex(key_hex)


def test_make_reproduce_creates_an_owner_only_key_that_from_env_accepts(monkeypatch, tmp_path):
    """Run the Makefile's own key-creation command (under a permissive umask) and use the key it writes."""
    import shlex
    import subprocess

    makefile = (REPO / "Makefile").read_text()
    match = re.search(r"\(umask 077;.*?> \$\(LINKAGE_KEY_FILE\)\)", makefile)
    assert match, "the reproduce target no longer creates the key under umask 077"
    key_file = tmp_path / "secrets" / "linkage.key"
    key_file.parent.mkdir()
    command = match.group(0).replace("$(BIN)/python", shlex.quote(sys.executable)).replace(
        "$(LINKAGE_KEY_FILE)", shlex.quote(str(key_file)))
    subprocess.run(["bash", "-c", f"umask 022; {command}"], check=True)
    assert key_file.stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv(lk.KEY_ENV, raising=False)
    monkeypatch.setenv(lk.KEY_FILE_ENV, str(key_file))
    assert len(LinkageKey.from_env()._secret) == 32


def test_short_or_malformed_keys_are_refused_without_echoing_them():
    with pytest.raises(ValueError, match="too short"):
        LinkageKey(b"\x01" * 31)
    with pytest.raises(ValueError, match="too short"):
        LinkageKey.from_hex("ab" * 31)
    bad = "zz" + "cd" * 31
    with pytest.raises(ValueError) as err:
        LinkageKey.from_hex(bad)
    assert bad not in str(err.value)
    with pytest.raises(TypeError):
        LinkageKey(KEY_HEX)  # hex text is not the key bytes


def test_repr_and_str_hide_the_key(key):
    secret_forms = [KEY_HEX, KEY_HEX.upper(), repr(bytes(range(32)))[2:-1]]
    for shown in (repr(key), str(key), f"{key}", repr([key]),
                  repr(BloomEncoder(FIELDS, key=key))):
        assert not any(s in shown for s in secret_forms), shown
    assert "hidden" in repr(key)


def test_synthetic_evaluation_keys_are_deterministic_per_seed_and_labelled():
    a, b = LinkageKey.for_synthetic_evaluation(3), LinkageKey.for_synthetic_evaluation(3)
    assert a == b and a != LinkageKey.for_synthetic_evaluation(4)
    assert a.synthetic and "synthetic" in repr(a)
    assert not LinkageKey(bytes(32)).synthetic


# ------------------------------------------------------------------------------------------------ Bloom filters
def test_bloom_similarities_identical_unrelated_and_one_typo(key):
    encoder = BloomEncoder(FIELDS, key=key)
    filters = encoder.encode([_record(), _record(), _record(given_name="Margarita"),
                              _record(given_name="Nikolai", family_name="Oliveira", date_of_birth="2001-11-23",
                                      sex="M", postcode="BW3 9XZ")])
    assert filters.dtype == bool and filters.shape == (4, 1024)
    dice = dice_similarity(filters, filters)
    assert dice[0, 1] == pytest.approx(1.0)
    assert dice[0, 2] > 0.85  # one substitution in the given name
    assert dice[0, 3] < 0.5  # a different person
    assert np.allclose(np.diag(dice), 1.0) and np.allclose(dice, dice.T)


def test_bloom_unrelated_records_score_low_on_average(key):
    table = synthetic_identity_table(300, seed=5, household_rate=0.0)
    filters = BloomEncoder(FIELDS, key=key).encode(table)
    dice = dice_similarity(filters, filters)
    off_diagonal = dice[~np.eye(len(table), dtype=bool)]
    assert np.median(off_diagonal) < 0.5
    assert 0.15 < filters.mean() < 0.45  # ~30 % full at the default 10 hashes


def test_bloom_normalises_formats_and_name_order(key):
    encoder = BloomEncoder(FIELDS, key=key)
    variants = [_record(), _record(given_name="KOWALCZYK", family_name="  margarida "),
                _record(date_of_birth="07/03/1980"), _record(date_of_birth="07.03.1980"),
                _record(date_of_birth="19800307"), _record(sex="female"), _record(postcode="kt124rw")]
    dice = dice_similarity(encoder.encode(variants[:1]), encoder.encode(variants))
    assert np.allclose(dice, 1.0)


def test_bloom_fields_are_salted_and_keyed(key):
    encoder = BloomEncoder(["given_name", "family_name"], key=key)
    swapped = encoder.encode([{"given_name": "Hartmann", "family_name": None},
                              {"given_name": None, "family_name": "Hartmann"}])
    assert dice_similarity(swapped[:1], swapped[1:])[0, 0] < 0.3  # same text, other field: other bits
    other_key = BloomEncoder(FIELDS, key=LinkageKey(bytes(range(1, 33))))
    same_record = [_record()]
    assert dice_similarity(BloomEncoder(FIELDS, key=key).encode(same_record),
                           other_key.encode(same_record))[0, 0] < 0.5
    with pytest.raises(MissingLinkageKeyError):
        BloomEncoder(FIELDS)
    encoder = BloomEncoder(FIELDS, key=key)
    encoder.encode(same_record)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(encoder)  # it caches plaintext values and holds sub-keys
    with pytest.raises(KeyError, match="postcode"):
        BloomEncoder(["postcode"], key=key).encode([{"given_name": "Anna"}])


def test_dice_similarity_matches_a_popcount_reference():
    rng = np.random.default_rng(0)
    a, b = rng.random((7, 64)) < 0.3, rng.random((5, 64)) < 0.3
    b[0] = False  # an empty filter
    expected = np.array([[0.0 if (x.sum() + y.sum()) == 0 else 2 * np.sum(x & y) / (x.sum() + y.sum())
                          for y in b] for x in a])
    assert np.allclose(dice_similarity(a, b), expected)
    assert np.allclose(dice_similarity(a, b, chunk=2), expected)
    with pytest.raises(ValueError):
        dice_similarity(a, b[:, :32])


def test_greedy_matching_is_one_to_one_best_first():
    similarity = np.array([[0.95, 0.90, 0.10],
                           [0.92, 0.50, 0.20],
                           [0.10, 0.85, 0.70]])
    matches = greedy_one_to_one(similarity, 0.6)
    # (0,0) first; row 1's best is then below threshold; (2,1) beats (2,2)
    assert matches == [(0, 0, 0.95), (2, 1, 0.85)]
    assert greedy_one_to_one(similarity, 0.99) == []
    linked = BloomLinker(threshold=0.6).link(np.eye(3, 8, dtype=bool), np.eye(3, 8, dtype=bool))
    assert sorted((i, j) for i, j, _ in linked) == [(0, 0), (1, 1), (2, 2)]
    with pytest.raises(ValueError):
        BloomLinker(threshold=1.5)


def test_greedy_matches_at_a_higher_threshold_are_a_filter_of_a_lower_one():
    similarity = np.random.default_rng(1).random((60, 50))
    low = greedy_one_to_one(similarity, 0.3)
    assert len({i for i, _, _ in low}) == len(low) == len({j for _, j, _ in low})
    for threshold in (0.5, 0.8, 0.95):
        assert greedy_one_to_one(similarity, threshold) == [m for m in low if m[2] >= threshold]


def test_linking_1000_by_1000_is_fast():
    rng = np.random.default_rng(2)
    a = rng.random((1000, 1024)) < 0.3
    b = a.copy()
    flips = rng.random(b.shape) < 0.02
    b ^= flips
    start = time.perf_counter()
    matches = BloomLinker(threshold=0.8).link(a, b[::-1])
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0  # ~0.1 s unloaded; generous for a busy CI machine
    assert linkage_quality(matches, {(i, 999 - i) for i in range(1000)})["recall"] == 1.0


def test_linkage_quality_counts():
    truth = {(0, 0), (1, 1), (2, 2), (3, 3)}
    quality = linkage_quality([(0, 0, 1.0), (1, 1, 0.9), (2, 3, 0.8)], truth)
    assert quality["precision"] == pytest.approx(2 / 3) and quality["recall"] == pytest.approx(0.5)
    assert quality["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert quality["n_true"] == 4 and quality["n_predicted"] == 3 and quality["true_positives"] == 2
    empty = linkage_quality([], truth)
    assert np.isnan(empty["precision"]) and empty["recall"] == 0.0


# ------------------------------------------------------------------------------------- synthetic identity tables
def test_synthetic_identity_table_is_seeded_unique_and_has_households():
    table = synthetic_identity_table(400, seed=1)
    assert list(table.columns) == ["record_id", *lk.IDENTITY_COLUMNS]
    assert table.equals(synthetic_identity_table(400, seed=1))
    assert not table.equals(synthetic_identity_table(400, seed=2))
    assert table["national_id"].is_unique and table["record_id"].tolist() == list(range(400))
    assert table["national_id"].str.fullmatch(r"\d{3} \d{3} \d{4}").all()
    assert pd.to_datetime(table["date_of_birth"], format="%Y-%m-%d").notna().all()
    assert table.duplicated(["family_name", "postcode"]).sum() > 40  # relatives share name and postcode


def test_corruption_keeps_record_ids_and_injects_what_it_says():
    table = synthetic_identity_table(300, seed=3)
    assert corrupt_identities(table, seed=0, typo_rate=0.0, format_rate=0.0).equals(table)

    typos = corrupt_identities(table, seed=0, typo_rate=1.0, format_rate=0.0)
    assert typos["record_id"].tolist() == table["record_id"].tolist()
    for field in lk.TYPO_FIELDS:  # every field got exactly one edit, so none is unchanged
        assert (typos[field] != table[field]).all(), field
    assert (typos["sex"] == table["sex"]).all()

    formats = corrupt_identities(table, seed=0, typo_rate=0.0, format_rate=1.0)
    assert (formats["national_id"] != table["national_id"]).mean() > 0.5
    assert (formats["national_id"].map(canonical_identifier) == table["national_id"].map(canonical_identifier)).all()
    assert (formats["date_of_birth"].map(lk.normalise_date) == table["date_of_birth"].str.replace("-", "")).all()
    assert (formats["date_of_birth"] != table["date_of_birth"]).all()
    with pytest.raises(ValueError):
        corrupt_identities(table, seed=0, typo_rate=1.5, format_rate=0.0)


def test_canonicalisation_absorbs_every_format_variant_in_exact_linkage():
    key = LinkageKey.for_synthetic_evaluation(0)
    site_a, site_b, truth = linkage_scenario(300, seed=4, typo_rate=0.0, format_rate=1.0)
    matches = exact_link([global_id(v, key) for v in site_a["national_id"]],
                         [global_id(v, key) for v in site_b["national_id"]])
    quality = linkage_quality(matches, truth)
    assert quality["precision"] == 1.0 and quality["recall"] == 1.0


def test_bloom_linkage_beats_exact_linkage_under_typos():
    key = LinkageKey.for_synthetic_evaluation(0)
    site_a, site_b, truth = linkage_scenario(600, seed=0, typo_rate=0.1, format_rate=0.2)
    assert len(truth) == 480 and len(site_b) == 600
    exact = linkage_quality(exact_link([global_id(v, key) for v in site_a["national_id"]],
                                       [global_id(v, key) for v in site_b["national_id"]]), truth)
    encoder = BloomEncoder(FIELDS, key=key)
    bloom = linkage_quality(BloomLinker(0.8).link(encoder.encode(site_a), encoder.encode(site_b)), truth)
    assert bloom["recall"] > 0.9 and bloom["precision"] > 0.9
    assert exact["precision"] == 1.0 and exact["recall"] < 0.95  # one typo in the id loses the record
    assert bloom["recall"] > exact["recall"] + 0.03


# --------------------------------------------------------------------------------------------------- the stage
SMALL = {"linkage": {"n_records": 120, "overlap": 0.8, "household_rate": 0.2, "format_rate": 0.3,
                     "typo_rates": [0.0, 0.2], "seeds": [0, 1], "q": 2, "num_bits": 1024, "num_hashes": 10,
                     "fields": [["given_name", "family_name"], "date_of_birth", "sex", "postcode"],
                     "thresholds": [0.6, 0.8, 0.9], "default_threshold": 0.8}}


def _stage_argv(params_file, outputs, cells, figure: str, *extra: str) -> list[str]:
    """The stage's command line with its outputs in ``outputs`` and its cell cache in ``cells``."""
    return ["linkage", "--params", str(params_file), "--out", str(outputs / "linkage.csv"),
            "--summary", str(outputs / "linkage.json"), "--figure", str(outputs / figure), "--cells", str(cells),
            *extra]


def _secrets(params: dict, deployment_key_hex: str) -> tuple[set[str], set[str]]:
    """What must never leave the stage: (identity values, pseudonyms and key material)."""
    identities, hidden = set(), {deployment_key_hex, deployment_key_hex.upper()}
    for seed in params["seeds"]:
        key = LinkageKey.for_synthetic_evaluation(seed)
        hidden |= {key._secret.hex(), key.derive("bloom/h1").hex(), key.derive("bloom/h2").hex()}
        for typo_rate in params["typo_rates"]:
            site_a, site_b, _ = linkage_scenario(params["n_records"], seed, typo_rate, params["format_rate"],
                                                 overlap=params["overlap"], household_rate=params["household_rate"])
            for site in (site_a, site_b):
                hidden |= {global_id(v, key) for v in site["national_id"]}
                for column in lk.IDENTITY_COLUMNS:
                    if column != "sex":  # single letters say nothing about a person
                        identities |= {str(v).strip() for v in site[column] if len(str(v).strip()) >= 4}
                identities |= {canonical_identifier(v) for v in site["national_id"]}
    return identities, hidden


@pytest.mark.slow
def test_stage_releases_rates_only_never_identities_pseudonyms_or_keys(tmp_path, monkeypatch, capfd, caplog):
    deployment_key = bytes(range(200, 232)).hex()  # a real key in the environment must not leak either
    monkeypatch.setenv(lk.KEY_ENV, deployment_key)
    caplog.set_level(logging.DEBUG)
    params_file = tmp_path / "linkage.yaml"
    params_file.write_text(yaml.safe_dump(SMALL))
    outputs = tmp_path / "outputs"
    assert main(_stage_argv(params_file, outputs, tmp_path / "cells", "linkage_precision_recall.png")) == 0
    captured = capfd.readouterr()
    texts = {"stdout": captured.out, "stderr": captured.err, "log": caplog.text}

    # the stage did its job: per-seed rows, a headline, a figure, tagged runs
    rows = pd.read_csv(outputs / "linkage.csv")
    assert set(rows["method"]) == {"exact_hmac", "bloom"} and set(rows["seed"]) == {0, 1}
    assert rows["value"].between(0, 1).all()
    summary = json.loads((outputs / "linkage.json").read_text())
    assert summary["synthetic"] is True
    typo = summary["typo_rates"]["0.2"]
    assert typo["bloom"]["recall"]["mean"] > typo["exact_hmac"]["recall"]["mean"]
    assert (outputs / "linkage_precision_recall.png").stat().st_size > 10_000

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-a-dp-release")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    assert len(runs) == 1 + 4 + 1  # sweep parent, one child per (typo rate, seed), summary
    for run in runs:
        assert run.data.tags["stage"] == "linkage" and run.data.tags["synthetic"] == "true"
        assert run.data.tags["dataset"] == "synthetic_identities"
        texts[f"run {run.info.run_id}"] = json.dumps({"params": run.data.params, "tags": run.data.tags,
                                                      "metric_keys": sorted(run.data.metrics)})
        artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "linkage")]
        texts[f"artifacts {run.info.run_id}"] = " ".join(artifacts)
    assert any(texts[k].count("linkage/") for k in texts if k.startswith("artifacts"))

    # every file the stage or MLflow wrote under tmp_path: outputs, cell cache, sqlite store, artifact copies
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != params_file]
    assert any(p.suffix == ".db" for p in files) and any("mlartifacts" in p.parts for p in files)
    blobs = {str(p): p.read_bytes() for p in files}

    identities, hidden = _secrets(SMALL["linkage"], deployment_key)
    assert len(identities) > 500 and len(hidden) > 300
    for where, text in texts.items():
        leaked = [s for s in identities | hidden if s in text]
        assert not leaked, f"{where} leaks {len(leaked)} identity/pseudonym/key strings"
        version = summary["dataset_version"]
        assert set(re.findall(r"[0-9a-f]{64}", text)) <= {version}, where
    for where, blob in blobs.items():
        leaked = [s for s in identities | hidden if s.encode() in blob]
        assert not leaked, f"{where} leaks {len(leaked)} identity/pseudonym/key strings"


def test_stage_help_names_synthetic_identities(capsys):
    from eegprivacy.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["linkage", "--help"])
    out = capsys.readouterr().out
    assert "SYNTHETIC" in out and "--params" in out and "--figure" in out


@pytest.mark.slow
def test_stage_rows_do_not_depend_on_the_number_of_processes(tmp_path):
    params_file = tmp_path / "linkage.yaml"
    params_file.write_text(yaml.safe_dump(SMALL))
    tables = {}
    for jobs in (1, 2):
        outputs = tmp_path / f"jobs{jobs}"
        assert main(_stage_argv(params_file, outputs, outputs / "cells", "linkage.png", "--no-progress",
                                "--jobs", str(jobs))) == 0
        tables[jobs] = pd.read_csv(outputs / "linkage.csv")
    assert set(tables[1]["seed"]) == {0, 1}
    pd.testing.assert_frame_equal(tables[1], tables[2])
