"""Stage embedding-audit (study C) end to end on real eegmat windows with small settings (band power + a tiny
BIOT, 6 windows per recording, 2 permutations, 1 noise seed): subject roles never leak into the audit, every
endpoint has its rows and controls, the outputs and MLflow runs exist, and a rerun resumes with identical rows."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from eegprivacy.cli import main
from eegprivacy.params import ParamsError
from eegprivacy.studies.embedding_audit.config import EmbeddingAuditConfig
from eegprivacy.studies.embedding_audit.context import Context
from eegprivacy.studies.embedding_audit.data import AuditData, assign_roles, window_roles
from eegprivacy.studies.embedding_audit.embed import embed_all
from eegprivacy.studies.embedding_audit.units import unit_tags, units
from eegprivacy.studies.embedding_audit.workers import AuditCells, one_thread
from eegprivacy.tracking import tracking_uri

REPO = Path(__file__).resolve().parents[1]


def _small_params() -> dict:
    params = yaml.safe_load((REPO / "params" / "embedding_audit.yaml").read_text())
    cfg = params["embedding_audit"]
    cfg.update(windows_per_recording=6, pretrain_subjects=4, encoders=["bandpower", "biot"], permutations=2,
               lira_shadows=8, bridge_permutations=2, defense_seeds=[0])
    cfg["defenses"].update(noise_sigmas=[1.0], pca_components=[4], dropout_rates=[0.5])
    cfg["defenses"]["dp_head"].update(epsilons=[1.0, math.inf], epochs=2)
    cfg["profiles"]["default"]["configs"]["biot"] = {"embed_dim": 32, "num_heads": 2, "num_layers": 1}
    cfg["profiles"]["default"]["pretrain"]["max_steps"] = {"biot": 2, "labram": 1, "eegpt": 1}
    return params


def _config(params: dict) -> EmbeddingAuditConfig:
    return EmbeddingAuditConfig.from_mapping(params["embedding_audit"], "test", "embedding_audit.")


def _run_stage(tmp_path, params, jobs: int = 1, dataset: str = "eegmat") -> SimpleNamespace:
    """Run ``eegprivacy embedding-audit`` on cohort ``dataset`` with ``params`` and every output under
    ``tmp_path``; the output paths."""
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(params))
    out = SimpleNamespace(out=tmp_path / "audit.csv", json=tmp_path / "audit.json", report=tmp_path / "audit.md",
                          figures=tmp_path / "fig", work=tmp_path / "work", cells=tmp_path / "cells")
    assert main(["embedding-audit", "--params", str(path), "--dataset", dataset, "--no-progress", "--jobs",
                 str(jobs), *(f"--{k}={v}" for k, v in vars(out).items())]) == 0
    return out


def test_roles_keep_pretraining_subjects_out_of_the_audit():
    subjects = [f"S{i:02d}" for i in range(20)]
    roles = assign_roles(subjects, 6, seed=0)
    assert sum(r == "pretrain" for r in roles.values()) == 6 and len(roles) == 20
    assert roles == assign_roles(subjects, 6, seed=0)
    assert roles != assign_roles(subjects, 6, seed=1)
    with pytest.raises(ParamsError, match="fewer than 8"):
        assign_roles(subjects[:10], 6, seed=0)

    # two pretraining recordings of 10 windows and one audited one
    subject_role = np.array(["pretrain"] * 20 + ["audit"] * 10)
    recording = np.repeat(["a1", "a2", "b1"], 10)
    order = np.tile(np.arange(10), 3)
    w = window_roles(subject_role, recording, order, gap=1, block=3, seed=0)
    np.testing.assert_array_equal(w, window_roles(subject_role, recording, order, gap=1, block=3, seed=0))
    for rec in ("a1", "a2"):
        r = w[recording == rec]
        assert {"pretrain_member", "pretrain_nonmember"} <= set(r)
    assert (w[recording == "b1"] == "audit").all()


def test_encoder_membership_blocks_are_interleaved_with_gaps():
    """Issue 20: members were the first half of each recording and non-members the end, so drift within a
    recording read as membership. Now member and non-member blocks are drawn at random within each recording,
    never adjacent, and across recordings sit at the same times on average."""
    n_rec, n = 40, 15
    subject_role = np.array(["pretrain"] * (n_rec * n))
    recording = np.repeat([f"r{i:02d}" for i in range(n_rec)], n)
    order = np.tile(np.arange(n), n_rec)
    w = window_roles(subject_role, recording, order, seed=3)
    members, nonmembers = order[w == "pretrain_member"], order[w == "pretrain_nonmember"]
    assert members.size > 0.4 * w.size and nonmembers.size > 0.3 * w.size
    assert abs(members.mean() - nonmembers.mean()) < 1.5  # first/second half: ~7.5 windows apart
    assert not (window_roles(subject_role, recording, order, seed=4) == w).all()
    for rec in np.unique(recording):
        r = w[recording == rec]
        for a, b in zip(r[:-1], r[1:]):  # a gap window between every member and non-member window
            assert {a, b} != {"pretrain_member", "pretrain_nonmember"}, rec
    with pytest.raises(ValueError, match=">= 1 window"):
        window_roles(subject_role, recording, order, gap=0)


def test_units_and_tags_name_every_split_and_defense():
    config = _config(_small_params())
    pre = [u for u, _ in units(config, "self_pretrained")]
    base = [u for u, _ in units(config, "random_init")]
    assert set(base) < set(pre) and not any(u.startswith("defense/") for u in base)
    assert {"defense/noise/1", "defense/pca/4", "defense/dropout/0.5", "defense/dp_head/1",
            "defense/dp_head/inf"} <= set(pre)
    assert unit_tags("defense/dp_head/1")["mechanism"] == "dp_sgd_gaussian"
    assert unit_tags("defense/dp_head/inf")["mechanism"] == "none"
    assert unit_tags("attribute/temporal_gap")["split"] == "temporal_gap"
    assert unit_tags("deployment/1")["defense"] == "noise_1"
    # membership and AEDS run per member draw (issue 20): over the seeds the defenses use
    seeds = dict(units(config, "self_pretrained"))
    assert seeds["membership"] == seeds["aeds"] == list(config.defense_seeds)


def test_bad_params_stop_before_any_work(tmp_path):
    for key, value in (("profile", "nope"), ("bootstrap", 100)):
        params = _small_params()
        params["embedding_audit"][key] = value
        with pytest.raises(ParamsError, match=f"embedding_audit.{key} = {value!r} is invalid; it must be"):
            _run_stage(tmp_path, params)
    assert not (tmp_path / "audit.csv").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("key,value", [
    ("encoders", []), ("encoders", ["biot", "resnet"]), ("windows_per_recording", 5), ("pretrain_subjects", 1),
    ("permutations", 0), ("defense_permutations", -1), ("bridge_permutations", -1), ("lira_shadows", 1.5),
    ("reconstruction_points", 0), ("utility_threshold", 1.0), ("utility_threshold", 0),
    ("defenses.dp_head.epsilons", [1, 0]), ("defenses.dp_head.delta", 1.0), ("random_init_baseline", "yes"),
    ("profiles.default.pretrain.max_steps.biot", 0)])
def test_each_params_rule_names_the_key(key, value):
    params = _small_params()
    *parents, last = key.split(".")
    section = params["embedding_audit"]
    for part in parents:
        section = section[part]
    section[last] = value
    with pytest.raises(ParamsError, match=re.escape(f"test: embedding_audit.{key} = {value!r} is invalid; it must "
                                                    "be ") + ".*nothing was computed or written"):
        _config(params)


def test_stage_end_to_end_on_eegmat(tmp_path, data_root):
    args = _run_stage(tmp_path, _small_params(), jobs=2)  # the default on 2 cores: cells in 2 worker processes
    tidy = pd.read_csv(args.out)
    cells = {("bandpower", "none"), ("biot", "self_pretrained"), ("biot", "random_init")}
    assert set(map(tuple, tidy[tidy["unit"] != "bridge"][["encoder", "weights"]].drop_duplicates().values)) == cells
    for e, w in cells:
        part = tidy[(tidy["encoder"] == e) & (tidy["weights"] == w)]
        for endpoint in ("raw_copy", "attribute", "identity", "membership_head", "reconstruction", "aeds",
                         "deployment_state"):
            assert endpoint in set(part["endpoint"]), (e, w, endpoint)
        # every leakage result sits next to both controls, and the controls read about 0
        for split in ("temporal_gap", "subject_disjoint"):
            rows = part[(part["unit"] == f"attribute/{split}")].set_index("metric")["value"]
            assert {"gain", "score", "control_gaussian", "control_permuted", "p_value"} <= set(rows.index)
            assert abs(rows["control_gaussian"]) < 0.25 and abs(rows["control_permuted"]) < 0.25
            assert rows["gain"] == pytest.approx(rows["score"] - max(rows["control_gaussian"],
                                                                     rows["control_permuted"]))
        bpid = part[part["metric"] == "bpid_at_1"].iloc[0]
        assert 0 < bpid["chance"] < 0.2 and bpid["ci_low"] <= bpid["value"] <= bpid["ci_high"]
    # the band-power reference carries the spectral attribute by construction: leakage must show, with its CI
    bp = tidy[(tidy["encoder"] == "bandpower") & (tidy["unit"] == "attribute/subject_disjoint")
              & (tidy["metric"] == "gain")].iloc[0]
    assert bp["ci_low"] > 0.3
    assert "membership_encoder" in set(tidy[tidy["weights"] == "self_pretrained"]["endpoint"])
    head = tidy[(tidy["endpoint"] == "membership_head") & (tidy["metric"] == "auc")]
    assert set(head["attacker"]) == {"loss_threshold", "lira_online"}
    assert head["value"].between(0, 1).all() and (head["ci_low"] <= head["value"]).all()
    # the random-init encoder runs the same encoder attack (its matched null), and the pretrained one reports it
    assert "membership_encoder" in set(tidy[tidy["weights"] == "random_init"]["endpoint"])
    enc = tidy[(tidy["endpoint"] == "membership_encoder") & (tidy["weights"] == "self_pretrained")]
    assert {"auc", "control_random_init", "auc_minus_control"} <= set(enc["metric"])
    assert (tidy.loc[tidy["ci_low"].notna(), "ci_over"].isin(["subjects", "windows"])).all()
    dp = tidy[tidy["unit"] == "defense/dp_head/1"]
    spent = dp[dp["metric"] == "epsilon_spent"]["value"].iloc[0]
    assert 0 < spent <= 1.0 + 1e-6
    assert set(dp["metric"]) >= {"gain", "balanced_accuracy", "auc", "closes_channel"}
    bridge = tidy[tidy["unit"] == "bridge"]
    assert set(map(tuple, bridge[["encoder", "weights"]].drop_duplicates().values)) == {("bandpower", "biot"),
                                                                                       ("biot", "bandpower")}
    assert {"gain", "beta", "bound", "rho0"} <= set(bridge["metric"])
    # the claims beside the rows: one test each, identity labelled by what it links, paired tests on the pretrained
    # cell only, Holm per (cohort, claim)
    claims = pd.read_csv(args.out.with_name("audit_claims.csv"), keep_default_na=False, na_values=[""])
    assert set(claims["claim"]) == {"task", "identity", "pretraining_adds_identity", "attribute",
                                    "head_membership", "encoder_membership"}
    head = claims[claims["claim"] == "head_membership"]
    assert len(head) == 3 and head["test"].str.startswith("LiRA: member-subject permutation").all()
    paired = claims[claims["claim"].isin(["pretraining_adds_identity", "encoder_membership"])]
    assert set(paired["weights"]) == {"self_pretrained"} and paired["test"].str.startswith("sign flips").all()
    identity = claims[claims["claim"] == "identity"]
    assert (identity["link"] == "across recordings (task 0 -> task 1), same session").all()
    assert identity["test"].str.startswith("reference-label permutation").all()
    assert (claims["p_value"].between(0, 1)).all() and (claims["p_holm"] >= claims["p_value"] - 1e-12).all()
    assert claims["provenance"].str.len().gt(0).all()
    assert "## Claims (one test each)" in args.report.read_text()

    headline = json.loads(Path(args.json).read_text())  # strict JSON: no NaN
    assert set(headline["encoders"]) == {"bandpower/none", "biot/self_pretrained", "biot/random_init"}
    assert headline["encoders"]["bandpower/none"]["l_a_ci_lower_bound"] == pytest.approx(bp["ci_low"])
    report = Path(args.report).read_text()
    assert "BIOT (random init)" in report and "AEDS" in report and "bound" in report
    for name in ("leakage", "aeds", "bridge", "defenses"):
        assert (tmp_path / "fig" / f"embedding_audit_eegmat_{name}.png").stat().st_size > 10_000
    record = json.loads((tmp_path / "work" / "eegmat" / "checkpoints" / "biot.json").read_text())
    assert record["steps"] == 2 and len(record["checkpoint_sha256"]) == 64
    assert not any(s.startswith("Subject") for s in json.dumps(record).split('"'))  # subjects only as hashes

    client = mlflow.MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("study-c-embedding-audit")
    runs = client.search_runs([experiment.experiment_id], max_results=500)
    parents = {r.info.run_name for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert {"embedding_audit-eegmat-bandpower-none", "embedding_audit-eegmat-biot-self_pretrained",
            "embedding_audit-eegmat-biot-random_init", "embedding_audit-eegmat-bridge"} <= parents
    parent = next(r for r in runs if r.info.run_name == "embedding_audit-eegmat-bandpower-none")
    key = ("unit_attribute/subject_disjoint/endpoint_attribute/split_subject_disjoint/defense_none/attacker_ridge/"
           "eps_unit_none/gain")  # the name the sweep logs its aggregate under
    assert f"{key}_mean" in parent.data.metrics
    # the bootstrap CI replaces the sweep's zero-width one-seed interval under that very name, with its unit
    assert parent.data.metrics[f"{key}_ci_low"] == pytest.approx(bp["ci_low"])
    assert parent.data.metrics[f"{key}_ci_low"] < parent.data.metrics[f"{key}_mean"]
    assert parent.data.tags[f"{key}_ci_over"] == "subjects"
    assert not any(k.endswith("attacker_ridge/gain_ci_low") for k in parent.data.metrics)  # no orphan names
    child = next(r for r in runs if r.data.tags.get("defense") == "dp_head_eps1")
    assert child.data.tags["epsilon"] == "1" and child.data.tags["encoder"] in ("bandpower", "biot")
    assert child.data.tags["cohort"] == "eegmat" and child.data.tags["dvc_stage"] == "embedding_audit@eegmat"
    assert child.data.tags["dataset_version"] and child.data.tags["seed"] == "0"

    first = tidy
    _run_stage(tmp_path, _small_params(), jobs=2)  # resumed from the cell cache
    pd.testing.assert_frame_equal(first, pd.read_csv(args.out))


def _synthetic_cells(config: EmbeddingAuditConfig):
    """Two small encoders' contexts on random windows (10 subjects, rest and arithmetic), the bridge inputs, and
    every unit of both plus both bridge pairs as (config, seed) jobs."""
    from eegprivacy.embeddings.attributes import centered_psd
    from eegprivacy.embeddings.splits import SubjectDisjointSplit

    rng = np.random.default_rng(0)
    subjects, per_state, sfreq = 10, 6, 128.0
    subject = np.repeat([f"S{i:02d}" for i in range(subjects)], 2 * per_state)
    state = np.tile(np.repeat([0, 1], per_state), subjects)
    order = np.tile(np.arange(per_state), 2 * subjects)
    gain = rng.uniform(0.5, 2.0, size=(subjects, 4))[np.repeat(np.arange(subjects), 2 * per_state)]
    X = rng.standard_normal((subject.size, 4, int(4 * sfreq))) * gain[:, :, None] * 1e-5
    data = AuditData(X=X, subject=subject, state=state, order=order, role=np.full(subject.size, "audit"),
                     sfreq=sfreq, ch_names=["Fz", "Cz", "Pz", "Oz"])
    A = centered_psd(X, sfreq)
    Z = {"small": np.hstack([A, np.log(gain), state[:, None]]) + 0.3 * rng.standard_normal((subject.size, 10))}
    Z["wide"] = Z["small"] @ rng.standard_normal((10, 24)) + 0.3 * rng.standard_normal((subject.size, 24))
    members = {"mia_members": rng.normal(0.9, 0.2, 30), "mia_nonmembers": rng.normal(1.0, 0.2, 30),
               "mia_control_members": rng.normal(1.0, 0.2, 30), "mia_control_nonmembers": rng.normal(1.0, 0.2, 30),
               "mia_members_subject": np.repeat(np.arange(3), 10),
               "mia_nonmembers_subject": np.repeat(np.arange(3), 10)}
    contexts = {("small", "self_pretrained"): Context(Z["small"], data, config, {"Z": Z["small"], **members}),
                ("wide", "none"): Context(Z["wide"], data, config, {"Z": Z["wide"]})}
    bridge = {"embeddings": Z, "A": A, "groups": subject, "audit_config": config,
              "splitter": SubjectDisjointSplit(config.splits.subject_disjoint.n_splits, random_state=0)}
    jobs = [({"encoder": e, "weights": w, "unit": u}, s) for e, w in contexts
            for u, seeds in units(config, w) for s in seeds]
    jobs += [({"source": a, "target": b}, 0) for a, b in (("small", "wide"), ("wide", "small"))]
    return contexts, bridge, jobs


def test_member_subjects_are_redrawn_per_seed_and_aeds_uses_its_seed():
    """Issue 20: the head's members were one fixed half for every seed. Now each seed draws its own half (the same
    one for the loss, LiRA and the DP-SGD head), and AEDS at seed s combines the membership result of seed s."""
    from eegprivacy.studies.embedding_audit.cells import core_rows

    params = _small_params()
    params["embedding_audit"].update(permutations=1, lira_shadows=0)
    config = _config(params)
    contexts, _, _ = _synthetic_cells(config)
    ctx = contexts[("small", "self_pretrained")]
    halves = [ctx.head_rows_for(s) for s in (0, 1, 2)]
    n_subjects = np.unique(ctx.groups).size
    for half in halves:
        assert np.unique(ctx.groups[half]).size == n_subjects // 2
        np.testing.assert_array_equal(half, ctx.head_rows_for(int(np.flatnonzero([h is half for h in halves])[0])))
    assert not all(np.array_equal(halves[0], h) for h in halves[1:])
    rows = {r["metric"]: r for r in core_rows("aeds", 1, ctx)}
    attacks = {k: m for k, m in ctx.membership(1).items() if k not in ("encoder_random_init", "tests")}
    assert rows["r_m"]["value"] == pytest.approx(max(m.residual for m in attacks.values()))
    assert ("membership", 1) in ctx.memo and ("membership", 0) not in ctx.memo
    head = ctx.membership(1)["head"]
    assert head.ci_over == "subjects" and not head.joint and head.n_subjects == n_subjects
    assert ctx.membership(1)["encoder"].joint  # same pretraining subjects on both sides: resampled jointly
    enc = {r["metric"]: r for r in core_rows("membership", 1, ctx) if r["endpoint"] == "membership_encoder"}
    assert {"auc", "residual", "control_random_init", "auc_minus_control"} == set(enc)
    assert enc["auc_minus_control"]["ci_low"] <= enc["auc_minus_control"]["value"] <= enc["auc_minus_control"][
        "ci_high"]


def test_cells_do_not_depend_on_the_number_of_worker_processes(tmp_path):
    """Every kind of cell (AEDS reusing the leakage, membership and BPID cells' results, the randomised defenses,
    the DP-SGD head, the bridge) gives exactly the same rows computed serially and ahead by 2 worker processes.
    Each runs on one thread: at the stage's sizes a BLAS reduction split over 2 threads changes the last bits of
    ridge and PCA results (too small here to show, hence the direct check)."""
    import torch
    from threadpoolctl import threadpool_info

    from eegprivacy.pipeline.sweep import PrefetchedCells

    before = torch.get_num_threads()
    with one_thread():
        assert {pool["num_threads"] for pool in threadpool_info()} == {1} and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    params = _small_params()
    params["embedding_audit"].update(permutations=1, lira_shadows=2, bridge_permutations=1, defense_seeds=[0, 1])
    params["embedding_audit"]["defenses"]["dp_head"].update(epsilons=[1.0], epochs=1)
    config = _config(params)
    tables = {}
    for jobs in (1, 2):
        contexts, bridge, cells = _synthetic_cells(config)  # fresh contexts: nothing memoised by the other run
        (tmp_path / str(jobs)).mkdir()
        compute = PrefetchedCells(AuditCells(contexts, bridge, tmp_path / str(jobs)), cells, n_jobs=jobs)
        tables[jobs] = pd.DataFrame([{**config, "seed": seed, **row} for config, seed in cells
                                     for row in compute(config, seed)])
    assert {"aeds", "bridge", "defense/dp_head/1", "defense/noise/1"} <= set(tables[2]["unit"])
    assert tables[2]["value"].notna().mean() > 0.8
    pd.testing.assert_frame_equal(tables[1], tables[2], check_exact=True)


def test_embeddings_and_pretraining_do_not_depend_on_the_number_of_worker_processes(tmp_path):
    """The encoders pretrain and embed in worker processes, each on one thread: the weights, the embeddings and
    the encoder-membership losses are bit for bit those of the serial run."""
    config = _config(_small_params())
    rng = np.random.default_rng(1)
    n, sfreq = 24, 128.0
    subject = np.repeat([f"S{i}" for i in range(6)], 4)
    role = np.where(np.isin(subject, ["S0", "S1"]), np.tile(["pretrain_member", "pretrain_member",
                                                               "pretrain_nonmember", "pretrain_gap"], 6), "audit")
    data = AuditData(X=rng.standard_normal((n, 4, int(4 * sfreq))) * 1e-5, subject=subject,
                     state=np.tile([0, 1], n // 2), order=np.tile(np.arange(4), 6), role=role, sfreq=sfreq,
                     ch_names=["Fz", "Cz", "Pz", "Oz"])
    cells = [("bandpower", "none"), ("biot", "self_pretrained"), ("biot", "random_init")]
    keys = {cell: f"key-{'-'.join(cell)}" for cell in cells}
    out = {jobs: embed_all(cells, keys, data, config, tmp_path / str(jobs), n_jobs=jobs)
           for jobs in (1, 2)}
    assert out[1][("biot", "self_pretrained")]["meta"]["pretrain"]["steps"] == 2
    for cell in cells:
        assert set(out[1][cell]) == set(out[2][cell])
        for name, value in out[1][cell].items():
            if name != "meta":
                np.testing.assert_array_equal(value, out[2][cell][name], err_msg=f"{cell} {name}")
    trained, untrained = out[2][("biot", "self_pretrained")]["Z"], out[2][("biot", "random_init")]["Z"]
    assert not np.array_equal(trained, untrained)  # pretraining moved the weights
    # the encoder attack's control: the random-init cell scores the same windows with the untrained encoder, the
    # very losses the pretrained cell keeps as its control; every loss names its subject (as a code)
    pre, init = out[1][("biot", "self_pretrained")], out[1][("biot", "random_init")]
    np.testing.assert_array_equal(init["mia_members"], pre["mia_control_members"])
    np.testing.assert_array_equal(init["mia_nonmembers"], pre["mia_control_nonmembers"])
    assert not np.array_equal(pre["mia_members"], pre["mia_control_members"])
    assert pre["mia_members_subject"].shape == pre["mia_members"].shape and set(pre["mia_members_subject"]) == {0, 1}


# ---- issue 21: the audit per cohort ---------------------------------------------------------------------------

def test_identity_parts_per_cohort_design():
    """Which windows enroll (0) and query (1): the label (eegmat), the halves of the one recording with a gap
    window each side (MSU), or the last audited run against the earlier ones (eegmmidb); only audited windows."""
    from eegprivacy.studies.embedding_audit.data import IDENTITY_GAP, identity_parts

    config = _config(_small_params())
    subject = np.repeat(["a", "b"], 12)
    order = np.tile(np.arange(12), 2)
    state = np.tile(np.repeat([0, 1], 6), 2)
    audited = subject == "a"
    parts = identity_parts(config.cohort("eegmat"), state, state, order, subject, audited)
    np.testing.assert_array_equal(parts[audited], state[audited])
    assert (parts[~audited] == -1).all()
    halves = identity_parts(config.cohort("msu_schizophrenia"), state, np.zeros(24, int), order, subject,
                            np.ones(24, bool))
    for s in ("a", "b"):
        p = halves[subject == s]
        assert (p[: 6 - IDENTITY_GAP] == 0).all() and (p[6 + IDENTITY_GAP:] == 1).all()
        assert (p[6 - IDENTITY_GAP: 6 + IDENTITY_GAP] == -1).all()
    block = np.tile(np.repeat([1, 2, 3], 4), 2)  # runs 8, 12 and a later one; the query is the last
    runs = identity_parts(config.cohort("eegmmidb"), state, block, order, subject, np.ones(24, bool))
    np.testing.assert_array_equal(runs, (block == 3).astype(int))


def test_cohort_params_are_checked():
    params = _small_params()
    params["embedding_audit"]["cohorts"]["eegmmidb"].pop("pretrain_run")
    with pytest.raises(ParamsError, match=r"cohorts.eegmmidb.pretrain_run.*a run number when pretrain is 'run'"):
        _config(params)
    params = _small_params()
    params["embedding_audit"]["datasets"].append("bonn")
    with pytest.raises(ParamsError, match="an entry for bonn"):
        _config(params)
    with pytest.raises(ParamsError, match="no entry for 'bonn'"):
        _config(_small_params()).cohort("bonn")


def _cohort_params() -> dict:
    params = _small_params()
    cfg = params["embedding_audit"]
    cfg.update(encoders=["bandpower"], random_init_baseline=False, lira_shadows=0)
    cfg["defenses"].update(noise_sigmas=[1.0], pca_components=[], dropout_rates=[])
    cfg["defenses"]["dp_head"].update(epsilons=[])
    return params


def test_stage_on_msu_audits_the_diagnosis_at_the_subject_level(tmp_path, data_root):
    """MSU: the diagnosis is the deployment task and a subject-level attribute (its own rows with a subject-label
    permutation null); identity links the halves of the one recording; defenses are judged by the diagnosis."""
    from eegprivacy.data import get_dataset

    args = _run_stage(tmp_path, _cohort_params(), dataset="msu_schizophrenia")
    tidy = pd.read_csv(args.out)
    assert (tidy["cohort"] == "msu_schizophrenia").all()
    n_subjects = len(get_dataset("msu_schizophrenia").subjects()) - 4  # pretrain_subjects = 4 here
    diag = tidy[tidy["unit"] == "subject_label"].set_index("metric")
    assert set(diag["endpoint"]) == {"diagnosis"}
    assert {"balanced_accuracy", "window_balanced_accuracy", "control_gaussian", "control_permuted",
            "control_permuted_q95", "p_value"} <= set(diag.index)
    ba = diag.loc["balanced_accuracy"]
    assert ba["ci_low"] <= ba["value"] <= ba["ci_high"] and ba["n"] == n_subjects and ba["ci_over"] == "subjects"
    ident = tidy[(tidy["unit"] == "identity") & (tidy["metric"] == "bpid_at_1")].iloc[0]
    assert ident["split"] == "reference_set_by_halves" and ident["chance"] == pytest.approx(1 / n_subjects)
    noise = tidy[tidy["unit"] == "defense/noise/1"]
    assert {"closes_channel", "closes_identity", "bpid_at_1", "undefended_balanced_accuracy"} <= set(noise["metric"])
    deploy = tidy[(tidy["unit"] == "deployment/0") & (tidy["metric"] == "balanced_accuracy")]["value"].iloc[0]
    undefended = noise[noise["metric"] == "undefended_balanced_accuracy"]["value"].iloc[0]
    assert undefended == pytest.approx(deploy)  # the verdict's utility is the diagnosis, same folds and seed


def test_stage_on_eegmmidb_links_identity_across_runs(tmp_path, data_root):
    """eegmmidb: one window per imagery cue; run 4 pretrains, runs 8 and 12 are audited, so every subject is a
    BPID candidate (K = all subjects present) and the attribute's temporal split leaves one run out."""
    from eegprivacy.data import get_dataset

    args = _run_stage(tmp_path, _cohort_params(), dataset="eegmmidb")
    tidy = pd.read_csv(args.out)
    k = len(get_dataset("eegmmidb", runs=[4, 8, 12]).subjects())
    ident = tidy[(tidy["unit"] == "identity") & (tidy["metric"] == "bpid_at_1")].iloc[0]
    assert ident["split"] == "reference_set_by_runs" and ident["chance"] == pytest.approx(1 / k)
    assert "subject_label" not in set(tidy["unit"])  # left/right is a trial's label, not a subject's
    temporal = tidy[(tidy["unit"] == "attribute/temporal_gap") & (tidy["metric"] == "gain")].iloc[0]
    assert np.isfinite(temporal["value"])
    report = Path(args.report).read_text()
    assert "left vs right fist imagery" in report
