"""After the small pipeline (every study-A stage, server-side linkage under a secret key file), no subject id,
GlobalID, linkage key or synthetic person's name is anywhere in what it wrote: the MLflow sqlite store and its
companions, artifacts, metrics/, plots/, reports/, the cell cache and the captured logs. The scanner itself is
checked to find what it looks for."""

from __future__ import annotations

import os
import sqlite3
import struct
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from eegprivacy.tracking.leaks import files_under, scan_for_identifiers  # noqa: E402

SECRET = "Subject-Q7731"


# ---- the scanner --------------------------------------------------------------------------------------------

def test_scanner_finds_text_names_and_never_prints_what_it_found(tmp_path):
    (tmp_path / "rows.csv").write_text(f"a,b\n1,{SECRET}\n")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / f"{SECRET}.json").write_text("{}")
    (tmp_path / f"run-{SECRET}").mkdir()
    (tmp_path / f"run-{SECRET}" / "values.txt").write_text(f"x {SECRET}")
    (tmp_path / "clean.txt").write_text("nothing here")
    hits = scan_for_identifiers([tmp_path], {"subject id": ["unrelated", SECRET]})
    assert {(h.path.name, h.part, h.kind, h.index) for h in hits} == {
        ("rows.csv", "bytes", "subject id", 1), (f"{SECRET}.json", "name", "subject id", 1),
        (f"run-{SECRET}", "name", "subject id", 1), ("values.txt", "bytes", "subject id", 1)}
    assert {h.offset for h in hits if h.path.name == "rows.csv"} == {6}
    # a report names the place, never the string, even when the string is the place's name
    assert all(SECRET not in str(h) and "<redacted>" in str(h) for h in hits if h.part == "name")
    assert all(SECRET not in str(h) for h in hits)
    assert scan_for_identifiers([tmp_path], [SECRET.lower()]) == []  # exact and case-sensitive: pass variants
    with pytest.raises(ValueError, match="shorter"):
        scan_for_identifiers([tmp_path], ["ab"])


def test_short_codes_can_be_matched_as_whole_words_only(tmp_path):
    (tmp_path / "fonts.log").write_text("cmss10.ttf nested_seeds03c hospitals06")
    (tmp_path / "metric.txt").write_text("auroc_s03=0.5")
    (tmp_path / "edge.csv").write_text("s10")
    (tmp_path / "dash.txt").write_text("id:p-06;")
    codes = {"code": ["s10", "s03", "p-06", "s06"]}
    whole = scan_for_identifiers([tmp_path], codes, whole_words=["code"])
    assert {(h.path.name, h.index) for h in whole} == {("metric.txt", 1), ("edge.csv", 0), ("dash.txt", 2)}
    assert len(scan_for_identifiers([tmp_path], codes)) == 6  # as substrings every file matches, fonts.log thrice


def test_short_codes_in_a_sqlite_store_are_judged_by_its_values_not_by_chance_bytes(tmp_path):
    db = tmp_path / "store.db"
    connection = sqlite3.connect(db)
    connection.execute("create table metrics (key text, value integer)")
    # an integer whose 8 big-endian bytes spell \x0e s04 \x00: raw bytes show a whole-word "s04" (as a real
    # MLflow store once did, in a cell-pointer array), yet no value holds the code
    coincidence = int.from_bytes(b"\x00\x0es04\x00\x01\x02", "big")
    connection.execute("insert into metrics values ('loss', ?)", (coincidence,))
    connection.commit()
    assert b"\x0es04\x00" in db.read_bytes()
    assert scan_for_identifiers([db], {"code": ["s04"]}, whole_words=["code"]) == []
    assert len(scan_for_identifiers([db], {"code": ["s04"]})) == 1  # as a plain substring the bytes still count

    connection.execute("insert into metrics values ('s04', 1)")  # the code as a value of its own is a leak
    connection.commit()
    connection.close()
    hits = scan_for_identifiers([db], {"code": ["s04", "s05"]}, whole_words=["code"])
    assert [(h.part, h.index) for h in hits] == [("sqlite value", 0)]


def test_scanner_reads_the_sqlite_write_ahead_log_of_a_store_named_directly(tmp_path):
    db = tmp_path / "store.db"
    connection = sqlite3.connect(db)
    connection.execute("pragma journal_mode=wal")
    connection.execute("create table params (key text, value text)")
    connection.execute("insert into params values ('subject', ?)", (SECRET,))
    connection.commit()  # committed to the WAL; the open connection keeps it from being checkpointed away
    try:
        assert (tmp_path / "store.db-wal").exists()
        hits = scan_for_identifiers([db], [SECRET])
        assert [h.path.name for h in hits] == ["store.db-wal"]
        assert {p.name for p in files_under([db])} >= {"store.db", "store.db-wal"}
    finally:
        connection.close()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_scanner_reads_png_text_chunks_not_compressed_pixels(tmp_path):
    fig, ax = plt.subplots()
    ax.set_title(SECRET)  # drawn into the pixels: beyond any byte scanner
    fig.savefig(tmp_path / "drawn.png", metadata={"Description": "fine"})
    fig.savefig(tmp_path / "meta.png", metadata={"Title": f"cohort {SECRET}"})
    plt.close(fig)
    plain = (tmp_path / "drawn.png").read_bytes()
    end = plain.rindex(b"IEND") - 4
    compressed = (_png_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(SECRET.encode()))
                  + _png_chunk(b"iTXt", b"Author\0\x01\0en\0\0" + zlib.compress(SECRET.encode())))
    (tmp_path / "compressed.png").write_bytes(plain[:end] + compressed + plain[end:])
    hits = scan_for_identifiers([tmp_path], [SECRET])
    assert sorted(h.path.name for h in hits) == ["compressed.png", "meta.png"]
    assert all(h.part == "png text" for h in hits)


