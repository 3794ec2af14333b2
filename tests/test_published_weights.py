"""Study C with the authors' published checkpoints (BIOT, LaBraM, EEGPT; shared/weights/README.md), none of which
exists here: each test writes, *inside the test*, a small file in the published layout -- random tensors under
the published key names (BIOT: a flat state dict with ``index``; LaBraM: ``{"model": {"student.*", heads},
"args": argparse.Namespace}``; EEGPT: a Lightning ``{"state_dict": {target_encoder.*, encoder.*, predictor.*,
reconstructor.*}, "hyper_parameters": ...}``), built by inverting the README's key mapping from a small-config
encoder -- and loads it through the path a real file takes: :func:`load_published`, and the stage's config ->
``audited_cells`` -> ``embedding_keys`` -> ``embed_cell``. The small configs replace the published ones through
``PUBLISHED_CONFIGS`` (the test hook); one test checks the real published configs against the README's tensor
counts without any file.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import pathlib
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("braindecode")

from eegprivacy.embeddings.encoders import published as published_mod  # noqa: E402
from eegprivacy.embeddings.encoders.checkpoints import (  # noqa: E402
    CheckpointMismatchError,
    CheckpointRequiredError,
    ChecksumError,
    UnsafeCheckpointError,
)
from eegprivacy.embeddings.encoders.published import load_published, published_config  # noqa: E402
from eegprivacy.embeddings.encoders.registry import WEIGHTS_SOURCES, make_encoder, resolve_weights  # noqa: E402
from eegprivacy.params import ParamsError  # noqa: E402
from eegprivacy.studies.embedding_audit.units import (  # noqa: E402
    audited_cells,
    encoder_label,
    primary_weights,
    provenance_text,
    units,
)

REPO = Path(__file__).resolve().parents[1]
EEGMAT_CH = "Fp1,Fp2,F3,F4,F7,F8,T3,T4,C3,C4,T5,T6,P3,P4,O1,O2,Fz,Cz,Pz".split(",")
SFREQ = 100.0
WIN_S = 4.0
NEURAL = ["biot", "labram", "eegpt"]
# Small stand-ins of the published architectures (same layouts, a fraction of the size).
SMALL_PUBLISHED = {
    "biot": {"embed_dim": 32, "num_heads": 2, "num_layers": 1, "hop_length": 100, "n_chans": 18},
    "labram": {"patch_size": 200, "num_layers": 1, "num_heads": 2, "use_mean_pooling": False},
    "eegpt": {"patch_size": 64, "patch_stride": 64, "embed_num": 2, "embed_dim": 32, "depth": 1, "num_heads": 2},
}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture
def small(monkeypatch):
    """The test hook: the published configs replaced by small ones of the same layout."""
    for name, cfg in SMALL_PUBLISHED.items():
        monkeypatch.setitem(published_mod.PUBLISHED_CONFIGS, name, dict(cfg))
    return SMALL_PUBLISHED


def _windows(n=3, seed=0, ch=EEGMAT_CH, sfreq=SFREQ, win_s=WIN_S):
    rng = np.random.default_rng(seed)
    t = np.arange(int(win_s * sfreq)) / sfreq
    freqs = rng.uniform(2, 30, (n, len(ch), 1))
    x = np.sin(2 * np.pi * freqs * t + rng.uniform(0, 6, (n, len(ch), 1))) + 0.3 * rng.normal(size=(n, len(ch), t.size))
    return (x * 2e-5).astype(np.float32)


# ---- writing published-format files (the README's key mapping, inverted) -------------------------------------

def _labram_published_key(key: str) -> str:
    key = {"position_embedding": "pos_embed", "temporal_embedding": "time_embed"}.get(key, key)
    key = re.sub(r"^patch_embed\.temporal_conv\.", "patch_embed.", key)
    key = re.sub(r"^(blocks\.\d+\.mlp\.)0\.", r"\g<1>fc1.", key)
    key = re.sub(r"^(blocks\.\d+\.mlp\.)2\.", r"\g<1>fc2.", key)
    return "student." + key


def write_published(name: str, encoder, path: Path, seed: int = 0, drop: str | None = None) -> dict:
    """A published-layout file of random tensors for ``encoder``'s architecture at ``path``; returns the encoder
    key -> tensor it must load (LaBraM's time_embed is written with 16 rows, as published, and cut on loading)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(t):
        return torch.randn(t.shape, generator=gen).to(t.dtype) if t.is_floating_point() else t.clone()

    own = {k: rand(v) for k, v in encoder.encoder_state_dict().items() if k != drop}
    expected = dict(own)
    if name == "biot":
        n = own["encoder.channel_tokens.weight"].shape[0]
        obj = {k[len("encoder."):]: v for k, v in own.items()}
        obj["index"] = torch.arange(n)  # the original keeps it in the state dict; braindecode does not
    elif name == "labram":
        model = {_labram_published_key(k): v for k, v in own.items()}
        t = model["student.time_embed"]
        model["student.time_embed"] = torch.cat([t, torch.randn(1, 16 - t.shape[1], t.shape[2], generator=gen)], 1)
        d = t.shape[2]
        model.update({"student.mask_token": torch.randn(1, 1, d, generator=gen),
                      "student.lm_head.weight": torch.randn(64, d, generator=gen),
                      "student.lm_head.bias": torch.zeros(64), "lm_head.weight": torch.randn(64, d, generator=gen),
                      "lm_head.bias": torch.zeros(64), "projection_head.0.weight": torch.randn(d, d, generator=gen),
                      "projection_head.0.bias": torch.zeros(d), "logit_scale": torch.ones([])})
        obj = {"model": model, "epoch": 49, "optimizer": {"state": {}, "param_groups": [{"lr": 5e-4}]},
               "args": argparse.Namespace(model="labram_base_patch200_1600_8k_vocab", input_size=1600, lr=5e-4,
                                          layer_scale_init_value=0.1, output_dir="./checkpoints/labram_base")}
    else:
        state = dict(own)
        for k, v in own.items():  # the online encoder (other values), the predictor and the reconstructor
            state["encoder." + k[len("target_encoder."):]] = torch.randn(v.shape, generator=gen)
        state.update({"predictor.mask_token": torch.randn(1, 1, 8, generator=gen),
                      "predictor.blocks.0.mlp.fc1.weight": torch.randn(16, 8, generator=gen),
                      "reconstructor.proj.weight": torch.randn(64, 8, generator=gen)})
        obj = {"state_dict": state, "epoch": 199, "global_step": 1000, "pytorch-lightning_version": "1.9.5",
               "hyper_parameters": {"models_configs": {"encoder": {"embed_dim": 512, "depth": 8}},
                                    "USE_LOSS_A": True, "USE_LN": True, "USE_SKIP": True}}
    torch.save(obj, path)
    return expected


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _published_encoder(name, path=None, **kwargs):
    return make_encoder(name, EEGMAT_CH, SFREQ, WIN_S, config=published_config(name, path), **kwargs)


def _file_for(name, tmp_path, seed=0, biot_chans=16):
    """The published-format file of ``name`` (BIOT: ``biot_chans`` channel tokens) and its expected tensors."""
    cfg = published_config(name)
    if name == "biot":
        cfg["n_chans"] = biot_chans
    source = make_encoder(name, EEGMAT_CH, SFREQ, WIN_S, config=cfg, seed=99)
    path = tmp_path / f"{name}-{seed}.ckpt"
    return path, write_published(name, source, path, seed=seed)


# ---- the published configs (no file) -----------------------------------------------------------------------------

def test_published_configs_have_the_readmes_tensor_counts():
    """The real published architectures, built by our wrappers, hold exactly the tensors the README counts in the
    files (after its key mapping): BIOT 57 incl. ``index`` (3,442,192 numbers for 16 ch, 3,442,706 for 18),
    LaBraM's encoder 221, EEGPT's target encoder 102 (25,287,168 numbers)."""
    counts = {}
    for name, n_chans in (("biot", 16), ("biot", 18), ("labram", None), ("eegpt", None)):
        cfg = {**published_mod.PUBLISHED_CONFIGS[name], **({"n_chans": n_chans} if n_chans else {})}
        state = make_encoder(name, EEGMAT_CH, SFREQ, WIN_S, config=cfg).encoder_state_dict()
        counts[(name, n_chans)] = (len(state), sum(v.numel() for v in state.values()))
    assert counts[("biot", 16)] == (57 - 1, 3_442_192 - 16)  # + index (16 int64) in the file
    assert counts[("biot", 18)] == (57 - 1, 3_442_706 - 18)
    assert counts[("labram", None)][0] == 221
    assert counts[("eegpt", None)] == (102, 25_287_168)
    assert "published" in WEIGHTS_SOURCES


# ---- load_published ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEURAL)
def test_published_file_loads_every_tensor_and_embeds_deterministically(name, small, tmp_path):
    path, expected = _file_for(name, tmp_path)
    sha = _sha(path)
    enc = _published_encoder(name, path)
    if name == "biot":  # the channel count comes from the file: PREST-16's 16 bipolar derivations
        assert enc.config["n_chans"] == 16 and len(enc.mapping.output) == 16
        assert enc.mapping.output[:2] == ["FP1-F7", "F7-T7"]
    if name == "labram":
        assert enc.model.fc_norm is None  # the published final norm is kept
    x = _windows(3)
    z_init = enc.transform(x)
    assert load_published(enc, path, sha256=sha) is enc
    state = enc.model.state_dict()
    for key, tensor in expected.items():
        torch.testing.assert_close(state[key], tensor, rtol=0, atol=0, msg=key)
    if name == "labram":  # time_embed: 16 rows in the file, the first p + 1 = 5 loaded
        assert state["temporal_embedding"].shape[1] == 5
        raw = torch.load(path, weights_only=False)["model"]["student.time_embed"]
        torch.testing.assert_close(state["temporal_embedding"], raw[:, :5], rtol=0, atol=0)
    assert enc.weights_source == "published" and enc.checkpoint_sha256 == sha
    assert enc.describe()["weights_source"] == "published" and enc.describe()["checkpoint_sha256"] == sha
    assert not any(p.requires_grad for p in enc.model.parameters())
    z = enc.transform(x)
    assert np.isfinite(z).all() and not np.allclose(z, z_init)
    np.testing.assert_array_equal(z, enc.transform(x))
    # weights_only=True reads every layout (LaBraM's argparse.Namespace allow-listed): no pinned sha256 needed
    twin = resolve_weights(_published_encoder(name, path, seed=5, batch_size=1), "published", path)
    assert twin.checkpoint_sha256 == sha
    np.testing.assert_allclose(twin.transform(x), z, rtol=1e-5, atol=1e-6)  # other seed and batching, same z


def test_published_errors_are_clear(small, tmp_path):
    path, _ = _file_for("labram", tmp_path)
    enc = _published_encoder("labram")
    with pytest.raises(CheckpointRequiredError, match=r"github\.com/935963004/LaBraM.*weights/labram/"
                                                      r"labram-base\.pth"):
        load_published(enc, tmp_path / "labram-base.pth")
    with pytest.raises(CheckpointRequiredError, match="published_weights.eegpt.path"):
        resolve_weights(_published_encoder("eegpt"), "published")
    with pytest.raises(ChecksumError, match="sha256"):
        load_published(enc, path, sha256="0" * 64)
    # a published file of another config: the strict check names what differs
    deeper = make_encoder("labram", EEGMAT_CH, SFREQ, WIN_S, config={**SMALL_PUBLISHED["labram"], "num_layers": 2})
    write_published("labram", deeper, tmp_path / "deep.pth")
    with pytest.raises(CheckpointMismatchError, match=r"unexpected keys \[blocks\.1\."):
        load_published(enc, tmp_path / "deep.pth")
    wide = make_encoder("eegpt", EEGMAT_CH, SFREQ, WIN_S, config={**SMALL_PUBLISHED["eegpt"], "embed_dim": 48})
    write_published("eegpt", wide, tmp_path / "wide.ckpt")
    with pytest.raises(CheckpointMismatchError, match="shape mismatches"):
        load_published(_published_encoder("eegpt"), tmp_path / "wide.ckpt")
    eegpt_small = _published_encoder("eegpt")
    write_published("eegpt", eegpt_small, tmp_path / "short.ckpt", drop="target_encoder.norm.weight")
    with pytest.raises(CheckpointMismatchError, match=r"missing keys \[target_encoder\.norm\.weight"):
        load_published(eegpt_small, tmp_path / "short.ckpt")
    # BIOT: an 18-channel file into the encoder built for a 16-channel one
    biot18, _ = _file_for("biot", tmp_path, biot_chans=18)
    biot16, _ = _file_for("biot", tmp_path, seed=1, biot_chans=16)
    assert published_config("biot", biot18)["n_chans"] == 18
    with pytest.raises(CheckpointMismatchError, match="channel_tokens"):
        load_published(_published_encoder("biot", biot16), biot18)
    # the wrong layout: a flat state dict is not LaBraM's training checkpoint
    with pytest.raises(CheckpointMismatchError, match="not a published LaBraM file"):
        load_published(enc, biot16)
    with pytest.raises(TypeError):
        load_published(make_encoder("bandpower", EEGMAT_CH, SFREQ, WIN_S), path)


def test_a_file_weights_only_refuses_needs_a_pinned_sha256(small, tmp_path):
    """argparse.Namespace (LaBraM's stored arguments) is allow-listed; anything else that needs a full unpickle is
    loaded only when the caller pinned the file's sha256."""
    path, expected = _file_for("eegpt", tmp_path)
    obj = torch.load(path, weights_only=False)
    obj["hyper_parameters"]["log_dir"] = pathlib.PurePosixPath("/logs/eegpt")  # a non-tensor object
    torch.save(obj, path)
    enc = _published_encoder("eegpt")
    with pytest.raises(UnsafeCheckpointError, match=r"PurePosixPath.*sha256"):
        load_published(enc, path)
    load_published(enc, path, sha256=_sha(path))
    torch.testing.assert_close(enc.model.state_dict()["target_encoder.norm.bias"],
                               expected["target_encoder.norm.bias"], rtol=0, atol=0)


# ---- the stage: params -> cells -> embeddings ----------------------------------------------------------------------

def _params(published: dict) -> dict:
    params = yaml.safe_load((REPO / "params" / "embedding_audit.yaml").read_text())
    cfg = params["embedding_audit"]
    assert cfg["published_weights"] == {}
    cfg.update(encoders=["bandpower", *NEURAL], random_init_baseline=True, published_weights=published,
               pretrain_subjects=2)
    cfg["profiles"]["default"]["configs"] = {"biot": {"embed_dim": 16, "num_heads": 2, "num_layers": 1},
                                             "labram": {"num_layers": 1, "num_heads": 2},
                                             "eegpt": {"embed_dim": 16, "depth": 1, "num_heads": 2, "embed_num": 1}}
    return params


def _config(params):
    from eegprivacy.studies.embedding_audit.config import EmbeddingAuditConfig

    return EmbeddingAuditConfig.from_mapping(params["embedding_audit"], "test", "embedding_audit.")


def _audit_data():
    """A small synthetic cohort: 2 pretraining subjects (member / non-member windows), 3 audited ones."""
    from eegprivacy.studies.embedding_audit.data import AuditData

    roles = ["pretrain_member", "pretrain_nonmember"] * 4 + ["audit"] * 6
    subject = ["p0", "p0", "p0", "p0", "p1", "p1", "p1", "p1", "a0", "a0", "a1", "a1", "a2", "a2"]
    n = len(roles)
    return AuditData(X=_windows(n, seed=3), subject=np.array(subject), state=np.arange(n) % 2,
                     order=np.arange(n), role=np.array(roles), sfreq=SFREQ, ch_names=list(EEGMAT_CH))


def test_params_point_the_stage_at_published_files(small, tmp_path):
    from eegprivacy.studies.embedding_audit.embed import cell_config, embed_cell, embedding_keys
    from eegprivacy.studies.embedding_audit.study import Provenance, encoder_runner

    files = {name: _file_for(name, tmp_path)[0] for name in NEURAL}
    published = {name: {"path": str(path), "sha256": _sha(path)} for name, path in files.items()}
    published["eegpt"]["sha256"] = None  # optional: the file's own hash keys the cache then
    config = _config(_params(published))
    cohort = config.cohort("eegmat")

    cells = audited_cells(config)
    assert cells[:4] == [("bandpower", "none"), ("biot", "published"), ("labram", "published"),
                         ("eegpt", "published")]
    assert {(e, "self_pretrained") for e in NEURAL} | {(e, "random_init") for e in NEURAL} == set(cells[4:])
    assert primary_weights("labram", config) == "published" and primary_weights("labram") == "self_pretrained"
    assert encoder_label("eegpt", "published") == "EEGPT (published)"
    assert [u for u, _ in units(config, "published")] == [u for u, _ in units(config, "self_pretrained")]

    keys = embedding_keys(config, cells, "v1", "code", cohort)
    assert len(set(keys.values())) == len(cells)
    other = tmp_path / "other.ckpt"  # another file (other sha256) -> other keys for that encoder's published cells
    write_published("eegpt", _published_encoder("eegpt"), other, seed=7)
    moved = copy.deepcopy(_params(published))
    moved["embedding_audit"]["published_weights"]["eegpt"]["path"] = str(other)
    moved_keys = embedding_keys(_config(moved), cells, "v1", "code", cohort)
    changed = {c for c in cells if keys[c] != moved_keys[c]}
    assert changed == {("eegpt", "published"), ("eegpt", "random_init")}

    data, work = _audit_data(), tmp_path / "work"
    prov = Provenance("eegmat", "v1", True, "code")
    for name in NEURAL:
        emb = embed_cell(name, "published", data, config, work, keys[(name, "published")])
        meta = emb["meta"]
        d = meta["describe"]
        assert d["weights_source"] == "published" and d["checkpoint_sha256"] == _sha(files[name])
        assert meta["published"]["sha256"] == _sha(files[name]) and meta["pretrain"] is None
        assert meta["encoder_membership"]["status"] == "skipped" and "no member" in meta["encoder_membership"]["reason"]
        assert not any(k.startswith("mia_") for k in emb)  # no encoder-membership losses: no row, not a 0.5
        direct = load_published(_published_encoder(name, files[name]), files[name])
        np.testing.assert_allclose(emb["Z"], direct.transform(data.X[data.select("audit")]), rtol=1e-5, atol=1e-6)
        again = embed_cell(name, "published", data, config, work, keys[(name, "published")])  # from the cache
        np.testing.assert_array_equal(again["Z"], emb["Z"])
        assert re.fullmatch(rf"\w+ architecture \(\d+\.\d\d M parameters\), published weights \(sha256 "
                            rf"{_sha(files[name])[:6]}…\)", provenance_text(name, "published", meta))
        _, runner, unit_cells = encoder_runner(prov, config, cohort, (name, "published"), meta,
                                               keys[(name, "published")], tmp_path / "cells", False)
        assert runner.parent_tags["weights"] == "published"
        assert runner.parent_tags["checkpoint_sha256"] == _sha(files[name])
        assert runner.params["weights_source"] == "published" and runner.params["encoder_membership"]["status"] \
            == "skipped"
        assert "published weights" in runner.params["provenance"]
        assert runner.tags_fn(unit_cells[0])["weights"] == "published"

    # the random-init baseline of a published encoder is the published architecture, and runs the null attack
    assert cell_config(config, "eegpt", "random_init") == SMALL_PUBLISHED["eegpt"]
    assert cell_config(config, "eegpt", "self_pretrained") == config.active_profile.configs["eegpt"]
    base = embed_cell("eegpt", "random_init", data, config, work, keys[("eegpt", "random_init")])
    assert base["meta"]["describe"]["config"] == {**SMALL_PUBLISHED["eegpt"]}
    assert base["meta"]["describe"]["weights_source"] == "random_init" and "mia_members" in base
    assert re.fullmatch(r"EEGPT architecture \(\d+\.\d\d M parameters\), random init \(seed 0\)",
                        provenance_text("eegpt", "random_init", base["meta"]))
    assert cell_config(config, "biot", "random_init")["n_chans"] == 16  # from the file


def test_published_params_are_checked_and_a_missing_file_stops_the_keys(small, tmp_path):
    from eegprivacy.studies.embedding_audit.embed import embedding_keys

    for bad in ({"biot": {"path": "x.ckpt", "sha256": "abc"}}, {"biot": {"file": "x.ckpt"}},
                {"bandpower": {"path": "x"}}, {"biot": "x.ckpt"}):
        with pytest.raises(ParamsError, match="published_weights"):
            _config(_params(bad))
    unaudited = _params({"biot": {"path": "x.ckpt"}})
    unaudited["embedding_audit"]["encoders"] = ["bandpower", "labram"]
    with pytest.raises(ParamsError, match="published_weights.biot"):
        _config(unaudited)
    params = _params({"labram": {"path": str(tmp_path / "labram-base.pth"), "sha256": None}})
    params["embedding_audit"]["encoders"] = ["bandpower", "labram"]
    config = _config(params)
    with pytest.raises(CheckpointRequiredError, match=r"labram-base\.pth.*published_weights\.labram\.path"):
        embedding_keys(config, audited_cells(config), "v1", "code", config.cohort("eegmat"))


def test_provenance_text():
    """A cell's title says what the encoder is: the architecture at the size built here, how its weights were made
    (steps, objective, data) and that self-pretrained weights are not the published ones (issue 46)."""
    pre = {"pretrain": {"steps": 120, "n_windows": 58, "n_subjects": 8,
                        "objective": "masked_patch_waveform_reconstruction"},
           "describe": {"seed": 0, "n_params": 819314}}
    assert provenance_text("eegpt", "self_pretrained", pre) == (
        "EEGPT architecture (0.82 M parameters), self-pretrained here: 120 steps of masked patch waveform "
        "reconstruction on 58 windows of 8 pretraining subjects, not the published weights")
    assert provenance_text("biot", "self_pretrained", {"pretrain": {"steps": 37}, "n_pretrain_windows": 90}) == \
        "BIOT architecture, self-pretrained here: 37 steps on 90 windows, not the published weights"
    assert provenance_text("eegpt", "random_init", {"describe": {"seed": 3}}) == \
        "EEGPT architecture, random init (seed 3)"
    sha = "7c50583826afac76c4ab18f43d958df40496c8229accc09ed6a227c9bb57c37c"
    assert provenance_text("labram", "published", {"describe": {"checkpoint_sha256": sha}}) == \
        "published weights (sha256 7c5058…)"
    assert provenance_text("labram", "published", {"describe": {"checkpoint_sha256": sha, "n_params": 5_820_000}}) \
        == "LaBraM architecture (5.82 M parameters), published weights (sha256 7c5058…)"
    assert provenance_text("bandpower", "none", {}) == "band-power features (no weights)"