# ---- the pipeline -------------------------------------------------------------------------------------------

def _forbidden(key_hex: str) -> dict[str, set[str]]:
    """Everything that would identify a person or unlock the pseudonyms, in every form the pipeline handles."""
    from _small_pipeline import CLINICAL, PARAMS, REST_TASK

    from eegprivacy.data import get_dataset
    from eegprivacy.privacy import linkage as lk
    from eegprivacy.privacy.deployment import identifier_as_recorded

    key = lk.LinkageKey.from_hex(key_hex)
    subjects = [*get_dataset(CLINICAL, seed=0).subjects(), *get_dataset(REST_TASK).subjects()]
    ids = {v for s in subjects for v in (s, lk.canonical_identifier(s),
                                          *(identifier_as_recorded(s, h).strip() for h in range(4)))}
    gids = {lk.global_id(identifier_as_recorded(s, h), key) for s in subjects for h in range(4)}
    assert len(gids) == len(subjects)  # canonicalisation: one GlobalID per subject whatever the format

    params = PARAMS["linkage"]["linkage"]
    names, synthetic_secrets = set(), set()
    for seed in params["seeds"]:
        synthetic_key = lk.LinkageKey.for_synthetic_evaluation(seed)
        synthetic_secrets |= {synthetic_key._secret.hex(), synthetic_key.derive("bloom/h1").hex(),
                              synthetic_key.derive("bloom/h2").hex()}
        for typo_rate in params["typo_rates"]:
            sites = lk.linkage_scenario(params["n_records"], seed, typo_rate, params["format_rate"],
                                        overlap=params["overlap"], household_rate=params["household_rate"])[:2]
            for site in sites:
                synthetic_secrets |= {lk.global_id(v, synthetic_key) for v in site["national_id"]}
                for column in lk.IDENTITY_COLUMNS:
                    if column != "sex":  # one letter says nothing about a person
                        names |= {str(v).strip() for v in site[column] if len(str(v).strip()) >= 4}
                names |= {lk.canonical_identifier(v) for v in site["national_id"]}
    return {"subject id": ids, "GlobalID": gids | {g.upper() for g in gids},
            "linkage key": {key_hex, key_hex.upper()}, "synthetic identity": names,
            "synthetic pseudonym or key": synthetic_secrets}


@pytest.mark.slow
def test_small_pipeline_leaves_no_identifier_anywhere(small_pipeline):
    run = small_pipeline("a")
    root = run.root
    forbidden = {kind: sorted(strings) for kind, strings in _forbidden(run.key_hex).items()}
    assert len(forbidden["subject id"]) == 29 * 3 and len(forbidden["synthetic identity"]) > 100

    # the scan is not vacuous: the server-side scenario linked by GlobalID, and every kind of output exists
    scenarios = pd.read_csv(root / "metrics" / "dp_scenarios_synthetic_clinical.csv")
    merged = scenarios[(scenarios.scenario == "server_side") & (scenarios.metric == "n_duplicates_merged")]
    assert (merged["value"] > 0).all() and len(merged) > 0
    files = files_under([root])
    assert (root / "mlflow.db").stat().st_size > 100_000
    for folder in ("mlartifacts", "metrics", "plots", "reports", "cells"):
        assert any(folder in p.relative_to(root).parts for p in files), folder
    assert any(p.suffix == ".png" for p in files if "mlartifacts" in p.parts)
    log = (root / "logs" / "pipeline.log").read_text()
    assert "synthetic_clinical:" in log and "DEBUG" in log  # stage prints and library debug records are in it

    # subject codes are short (P01, p-01, p01): they count as whole words, so cmss10.ttf is not subject s10
    hits = scan_for_identifiers([root], forbidden, whole_words=["subject id"])
    assert not hits, "\n".join(map(str, hits[:20]))

    # and the same scan does find a GlobalID that reaches the store (a param set behind the tracking layer's back)
    leaked = root.parent / f"{root.name}-leaked.db"
    leaked.write_bytes((root / "mlflow.db").read_bytes())
    connection = sqlite3.connect(leaked)
    run_uuid = connection.execute("select run_uuid from runs limit 1").fetchone()[0]
    connection.execute("insert into params (key, value, run_uuid) values (?, ?, ?)",
                       ("note", forbidden["GlobalID"][0], run_uuid))
    connection.commit()
    connection.close()
    try:
        found = scan_for_identifiers([leaked], forbidden, whole_words=["subject id"])
        assert [(h.kind, h.index) for h in found] == [("GlobalID", 0)]
    finally:
        for path in files_under([leaked]):
            os.remove(path)

